// Per-layer configs (`layers=0-1:dynamic;*:K=fp8,V=quanto:nbits=4`): the rules' parsing (SPEC and JSON),
// validation, serialisation, and the lookup of one layer's configs.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <sstream>

#include "cache/config/detail.h"

namespace kvscope::cache {

namespace detail {
namespace {

std::string rangeText(const LayerRule& r) {
  if (r.wildcard()) return "*";
  return r.first == r.last ? std::to_string(r.first) : fmt::format("{}-{}", r.first, r.last);
}

LayerRule parseRange(const std::string& text, const std::string& spec) {
  LayerRule r;
  if (text == "*") return r;
  auto num = [&](const std::string& t) {
    int v = -1;
    const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || ec != std::errc() || p != t.data() + t.size() || v < 0)
      throw ConfigError("layers", fmt::format("bad layer range `{}` in `{}` (write `*`, `N` or `N-M`)", text, spec));
    return v;
  };
  const auto dash = text.find('-');
  r.first = num(trim(text.substr(0, dash)));
  r.last = dash == std::string::npos ? r.first : num(trim(text.substr(dash + 1)));
  if (r.last < r.first) throw ConfigError("layers", fmt::format("layer range `{}` in `{}` runs backwards", text, spec));
  return r;
}

// The config a single-backend view shows for a per-layer config: the first quantizing side, the `*` rule's first.
CacheConfig mirrorOf(std::vector<LayerRule> rules) {
  std::vector<const LayerRule*> order;
  for (const auto& r : rules)
    if (r.wildcard()) order.push_back(&r);
  for (const auto& r : rules)
    if (!r.wildcard()) order.push_back(&r);
  CacheConfig m = order.front()->keys;
  for (const LayerRule* r : order) {
    if (r->keys.backend != Backend::Dynamic) {
      m = r->keys;
      break;
    }
    if (r->values.backend != Backend::Dynamic) {
      m = r->values;
      break;
    }
  }
  m.layers = std::move(rules);
  return m;
}

}  // namespace

void validateLayers(const CacheConfig& cfg) {
  int wildcards = 0;
  for (std::size_t i = 0; i < cfg.layers.size(); ++i) {
    const LayerRule& r = cfg.layers[i];
    if (r.wildcard()) {
      if (++wildcards > 1) throw ConfigError("layers", "more than one `*` rule in a per-layer config");
    } else if (r.first < 0 || r.last < r.first) {
      throw ConfigError("layers", fmt::format("bad layer range {}..{}", r.first, r.last));
    }
    for (const CacheConfig* side : {&r.keys, &r.values}) {
      if (side->mixed())
        throw ConfigError("layers", fmt::format("{}: a rule's config cannot have rules of its own", ruleWhat(r)));
      try {
        validate(*side);
      } catch (const ConfigError& e) {
        throw ConfigError(e.key(),
                          fmt::format("{} ({}): {}", ruleWhat(r), side == &r.keys ? "keys" : "values", e.what()));
      }
    }
    for (std::size_t j = 0; j < i; ++j) {
      const LayerRule& o = cfg.layers[j];
      if (!r.wildcard() && !o.wildcard() && r.first <= o.last && o.first <= r.last)
        throw ConfigError(
            "layers", fmt::format("layers {} and {} overlap: each layer takes one rule", rangeText(o), rangeText(r)));
    }
  }
}

CacheConfig parseLayersSpec(const std::string& spec) {
  std::vector<LayerRule> rules;
  std::stringstream rest(spec.substr(kLayersPrefix.size()));
  std::string item;
  while (std::getline(rest, item, ';')) {
    item = trim(item);
    if (item.empty()) continue;
    const auto colon = item.find(':');
    if (colon == std::string::npos)
      throw ConfigError("layers", fmt::format("rule `{}` in `{}` needs RANGE:CONFIG (e.g. `0-1:dynamic`)", item, spec));
    LayerRule r = parseRange(trim(item.substr(0, colon)), spec);
    const std::string body = trim(item.substr(colon + 1));
    auto side = [&](const std::string& text) {
      if (text.rfind(kLayersPrefix, 0) == 0)
        throw ConfigError("layers", fmt::format("rule `{}`: a rule's config cannot have rules of its own", item));
      return parseSpec(text);
    };
    const bool kFirst = body.rfind("K=", 0) == 0, vFirst = body.rfind("V=", 0) == 0;
    if (kFirst || vFirst) {
      const std::string other = kFirst ? ",V=" : ",K=";
      const auto cut = body.find(other);
      if (cut == std::string::npos)
        throw ConfigError("layers", fmt::format("rule `{}`: give both sides, `K=SPEC,V=SPEC`", item));
      const std::string first = trim(body.substr(2, cut - 2)), second = trim(body.substr(cut + other.size()));
      r.keys = side(kFirst ? first : second);
      r.values = side(kFirst ? second : first);
    } else {
      r.keys = r.values = side(body);
    }
    rules.push_back(std::move(r));
  }
  if (rules.empty()) throw ConfigError("layers", fmt::format("`{}` has no rules", spec));
  CacheConfig cfg = mirrorOf(rules);
  validate(cfg);
  return cfg;
}

CacheConfig layersFromJson(const json& doc, std::string_view origin) {
  for (const auto& [key, value] : doc.items())
    if (key != "layers" && key != "format" && key != "version")
      throw ConfigError(key, fmt::format("{}: unknown top-level key `{}` beside `layers`", origin, key));
  const json& list = doc["layers"];
  if (!list.is_array() || list.empty())
    throw ConfigError("layers", fmt::format("{}: `layers` must be a non-empty list of rules", origin));
  std::vector<LayerRule> rules;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const json& e = list[i];
    const std::string where = fmt::format("{}: layers[{}]", origin, i);
    if (!e.is_object() || !e.contains("layers") || !e["layers"].is_string())
      throw ConfigError("layers",
                        fmt::format("{}: expected an object with a `layers` range (\"*\", \"N\", \"N-M\")", where));
    for (const auto& [key, value] : e.items())
      if (key != "layers" && key != "cache" && key != "keys" && key != "values")
        throw ConfigError(key, fmt::format("{}: unknown key `{}` (layers, cache, keys, values)", where, key));
    LayerRule r = parseRange(e["layers"].get<std::string>(), where);
    auto side = [&](const char* key) {
      if (!e.contains(key) || !e[key].is_object())
        throw ConfigError("layers", fmt::format("{}: `{}` must be a config object", where, key));
      if (e[key].contains("layers"))
        throw ConfigError("layers", fmt::format("{}.{}: a rule's config cannot have rules of its own", where, key));
      return configFromJson(e[key].dump(), fmt::format("{}.{}", where, key));
    };
    if (e.contains("cache")) {
      if (e.contains("keys") || e.contains("values"))
        throw ConfigError("layers", fmt::format("{}: give `cache` or `keys` and `values`, not both", where));
      r.keys = r.values = side("cache");
    } else {
      r.keys = side("keys");
      r.values = side("values");
    }
    rules.push_back(std::move(r));
  }
  CacheConfig cfg = mirrorOf(rules);
  try {
    validate(cfg);
  } catch (const ConfigError& e) {
    throw ConfigError(e.key(), fmt::format("{}: {}", origin, e.what()));
  }
  return cfg;
}

const LayerRule* wildcardRule(const CacheConfig& cfg) {
  for (const auto& r : cfg.layers)
    if (r.wildcard()) return &r;
  return nullptr;
}

std::string ruleWhat(const LayerRule& r) {
  return r.wildcard() ? std::string("the `*` rule") : fmt::format("layers {}", rangeText(r));
}

std::vector<int> slidingLayers(const LayerWindows& windows) {
  std::vector<int> out;
  for (std::size_t l = 0; l < windows.size(); ++l)
    if (windows[l] > 0) out.push_back(static_cast<int>(l));
  return out;
}

std::string notExported(const LayerRule& r, std::string_view why) {
  return fmt::format("not exported: {} use keys `{}` and values `{}`; {}", ruleWhat(r), toSpec(r.keys),
                     toSpec(r.values), why);
}

std::string layersToKvscopeJson(const CacheConfig& cfg) {
  json doc = json::object();
  doc["format"] = "kvscope-cache-config";
  doc["version"] = 1;
  json list = json::array();
  for (const auto& r : cfg.layers) {
    json e = json::object();
    e["layers"] = rangeText(r);
    auto side = [](const CacheConfig& c) {
      json j = json::parse(toKvscopeJson(c));
      j.erase("format");
      j.erase("version");
      return j;
    };
    if (r.keys == r.values) {
      e["cache"] = side(r.keys);
    } else {
      e["keys"] = side(r.keys);
      e["values"] = side(r.values);
    }
    list.push_back(std::move(e));
  }
  doc["layers"] = std::move(list);
  return doc.dump(2);
}

std::string layersToSpec(const CacheConfig& cfg) {
  std::vector<std::string> rules;
  for (const auto& r : cfg.layers)
    rules.push_back(rangeText(r) + ":" +
                    (r.keys == r.values ? toSpec(r.keys) : "K=" + toSpec(r.keys) + ",V=" + toSpec(r.values)));
  return std::string(kLayersPrefix) + fmt::format("{}", fmt::join(rules, ";"));
}

}  // namespace detail

CacheConfig perLayerConfig(std::vector<LayerRule> rules) {
  if (rules.empty()) throw ConfigError("layers", "a per-layer config needs at least one rule");
  CacheConfig cfg = detail::mirrorOf(std::move(rules));
  validate(cfg);
  return cfg;
}

std::pair<CacheConfig, CacheConfig> layerConfigs(const CacheConfig& cfg, int layer, int numLayers) {
  if (!cfg.mixed()) return {cfg, cfg};
  const LayerRule* hit = nullptr;
  for (const auto& r : cfg.layers) {
    if (!r.wildcard() && r.last >= numLayers)
      throw ConfigError("layers", fmt::format("layers {} reach past the model's {} layers (0-{})", detail::rangeText(r),
                                              numLayers, numLayers - 1));
    if (!r.wildcard() && layer >= r.first && layer <= r.last) hit = &r;
  }
  if (!hit) hit = detail::wildcardRule(cfg);
  if (!hit)
    throw ConfigError("layers",
                      fmt::format("layer {} has no rule (add `*:SPEC` for the layers no range names)", layer));
  return {hit->keys, hit->values};
}

}  // namespace kvscope::cache
