// The option table: which options each backend takes (OptionInfo: forms, help, errors) and, once per option, the
// field it sets (OptionField: parsing, serialisation, export notes). Adding an option is one OptionField, its line in
// the backends' lists, and its check in validate.cpp when it has one.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <charconv>

#include "cache/config/detail.h"

namespace kvscope::cache {

namespace detail {
namespace {

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

// A choice option's value, as the index of its name in `names` (the enum's order).
template <typename Enum, std::size_t N>
Enum asChoice(std::string_view key, const json& v, const OptionInfo* info,
              const std::array<std::string_view, N>& names) {
  const std::string s = valueText(v);
  const auto it = std::find(names.begin(), names.end(), s);
  const bool offered = !info || std::find(info->choices.begin(), info->choices.end(), s) != info->choices.end();
  if (it == names.end() || !offered)
    throw ConfigError(
        std::string(key),
        fmt::format("option `{}` takes one of {}, got `{}`", key,
                    fmt::join(info ? info->choices : std::vector<std::string>(names.begin(), names.end()), ", "), s));
  return static_cast<Enum>(it - names.begin());
}

constexpr std::array<std::string_view, 2> kFormats{"e4m3fn", "e5m2"};
constexpr std::array<std::string_view, 3> kGranularities{"tensor", "head", "channel"};
constexpr std::array<std::string_view, 3> kOverflows{"nan", "saturate", "recalibrate"};
constexpr std::array<std::string_view, 2> kAttention{"fused", "reference"};
constexpr std::array<std::string_view, 8> kLlamaCppTypes{"f16",  "bf16", "q8_0", "q4_0",
                                                         "q4_1", "q5_0", "q5_1", "iq4_nl"};
constexpr std::array<std::string_view, 3> kRotations{"auto", "on", "off"};
constexpr std::array<std::string_view, 2> kScales{"amax", "unit"};
constexpr std::array<std::string_view, 10> kVllmKv{"nvfp4",
                                                   "nvfp4_4over6",
                                                   "ultraquant_4bit",
                                                   "int8_per_token_head",
                                                   "fp8_per_token_head",
                                                   "int4_per_token_head",
                                                   "turboquant_k8v4",
                                                   "turboquant_4bit_nc",
                                                   "turboquant_k3v4_nc",
                                                   "turboquant_3bit_nc"};

// A choice option's choices, as OptionInfo lists them: the names above, in the enum's order.
template <std::size_t N>
std::vector<std::string> choicesOf(const std::array<std::string_view, N>& names) {
  return {names.begin(), names.end()};
}

// transformers' group-wise keys: std::optional<int> fields, written into SPECs when given, into files resolved.
#define KVS_INT_FIELD(NAME, MEMBER, RESOLVED)                                                         \
  OptionField {                                                                                       \
    NAME, false, [](CacheConfig& c, const json& v, const OptionInfo*) { c.MEMBER = asInt(NAME, v); }, \
        [](const CacheConfig& c) { return c.MEMBER.has_value(); },                                    \
        [](const CacheConfig& c) { return json(c.RESOLVED()); }, {}, {}, {}                           \
  }

const CacheConfig kDefaults{};

const std::array<OptionField, 17> kFields{{
    KVS_INT_FIELD("nbits", nbits, resolvedNbits),
    KVS_INT_FIELD("axis_key", axisKey, resolvedAxisKey),
    KVS_INT_FIELD("axis_value", axisValue, resolvedAxisValue),
    KVS_INT_FIELD("q_group_size", qGroupSize, resolvedGroupSize),
    KVS_INT_FIELD("residual_length", residualLength, resolvedResidualLength),
    {"format",
     false,
     [](CacheConfig& c, const json& v, const OptionInfo* i) {
       c.fp8Format = asChoice<Fp8Format>("format", v, i, kFormats);
     },
     [](const CacheConfig& c) { return c.fp8Format != kDefaults.fp8Format; },
     [](const CacheConfig& c) { return json(std::string(fp8FormatName(c.fp8Format))); },
     "its fp8 backend stores e4m3fn",
     {},
     {}},
    {"granularity",
     false,
     [](CacheConfig& c, const json& v, const OptionInfo* i) {
       c.granularity = asChoice<Fp8Granularity>("granularity", v, i, kGranularities);
     },
     [](const CacheConfig& c) { return c.granularity != kDefaults.granularity; },
     [](const CacheConfig& c) { return json(std::string(granularityName(c.granularity))); },
     "its fp8 backend uses one scale per tensor",
     "vLLM's FP8 KV cache scales per tensor (or per head from a checkpoint), not as kvscope does here",
     {}},
    {"headroom",
     false,
     [](CacheConfig& c, const json& v, const OptionInfo*) { c.headroom = asNumber("headroom", v); },
     [](const CacheConfig& c) { return c.headroom != kDefaults.headroom; },
     [](const CacheConfig& c) { return json(c.headroom); },
     "its scale is amax / 448",
     {},
     {}},
    {"scale",
     false,
     [](CacheConfig& c, const json& v, const OptionInfo* i) {
       c.fp8Scale = asChoice<Fp8Scale>("scale", v, i, kScales);
     },
     [](const CacheConfig& c) { return c.fp8Scale != kDefaults.fp8Scale; },
     [](const CacheConfig& c) { return json(std::string(kScales[static_cast<std::size_t>(c.fp8Scale)])); },
     "its fp8 backend takes the scale from the first update's amax",
     {},
     "llama.cpp has no FP8 cache type"},
    {"overflow",
     false,
     [](CacheConfig& c, const json& v, const OptionInfo* i) {
       c.overflow = asChoice<OverflowPolicy>("overflow", v, i, kOverflows);
     },
     [](const CacheConfig& c) { return c.overflow != kDefaults.overflow; },
     [](const CacheConfig& c) { return json(std::string(overflowName(c.overflow))); },
     "its cast turns |x/scale| >= 480 into NaN",
     "vLLM's FP8 cast saturates values beyond the scale",
     {}},
    {"optimize",
     false,
     [](CacheConfig& c, const json& v, const OptionInfo*) { c.hqqOptimize = asBool("optimize", v); },
     [](const CacheConfig& c) { return c.hqqOptimize != kDefaults.hqqOptimize; },
     [](const CacheConfig& c) { return json(c.hqqOptimize); },
     "transformers runs hqq's optimizer",
     {},
     {}},
    {"sink", true, [](CacheConfig& c, const json& v, const OptionInfo*) { c.sink = asInt("sink", v); },
     [](const CacheConfig& c) { return c.sink != kDefaults.sink; }, [](const CacheConfig& c) { return json(c.sink); },
     "its QuantizedCache quantizes the first tokens with the rest", "vLLM quantizes every token alike",
     "llama.cpp quantizes every token alike"},
    {"type_k",
     false,
     [](CacheConfig& c, const json& v, const OptionInfo* i) {
       c.typeK = asChoice<LlamaCppType>("type_k", v, i, kLlamaCppTypes);
     },
     [](const CacheConfig& c) { return c.typeK != kDefaults.typeK; },
     [](const CacheConfig& c) { return json(std::string(llamaCppTypeName(c.typeK))); },
     {},
     {},
     {}},
    {"type_v",
     false,
     [](CacheConfig& c, const json& v, const OptionInfo* i) {
       c.typeV = asChoice<LlamaCppType>("type_v", v, i, kLlamaCppTypes);
     },
     [](const CacheConfig& c) { return c.typeV != kDefaults.typeV; },
     [](const CacheConfig& c) { return json(std::string(llamaCppTypeName(c.typeV))); },
     {},
     {},
     {}},
    {"rot",
     false,
     [](CacheConfig& c, const json& v, const OptionInfo* i) {
       c.rotation = asChoice<Rotation>("rot", v, i, kRotations);
     },
     [](const CacheConfig& c) { return c.rotation != kDefaults.rotation; },
     [](const CacheConfig& c) { return json(std::string(rotationName(c.rotation))); },
     "its caches store K and V unrotated",
     "vLLM stores K and V unrotated",
     {}},
    {"kv",
     false,
     [](CacheConfig& c, const json& v, const OptionInfo* i) { c.vllmKv = asChoice<VllmKv>("kv", v, i, kVllmKv); },
     [](const CacheConfig& c) { return c.vllmKv != kDefaults.vllmKv; },
     [](const CacheConfig& c) { return json(std::string(vllmKvName(c.vllmKv))); },
     {},
     {},
     {}},
    {"attention",
     true,
     [](CacheConfig& c, const json& v, const OptionInfo* i) {
       c.attention = asChoice<AttentionMode>("attention", v, i, kAttention);
     },
     [](const CacheConfig& c) { return c.attention != kDefaults.attention; },
     [](const CacheConfig& c) { return json(std::string(attentionName(c.attention))); },
     {},
     {},
     {}},
}};
#undef KVS_INT_FIELD

std::string joinNames(const std::vector<OptionInfo>& opts) {
  std::string s;
  for (const auto& o : opts) s += (s.empty() ? "" : ", ") + o.name;
  return s.empty() ? "none" : s;
}

}  // namespace

const OptionField* findField(std::string_view name) {
  for (const auto& f : kFields)
    if (f.name == name) return &f;
  return nullptr;
}

const OptionInfo* findOption(Backend b, std::string_view key) {
  for (const auto& o : backendOptions(b))
    if (o.name == key) return &o;
  return nullptr;
}

void applyOption(CacheConfig& cfg, std::string_view key, const json& v) {
  const OptionInfo* info = findOption(cfg.backend, key);
  // fp8 knows transformers' group-wise keys in order to reject them as transformers does (validate()).
  if (!info && !(cfg.backend == Backend::Fp8 && isGroupWiseKey(key))) {
    throw ConfigError(std::string(key), fmt::format("unknown option `{}` for the `{}` backend (allowed: {})", key,
                                                    backendName(cfg.backend), joinNames(backendOptions(cfg.backend))));
  }
  findField(key)->set(cfg, v, info);
}

json specValue(std::string_view text) {
  long long i = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), i);
  if (ec == std::errc() && p == text.data() + text.size() && !text.empty()) return json(i);
  return json(std::string(text));
}

std::string valueText(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return fmt::format("{}", v.get<double>());
  return v.dump();
}

std::vector<std::string> optionNotes(const CacheConfig& cfg, std::string_view OptionField::*why, bool hfWording,
                                     std::string_view skip) {
  std::vector<std::string> notes;
  for (const auto& o : backendOptions(cfg.backend)) {
    const OptionField& f = *findField(o.name);
    if (!f.isSet(cfg) || (f.*why).empty() || f.name == skip) continue;
    const std::string head = fmt::format("{}={}", f.name, valueText(f.value(cfg)));
    notes.push_back(hfWording ? fmt::format("{} has no transformers equivalent: {}", head, f.*why)
                              : fmt::format("{}: {}", head, f.*why));
  }
  return notes;
}

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

namespace {
// Each option's default: its field's value in a config of backend `b` with nothing set (CacheConfig's defaults,
// transformers' resolved keys), so that no default is written twice.
std::vector<OptionInfo> withDefaults(Backend b, std::vector<OptionInfo> options) {
  CacheConfig unset;
  unset.backend = b;
  for (auto& o : options) o.defaultValue = valueText(findField(o.name)->value(unset));
  return options;
}
}  // namespace

}  // namespace detail

std::string_view fp8FormatName(Fp8Format f) {
  return detail::kFormats[static_cast<std::size_t>(f)];
}
std::string_view overflowName(OverflowPolicy p) {
  return detail::kOverflows[static_cast<std::size_t>(p)];
}
std::string_view granularityName(Fp8Granularity g) {
  return detail::kGranularities[static_cast<std::size_t>(g)];
}
std::string_view attentionName(AttentionMode m) {
  return detail::kAttention[static_cast<std::size_t>(m)];
}
std::string_view llamaCppTypeName(LlamaCppType t) {
  return detail::kLlamaCppTypes[static_cast<std::size_t>(t)];
}
std::optional<LlamaCppType> parseLlamaCppType(std::string_view name) {
  const auto it = std::find(detail::kLlamaCppTypes.begin(), detail::kLlamaCppTypes.end(), name);
  if (it == detail::kLlamaCppTypes.end()) return std::nullopt;
  return static_cast<LlamaCppType>(it - detail::kLlamaCppTypes.begin());
}
bool llamaCppQuantized(LlamaCppType t) {
  return t != LlamaCppType::F16 && t != LlamaCppType::BF16;
}
std::string_view rotationName(Rotation r) {
  return detail::kRotations[static_cast<std::size_t>(r)];
}
std::string_view vllmKvName(VllmKv k) {
  return detail::kVllmKv[static_cast<std::size_t>(k)];
}

std::string_view backendName(Backend b) {
  switch (b) {
    case Backend::Dynamic:
      return "dynamic";
    case Backend::Fp8:
      return "fp8";
    case Backend::Quanto:
      return "quanto";
    case Backend::Hqq:
      return "hqq";
    case Backend::Kivi:
      return "kivi";
    case Backend::LlamaCpp:
      return "llamacpp";
    case Backend::Vllm:
      return "vllm";
    case Backend::Mxfp4:
      return "mxfp4";
  }
  return "dynamic";
}

std::string_view backendSummary(Backend b) {
  switch (b) {
    case Backend::Dynamic:
      return "unquantized: transformers' DynamicCache, every engine's default cache";
    case Backend::Fp8:
      return "FP8 with one scale per tensor (or head, channel): transformers' fp8 QuantizedCache, vLLM's fp8 "
             "cache with scale=unit";
    case Backend::Quanto:
      return "2- or 4-bit groups with a full-precision residual window: transformers' quanto QuantizedCache";
    case Backend::Hqq:
      return "1- to 8-bit groups, half-quadratic zero points: transformers' hqq QuantizedCache";
    case Backend::Kivi:
      return "keys per channel, values per token, 2 or 4 bits (KIVI)";
    case Backend::LlamaCpp:
      return "llama.cpp's cache types (-ctk / -ctv: q8_0, q4_0, iq4_nl, ...) with its Hadamard rotation";
    case Backend::Vllm:
      return "vLLM 0.33's --kv-cache-dtype nvfp4 / nvfp4_4over6 (also SGLang's and TensorRT-LLM's NVFP4 "
             "layout, 4.5 bits per value), ultraquant_4bit (4.25 bits per value), int8 / fp8 / int4 per token and "
             "head, turboquant_k8v4 / 4bit_nc / k3v4_nc / 3bit_nc (Lloyd-Max keys, uniform values)";
    case Backend::Mxfp4:
      return "OCP MXFP4 (E2M1 in blocks of 32, E8M0 scales; Model-Optimizer's numerics), optional Hadamard "
             "rotation of the keys as in SGLang: 4.25 bits per value";
  }
  return "";
}

std::vector<Backend> allBackends() {
  return {Backend::Dynamic, Backend::Fp8,      Backend::Quanto, Backend::Hqq,
          Backend::Kivi,    Backend::LlamaCpp, Backend::Vllm,   Backend::Mxfp4};
}

Backend parseBackend(std::string_view name) {
  for (Backend b : allBackends())
    if (backendName(b) == name) return b;
  std::string allowed;
  for (Backend b : allBackends()) allowed += (allowed.empty() ? "" : ", ") + std::string(backendName(b));
  throw ConfigError("backend", fmt::format("unknown cache backend `{}` (allowed: {})", name, allowed));
}

const std::vector<OptionInfo>& backendOptions(Backend b) {
  using detail::choicesOf;
  using detail::withDefaults;
  // The defaults are filled in by withDefaults() from CacheConfig; the choices of a choice option are the names its
  // field parses (choicesOf); int choices are the reference's limits (validate.cpp checks them from this table).
  static const OptionInfo kSinkOption{"sink", "int", {},
                                      {},     false, "first tokens kept in full precision (attention sinks); 0: none"};
  static const OptionInfo kAttentionOption{
      "attention",
      "choice",
      choicesOf(detail::kAttention),
      {},
      false,
      "fused: attention reads the stored codes tile by tile (no full-precision copy; chunked prefill); reference: "
      "transformers' computation bit for bit (a dequantized copy of the history; one-shot prefill)"};
  static const std::vector<OptionInfo> dynamic = withDefaults(Backend::Dynamic, {kAttentionOption});
  static const std::vector<OptionInfo> fp8 = withDefaults(
      Backend::Fp8,
      {
          {"format", "choice", choicesOf(detail::kFormats), {}, false, "FP8 format of the stored states"},
          {"granularity",
           "choice",
           choicesOf(detail::kGranularities),
           {},
           false,
           "one scale per tensor (transformers), per KV head, or per (head, channel)"},
          {"headroom", "number", {}, {}, false, "scale = amax x headroom / format max, calibrated on the first update"},
          {"scale",
           "choice",
           choicesOf(detail::kScales),
           {},
           false,
           "without calibrated scales: from the first update's amax (transformers), or 1.0 (vLLM without checkpoint "
           "k_scale/v_scale)"},
          {"overflow",
           "choice",
           choicesOf(detail::kOverflows),
           {},
           false,
           "values beyond the frozen scale: NaN as PyTorch's cast (transformers), clamp, or grow the scale"},
          kSinkOption,
          kAttentionOption,
      });
  static const std::vector<OptionInfo> quanto = withDefaults(
      Backend::Quanto,
      {
          {"nbits", "int", {"2", "4"}, {}, true, "bits per value"},
          {"axis_key", "int", {"0", "-1"}, {}, true, "quantization axis of the keys"},
          {"axis_value", "int", {"0", "-1"}, {}, true, "quantization axis of the values"},
          {"q_group_size", "int", {}, {}, true, "values per scale/zero-point group"},
          {"residual_length", "int", {}, {}, true, "full-precision window before the history is re-quantized"},
          kSinkOption,
          kAttentionOption,
      });
  static const std::vector<OptionInfo> hqq = withDefaults(
      Backend::Hqq,
      {
          {"nbits", "int", {"1", "2", "3", "4", "8"}, {}, true, "bits per value"},
          {"axis_key", "int", {"0", "1"}, {}, true, "quantization axis of the keys"},
          {"axis_value", "int", {"0", "1"}, {}, true, "quantization axis of the values"},
          {"q_group_size", "int", {}, {}, true, "values per scale/zero-point group"},
          {"residual_length", "int", {}, {}, true, "full-precision window before the history is re-quantized"},
          {"optimize",
           "bool",
           {"true", "false"},
           {},
           false,
           "hqq's half-quadratic zero-point optimizer (hqq's default, so transformers runs it)"},
          kSinkOption,
          kAttentionOption,
      });
  static const std::vector<OptionInfo> kivi = withDefaults(
      Backend::Kivi,
      {
          {"nbits", "int", {"2", "4"}, {}, false, "bits per value (keys and values)"},
          {"q_group_size",
           "int",
           {},
           {},
           false,
           "keys: tokens per group (one scale/zero per channel); values: channels per group of each token"},
          {"residual_length",
           "int",
           {},
           {},
           false,
           "full-precision window of the newest tokens; older tokens leave it one whole group at a time"},
          kSinkOption,
          kAttentionOption,
      });
  static const std::vector<OptionInfo> llamacpp = withDefaults(
      Backend::LlamaCpp,
      {
          {"type_k",
           "choice",
           choicesOf(detail::kLlamaCppTypes),
           {},
           false,
           "llama.cpp's cache type of the keys (-ctk)"},
          {"type_v",
           "choice",
           choicesOf(detail::kLlamaCppTypes),
           {},
           false,
           "llama.cpp's cache type of the values (-ctv)"},
          {"rot",
           "choice",
           choicesOf(detail::kRotations),
           {},
           false,
           "Hadamard rotation of K and V before they are stored: llama.cpp's rule (quantized types, head size a "
           "multiple of 64), always, or never (LLAMA_ATTN_ROT_DISABLE=1)"},
          kSinkOption,
          kAttentionOption,
      });
  static const std::vector<OptionInfo> vllm = withDefaults(
      Backend::Vllm,
      {
          {"kv",
           "choice",
           choicesOf(detail::kVllmKv),
           {},
           false,
           "vLLM's --kv-cache-dtype: nvfp4 (E2M1 in blocks of 16, an E4M3 scale per block, a global scale per "
           "layer and side), nvfp4_4over6 (each block's scale chosen between amax/6 and amax/4 by squared error), "
           "ultraquant_4bit (E2M1 in blocks of 32 with power-of-two scales, keys rotated, first and last two layers "
           "unquantized), int8_per_token_head / fp8_per_token_head (int8 or e4m3 codes, a float32 scale per token "
           "and head), int4_per_token_head (4-bit codes and a zero point per token and head after vLLM's randomized "
           "Hadamard transform), turboquant_k8v4 / turboquant_4bit_nc / turboquant_k3v4_nc / turboquant_3bit_nc "
           "(TurboQuant: keys as 8-bit FP8 or 4- / 3-bit Lloyd-Max codes of the rotated unit vector with its norm, "
           "values as 4- / 3-bit uniform codes; first and last two layers unquantized)"},
          {"scale",
           "choice",
           choicesOf(detail::kScales),
           {},
           false,
           "NVFP4's global scales (vLLM's k_scale / v_scale): the first update's amax / 448, as a Model-Optimizer "
           "checkpoint carries them, or 1.0 (vLLM without checkpoint scales)"},
          kSinkOption,
          kAttentionOption,
      });
  static const std::vector<OptionInfo> mxfp4 = withDefaults(
      Backend::Mxfp4,
      {
          {"rot",
           "choice",
           choicesOf(detail::kRotations),
           {},
           false,
           "Hadamard rotation of the keys (and queries) over the head before they are stored: on (the head size a "
           "power of two, 32 or more), or off (auto: off, plain OCP MXFP4)"},
          kSinkOption,
          kAttentionOption,
      });
  switch (b) {
    case Backend::Dynamic:
      return dynamic;
    case Backend::LlamaCpp:
      return llamacpp;
    case Backend::Vllm:
      return vllm;
    case Backend::Mxfp4:
      return mxfp4;
    case Backend::Fp8:
      return fp8;
    case Backend::Quanto:
      return quanto;
    case Backend::Hqq:
      return hqq;
    case Backend::Kivi:
      return kivi;
  }
  return dynamic;
}

void setOption(CacheConfig& cfg, std::string_view key, std::string_view value) {
  detail::applyOption(cfg, key, detail::specValue(value));
}

std::string optionValue(const CacheConfig& cfg, std::string_view key) {
  if (!detail::findOption(cfg.backend, key))
    throw ConfigError(std::string(key),
                      fmt::format("the `{}` backend has no option `{}`", backendName(cfg.backend), key));
  return detail::valueText(detail::findField(key)->value(cfg));
}

}  // namespace kvscope::cache

namespace kvscope::cache {

LlamaCppBlock llamaCppBlock(LlamaCppType t) {
  switch (t) {
    case LlamaCppType::F16:
    case LlamaCppType::BF16:
      return {1, 2};
    case LlamaCppType::Q8_0:
      return {32, 34};
    case LlamaCppType::Q4_1:
      return {32, 20};
    case LlamaCppType::Q5_0:
      return {32, 22};
    case LlamaCppType::Q5_1:
      return {32, 24};
    case LlamaCppType::Q4_0:
    case LlamaCppType::IQ4_NL:
      return {32, 18};
  }
  return {1, 2};
}

double bitsPerValue(const CacheConfig& cfg, int headDim) {
  if (cfg.mixed()) {
    const LayerRule* all = detail::wildcardRule(cfg);
    const LayerRule& r = all ? *all : cfg.layers.front();
    return 0.5 * (bitsPerValue(r.keys, headDim) + bitsPerValue(r.values, headDim));
  }
  const auto llamaBits = [](LlamaCppType t) {
    const LlamaCppBlock b = llamaCppBlock(t);
    return b.bytes * 8.0 / b.values;
  };
  switch (cfg.backend) {
    case Backend::Dynamic:
      return 16.0;
    case Backend::Fp8:
      return 8.0;
    case Backend::Quanto:
    case Backend::Hqq:
    case Backend::Kivi:
      return cfg.resolvedNbits() + 2.0 * 16.0 / std::max(1, cfg.resolvedGroupSize());
    case Backend::LlamaCpp:
      return 0.5 * (llamaBits(cfg.typeK) + llamaBits(cfg.typeV));
    case Backend::Vllm: {  // E2M1 values, an E4M3 byte per 16 (UltraQuant: a UE8M0 byte per 32); or 8-bit codes
      const double d = std::max(1, headDim);
      switch (cfg.vllmKv) {  // vLLM's slot sizes: codes, then the fp16 norm (keys) or fp16 scale and zero (values)
        case VllmKv::TurboquantK8V4:
          return 0.5 * (8.0 + 4.0 + 32.0 / d);
        case VllmKv::Turboquant4BitNc:
          return 0.5 * (4.0 + 16.0 / d + 4.0 + 32.0 / d);
        case VllmKv::TurboquantK3V4Nc:
          return 0.5 * (3.0 + 16.0 / d + 4.0 + 32.0 / d);
        case VllmKv::Turboquant3BitNc:
          return 0.5 * (3.0 + 16.0 / d + 3.0 + 32.0 / d);
        case VllmKv::Int4PerTokenHead:
          return 4.0 + 32.0 / d;
        default:
          break;
      }
      if (!vllmNvfp4(cfg.vllmKv) && cfg.vllmKv != VllmKv::Ultraquant4Bit) return 8.0 + 32.0 / d;
      return cfg.vllmKv == VllmKv::Ultraquant4Bit ? 4.0 + 8.0 / 32.0 : 4.0 + 8.0 / 16.0;
    }
    case Backend::Mxfp4:
      return 4.0 + 8.0 / 32.0;  // E2M1 values, an E8M0 byte per 32
  }
  return 16.0;
}

}  // namespace kvscope::cache
