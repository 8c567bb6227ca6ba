// Export to NVIDIA Model-Optimizer 0.47.0's checkpoint metadata: the KV cache format it writes into
// hf_quant_config.json (`kv_cache_quant_algo`, torch/export/quant_utils.py get_quant_config) and into config.json's
// `quantization_config` (torch/export/convert_hf_config.py convert_hf_quant_config_format), which vLLM and
// TensorRT-LLM read. 0.47.0 writes one KV format for the whole model (it asserts against mixed KV formats) and no
// per-layer KV metadata; its k_scale / v_scale tensors are amax / 448 for FP8 and NVFP4 alike.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cache/config/detail.h"

namespace kvscope::cache {

namespace {

// Model-Optimizer's name of a uniform config's KV format ("FP8", "NVFP4"), or a ConfigError naming what it lacks.
std::string kvAlgo(const CacheConfig& cfg, std::vector<std::string>& notes) {
  if (cfg.backend == Backend::Fp8) {
    if (cfg.fp8Format != Fp8Format::E4M3FN)
      throw ConfigError("format", "Model-Optimizer's FP8 KV cache is e4m3: format=e5m2 has no kv_cache_quant_algo");
    return "FP8";
  }
  if (cfg.backend == Backend::Vllm && vllmNvfp4(cfg.vllmKv)) {
    if (cfg.vllmKv == VllmKv::Nvfp4FourOverSix)
      notes.push_back(
          "Model-Optimizer writes NVFP4 for the 4over6 layout too (it has no 4over6 form): run vLLM with "
          "--kv-cache-dtype nvfp4_4over6 to choose the scales by error");
    if (cfg.fp8Scale == Fp8Scale::Unit)
      notes.push_back(
          "scale=unit: export the checkpoint without k_scale / v_scale (vLLM then uses 1.0), or pin amax to 448 "
          "(Model-Optimizer's use_constant_amax) so that they are 1.0");
    else
      notes.push_back("scale=amax: Model-Optimizer's calibration writes k_scale / v_scale = amax / 448 per layer");
    return "NVFP4";
  }
  throw ConfigError("backend", fmt::format("Model-Optimizer 0.47.0 writes an FP8 or NVFP4 KV cache "
                                           "(kv_cache_quant_algo); `{}` is neither",
                                           toSpec(cfg)));
}

}  // namespace

ModelOptExport toModelOptConfig(const CacheConfig& cfg) {
  validate(cfg);
  if (cfg.tiered()) return detail::exportOldestTier<ModelOptExport>(cfg, "Model-Optimizer 0.47.0", toModelOptConfig);
  ModelOptExport out;
  std::string algo;
  if (!cfg.mixed()) {
    if (cfg.backend == Backend::Dynamic)
      throw ConfigError("backend", "the `dynamic` backend quantizes no KV cache: there is no kv_cache_quant_algo");
    algo = kvAlgo(cfg, out.notes);
  } else {
    std::vector<std::string> skipped;
    for (const auto& r : cfg.layers)
      for (const CacheConfig* side : {&r.keys, &r.values}) {
        if (side->backend == Backend::Dynamic) continue;
        std::vector<std::string> notes;
        const std::string a = kvAlgo(*side, notes);
        if (!algo.empty() && a != algo)
          throw ConfigError("layers", fmt::format("Model-Optimizer 0.47.0 writes one KV format for every layer "
                                                  "(\"Do not support mixed precision kv cache quantization\"): "
                                                  "{} and {} here",
                                                  algo, a));
        if (algo.empty()) out.notes.insert(out.notes.end(), notes.begin(), notes.end());
        algo = a;
      }
    if (algo.empty()) throw ConfigError("layers", "no layer quantizes its KV cache: there is no kv_cache_quant_algo");
    for (const auto& r : cfg.layers)
      if (!r.wildcard() && r.keys.backend == Backend::Dynamic && r.values.backend == Backend::Dynamic)
        for (int l = r.first; l <= r.last; ++l) skipped.push_back(std::to_string(l));
    out.notes.push_back("Model-Optimizer has no per-layer KV formats: the checkpoint names one format for every layer" +
                        (skipped.empty()
                             ? std::string()
                             : fmt::format("; keep layers {} unquantized with vLLM's --kv-cache-dtype-skip-layers {}",
                                           fmt::join(skipped, ","), fmt::join(skipped, " "))));
  }
  const detail::json producer = {{"name", "modelopt"}, {"version", "0.47.0"}};
  detail::json hf = detail::json::object();
  hf["producer"] = producer;
  hf["quantization"] = {{"quant_algo", nullptr}, {"kv_cache_quant_algo", algo}};
  out.hfQuantConfig = hf.dump(4);
  detail::json qc = detail::json::object();
  qc["ignore"] = detail::json::array();
  qc["kv_cache_scheme"] =
      algo == "FP8" ? detail::json{{"dynamic", false}, {"num_bits", 8}, {"type", "float"}} : detail::json(algo);
  qc["producer"] = producer;
  qc["quant_method"] = "modelopt";
  out.quantizationConfig = qc.dump();
  out.kvCacheQuantAlgo = algo;
  return out;
}

}  // namespace kvscope::cache
