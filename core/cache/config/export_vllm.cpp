// Export to vLLM: --kv-cache-dtype (and skip-layers for a per-layer config, `sliding_window` for the sliding-window
// layers as vLLM 0.33 names them), with what does not carry over.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "cache/config/detail.h"

namespace kvscope::cache {

namespace {

FlagExport uniformToVllm(const CacheConfig& cfg);

// `sliding`: the model's sliding-window layers; `slidingSkipped` says whether the export skips every one of them.
FlagExport layersToVllm(const CacheConfig& cfg, const std::vector<int>& sliding, bool& slidingSkipped) {
  const LayerRule* all = detail::wildcardRule(cfg);
  if (!all) throw ConfigError("layers", "vLLM takes one KV cache dtype: add a `*` rule for the layers not named");
  FlagExport e = toVllmFlags(all->keys);
  if (!(all->keys == all->values)) {
    const FlagExport ev = toVllmFlags(all->values);
    e.notes.push_back(
        fmt::format("vLLM has one --kv-cache-dtype for keys and values: exported from the keys' `{}`; "
                    "the values' `{}` alone would export as `{}`",
                    toSpec(all->keys), toSpec(all->values), ev.flags));
  }
  std::vector<int> skip;
  for (const auto& r : cfg.layers) {
    if (r.wildcard()) continue;
    if (r.keys.backend == Backend::Dynamic && r.values.backend == Backend::Dynamic) {
      for (int l = r.first; l <= r.last; ++l) skip.push_back(l);
    } else if (!(r.keys == all->keys && r.values == all->values)) {
      e.notes.push_back(detail::notExported(r,
                                            "vLLM can only skip layers (keep them unquantized), not give them "
                                            "another type"));
    }
  }
  // vLLM's Attention skips a layer built with a sliding window when the list names `sliding_window`
  // (model_executor/layers/attention/attention.py): one word for all of them when every one is skipped.
  const auto in = [](const std::vector<int>& ls, int l) { return std::find(ls.begin(), ls.end(), l) != ls.end(); };
  slidingSkipped = !sliding.empty() && std::all_of(sliding.begin(), sliding.end(), [&](int l) { return in(skip, l); });
  std::vector<std::string> words;
  if (slidingSkipped) words.emplace_back("sliding_window");
  for (int l : skip)
    if (!slidingSkipped || !in(sliding, l)) words.push_back(std::to_string(l));
  if (!words.empty() && all->keys.backend != Backend::Dynamic)
    e.flags += fmt::format(" --kv-cache-dtype-skip-layers {}", fmt::join(words, " "));
  return e;
}

// What vLLM 0.33 does on a model's sliding-window layers with this (uniform or `*` rule) config.
void slidingNotes(const CacheConfig& cfg, const std::vector<int>& sliding, bool skipped,
                  std::vector<std::string>& notes) {
  if (sliding.empty() || cfg.backend == Backend::Dynamic) return;
  const std::string layers = util::layerRanges(sliding);
  if (skipped) {
    notes.push_back(
        fmt::format("the sliding-window layers ({}) keep the model's dtype: vLLM skips every layer "
                    "built with a sliding window",
                    layers));
    return;
  }
  notes.push_back(
      fmt::format("vLLM quantizes the sliding-window layers ({}) too, as this config does; "
                  "`--kv-cache-dtype-skip-layers sliding_window` keeps them in the model's dtype "
                  "(kvscope: a `layers=` rule giving them `dynamic`)",
                  layers));
  if (cfg.backend == Backend::Vllm && vllmTurboQuant(cfg.vllmKv))
    notes.push_back(
        "vLLM 0.33's TurboQuant prefill calls flash_attn_varlen_func without a window: on the sliding-window layers "
        "a prompt longer than the window attends over all of it (decode keeps the window); kvscope keeps the "
        "window in both");
}

}  // namespace

FlagExport toVllmFlags(const CacheConfig& cfg, const LayerWindows& windows) {
  validate(cfg);
  const std::vector<int> sliding = detail::slidingLayers(windows);
  if (cfg.mixed()) {
    bool skipped = false;
    FlagExport e = layersToVllm(cfg, sliding, skipped);
    slidingNotes(detail::wildcardRule(cfg)->keys, sliding, skipped, e.notes);  // layersToVllm checked the rule
    return e;
  }
  if (cfg.tiered())
    return detail::exportOldestTier<FlagExport>(cfg, "vLLM 0.33",
                                                [&](const CacheConfig& c) { return toVllmFlags(c, windows); });
  FlagExport e = uniformToVllm(cfg);
  slidingNotes(cfg, sliding, false, e.notes);
  return e;
}

namespace {

FlagExport uniformToVllm(const CacheConfig& cfg) {
  FlagExport e;
  switch (cfg.backend) {
    case Backend::Dynamic:
      e.flags = "--kv-cache-dtype auto";
      break;
    case Backend::Fp8:
      e.flags = cfg.fp8Format == Fp8Format::E5M2 ? "--kv-cache-dtype fp8_e5m2" : "--kv-cache-dtype fp8_e4m3";
      if (cfg.fp8Scale == Fp8Scale::Unit && cfg.keyScales.empty())
        e.notes.push_back(
            "scale=unit is vLLM's FP8 cache without k/v scales in the checkpoint (and without "
            "--calculate-kv-scales): every scale 1.0");
      else if (cfg.keyScales.empty())
        e.notes.push_back(
            "vLLM takes per-tensor k/v scales from the checkpoint, or computes them with "
            "--calculate-kv-scales; without either it uses 1.0 (kvscope's scale=unit), which can hurt "
            "quality");
      break;
    case Backend::LlamaCpp:
      if (!llamaCppQuantized(cfg.typeK) && !llamaCppQuantized(cfg.typeV)) {
        e.flags = "--kv-cache-dtype auto";
        e.notes.push_back(fmt::format("{} keys and {} values are 16-bit: vLLM's default cache (the model's dtype)",
                                      llamaCppTypeName(cfg.typeK), llamaCppTypeName(cfg.typeV)));
        break;
      }
      e.flags = "--kv-cache-dtype fp8_e4m3";
      e.notes.push_back(
          fmt::format("nearest equivalent only: vLLM has no llama.cpp block types (keys {}, values {}); "
                      "FP8 with one scale per tensor is its 8-bit KV cache",
                      llamaCppTypeName(cfg.typeK), llamaCppTypeName(cfg.typeV)));
      if (cfg.rotation == Rotation::Auto) e.notes.push_back("rot=auto: vLLM stores K and V unrotated");
      break;
    case Backend::Vllm:
      e.flags = fmt::format("--kv-cache-dtype {}", vllmKvName(cfg.vllmKv));
      if (vllmTurboQuant(cfg.vllmKv)) {
        e.notes.push_back(
            "vLLM adds the first and last two layers to --kv-cache-dtype-skip-layers itself (dense models), as "
            "kvscope's cache does");
        e.notes.push_back(
            "vLLM's first prefill chunk attends over the unquantized K/V; later chunks and decode read the "
            "TurboQuant cache (kvscope reads the stored form for every token)");
        break;
      }
      if (cfg.vllmKv == VllmKv::Int4PerTokenHead) {
        e.notes.push_back(
            "vLLM's Triton attention backend reads int4 per-token-head caches (head sizes of 32 or more, causal "
            "attention only)");
        break;
      }
      if (cfg.vllmKv == VllmKv::Ultraquant4Bit) {
        e.notes.push_back(
            "vLLM adds the first and last two layers to --kv-cache-dtype-skip-layers itself (dense models), as "
            "kvscope's cache does");
        break;
      }
      if (!vllmNvfp4(cfg.vllmKv)) {
        e.notes.push_back("vLLM's Triton attention backend reads per-token-head caches (head sizes of 32 or more)");
        break;
      }
      e.notes.push_back(
          cfg.fp8Scale == Fp8Scale::Unit
              ? "scale=unit is vLLM's NVFP4 cache without k/v scales in the checkpoint: every global scale 1.0"
              : "scale=amax: vLLM takes the global scales (k_scale / v_scale) from the checkpoint, as "
                "Model-Optimizer writes them (amax / 448); without them it uses 1.0 (kvscope's scale=unit)");
      e.notes.push_back(cfg.vllmKv == VllmKv::Nvfp4FourOverSix
                            ? "nvfp4_4over6 runs on vLLM's FlashInfer trtllm-gen path only (SM100, Blackwell)"
                            : "vLLM's FlashInfer backend reads NVFP4 caches (head sizes 64, 128, 256, 512; not "
                              "MLA models)");
      break;
    case Backend::Mxfp4:
      e.flags = "--kv-cache-dtype nvfp4";
      e.notes.push_back(
          "nearest equivalent only: vLLM has no MXFP4 KV cache; nvfp4 (E2M1 in blocks of 16 with E4M3 "
          "scales) is its FP4 cache");
      if (cfg.rotation == Rotation::On) e.notes.push_back("rot=on: vLLM stores NVFP4 keys unrotated");
      break;
    case Backend::Quanto:
    case Backend::Hqq:
    case Backend::Kivi:
      e.flags = "--kv-cache-dtype fp8_e4m3";
      e.notes.push_back(
          fmt::format("nearest equivalent only: vLLM has no {}-bit group-wise KV cache; FP8 (8 bits) is "
                      "its smallest KV cache type",
                      cfg.resolvedNbits()));
      break;
  }
  // Calibrated per-head scales do carry over (the checkpoint's [heads] k/v scales): no granularity note for them.
  const bool headScales = !cfg.keyScales.empty() && cfg.granularity == Fp8Granularity::Head;
  for (auto& n : detail::optionNotes(cfg, &detail::OptionField::vllmWhy, false, headScales ? "granularity" : ""))
    e.notes.push_back(std::move(n));
  if (!cfg.keyScales.empty())
    e.notes.push_back(
        "calibrated scales: vLLM reads them from the model checkpoint (k_scale/v_scale); "
        "`--scales FILE.safetensors` writes them in that form (merge step: docs/cache-configs.md)");
  return e;
}

}  // namespace

VllmScales toVllmScales(const CacheConfig& cfg) {
  validate(cfg);
  if (cfg.mixed() || cfg.backend != Backend::Fp8 || cfg.keyScales.empty())
    throw ConfigError("key_scales",
                      fmt::format("vLLM scales come from a calibrated fp8 config (kvscope-cli calibrate), "
                                  "got `{}`",
                                  toSpec(cfg)));
  if (cfg.granularity == Fp8Granularity::Channel)
    throw ConfigError("granularity",
                      "vLLM loads one k/v scale per layer or per KV head: granularity=channel has no "
                      "vLLM form (calibrate with granularity=tensor or head)");
  if (cfg.fp8Format != Fp8Format::E4M3FN)
    throw ConfigError("format", "vLLM applies checkpoint k/v scales to its fp8_e4m3 cache: calibrate with format=e4m3");
  const bool head = cfg.granularity == Fp8Granularity::Head;
  VllmScales out;
  for (std::size_t l = 0; l < cfg.keyScales.size(); ++l)
    for (const auto* side : {&cfg.keyScales, &cfg.valueScales}) {
      const std::vector<float>& v = (*side)[l];
      out.tensors.push_back(
          {fmt::format("model.layers.{}.self_attn.{}_scale", l, side == &cfg.keyScales ? 'k' : 'v'),
           head ? std::vector<std::int64_t>{static_cast<std::int64_t>(v.size())} : std::vector<std::int64_t>{}, v});
    }
  // compressed-tensors with no weight scheme: the weights load as they are; kv_cache_scheme gives every attention
  // layer the k/v scale parameters these tensors fill.
  out.quantizationConfig = fmt::format(
      R"({{"quant_method": "compressed-tensors", "format": "dense", "config_groups": {{}}, "ignore": [], )"
      R"("kv_cache_scheme": {{"num_bits": 8, "type": "float", "strategy": "{}", "dynamic": false, "symmetric": true}}}})",
      head ? "attn_head" : "tensor");
  if (head)
    out.notes.push_back(
        "per-head scales (kv_cache_scheme strategy attn_head): vLLM's Flash-Attention 3 backend only, "
        "in releases since its per-head KV scales (PR #30141); other backends and older releases "
        "refuse them: calibrate with granularity=tensor for those");
  out.notes.push_back(
      "vLLM reads a checkpoint's k/v scales only through a quantization_config: add the one printed to "
      "config.json, and run with --kv-cache-dtype fp8_e4m3");
  return out;
}

}  // namespace kvscope::cache
