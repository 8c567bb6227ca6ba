// Cache configuration: the backend, transformers' `cache_config` keys and kvscope's own options; parsing of SPEC
// strings and JSON files, validation with the reference's limits, and export. No torch, no Qt: the CLI and the GUI
// use this header as it is.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cache/fp8_format.h"
#include "util/error.h"

namespace kvscope::cache {

enum class Backend { Dynamic, Fp8, Quanto, Hqq, Kivi, LlamaCpp, Vllm, Mxfp4 };
/// vLLM's KV cache dtypes the `vllm` backend computes (`kv=`, named as vLLM's --kv-cache-dtype): NVFP4 (blocks of 16
/// E2M1 values, an E4M3 scale per block, the layer's global scale) and NVFP4 with the 4over6 scale choice.
/// UltraQuant: E2M1 in blocks of 32 with power-of-two scales, the keys Hadamard-rotated, the first and last two layers
/// left unquantized as vLLM leaves them. Per token and head: int8 or e4m3 codes with a float32 scale per token and
/// head; int4 codes with a zero point after vLLM's randomized Hadamard transform. TurboQuant's four presets: keys as
/// Lloyd-Max codes of the rotated unit vector and its norm (k8v4: FP8 keys), values as 4- or 3-bit uniform codes, the
/// first and last two layers unquantized.
enum class VllmKv {
  Nvfp4,
  Nvfp4FourOverSix,
  Ultraquant4Bit,
  Int8PerTokenHead,
  Fp8PerTokenHead,
  Int4PerTokenHead,
  TurboquantK8V4,
  Turboquant4BitNc,
  TurboquantK3V4Nc,
  Turboquant3BitNc
};
/// Whether `k` is one of vLLM's NVFP4 caches (nvfp4, nvfp4_4over6).
inline bool vllmNvfp4(VllmKv k) {
  return k == VllmKv::Nvfp4 || k == VllmKv::Nvfp4FourOverSix;
}
/// Whether `k` is one of vLLM's TurboQuant presets.
inline bool vllmTurboQuant(VllmKv k) {
  return k == VllmKv::TurboquantK8V4 || k == VllmKv::Turboquant4BitNc || k == VllmKv::TurboquantK3V4Nc ||
         k == VllmKv::Turboquant3BitNc;
}
/// Whether vLLM leaves a dense model's first and last min(2, L / 2) layers unquantized under `k` (its
/// TurboQuantConfig.get_boundary_skip_layers, applied to TurboQuant and UltraQuant).
inline bool vllmBoundarySkip(VllmKv k) {
  return k == VllmKv::Ultraquant4Bit || vllmTurboQuant(k);
}
/// How many layers at each end vLLM's boundary skip keeps unquantized in a model of `numLayers`: min(2, L / 2).
inline int vllmBoundaryEdge(int numLayers) {
  return numLayers / 2 < 2 ? numLayers / 2 : 2;
}
/// Whether `layer` is one of them.
inline bool vllmBoundaryLayer(int layer, int numLayers) {
  const int edge = vllmBoundaryEdge(numLayers);
  return layer < edge || layer >= numLayers - edge;
}
/// llama.cpp's KV cache types (-ctk / -ctv): f16 and bf16 keep the values at 16 bits, the others are ggml's blocks of
/// 32 values along the head dimension.
enum class LlamaCppType { F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL };
/// llama.cpp's Hadamard rotation of K and V (src/llama-kv-cache.cpp). Auto: llama.cpp's rule, each side rotated when
/// its type is quantized and the head size is a multiple of 64. On: both sides rotated whatever their type (an error
/// for a head size that is not a multiple of 64). Off: none, as with LLAMA_ATTN_ROT_DISABLE=1.
enum class Rotation { Auto, On, Off };
enum class Fp8Granularity { Tensor, Head, Channel };
/// Where an fp8 cache's scale comes from when no calibrated scales are given. Amax: the first update's amax
/// (transformers). Unit: 1.0, what vLLM's FP8 cache uses when the checkpoint carries no k_scale / v_scale.
enum class Fp8Scale { Amax, Unit };
/// What happens to a value whose |x / scale| exceeds the format's maximum after the scale was calibrated.
enum class OverflowPolicy {
  Nan,          ///< PyTorch's cast, as transformers' fp8 backend: e4m3fn turns it into NaN (e5m2 into inf)
  Saturate,     ///< clamp to +-max
  Recalibrate,  ///< grow the scale to cover the new amax and re-encode the stored states with it
};

/// How attention reads a layer's cache. Fused: from the stored form (codes and scales, tile by tile), keeping no
/// full-precision copy of the history. Reference: what transformers computes, bit for bit: the layer keeps the
/// dequantized history beside the codes and LibTorch's scaled_dot_product_attention reads it.
enum class AttentionMode { Fused, Reference };

/// A bad option, key, value or combination (ErrorCode::BadInput). `key()` names the offending key (empty for the
/// backend itself).
class ConfigError : public Error {
 public:
  ConfigError(std::string key, const std::string& message)
      : Error(ErrorCode::BadInput, message), key_(std::move(key)) {}
  const std::string& key() const { return key_; }

 private:
  std::string key_;
};

struct LayerRule;

/// One tier of a config by age (`tiers=256:bf16,4096:fp8,*:nvfp4`): the tokens younger than `age` that no newer tier
/// holds, stored in `format` (a row format: f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, fp8, int8, int4, nvfp4,
/// nvfp4_4over6, mxfp4; tierFormatConfig). age 0: `*`, every older token (the last tier).
struct AgeTier {
  std::int64_t age = 0;
  std::string format;
  bool operator==(const AgeTier&) const = default;
};

struct CacheConfig {
  Backend backend = Backend::Dynamic;

  // transformers' group-wise keys (quanto, hqq). Unset means the layer's default, as in transformers.
  std::optional<int> nbits, axisKey, axisValue, qGroupSize, residualLength;

  // kvscope's fp8 options; the defaults are transformers' fp8 backend, bit for bit.
  Fp8Format fp8Format = Fp8Format::E4M3FN;
  Fp8Granularity granularity = Fp8Granularity::Tensor;
  double headroom = 1.0;  ///< scale = amax * headroom / format max
  Fp8Scale fp8Scale = Fp8Scale::Amax;
  OverflowPolicy overflow = OverflowPolicy::Nan;

  // kvscope's hqq option: the half-quadratic optimizer, on by default as in hqq 0.2.8 (what transformers runs).
  bool hqqOptimize = true;

  // kvscope's llamacpp options: the cache types of keys and values (`type_k`, `type_v`; q8_0 by default, the type
  // llama.cpp users quantize to first) and the rotation (`rot`).
  LlamaCppType typeK = LlamaCppType::Q8_0, typeV = LlamaCppType::Q8_0;
  Rotation rotation = Rotation::Auto;

  // kvscope's vllm option: the engine's KV cache dtype (`kv`). Its global scales are `scale` (fp8Scale): the first
  // update's amax / 448 (a Model-Optimizer checkpoint's k_scale / v_scale) or 1.0 (vLLM without checkpoint scales).
  VllmKv vllmKv = VllmKv::Nvfp4;

  // kvscope's attention-sink option (fp8, quanto, hqq, kivi, llamacpp): the first `sink` tokens stay in full precision
  // and the backend sees only the tokens after them. 0 (default): the backend alone, as transformers.
  int sink = 0;

  // kvscope's option for every backend: how attention reads this cache (`attention=fused|reference`).
  AttentionMode attention = AttentionMode::Fused;

  // kvscope's fp8 option: scales calibrated offline on a text (`kvscope-cli calibrate`), per layer: [layer][1]
  // (granularity=tensor), [layer][kv_heads] (head) or [layer][kv_heads * head_dim] (channel). Used from the first
  // token instead of the first update's amax. Only in JSON files (`key_scales`, `value_scales`); empty: the seed's
  // first-update calibration.
  std::vector<std::vector<float>> keyScales, valueScales;

  // transformers' layer defaults for unset keys.
  // (kivi: KIVI's own defaults, 2 bits in groups of 32.)
  int resolvedNbits() const { return nbits.value_or(backend == Backend::Kivi ? 2 : 4); }
  int resolvedAxisKey() const { return axisKey.value_or(0); }
  int resolvedAxisValue() const { return axisValue.value_or(0); }
  int resolvedGroupSize() const { return qGroupSize.value_or(backend == Backend::Kivi ? 32 : 64); }
  int resolvedResidualLength() const { return residualLength.value_or(128); }

  /// Per-layer and per-side configs (SPEC `layers=0-1:dynamic;*:K=fp8,V=quanto:nbits=4`, docs/cache-configs.md).
  /// Empty: this config for every layer, keys and values alike. Otherwise the rules decide, and the fields above
  /// mirror one quantizing side of them (the `*` rule's keys first) for views that show a single backend.
  std::vector<LayerRule> layers;
  bool mixed() const { return !layers.empty(); }

  // Tiers by age (`tiers=...`): each layer keeps its newest tokens in the first tier's format and moves older ones
  // down. The fields above then describe the oldest tier's format (the exports' and bits per value's view).
  std::vector<AgeTier> tiers;
  bool tiered() const { return !tiers.empty(); }

  bool operator==(const CacheConfig&) const = default;
};

/// One rule of a per-layer config: a layer range and the configs of its keys and values (uniform configs).
struct LayerRule {
  int first = -1, last = -1;  ///< inclusive layer range; first == -1 is `*`: every layer no other rule names
  CacheConfig keys, values;
  bool wildcard() const { return first < 0; }
  bool operator==(const LayerRule&) const = default;
};

/// The keys' and the values' configs of layer `layer` in a model of `numLayers` layers (for a uniform config: the
/// config twice). Throws ConfigError when no rule covers the layer or a rule names a layer the model does not have.
std::pair<CacheConfig, CacheConfig> layerConfigs(const CacheConfig& cfg, int layer, int numLayers);
/// A per-layer config from its rules, as parseSpec builds one from `layers=...` (the mirrored single-backend fields
/// set, validated). Throws ConfigError.
CacheConfig perLayerConfig(std::vector<LayerRule> rules);

/// One option a backend accepts, for forms, help and error messages.
struct OptionInfo {
  std::string name;
  std::string kind;                  ///< "int", "number", "bool" or "choice"
  std::vector<std::string> choices;  ///< allowed values (ints as text for "int" keys with a fixed set)
  std::string defaultValue;
  bool transformersKey = false;  ///< part of transformers' cache_config
  std::string help;
};

std::string_view backendName(Backend b);
/// One line on what a backend is and whose engine it computes, for lists and tooltips.
std::string_view backendSummary(Backend b);
/// Throws ConfigError naming the allowed backends.
Backend parseBackend(std::string_view name);
std::vector<Backend> allBackends();
/// The options `b` accepts, in display order.
const std::vector<OptionInfo>& backendOptions(Backend b);

/// Sets one option from its text form (as in a SPEC); validates the key and the value's type, not the combination.
void setOption(CacheConfig& cfg, std::string_view key, std::string_view value);
/// One option's resolved value in its text form (as a SPEC writes it), for forms. Throws ConfigError when `cfg`'s
/// backend does not take `key`.
std::string optionValue(const CacheConfig& cfg, std::string_view key);

/// `fp8`, `quanto:nbits=2,q_group_size=32`, `hqq:nbits=3,axis_key=1`, `dynamic`, a per-layer config
/// `layers=RANGE:BODY;...` (RANGE `*`, `N` or `N-M`; BODY a SPEC for keys and values, or `K=SPEC,V=SPEC`), tiers by
/// age `tiers=AGE:FORMAT,...,*:FORMAT`, or a path to a JSON config (kvscope's file or a bare transformers
/// cache_config). Validated. Throws ConfigError.
CacheConfig parseSpec(std::string_view spec);
/// The single-backend config a tier format names (`q8_0`: llamacpp with q8_0 keys and values; `fp8`, `int8`, `int4`:
/// vLLM's per-token-head caches; `nvfp4`, `nvfp4_4over6`: vllm; `mxfp4`). Throws ConfigError naming the formats.
CacheConfig tierFormatConfig(std::string_view format);
/// Parses kvscope's config file or a bare transformers cache_config dict. Validated. Throws ConfigError.
CacheConfig configFromJson(std::string_view text, std::string_view origin = "config");
/// Reads and parses a JSON config file. Throws ConfigError (also for unreadable files).
CacheConfig loadConfigFile(const std::string& path);

/// A grid of configs, `quanto:nbits=2,4;q_group_size=32,64` -> every combination as a SPEC (not yet validated).
/// Throws ConfigError for a malformed grid or one of more than 4096 configs.
std::vector<std::string> expandGrid(std::string_view grid);

/// Checks the combination with the reference's own limits and messages. Throws ConfigError.
void validate(const CacheConfig& cfg);

struct HfExport {
  std::string json;                ///< transformers' cache_config: only keys QuantizedCache accepts
  std::vector<std::string> notes;  ///< kvscope options that transformers cannot express, said plainly
};
/// Throws ConfigError for the dynamic backend (transformers' default cache needs no cache_config).
HfExport toHfCacheConfig(const CacheConfig& cfg);
/// Command-line flags for another engine, with what does not carry over said plainly.
struct FlagExport {
  std::string flags;  ///< e.g. "--kv-cache-dtype fp8_e4m3"
  std::string env;    ///< environment the engine must run with, e.g. "LLAMA_ATTN_ROT_DISABLE=1"; empty: none
  std::vector<std::string> notes;  ///< "nearest equivalent" statements
};
/// Each layer's sliding window (0: full attention), as the model's layer specs give them: what the engines' rules per
/// layer kind need. Empty: the model is not known (an export then says nothing of layer kinds).
using LayerWindows = std::vector<std::int64_t>;

/// vLLM's --kv-cache-dtype (FP8 only: integer configs map to the nearest FP8 setting, stated as such). With the
/// model's windows: a per-layer config that leaves every sliding-window layer unquantized skips them as vLLM names
/// them (`--kv-cache-dtype-skip-layers sliding_window`), and what vLLM 0.33 does on those layers is said.
FlagExport toVllmFlags(const CacheConfig& cfg, const LayerWindows& windows = {});
/// A calibrated fp8 config's scales as vLLM loads them from a checkpoint: one float32 tensor per layer and side,
/// `model.layers.N.self_attn.k_scale` / `v_scale` (dequantization scales, amax / 448 for e4m3, as kvscope's), shape []
/// for granularity=tensor and [num_kv_heads] for granularity=head.
struct VllmScales {
  struct Tensor {
    std::string name;
    std::vector<std::int64_t> shape;
    std::vector<float> values;
  };
  std::vector<Tensor> tensors;     ///< layer by layer, k_scale before v_scale
  std::string quantizationConfig;  ///< the `quantization_config` object config.json needs for vLLM to load them
  std::vector<std::string> notes;  ///< what the target does with them (per-head: Flash-Attention 3 only)
};
/// Throws ConfigError naming the problem: not an fp8 config with calibrated scales, granularity=channel (vLLM has
/// per-tensor and per-head scales), format=e5m2 (vLLM's checkpoint scales are for its e4m3 cache).
VllmScales toVllmScales(const CacheConfig& cfg);
/// llama.cpp's -ctk/-ctv (the `llamacpp` backend: exact, with LLAMA_ATTN_ROT_DISABLE=1 for rot=off; other backends:
/// the nearest type, stated as such; a quantized cache runs with -fa on). With the model's windows: its SWA cache
/// takes the same types, without --swa-full (the sliding layers keep their window, as kvscope's do).
FlagExport toLlamaCppFlags(const CacheConfig& cfg, const LayerWindows& windows);
FlagExport toLlamaCppFlags(const CacheConfig& cfg);

/// NVIDIA Model-Optimizer 0.47.0's checkpoint metadata for a KV cache format (FP8: `fp8`; NVFP4: `vllm` with
/// kv=nvfp4 or nvfp4_4over6), as its export writes it: hf_quant_config.json and config.json's quantization_config.
/// One format for every layer (a per-layer config whose quantized sides share one; its unquantized layers are said to
/// need vLLM's skip flag). Throws ConfigError for a config with no Model-Optimizer form.
struct ModelOptExport {
  std::string kvCacheQuantAlgo;    ///< "FP8" or "NVFP4"
  std::string hfQuantConfig;       ///< hf_quant_config.json
  std::string quantizationConfig;  ///< config.json's "quantization_config" object
  std::vector<std::string> notes;
};
ModelOptExport toModelOptConfig(const CacheConfig& cfg);

/// kvscope's own file: transformers' dict plus kvscope's options beside it.
std::string toKvscopeJson(const CacheConfig& cfg);
/// Canonical SPEC string (only what differs from the defaults, transformers keys first).
std::string toSpec(const CacheConfig& cfg);
/// The SPEC value of an attention mode: "fused" or "reference".
std::string_view attentionName(AttentionMode m);
/// True when every layer of `cfg` (every rule's keys and values) attends in fused mode.
bool allFused(const CacheConfig& cfg);
/// The SPEC value of an FP8 format: "e4m3fn" or "e5m2" (its largest finite value: fp8Max, cache/fp8_format.h).
std::string_view fp8FormatName(Fp8Format f);
/// The SPEC value of an overflow policy: "nan", "saturate" or "recalibrate".
std::string_view overflowName(OverflowPolicy p);
/// The SPEC value of a granularity: "tensor", "head" or "channel".
std::string_view granularityName(Fp8Granularity g);
/// llama.cpp's name of a cache type ("q8_0", "iq4_nl", ...), as -ctk / -ctv and SPECs write it.
std::string_view llamaCppTypeName(LlamaCppType t);
/// The type llama.cpp calls `name` (its -ctk / -ctv spelling); none for another name.
std::optional<LlamaCppType> parseLlamaCppType(std::string_view name);
/// Whether a llama.cpp cache type is a block-quantized one (not f16 / bf16).
bool llamaCppQuantized(LlamaCppType t);
/// A llama.cpp cache type's block: values and bytes (ggml-common.h; f16 and bf16 are blocks of one 2-byte value).
struct LlamaCppBlock {
  int values = 1, bytes = 2;
};
LlamaCppBlock llamaCppBlock(LlamaCppType t);
/// The SPEC value of a rotation: "auto", "on" or "off".
std::string_view rotationName(Rotation r);
/// vLLM's --kv-cache-dtype of a `vllm` config's `kv` ("nvfp4", "nvfp4_4over6").
std::string_view vllmKvName(VllmKv k);
/// Bits per value a config stores, scales included, the keys' and values' mean (NVFP4 4.5, MXFP4 4.25, fp8 8,
/// llamacpp q4_0 4.5; vLLM's per-token-head caches 8 + 32 / headDim); the group-wise backends count a 16-bit scale and
/// zero-point per group and no residual window; a per-layer config, its `*` rule's (else its first rule's).
double bitsPerValue(const CacheConfig& cfg, int headDim = 128);

}  // namespace kvscope::cache
