// Export to transformers: the cache_config its QuantizedCache takes, and notes for what it cannot express.
#include <fmt/format.h>

#include <algorithm>

#include "cache/config/detail.h"

namespace kvscope::cache {

namespace {

HfExport layersToHf(const CacheConfig& cfg) {
  const LayerRule* all = detail::wildcardRule(cfg);
  if (!all)
    throw ConfigError("layers",
                      "transformers' QuantizedCache takes one config for every layer: this per-layer "
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
    throw ConfigError("layers",
                      "the `*` rule is `dynamic`: transformers' QuantizedCache cannot leave layers "
                      "unquantized, so there is no cache_config for most of this model");
  HfExport out = toHfCacheConfig(merged);
  for (const auto& r : cfg.layers)
    if (!r.wildcard())
      out.notes.push_back(detail::notExported(r, "transformers applies this cache_config to every layer"));
  return out;
}

}  // namespace

HfExport toHfCacheConfig(const CacheConfig& cfg) {
  validate(cfg);
  if (cfg.mixed()) return layersToHf(cfg);
  if (cfg.tiered())
    throw ConfigError("tiers", fmt::format("transformers' QuantizedCache has no tiers by age: `{}` has no "
                                           "cache_config (export it with --format kvscope)",
                                           toSpec(cfg)));
  if (cfg.backend == Backend::Dynamic)
    throw ConfigError("backend",
                      "the `dynamic` backend is transformers' default cache: it has no cache_config to export");
  if (cfg.backend == Backend::Vllm || cfg.backend == Backend::Mxfp4)
    throw ConfigError("backend",
                      fmt::format("transformers' QuantizedCache has no FP4 format: `{}` has no cache_config (export "
                                  "it with --format vllm or kvscope)",
                                  toSpec(cfg)));
  HfExport out;
  if (cfg.backend == Backend::LlamaCpp) {
    // The nearest QuantizedCache: hqq, groups of 32 consecutive values along the head dimension (axis 1), at the
    // bits of the narrower side, every token quantized (no residual window).
    const bool qk = llamaCppQuantized(cfg.typeK), qv = llamaCppQuantized(cfg.typeV);
    if (!qk && !qv)
      throw ConfigError("type_k", fmt::format("{} keys and {} values are not quantized: that is transformers' default "
                                              "cache, with no cache_config to export",
                                              llamaCppTypeName(cfg.typeK), llamaCppTypeName(cfg.typeV)));
    const auto bitsOf = [](LlamaCppType t) {
      return t == LlamaCppType::Q8_0 ? 8 : t == LlamaCppType::F16 || t == LlamaCppType::BF16 ? 16 : 4;
    };
    const int nb = std::min(bitsOf(cfg.typeK), bitsOf(cfg.typeV));
    detail::json d = detail::json::object();
    d["backend"] = "hqq";
    d["nbits"] = nb;
    d["axis_key"] = 1;
    d["axis_value"] = 1;
    d["q_group_size"] = 32;
    d["residual_length"] = 0;
    out.json = d.dump(2);
    out.notes.push_back(
        fmt::format("nearest equivalent only: transformers has no llama.cpp cache types; keys {} and "
                    "values {} map to hqq {}-bit groups of 32 along the head dimension for both "
                    "sides (hqq's zero-point optimizer, its history re-quantized each step)",
                    llamaCppTypeName(cfg.typeK), llamaCppTypeName(cfg.typeV), nb));
    if (cfg.rotation == Rotation::Auto)
      out.notes.push_back("rot=auto has no transformers equivalent: its caches store K and V unrotated");
  } else if (cfg.backend == Backend::Kivi) {
    // The nearest QuantizedCache: quanto with keys grouped per channel (axis -1) and values per token (axis 0).
    detail::json d = detail::json::object();
    d["backend"] = "quanto";
    d["nbits"] = cfg.resolvedNbits();
    d["axis_key"] = -1;
    d["axis_value"] = 0;
    d["q_group_size"] = cfg.resolvedGroupSize();
    d["residual_length"] = cfg.resolvedResidualLength();
    out.json = d.dump(2);
    out.notes.push_back(
        "nearest equivalent only: transformers has no KIVI-style cache; its quanto backend groups "
        "keys across all tokens of a channel and re-quantizes the whole history when the residual "
        "window fills, where kivi quantizes each group of tokens once as it leaves the window");
  } else {
    out.json = detail::hfDict(cfg).dump(2);
  }
  for (auto& n : detail::optionNotes(cfg, &detail::OptionField::hfWhy, true)) out.notes.push_back(std::move(n));
  if (!cfg.keyScales.empty())
    out.notes.push_back(
        "calibrated scales have no transformers equivalent: its fp8 backend calibrates on the first "
        "update (the prompt) and freezes that scale");
  return out;
}

}  // namespace kvscope::cache
