#include "cache/config.h"
#include "model/json_depth.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace kvscope::cache {

std::string_view granularityName(Fp8Granularity g) {
  switch (g) {
    case Fp8Granularity::Tensor: return "tensor";
    case Fp8Granularity::Head: return "head";
    case Fp8Granularity::Channel: return "channel";
  }
  return "tensor";
}

std::string_view attentionName(AttentionMode m) { return m == AttentionMode::Reference ? "reference" : "fused"; }

bool allFused(const CacheConfig& cfg) {
  if (!cfg.mixed()) return cfg.attention == AttentionMode::Fused;
  for (const auto& r : cfg.layers)
    if (!allFused(r.keys) || !allFused(r.values)) return false;
  return true;
}

namespace {

// Group-wise backends: a positive group size and a residual window of 0 or more tokens.
void checkGroupAndWindow(const CacheConfig& cfg) {
  if (cfg.resolvedGroupSize() <= 0)
    throw ConfigError("q_group_size",
                      fmt::format("`q_group_size` must be a positive integer, got {}", cfg.resolvedGroupSize()));
  if (cfg.resolvedResidualLength() < 0)
    throw ConfigError("residual_length",
                      fmt::format("`residual_length` must be 0 or more, got {}", cfg.resolvedResidualLength()));
}

using nlohmann::json;

constexpr const char* kGroupWiseKeys[] = {"nbits", "axis_key", "axis_value", "q_group_size", "residual_length"};

std::string joinNames(const std::vector<OptionInfo>& opts) {
  std::string s;
  for (const auto& o : opts) s += (s.empty() ? "" : ", ") + o.name;
  return s.empty() ? "none" : s;
}

std::string_view fp8FormatName(Fp8Format f) { return f == Fp8Format::E4M3FN ? "e4m3fn" : "e5m2"; }
std::string_view overflowName(OverflowPolicy p) {
  switch (p) {
    case OverflowPolicy::Nan: return "nan";
    case OverflowPolicy::Saturate: return "saturate";
    case OverflowPolicy::Recalibrate: return "recalibrate";
  }
  return "nan";
}

std::string valueText(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

std::vector<std::vector<float>> scalesFromJson(const std::string& key, const json& v, std::string_view origin) {
  std::vector<std::vector<float>> out;
  const auto bad = [&] {
    return ConfigError(key, fmt::format("{}: `{}` must be a list (one per layer) of lists of positive numbers", origin,
                                        key));
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

void validateScales(const CacheConfig& cfg) {
  if (cfg.keyScales.empty() && cfg.valueScales.empty()) return;
  if (cfg.backend != Backend::Fp8)
    throw ConfigError("key_scales", fmt::format("calibrated scales are for the `fp8` backend, not `{}`",
                                                backendName(cfg.backend)));
  if (cfg.keyScales.size() != cfg.valueScales.size())
    throw ConfigError("key_scales", fmt::format("calibrated scales for {} layers of keys but {} of values",
                                                cfg.keyScales.size(), cfg.valueScales.size()));
  for (const auto* side : {&cfg.keyScales, &cfg.valueScales})
    for (std::size_t l = 0; l < side->size(); ++l) {
      const auto& s = (*side)[l];
      if (s.empty() || (cfg.granularity == Fp8Granularity::Tensor && s.size() != 1))
        throw ConfigError("key_scales", fmt::format("layer {}: {} calibrated scales, granularity={} takes {}", l,
                                                    s.size(), granularityName(cfg.granularity),
                                                    cfg.granularity == Fp8Granularity::Tensor ? "1" : "one per head "
                                                                                                     "(or channel)"));
      for (float x : s)
        if (!std::isfinite(x) || x <= 0.0f)
          throw ConfigError("key_scales", fmt::format("layer {}: calibrated scale {} is not a positive number", l, x));
    }
}

int asInt(std::string_view key, const json& v) {
  if (v.is_number_integer()) {
    const auto i = v.get<long long>();
    if (i >= -(1LL << 30) && i <= (1LL << 30)) return static_cast<int>(i);
  }
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    int out = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    if (ec == std::errc() && p == s.data() + s.size() && !s.empty()) return out;
  }
  throw ConfigError(std::string(key), fmt::format("option `{}` takes an integer, got `{}`", key, valueText(v)));
}

double asNumber(std::string_view key, const json& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    try {
      std::size_t used = 0;
      const double d = std::stod(s, &used);
      if (used == s.size()) return d;
    } catch (const std::exception&) {
    }
  }
  throw ConfigError(std::string(key), fmt::format("option `{}` takes a number, got `{}`", key, valueText(v)));
}

bool asBool(std::string_view key, const json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "true" || s == "1" || s == "on" || s == "yes") return true;
    if (s == "false" || s == "0" || s == "off" || s == "no") return false;
  }
  throw ConfigError(std::string(key), fmt::format("option `{}` takes true or false, got `{}`", key, valueText(v)));
}

std::string asChoice(std::string_view key, const json& v, const std::vector<std::string>& choices) {
  const std::string s = v.is_string() ? v.get<std::string>() : v.dump();
  if (std::find(choices.begin(), choices.end(), s) != choices.end()) return s;
  throw ConfigError(std::string(key), fmt::format("option `{}` takes one of {}, got `{}`", key,
                                                  fmt::join(choices, ", "), s));
}

const OptionInfo* findOption(Backend b, std::string_view key) {
  for (const auto& o : backendOptions(b))
    if (o.name == key) return &o;
  return nullptr;
}

bool isGroupWiseKey(std::string_view key) {
  return std::find(std::begin(kGroupWiseKeys), std::end(kGroupWiseKeys), key) != std::end(kGroupWiseKeys);
}

void applyOption(CacheConfig& cfg, std::string_view key, const json& v) {
  const OptionInfo* info = findOption(cfg.backend, key);
  // fp8 knows transformers' group-wise keys in order to reject them as transformers does (validate()).
  if (!info && !(cfg.backend == Backend::Fp8 && isGroupWiseKey(key))) {
    throw ConfigError(std::string(key),
                      fmt::format("unknown option `{}` for the `{}` backend (allowed: {})", key,
                                  backendName(cfg.backend), joinNames(backendOptions(cfg.backend))));
  }
  if (key == "nbits") cfg.nbits = asInt(key, v);
  else if (key == "axis_key") cfg.axisKey = asInt(key, v);
  else if (key == "axis_value") cfg.axisValue = asInt(key, v);
  else if (key == "q_group_size") cfg.qGroupSize = asInt(key, v);
  else if (key == "residual_length") cfg.residualLength = asInt(key, v);
  else if (key == "format") cfg.fp8Format = asChoice(key, v, info->choices) == "e5m2" ? Fp8Format::E5M2 : Fp8Format::E4M3FN;
  else if (key == "granularity") {
    const auto s = asChoice(key, v, info->choices);
    cfg.granularity = s == "head" ? Fp8Granularity::Head : s == "channel" ? Fp8Granularity::Channel : Fp8Granularity::Tensor;
  } else if (key == "headroom") cfg.headroom = asNumber(key, v);
  else if (key == "overflow") {
    const auto s = asChoice(key, v, info->choices);
    cfg.overflow = s == "saturate" ? OverflowPolicy::Saturate : s == "recalibrate" ? OverflowPolicy::Recalibrate : OverflowPolicy::Nan;
  } else if (key == "optimize") cfg.hqqOptimize = asBool(key, v);
  else if (key == "sink") cfg.sink = asInt(key, v);
  else if (key == "attention") cfg.attention = asChoice(key, v, info->choices) == "reference" ? AttentionMode::Reference : AttentionMode::Fused;
}

json specValue(std::string_view text) {
  // Integers stay integers so that a JSON round trip keeps them as numbers; everything else is text.
  long long i = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), i);
  if (ec == std::errc() && p == text.data() + text.size() && !text.empty()) return json(i);
  return json(std::string(text));
}

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

bool looksLikePath(std::string_view spec) {
  if (spec.find('/') != std::string_view::npos) return true;
  if (spec.size() > 5 && spec.substr(spec.size() - 5) == ".json") return true;
  std::error_code ec;
  return spec.find(':') == std::string_view::npos && std::filesystem::is_regular_file(std::string(spec), ec);
}

}  // namespace

std::string_view backendName(Backend b) {
  switch (b) {
    case Backend::Dynamic: return "dynamic";
    case Backend::Fp8: return "fp8";
    case Backend::Quanto: return "quanto";
    case Backend::Hqq: return "hqq";
    case Backend::Kivi: return "kivi";
  }
  return "dynamic";
}

std::vector<Backend> allBackends() {
  return {Backend::Dynamic, Backend::Fp8, Backend::Quanto, Backend::Hqq, Backend::Kivi};
}

Backend parseBackend(std::string_view name) {
  for (Backend b : allBackends())
    if (backendName(b) == name) return b;
  throw ConfigError("backend", fmt::format("unknown cache backend `{}` (allowed: dynamic, fp8, quanto, hqq, kivi)", name));
}

const std::vector<OptionInfo>& backendOptions(Backend b) {
  static const OptionInfo kSinkOption{"sink", "int", {}, "0", false,
                                      "first tokens kept in full precision (attention sinks); 0: none"};
  static const OptionInfo kAttentionOption{
      "attention", "choice", {"fused", "reference"}, "fused", false,
      "fused: attention reads the stored codes tile by tile (no full-precision copy; chunked prefill); reference: "
      "transformers' computation bit for bit (a dequantized copy of the history; one-shot prefill)"};
  static const std::vector<OptionInfo> dynamic = {kAttentionOption};
  static const std::vector<OptionInfo> fp8 = {
      {"format", "choice", {"e4m3fn", "e5m2"}, "e4m3fn", false, "FP8 format of the stored states"},
      {"granularity", "choice", {"tensor", "head", "channel"}, "tensor", false,
       "one scale per tensor (transformers), per KV head, or per (head, channel)"},
      {"headroom", "number", {}, "1", false, "scale = amax x headroom / format max, calibrated on the first update"},
      {"overflow", "choice", {"nan", "saturate", "recalibrate"}, "nan", false,
       "values beyond the frozen scale: NaN as PyTorch's cast (transformers), clamp, or grow the scale"},
      kSinkOption,
      kAttentionOption,
  };
  static const std::vector<OptionInfo> quanto = {
      {"nbits", "int", {"2", "4"}, "4", true, "bits per value"},
      {"axis_key", "int", {"0", "-1"}, "0", true, "quantization axis of the keys"},
      {"axis_value", "int", {"0", "-1"}, "0", true, "quantization axis of the values"},
      {"q_group_size", "int", {}, "64", true, "values per scale/zero-point group"},
      {"residual_length", "int", {}, "128", true, "full-precision window before the history is re-quantized"},
      kSinkOption,
      kAttentionOption,
  };
  static const std::vector<OptionInfo> hqq = {
      {"nbits", "int", {"1", "2", "3", "4", "8"}, "4", true, "bits per value"},
      {"axis_key", "int", {"0", "1"}, "0", true, "quantization axis of the keys"},
      {"axis_value", "int", {"0", "1"}, "0", true, "quantization axis of the values"},
      {"q_group_size", "int", {}, "64", true, "values per scale/zero-point group"},
      {"residual_length", "int", {}, "128", true, "full-precision window before the history is re-quantized"},
      {"optimize", "bool", {"true", "false"}, "true", false,
       "hqq's half-quadratic zero-point optimizer (hqq's default, so transformers runs it)"},
      kSinkOption,
      kAttentionOption,
  };
  static const std::vector<OptionInfo> kivi = {
      {"nbits", "int", {"2", "4"}, "2", false, "bits per value (keys and values)"},
      {"q_group_size", "int", {}, "32", false,
       "keys: tokens per group (one scale/zero per channel); values: channels per group of each token"},
      {"residual_length", "int", {}, "128", false,
       "full-precision window of the newest tokens; older tokens leave it one whole group at a time"},
      kSinkOption,
      kAttentionOption,
  };
  switch (b) {
    case Backend::Dynamic: return dynamic;
    case Backend::Fp8: return fp8;
    case Backend::Quanto: return quanto;
    case Backend::Hqq: return hqq;
    case Backend::Kivi: return kivi;
  }
  return dynamic;
}

void setOption(CacheConfig& cfg, std::string_view key, std::string_view value) {
  applyOption(cfg, key, specValue(value));
}

namespace {
// Per-layer configs (`layers=...`), defined at the end of this file.
void validateLayers(const CacheConfig& cfg);
CacheConfig parseLayersSpec(const std::string& spec);
CacheConfig layersFromJson(const json& doc, std::string_view origin);
HfExport layersToHf(const CacheConfig& cfg);
FlagExport layersToVllm(const CacheConfig& cfg);
FlagExport layersToLlamaCpp(const CacheConfig& cfg);
std::string layersToKvscopeJson(const CacheConfig& cfg);
std::string layersToSpec(const CacheConfig& cfg);
constexpr std::string_view kLayersPrefix = "layers=";
}  // namespace

void validate(const CacheConfig& cfg) {
  if (cfg.mixed()) return validateLayers(cfg);
  const std::optional<int>* groupWise[] = {&cfg.nbits, &cfg.axisKey, &cfg.axisValue, &cfg.qGroupSize,
                                           &cfg.residualLength};
  if (cfg.sink < 0) throw ConfigError("sink", fmt::format("`sink` must be 0 or more tokens, got {}", cfg.sink));
  validateScales(cfg);
  if (cfg.sink > 0 && cfg.backend == Backend::Dynamic)
    throw ConfigError("sink", "the `dynamic` backend keeps every token in full precision: `sink` does not apply");
  switch (cfg.backend) {
    case Backend::Dynamic: {
      for (int i = 0; i < 5; ++i)
        if (groupWise[i]->has_value())
          throw ConfigError(kGroupWiseKeys[i],
                            fmt::format("the `dynamic` backend takes no options (got `{}`)", kGroupWiseKeys[i]));
      return;
    }
    case Backend::Fp8: {
      // transformers' own message, word for word (QuantizedCache.__init__).
      std::vector<std::string> unsupported;
      for (int i = 0; i < 5; ++i)
        if (groupWise[i]->has_value()) unsupported.push_back(fmt::format("'{}'", kGroupWiseKeys[i]));
      if (!unsupported.empty()) {
        throw ConfigError(unsupported.front().substr(1, unsupported.front().size() - 2),
                          fmt::format("The `fp8` backend quantizes per-tensor and does not support [{}]. Use the "
                                      "`quanto` or `hqq` backend to quantize group-wise.",
                                      fmt::join(unsupported, ", ")));
      }
      if (!std::isfinite(cfg.headroom) || cfg.headroom <= 0.0)
        throw ConfigError("headroom", fmt::format("`headroom` must be a positive number, got {}", cfg.headroom));
      return;
    }
    case Backend::Quanto:
    case Backend::Hqq: {
      const bool quanto = cfg.backend == Backend::Quanto;
      const int nb = cfg.resolvedNbits();
      if (quanto && nb != 2 && nb != 4)
        throw ConfigError("nbits", fmt::format("`nbits` for `quanto` backend has to be one of [`2`, `4`] but got {}", nb));
      if (!quanto && nb != 1 && nb != 2 && nb != 3 && nb != 4 && nb != 8)
        throw ConfigError("nbits", fmt::format("`nbits` for `HQQ` backend has to be one of [`1`, `2`, `3`, `4`, `8`] "
                                               "but got {}", nb));
      const char* name = quanto ? "quanto" : "HQQ";
      const char* allowed = quanto ? "[`0`, `-1`]" : "[`0`, `1`]";
      const int other = quanto ? -1 : 1;
      for (auto [key, v] : {std::pair{"axis_key", cfg.resolvedAxisKey()}, std::pair{"axis_value", cfg.resolvedAxisValue()}})
        if (v != 0 && v != other)
          throw ConfigError(key, fmt::format("`{}` for `{}` backend has to be one of {} but got {}", key, name, allowed, v));
      checkGroupAndWindow(cfg);
      return;
    }
    case Backend::Kivi: {
      const int nb = cfg.resolvedNbits();
      if (nb != 2 && nb != 4) throw ConfigError("nbits", fmt::format("`nbits` for `kivi` has to be 2 or 4, got {}", nb));
      for (auto [key, v] : {std::pair{"axis_key", cfg.axisKey}, std::pair{"axis_value", cfg.axisValue}})
        if (v) throw ConfigError(key, fmt::format("`kivi` fixes the axes (keys per channel, values per token): `{}` "
                                                  "does not apply", key));
      checkGroupAndWindow(cfg);
      return;
    }
  }
}

std::vector<std::string> expandGrid(std::string_view gridIn) {
  constexpr std::size_t kMaxGridConfigs = 4096;  // a sweep of more is a typo, not a plan
  const std::string grid = trim(gridIn);
  const auto colon = grid.find(':');
  std::vector<std::string> specs{trim(grid.substr(0, colon))};
  if (specs.front().empty()) throw ConfigError("backend", fmt::format("grid `{}` names no backend", grid));
  if (colon == std::string::npos) return specs;
  std::stringstream rest(grid.substr(colon + 1));
  std::string axis;
  while (std::getline(rest, axis, ';')) {
    axis = trim(axis);
    if (axis.empty()) continue;
    const auto eq = axis.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ConfigError(axis, fmt::format("bad grid axis `{}` in `{}` (write key=v1,v2,...)", axis, grid));
    const std::string key = trim(axis.substr(0, eq));
    std::vector<std::string> values;
    std::stringstream vs(axis.substr(eq + 1));
    std::string v;
    while (std::getline(vs, v, ','))
      if (!trim(v).empty()) values.push_back(trim(v));
    if (values.empty()) throw ConfigError(key, fmt::format("grid axis `{}` has no values", key));
    if (specs.size() * values.size() > kMaxGridConfigs)
      throw ConfigError(key, fmt::format("grid `{}` expands to more than {} configs", grid, kMaxGridConfigs));
    std::vector<std::string> next;
    for (const auto& s : specs)
      for (const auto& val : values) next.push_back(s + (s.find(':') == std::string::npos ? ":" : ",") + key + "=" + val);
    specs = std::move(next);
  }
  return specs;
}

CacheConfig parseSpec(std::string_view specIn) {
  const std::string spec = trim(specIn);
  if (spec.empty()) throw ConfigError("backend", "empty cache spec (try `fp8`, `quanto:nbits=2` or a JSON file)");
  if (spec.rfind(kLayersPrefix, 0) == 0) return parseLayersSpec(spec);
  if (looksLikePath(spec)) return loadConfigFile(spec);
  const auto colon = spec.find(':');
  CacheConfig cfg;
  cfg.backend = parseBackend(trim(spec.substr(0, colon)));
  if (colon != std::string::npos) {
    std::stringstream rest(spec.substr(colon + 1));
    std::string item;
    std::vector<std::string> seen;
    while (std::getline(rest, item, ',')) {
      item = trim(item);
      if (item.empty()) continue;
      const auto eq = item.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
        throw ConfigError(item, fmt::format("bad option `{}` in cache spec `{}` (write key=value)", item, spec));
      const std::string key = trim(item.substr(0, eq));
      // A key set twice is a mistake, not an override.
      if (std::find(seen.begin(), seen.end(), key) != seen.end())
        throw ConfigError(key, fmt::format("option `{}` is given twice in cache spec `{}`", key, spec));
      seen.push_back(key);
      applyOption(cfg, key, specValue(trim(item.substr(eq + 1))));
    }
  }
  validate(cfg);
  return cfg;
}

CacheConfig configFromJson(std::string_view text, std::string_view origin) {
  if (jsonNestingDepth(text) > kMaxJsonDepth)
    throw ConfigError("", fmt::format("{}: JSON nested deeper than {} levels", origin, kMaxJsonDepth));
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number that overflows a double
    throw ConfigError("", fmt::format("{}: not valid JSON ({})", origin, e.what()));
  }
  if (!doc.is_object()) throw ConfigError("", fmt::format("{}: expected a JSON object", origin));
  if (doc.contains("layers")) return layersFromJson(doc, origin);
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
        (key == "key_scales" ? cfg.keyScales : cfg.valueScales) = scalesFromJson(key, value, origin);
        continue;
      }
      const OptionInfo* info = findOption(cfg.backend, key);
      if (info && transformersDict != info->transformersKey) {
        throw ConfigError(key, fmt::format("{}: `{}` belongs in the `{}` section", origin, key,
                                           info->transformersKey ? "cache_config" : "kvscope"));
      }
      try {
        applyOption(cfg, key, value);
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
      if (!doc["kvscope"].is_object()) throw ConfigError("kvscope", fmt::format("{}: `kvscope` must be an object", origin));
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

namespace {
json hfDict(const CacheConfig& cfg) {
  json d = json::object();
  d["backend"] = std::string(backendName(cfg.backend));
  if (cfg.backend == Backend::Quanto || cfg.backend == Backend::Hqq) {
    // Written out resolved, so the export does not depend on a transformers version's defaults.
    d["nbits"] = cfg.resolvedNbits();
    d["axis_key"] = cfg.resolvedAxisKey();
    d["axis_value"] = cfg.resolvedAxisValue();
    d["q_group_size"] = cfg.resolvedGroupSize();
    d["residual_length"] = cfg.resolvedResidualLength();
  }
  return d;
}

json kvscopeSection(const CacheConfig& cfg) {
  json k = json::object();
  if (cfg.backend == Backend::Fp8) {
    k["format"] = std::string(fp8FormatName(cfg.fp8Format));
    k["granularity"] = std::string(granularityName(cfg.granularity));
    k["headroom"] = cfg.headroom;
    k["overflow"] = std::string(overflowName(cfg.overflow));
  } else if (cfg.backend == Backend::Hqq) {
    k["optimize"] = cfg.hqqOptimize;
  } else if (cfg.backend == Backend::Kivi) {
    k["nbits"] = cfg.resolvedNbits();
    k["q_group_size"] = cfg.resolvedGroupSize();
    k["residual_length"] = cfg.resolvedResidualLength();
  }
  if (cfg.sink > 0) k["sink"] = cfg.sink;
  if (cfg.attention != AttentionMode::Fused) k["attention"] = std::string(attentionName(cfg.attention));
  if (!cfg.keyScales.empty()) k["key_scales"] = cfg.keyScales;
  if (!cfg.valueScales.empty()) k["value_scales"] = cfg.valueScales;
  return k;
}
}  // namespace

HfExport toHfCacheConfig(const CacheConfig& cfg) {
  validate(cfg);
  if (cfg.mixed()) return layersToHf(cfg);
  if (cfg.backend == Backend::Dynamic)
    throw ConfigError("backend", "the `dynamic` backend is transformers' default cache: it has no cache_config to export");
  HfExport out;
  if (cfg.backend == Backend::Kivi) {
    // The nearest QuantizedCache: quanto with keys grouped per channel (axis -1) and values per token (axis 0).
    json d = json::object();
    d["backend"] = "quanto";
    d["nbits"] = cfg.resolvedNbits();
    d["axis_key"] = -1;
    d["axis_value"] = 0;
    d["q_group_size"] = cfg.resolvedGroupSize();
    d["residual_length"] = cfg.resolvedResidualLength();
    out.json = d.dump(2);
    out.notes.push_back("nearest equivalent only: transformers has no KIVI-style cache; its quanto backend groups "
                        "keys across all tokens of a channel and re-quantizes the whole history when the residual "
                        "window fills, where kivi quantizes each group of tokens once as it leaves the window");
  } else {
    out.json = hfDict(cfg).dump(2);
  }
  if (cfg.sink > 0)
    out.notes.push_back(fmt::format("sink={} has no transformers equivalent: its QuantizedCache quantizes the first "
                                    "tokens with the rest",
                                    cfg.sink));
  const CacheConfig defaults{};
  if (cfg.backend == Backend::Fp8) {
    if (cfg.fp8Format != defaults.fp8Format)
      out.notes.push_back("format=e5m2 has no transformers equivalent: its fp8 backend stores e4m3fn");
    if (cfg.granularity != defaults.granularity)
      out.notes.push_back(fmt::format("granularity={} has no transformers equivalent: its fp8 backend uses one scale "
                                      "per tensor", granularityName(cfg.granularity)));
    if (cfg.headroom != defaults.headroom)
      out.notes.push_back("headroom has no transformers equivalent: its scale is amax / 448");
    if (cfg.overflow != defaults.overflow)
      out.notes.push_back(fmt::format("overflow={} has no transformers equivalent: its cast turns |x/scale| >= 480 "
                                      "into NaN", overflowName(cfg.overflow)));
  }
  if (cfg.backend == Backend::Hqq && !cfg.hqqOptimize)
    out.notes.push_back("optimize=false has no transformers equivalent: transformers runs hqq's optimizer");
  if (!cfg.keyScales.empty())
    out.notes.push_back("calibrated scales have no transformers equivalent: its fp8 backend calibrates on the first "
                        "update (the prompt) and freezes that scale");
  return out;
}

FlagExport toVllmFlags(const CacheConfig& cfg) {
  validate(cfg);
  if (cfg.mixed()) return layersToVllm(cfg);
  FlagExport e;
  switch (cfg.backend) {
    case Backend::Dynamic:
      e.flags = "--kv-cache-dtype auto";
      break;
    case Backend::Fp8:
      e.flags = cfg.fp8Format == Fp8Format::E5M2 ? "--kv-cache-dtype fp8_e5m2" : "--kv-cache-dtype fp8_e4m3";
      e.notes.push_back("vLLM takes per-tensor k/v scales from the checkpoint, or computes them with "
                        "--calculate-kv-scales; without either it uses 1.0, which can hurt quality");
      if (cfg.granularity != Fp8Granularity::Tensor)
        e.notes.push_back(fmt::format("granularity={}: vLLM's FP8 KV cache scales per tensor (or per head from a "
                                      "checkpoint), not as kvscope does here",
                                      granularityName(cfg.granularity)));
      if (cfg.overflow != OverflowPolicy::Nan)
        e.notes.push_back(fmt::format("overflow={} is kvscope's; vLLM's cast saturates", overflowName(cfg.overflow)));
      break;
    case Backend::Quanto:
    case Backend::Hqq:
    case Backend::Kivi:
      e.flags = "--kv-cache-dtype fp8_e4m3";
      e.notes.push_back(fmt::format("nearest equivalent only: vLLM has no {}-bit group-wise KV cache; FP8 (8 bits) is "
                                    "its smallest KV cache type",
                                    cfg.resolvedNbits()));
      break;
  }
  if (cfg.sink > 0) e.notes.push_back(fmt::format("sink={}: vLLM quantizes every token alike", cfg.sink));
  if (!cfg.keyScales.empty())
    e.notes.push_back("calibrated scales: vLLM reads per-tensor (or per-head) k/v scales from the model checkpoint; "
                      "kvscope does not write checkpoints, so put them there (k_scale/v_scale) to use them");
  return e;
}

FlagExport toLlamaCppFlags(const CacheConfig& cfg) {
  validate(cfg);
  if (cfg.mixed()) return layersToLlamaCpp(cfg);
  FlagExport e;
  std::string type;
  switch (cfg.backend) {
    case Backend::Dynamic:
      type = "f16";
      e.notes.push_back("f16 is llama.cpp's default cache type (kvscope's dynamic cache keeps the model's dtype)");
      break;
    case Backend::Fp8:
      type = "q8_0";
      e.notes.push_back("nearest equivalent only: llama.cpp has no FP8 cache type; q8_0 (int8, one scale per 32 "
                        "values) is its 8-bit type");
      break;
    case Backend::Quanto:
    case Backend::Hqq:
    case Backend::Kivi: {
      const int nb = cfg.resolvedNbits();
      type = nb >= 8 ? "q8_0" : nb >= 4 ? "q4_1" : "q4_0";
      e.notes.push_back(fmt::format("nearest equivalent only: {}-bit groups of {} with a full-precision residual map to "
                                    "llama.cpp's {} (blocks of 32, no residual window){}",
                                    nb, cfg.resolvedGroupSize(), type,
                                    nb < 4 ? "; llama.cpp has no cache type below 4 bits" : ""));
      break;
    }
  }
  if (cfg.sink > 0)
    e.notes.push_back(fmt::format("sink={}: llama.cpp quantizes every token alike", cfg.sink));
  e.flags = fmt::format("-ctk {} -ctv {}", type, type);
  if (type != "f16") {
    e.flags += " -fa";
    e.notes.push_back("a quantized V cache needs flash attention (-fa)");
  }
  return e;
}

std::string toKvscopeJson(const CacheConfig& cfg) {
  validate(cfg);
  if (cfg.mixed()) return layersToKvscopeJson(cfg);
  json doc = json::object();
  doc["format"] = "kvscope-cache-config";
  doc["version"] = 1;
  doc["cache_config"] = hfDict(cfg);
  doc["kvscope"] = kvscopeSection(cfg);
  return doc.dump(2);
}

std::string toSpec(const CacheConfig& cfg) {
  if (cfg.mixed()) return layersToSpec(cfg);
  std::vector<std::string> parts;
  if (cfg.nbits) parts.push_back(fmt::format("nbits={}", *cfg.nbits));
  if (cfg.axisKey) parts.push_back(fmt::format("axis_key={}", *cfg.axisKey));
  if (cfg.axisValue) parts.push_back(fmt::format("axis_value={}", *cfg.axisValue));
  if (cfg.qGroupSize) parts.push_back(fmt::format("q_group_size={}", *cfg.qGroupSize));
  if (cfg.residualLength) parts.push_back(fmt::format("residual_length={}", *cfg.residualLength));
  const CacheConfig d{};
  if (cfg.backend == Backend::Fp8) {
    if (cfg.fp8Format != d.fp8Format) parts.push_back(fmt::format("format={}", fp8FormatName(cfg.fp8Format)));
    if (cfg.granularity != d.granularity) parts.push_back(fmt::format("granularity={}", granularityName(cfg.granularity)));
    if (cfg.headroom != d.headroom) parts.push_back(fmt::format("headroom={}", cfg.headroom));
    if (cfg.overflow != d.overflow) parts.push_back(fmt::format("overflow={}", overflowName(cfg.overflow)));
  }
  if (cfg.backend == Backend::Hqq && cfg.hqqOptimize != d.hqqOptimize) parts.push_back("optimize=false");
  if (cfg.sink != d.sink) parts.push_back(fmt::format("sink={}", cfg.sink));
  if (cfg.attention != d.attention) parts.push_back(fmt::format("attention={}", attentionName(cfg.attention)));
  std::string s(backendName(cfg.backend));
  if (!parts.empty()) s += ":" + fmt::format("{}", fmt::join(parts, ","));
  // Calibrated scales live in JSON files only: the label says so (it is not a SPEC that parses back).
  if (!cfg.keyScales.empty()) s += " [calibrated]";
  return s;
}

// ---- Per-layer configs ----------------------------------------------------------------------------------------

namespace {

std::string rangeText(const LayerRule& r) {
  if (r.wildcard()) return "*";
  return r.first == r.last ? std::to_string(r.first) : fmt::format("{}-{}", r.first, r.last);
}

std::string ruleWhat(const LayerRule& r) {
  return r.wildcard() ? std::string("the `*` rule") : fmt::format("layers {}", rangeText(r));
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
  if (r.last < r.first)
    throw ConfigError("layers", fmt::format("layer range `{}` in `{}` runs backwards", text, spec));
  return r;
}

// The config a single-backend view shows for a per-layer config: the first quantizing side, the `*` rule's first.
CacheConfig mirrorOf(const std::vector<LayerRule>& rules) {
  std::vector<const LayerRule*> order;
  for (const auto& r : rules)
    if (r.wildcard()) order.push_back(&r);
  for (const auto& r : rules)
    if (!r.wildcard()) order.push_back(&r);
  CacheConfig m = order.front()->keys;
  for (const LayerRule* r : order) {
    if (r->keys.backend != Backend::Dynamic) { m = r->keys; break; }
    if (r->values.backend != Backend::Dynamic) { m = r->values; break; }
  }
  m.layers = rules;
  return m;
}

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
      if (side->mixed()) throw ConfigError("layers", fmt::format("{}: a rule's config cannot have rules of its own",
                                                                 ruleWhat(r)));
      try {
        validate(*side);
      } catch (const ConfigError& e) {
        throw ConfigError(e.key(), fmt::format("{} ({}): {}", ruleWhat(r), side == &r.keys ? "keys" : "values",
                                               e.what()));
      }
    }
    for (std::size_t j = 0; j < i; ++j) {
      const LayerRule& o = cfg.layers[j];
      if (!r.wildcard() && !o.wildcard() && r.first <= o.last && o.first <= r.last)
        throw ConfigError("layers", fmt::format("layers {} and {} overlap: each layer takes one rule", rangeText(o),
                                                rangeText(r)));
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
      throw ConfigError("layers", fmt::format("{}: expected an object with a `layers` range (\"*\", \"N\", \"N-M\")",
                                              where));
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

HfExport layersToHf(const CacheConfig& cfg) {
  const LayerRule* all = wildcardRule(cfg);
  if (!all)
    throw ConfigError("layers", "transformers' QuantizedCache takes one config for every layer: this per-layer "
                                "config has no `*` rule to export (add `*:SPEC` for the layers it does not name)");
  // quanto/hqq take axis_key for the keys and axis_value for the values: sides that differ only there merge.
  CacheConfig merged = all->keys, v = all->values;
  merged.axisValue = v.axisValue;
  v.axisKey = all->keys.axisKey;
  if (!(merged == v))
    throw ConfigError("layers", fmt::format("transformers' QuantizedCache quantizes keys and values with one config: "
                                            "keys `{}` and values `{}` cannot be exported to it (export each side "
                                            "with --cache SPEC, or use the kvscope format)",
                                            toSpec(all->keys), toSpec(all->values)));
  if (merged.backend == Backend::Dynamic)
    throw ConfigError("layers", "the `*` rule is `dynamic`: transformers' QuantizedCache cannot leave layers "
                                "unquantized, so there is no cache_config for most of this model");
  HfExport out = toHfCacheConfig(merged);
  for (const auto& r : cfg.layers) {
    if (r.wildcard()) continue;
    out.notes.push_back(fmt::format("not exported: {} use keys `{}` and values `{}`; transformers applies this "
                                    "cache_config to every layer",
                                    ruleWhat(r), toSpec(r.keys), toSpec(r.values)));
  }
  return out;
}

FlagExport layersToVllm(const CacheConfig& cfg) {
  const LayerRule* all = wildcardRule(cfg);
  if (!all) throw ConfigError("layers", "vLLM takes one KV cache dtype: add a `*` rule for the layers not named");
  FlagExport e = toVllmFlags(all->keys);
  if (!(all->keys == all->values)) {
    const FlagExport ev = toVllmFlags(all->values);
    e.notes.push_back(fmt::format("vLLM has one --kv-cache-dtype for keys and values: exported from the keys' `{}`; "
                                  "the values' `{}` alone would export as `{}`",
                                  toSpec(all->keys), toSpec(all->values), ev.flags));
  }
  std::vector<std::string> skip;
  for (const auto& r : cfg.layers) {
    if (r.wildcard()) continue;
    if (r.keys.backend == Backend::Dynamic && r.values.backend == Backend::Dynamic) {
      for (int l = r.first; l <= r.last; ++l) skip.push_back(std::to_string(l));
    } else if (!(r.keys == all->keys && r.values == all->values)) {
      e.notes.push_back(fmt::format("not exported: {} use keys `{}` and values `{}`; vLLM can only skip layers "
                                    "(keep them unquantized), not give them another type",
                                    ruleWhat(r), toSpec(r.keys), toSpec(r.values)));
    }
  }
  if (!skip.empty() && all->keys.backend != Backend::Dynamic)
    e.flags += fmt::format(" --kv-cache-dtype-skip-layers {}", fmt::join(skip, " "));
  return e;
}

FlagExport layersToLlamaCpp(const CacheConfig& cfg) {
  const LayerRule* all = wildcardRule(cfg);
  if (!all) throw ConfigError("layers", "llama.cpp takes one K and one V cache type: add a `*` rule");
  const FlagExport k = toLlamaCppFlags(all->keys), v = toLlamaCppFlags(all->values);
  auto typeOf = [](const std::string& flags, const char* flag) {
    const auto p = flags.find(flag) + std::string(flag).size() + 1;
    return flags.substr(p, flags.find(' ', p) - p);
  };
  FlagExport e;
  const std::string kt = typeOf(k.flags, "-ctk"), vt = typeOf(v.flags, "-ctv");
  e.flags = fmt::format("-ctk {} -ctv {}", kt, vt);
  if (vt != "f16") e.flags += " -fa";
  for (const auto* src : {&k, &v})
    for (const auto& n : src->notes)
      if (std::find(e.notes.begin(), e.notes.end(), n) == e.notes.end()) e.notes.push_back(n);
  for (const auto& r : cfg.layers)
    if (!r.wildcard())
      e.notes.push_back(fmt::format("not exported: {} use keys `{}` and values `{}`; llama.cpp's cache types apply "
                                    "to every layer",
                                    ruleWhat(r), toSpec(r.keys), toSpec(r.values)));
  return e;
}

json sideJson(const CacheConfig& c) { return json::parse(toKvscopeJson(c)); }

std::string layersToKvscopeJson(const CacheConfig& cfg) {
  json doc = json::object();
  doc["format"] = "kvscope-cache-config";
  doc["version"] = 1;
  json list = json::array();
  for (const auto& r : cfg.layers) {
    json e = json::object();
    e["layers"] = rangeText(r);
    auto side = [](const CacheConfig& c) {
      json j = sideJson(c);
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

}  // namespace

std::pair<CacheConfig, CacheConfig> layerConfigs(const CacheConfig& cfg, int layer, int numLayers) {
  if (!cfg.mixed()) return {cfg, cfg};
  const LayerRule* hit = nullptr;
  for (const auto& r : cfg.layers) {
    if (!r.wildcard() && r.last >= numLayers)
      throw ConfigError("layers", fmt::format("layers {} reach past the model's {} layers (0-{})", rangeText(r),
                                              numLayers, numLayers - 1));
    if (!r.wildcard() && layer >= r.first && layer <= r.last) hit = &r;
  }
  if (!hit) hit = wildcardRule(cfg);
  if (!hit)
    throw ConfigError("layers", fmt::format("layer {} has no rule (add `*:SPEC` for the layers no range names)", layer));
  return {hit->keys, hit->values};
}

}  // namespace kvscope::cache
