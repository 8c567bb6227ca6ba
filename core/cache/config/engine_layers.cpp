#include "cache/engine_layers.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>

#include "util/layer_ranges.h"

namespace kvscope::cache {

namespace {

bool nearestOnly(const FlagExport& e) {
  return std::any_of(e.notes.begin(), e.notes.end(),
                     [](const std::string& n) { return n.starts_with("nearest equivalent"); });
}

// The value after `flag ` in an export's flags ("" where absent).
std::string flagValue(const std::string& flags, const std::string& flag) {
  const auto at = flags.find(flag + " ");
  if (at == std::string::npos) return {};
  const auto from = at + flag.size() + 1;
  return flags.substr(from, flags.find(' ', from) - from);
}

bool quantizedType(const std::string& name) {
  const auto t = parseLlamaCppType(name);
  return t && llamaCppQuantized(*t);
}

// An engine's layers by what it does with them, and the count of those with a cache of their own.
struct ByKind {
  std::map<EngineLayer, std::vector<int>> layers;
  std::size_t own = 0;
  explicit ByKind(const EngineLayers& e) {
    for (std::size_t l = 0; l < e.layers.size(); ++l) {
      layers[e.layers[l]].push_back(static_cast<int>(l));
      own += e.layers[l] != EngineLayer::Shared;
    }
  }
  bool has(EngineLayer k) const { return layers.count(k) > 0; }
  // "all 26" where `ls` is every layer with a cache, else their ranges ("0-4,6"); "none" where empty.
  std::string which(const std::vector<int>& ls) const {
    return ls.empty() ? "none" : ls.size() == own ? fmt::format("all {}", own) : util::layerRanges(ls);
  }
  std::string which(EngineLayer k) const { return has(k) ? which(layers.at(k)) : "none"; }
};

EngineLayers vllmRow(const CacheConfig& cfg, const std::vector<std::int64_t>& windows,
                     const std::vector<bool>& shared) {
  const int n = static_cast<int>(windows.size());
  const FlagExport fe = toVllmFlags(cfg, windows);
  EngineLayers e{"vLLM 0.33", fe.flags, nearestOnly(fe), {}, {}};
  const bool quantizes = flagValue(fe.flags, "--kv-cache-dtype") != "auto";
  // The dtype vLLM runs: the `*` rule's keys for a per-layer config (what the export writes).
  const CacheConfig* dtype = &cfg;
  for (const auto& r : cfg.layers)
    if (r.wildcard()) dtype = &r.keys;
  const bool boundary = dtype->backend == Backend::Vllm && vllmBoundarySkip(dtype->vllmKv);
  for (int l = 0; l < n; ++l) {
    if (shared[static_cast<std::size_t>(l)]) {
      e.layers.push_back(EngineLayer::Shared);
      continue;
    }
    const auto [k, v] = layerConfigs(cfg, l, n);
    const bool skipped =
        (k.backend == Backend::Dynamic && v.backend == Backend::Dynamic) || (boundary && vllmBoundaryLayer(l, n));
    e.layers.push_back(quantizes && !skipped ? EngineLayer::Quantized : EngineLayer::Unquantized);
  }
  return e;
}

EngineLayers llamaCppRow(const CacheConfig& cfg, const std::vector<std::int64_t>& windows,
                         const std::vector<bool>& shared) {
  const FlagExport fe = toLlamaCppFlags(cfg, windows);
  EngineLayers e{"llama.cpp", fe.flags, nearestOnly(fe), {}, {}};
  const bool k = quantizedType(flagValue(fe.flags, "-ctk")), v = quantizedType(flagValue(fe.flags, "-ctv"));
  const EngineLayer each = k && v ? EngineLayer::Quantized
                           : k    ? EngineLayer::KeysOnly
                           : v    ? EngineLayer::ValuesOnly
                                  : EngineLayer::Unquantized;
  for (const bool s : shared) e.layers.push_back(s ? EngineLayer::Shared : each);
  return e;
}

// transformers' QuantizedCache (fp8, quanto, hqq): every layer, or none where the model has a layer type other than
// full attention (cache_utils.py: "QuantizedCache is only supported for models with only full attention layers").
std::optional<EngineLayers> transformersRow(const CacheConfig& cfg, const std::vector<std::int64_t>& windows,
                                            const std::vector<bool>& shared) {
  if (cfg.mixed() || cfg.tiered()) return std::nullopt;
  std::string how;
  switch (cfg.backend) {
    case Backend::Fp8:
      how = "QuantizedCache(\"fp8\")";
      break;
    case Backend::Quanto:
    case Backend::Hqq:
      how = fmt::format("QuantizedCache(\"{}\", nbits={})", cfg.backend == Backend::Quanto ? "quanto" : "hqq",
                        cfg.resolvedNbits());
      break;
    default:
      return std::nullopt;
  }
  EngineLayers e{"transformers", how, false, {}, {}};
  const bool sliding = std::any_of(windows.begin(), windows.end(), [](std::int64_t w) { return w > 0; });
  if (sliding) e.why = "QuantizedCache takes models with full-attention layers only";
  for (std::size_t l = 0; l < windows.size(); ++l)
    e.layers.push_back(sliding ? EngineLayer::Refused : shared[l] ? EngineLayer::Shared : EngineLayer::Quantized);
  return e;
}

}  // namespace

std::vector<EngineLayers> engineLayers(const CacheConfig& cfg, const std::vector<std::int64_t>& windows,
                                       const std::vector<int>& kvSources) {
  std::vector<bool> shared(windows.size(), false);
  for (std::size_t l = 0; l < windows.size() && l < kvSources.size(); ++l) shared[l] = kvSources[l] >= 0;
  std::vector<EngineLayers> out{vllmRow(cfg, windows, shared), llamaCppRow(cfg, windows, shared)};
  if (auto t = transformersRow(cfg, windows, shared)) out.push_back(std::move(*t));
  return out;
}

std::string describeEngineLayers(const EngineLayers& e) {
  const ByKind by(e);
  std::vector<std::string> parts;
  const std::pair<EngineLayer, const char*> words[] = {{EngineLayer::Quantized, "quantizes {}"},
                                                       {EngineLayer::KeysOnly, "quantizes the keys of {}"},
                                                       {EngineLayer::ValuesOnly, "quantizes the values of {}"},
                                                       {EngineLayer::Unquantized, "keeps {} unquantized"},
                                                       {EngineLayer::Refused, "refuses {}"}};
  for (const auto& [kind, text] : words)
    if (by.has(kind)) parts.push_back(fmt::format(fmt::runtime(text), by.which(kind)));
  std::string s = fmt::format("{}", fmt::join(parts, ", "));
  if (by.has(EngineLayer::Refused) && !e.why.empty()) s += " (" + e.why + ")";
  if (by.has(EngineLayer::Shared)) {
    const auto& shared = by.layers.at(EngineLayer::Shared);
    s += fmt::format("; {} store{} nothing", util::layerRanges(shared), shared.size() > 1 ? "" : "s");
  }
  return s;
}

std::string briefEngineLayers(const EngineLayers& e) {
  const ByKind by(e);
  if (by.has(EngineLayer::Refused)) return "refuses";
  std::vector<int> keys, values;
  for (std::size_t l = 0; l < e.layers.size(); ++l) {
    const EngineLayer k = e.layers[l];
    if (k == EngineLayer::Quantized || k == EngineLayer::KeysOnly) keys.push_back(static_cast<int>(l));
    if (k == EngineLayer::Quantized || k == EngineLayer::ValuesOnly) values.push_back(static_cast<int>(l));
  }
  if (keys == values) return by.which(keys);
  if (values.empty()) return "keys of " + by.which(keys);
  if (keys.empty()) return "values of " + by.which(values);
  return fmt::format("keys {}, values {}", by.which(keys), by.which(values));
}

}  // namespace kvscope::cache
