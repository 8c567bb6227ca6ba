// Export to vLLM: --kv-cache-dtype (and skip-layers for a per-layer config), with what does not carry over.
#include "cache/config/detail.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kvscope::cache {

namespace {

FlagExport layersToVllm(const CacheConfig& cfg) {
  const LayerRule* all = detail::wildcardRule(cfg);
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
      e.notes.push_back(detail::notExported(r, "vLLM can only skip layers (keep them unquantized), not give them "
                                               "another type"));
    }
  }
  if (!skip.empty() && all->keys.backend != Backend::Dynamic)
    e.flags += fmt::format(" --kv-cache-dtype-skip-layers {}", fmt::join(skip, " "));
  return e;
}

}  // namespace

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
      break;
    case Backend::LlamaCpp:
      if (!llamaCppQuantized(cfg.typeK) && !llamaCppQuantized(cfg.typeV)) {
        e.flags = "--kv-cache-dtype auto";
        e.notes.push_back(fmt::format("{} keys and {} values are 16-bit: vLLM's default cache (the model's dtype)",
                                      llamaCppTypeName(cfg.typeK), llamaCppTypeName(cfg.typeV)));
        break;
      }
      e.flags = "--kv-cache-dtype fp8_e4m3";
      e.notes.push_back(fmt::format("nearest equivalent only: vLLM has no llama.cpp block types (keys {}, values {}); "
                                    "FP8 with one scale per tensor is its 8-bit KV cache",
                                    llamaCppTypeName(cfg.typeK), llamaCppTypeName(cfg.typeV)));
      if (cfg.rotation == Rotation::Auto) e.notes.push_back("rot=auto: vLLM stores K and V unrotated");
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
  for (auto& n : detail::optionNotes(cfg, &detail::OptionField::vllmWhy, false)) e.notes.push_back(std::move(n));
  if (!cfg.keyScales.empty())
    e.notes.push_back("calibrated scales: vLLM reads per-tensor (or per-head) k/v scales from the model checkpoint; "
                      "kvscope does not write checkpoints, so put them there (k_scale/v_scale) to use them");
  return e;
}

}  // namespace kvscope::cache
