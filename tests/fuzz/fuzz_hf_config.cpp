// libFuzzer target: a Hugging Face config.json -> ModelConfig. Only FormatError may come out, and whatever is
// accepted must be a model the loader can build (positive sizes, heads divisible, even head dimension).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "model/hf_config.h"
#include "model/safetensors.h"  // FormatError

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto c =
        kvscope::model::hfConfigFromJson(std::string_view(reinterpret_cast<const char*>(data), size), "config.json");
    if (c.layers <= 0 || c.hidden <= 0 || c.heads <= 0 || c.kvHeads <= 0 || c.headDim <= 0 || c.headDim % 2 ||
        c.vocab <= 0 || c.heads % c.kvHeads || !(c.rmsEps > 0) || !std::isfinite(c.ropeTheta) || !(c.ropeTheta > 0) ||
        c.contextLength <= 0)
      __builtin_trap();
    // Every layer has a spec; a dense layer has its units, an MoE layer experts to route to.
    if (c.layerSpecs.size() != static_cast<std::size_t>(c.layers)) __builtin_trap();
    for (const auto& s : c.layerSpecs)
      if (s.ffn == kvscope::model::FfnKind::Dense
              ? c.intermediate <= 0
              : c.moe.experts <= 0 || c.moe.used <= 0 || c.moe.used > c.moe.experts || c.moe.intermediate <= 0)
        __builtin_trap();
    if (c.ropeFactor > 0 && !(c.ropeHighFreq > c.ropeLowFreq && c.ropeLowFreq > 0 && c.ropeOriginalMax > 0))
      __builtin_trap();
  } catch (const kvscope::model::FormatError&) {
  }
  return 0;
}
