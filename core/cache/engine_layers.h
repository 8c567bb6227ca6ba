// Which layers each engine would quantize when it runs a config as kvscope exports it (`export --format vllm` /
// `llamacpp`, transformers' QuantizedCache for the quanto and hqq backends), layer by layer: vLLM 0.33 skips the layers
// a per-layer config keeps `dynamic` (sliding_window where that is all of them) and, for TurboQuant and UltraQuant, the
// first and last two; llama.cpp's two types reach every layer with a cache, its SWA cache included; transformers'
// QuantizedCache refuses sliding-window layers. A layer that reads another's KV (Gemma 4) stores nothing in any engine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cache/config.h"

namespace kvscope::cache {

/// What an engine does with one layer's cache.
enum class EngineLayer {
  Quantized,    ///< both sides
  KeysOnly,     ///< quantized keys, 16-bit values (llama.cpp's -ctk q8_0 -ctv f16)
  ValuesOnly,   ///< 16-bit keys, quantized values
  Unquantized,  ///< the model's dtype
  Shared,       ///< reads another layer's KV: stores nothing
  Refused,      ///< the engine will not run this config on such a layer (`why`)
};

struct EngineLayers {
  std::string engine;    ///< "vLLM 0.33", "llama.cpp", "transformers"
  std::string how;       ///< the flags or call it runs ("--kv-cache-dtype fp8_e4m3", "-ctk q8_0 -ctv q8_0")
  bool nearest = false;  ///< the engine has no exact equivalent: `how` is the nearest (export's notes say why)
  std::vector<EngineLayer> layers;
  std::string why;  ///< for Refused layers
};

/// Each engine's treatment of every layer of a model with these windows (0: full attention) and KV sources (-1: its
/// own; empty: every layer its own). transformers only for the quanto and hqq backends (uniform configs): the other
/// backends have no QuantizedCache there. Throws ConfigError where the exports do (a per-layer config without `*`).
std::vector<EngineLayers> engineLayers(const CacheConfig& cfg, const std::vector<std::int64_t>& windows,
                                       const std::vector<int>& kvSources);

/// "quantizes 0-23, keeps 24-25 unquantized", "quantizes keys of all 26 layers", "refuses layers 0-4 (why)", plus
/// the layers that store nothing: one engine's row in words.
std::string describeEngineLayers(const EngineLayers& e);
/// The same in a few words, for a line that must stay short: the layers it quantizes ("4,9,14", "all 15", "none",
/// "keys of all 26", "keys 0-3, values 0-1"), or "refuses".
std::string briefEngineLayers(const EngineLayers& e);

}  // namespace kvscope::cache
