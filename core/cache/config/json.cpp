// kvscope's config file (transformers' cache_config plus a `kvscope` section), and a bare transformers cache_config.
#include "util/json.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "cache/config/detail.h"

namespace kvscope::cache {

namespace detail {
namespace {

std::vector<std::vector<float>> scalesFromJson(const std::string& key, const json& v, std::string_view origin) {
  std::vector<std::vector<float>> out;
  const auto bad = [&] {
    return ConfigError(
        key, fmt::format("{}: `{}` must be a list (one per layer) of lists of positive numbers", origin, key));
  };
  if (!v.is_array()) throw bad();
  for (const auto& layer : v) {
    if (!layer.is_array() || layer.empty()) throw bad();
    std::vector<float> s;
    for (const auto& x : layer) {
      if (!x.is_number()) throw bad();
      s.push_back(x.get<float>());
    }
    out.push_back(std::move(s));
  }
  return out;
}

// kvscope's own options of a uniform config: the backend's options resolved, shared ones when set, and the scales.
json kvscopeSection(const CacheConfig& cfg) {
  json k = json::object();
  for (const auto& o : backendOptions(cfg.backend)) {
    const OptionField& f = *findField(o.name);
    if (!o.transformersKey && (!f.writtenOnlyWhenSet || f.isSet(cfg))) k[o.name] = f.value(cfg);
  }
  if (!cfg.keyScales.empty()) k["key_scales"] = cfg.keyScales;
  if (!cfg.valueScales.empty()) k["value_scales"] = cfg.valueScales;
  return k;
}

}  // namespace

json hfDict(const CacheConfig& cfg) {
  json d = json::object();
  d["backend"] = std::string(backendName(cfg.backend));
  // Written out resolved, so the export does not depend on a transformers version's defaults.
  for (const auto& o : backendOptions(cfg.backend))
    if (o.transformersKey) d[o.name] = findField(o.name)->value(cfg);
  return d;
}

}  // namespace detail

CacheConfig configFromJson(std::string_view text, std::string_view origin) {
  using detail::json;
  JsonParse parsed = parseBoundedJson(text);
  if (!parsed.problem.empty()) throw ConfigError("", fmt::format("{}: {}", origin, parsed.problem));
  json doc = std::move(parsed.value);
  if (!doc.is_object()) throw ConfigError("", fmt::format("{}: expected a JSON object", origin));
  if (doc.contains("layers")) return detail::layersFromJson(doc, origin);
  if (doc.contains("tiers")) return detail::tiersFromJson(doc, origin);
  const bool kvscopeFile = doc.contains("cache_config");
  const json dict = kvscopeFile ? doc["cache_config"] : doc;
  if (!dict.is_object()) throw ConfigError("cache_config", fmt::format("{}: `cache_config` must be an object", origin));
  CacheConfig cfg;
  if (!dict.contains("backend")) {
    // transformers' default backend when cache_config omits it.
    cfg.backend = Backend::Quanto;
  } else if (!dict["backend"].is_string()) {
    throw ConfigError("backend", fmt::format("{}: `backend` must be a string", origin));
  } else {
    try {
      cfg.backend = parseBackend(dict["backend"].get<std::string>());
    } catch (const ConfigError& e) {
      throw ConfigError("backend", fmt::format("{}: {}", origin, e.what()));
    }
  }
  auto apply = [&](const json& obj, bool transformersDict) {
    for (const auto& [key, value] : obj.items()) {
      if (key == "backend" && transformersDict) continue;
      if (value.is_null()) continue;  // transformers' "unset"
      if (!transformersDict && (key == "key_scales" || key == "value_scales")) {
        (key == "key_scales" ? cfg.keyScales : cfg.valueScales) = detail::scalesFromJson(key, value, origin);
        continue;
      }
      const OptionInfo* info = detail::findOption(cfg.backend, key);
      if (info && transformersDict != info->transformersKey) {
        throw ConfigError(key, fmt::format("{}: `{}` belongs in the `{}` section", origin, key,
                                           info->transformersKey ? "cache_config" : "kvscope"));
      }
      try {
        detail::applyOption(cfg, key, value);
      } catch (const ConfigError& e) {
        throw ConfigError(e.key(), fmt::format("{}: {}", origin, e.what()));
      }
    }
  };
  apply(dict, true);
  if (kvscopeFile) {
    for (const auto& [key, value] : doc.items()) {
      if (key != "cache_config" && key != "kvscope" && key != "format" && key != "version" && key != "calibration")
        throw ConfigError(key, fmt::format("{}: unknown top-level key `{}`", origin, key));
    }
    if (doc.contains("kvscope")) {
      if (!doc["kvscope"].is_object())
        throw ConfigError("kvscope", fmt::format("{}: `kvscope` must be an object", origin));
      apply(doc["kvscope"], false);
    }
  }
  try {
    validate(cfg);
  } catch (const ConfigError& e) {
    throw ConfigError(e.key(), fmt::format("{}: {}", origin, e.what()));
  }
  return cfg;
}

CacheConfig loadConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("", fmt::format("cannot read cache config file `{}`", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return configFromJson(ss.str(), path);
}

std::string toKvscopeJson(const CacheConfig& cfg) {
  validate(cfg);
  if (cfg.mixed()) return detail::layersToKvscopeJson(cfg);
  if (cfg.tiered()) return detail::tiersToKvscopeJson(cfg);
  detail::json doc = detail::json::object();
  doc["format"] = "kvscope-cache-config";
  doc["version"] = 1;
  doc["cache_config"] = detail::hfDict(cfg);
  doc["kvscope"] = detail::kvscopeSection(cfg);
  return doc.dump(2);
}

}  // namespace kvscope::cache
