// Export to llama.cpp: -ctk/-ctv block types (and -fa on for a quantized V), with what does not carry over. The
// `llamacpp` backend exports exactly: its types, and LLAMA_ATTN_ROT_DISABLE=1 for rot=off.
#include <fmt/format.h>

#include <algorithm>

#include "cache/config/detail.h"

namespace kvscope::cache {

namespace {

// The -ctk/-ctv type of a uniform config, and the notes of its mapping.
LlamaCppType cacheType(const CacheConfig& cfg, bool keys, std::vector<std::string>& notes) {
  switch (cfg.backend) {
    case Backend::LlamaCpp: {
      const LlamaCppType t = keys ? cfg.typeK : cfg.typeV;
      if (cfg.rotation == Rotation::On && !llamaCppQuantized(t))
        notes.push_back(
            fmt::format("rot=on: llama.cpp rotates only quantized cache types; its {} {} are stored "
                        "unrotated",
                        llamaCppTypeName(t), keys ? "keys" : "values"));
      return t;
    }
    case Backend::Dynamic:
      notes.push_back(
          fmt::format("{} is llama.cpp's default cache type (kvscope's dynamic cache keeps the model's "
                      "dtype)",
                      llamaCppTypeName(LlamaCppType::F16)));
      return LlamaCppType::F16;
    case Backend::Fp8:
      notes.push_back(
          fmt::format("nearest equivalent only: llama.cpp has no FP8 cache type; {} (int8, one scale per "
                      "32 values) is its 8-bit type",
                      llamaCppTypeName(LlamaCppType::Q8_0)));
      return LlamaCppType::Q8_0;
    case Backend::Vllm:
      if (vllmTurboQuant(cfg.vllmKv) || cfg.vllmKv == VllmKv::Int4PerTokenHead) {
        // TurboQuant's FP8 keys and 4-bit sides, int4 per token and head: llama.cpp's 8-bit type, or its
        // asymmetric 4-bit blocks (a scale and a minimum per 32 values, no rotation).
        const bool eight = keys && cfg.vllmKv == VllmKv::TurboquantK8V4;
        const LlamaCppType t = eight ? LlamaCppType::Q8_0 : LlamaCppType::Q4_1;
        notes.push_back(fmt::format(
            "nearest equivalent only: llama.cpp has no {} cache; {} {} stand for its {} {}", vllmKvName(cfg.vllmKv),
            llamaCppTypeName(t), keys ? "keys" : "values", keys ? "keys" : "values",
            eight ? "(FP8, no scale)"
                  : (vllmTurboQuant(cfg.vllmKv) ? "(Lloyd-Max or uniform codes of 3 or 4 bits per row)"
                                                : "(4-bit codes per token and head after a Hadamard transform)")));
        return t;
      }
      if (!vllmNvfp4(cfg.vllmKv) && cfg.vllmKv != VllmKv::Ultraquant4Bit) {
        notes.push_back(
            fmt::format("nearest equivalent only: llama.cpp has no per-token-head cache type; {} (int8, "
                        "one scale per 32 values) is its 8-bit type",
                        llamaCppTypeName(LlamaCppType::Q8_0)));
        return LlamaCppType::Q8_0;
      }
      [[fallthrough]];
    case Backend::Mxfp4:
      notes.push_back(
          fmt::format("nearest equivalent only: llama.cpp has no FP4 cache type; {} (4-bit codes on a "
                      "non-uniform grid, one fp16 scale per 32 values) is its nearest",
                      llamaCppTypeName(LlamaCppType::IQ4_NL)));
      return LlamaCppType::IQ4_NL;
    case Backend::Quanto:
    case Backend::Hqq:
    case Backend::Kivi: {
      const int nb = cfg.resolvedNbits();
      const LlamaCppType type = nb >= 8 ? LlamaCppType::Q8_0 : nb >= 4 ? LlamaCppType::Q4_1 : LlamaCppType::Q4_0;
      notes.push_back(
          fmt::format("nearest equivalent only: {}-bit groups of {} with a full-precision residual map to "
                      "llama.cpp's {} (blocks of 32, no residual window){}",
                      nb, cfg.resolvedGroupSize(), llamaCppTypeName(type),
                      nb < 4 ? "; llama.cpp has no cache type below 4 bits" : ""));
      return type;
    }
  }
  return LlamaCppType::F16;
}

// LLAMA_ATTN_ROT_DISABLE=1 where rot=off turns off a rotation llama.cpp would apply (a quantized side).
std::string rotationEnv(const CacheConfig& cfg) {
  const bool rotatable = llamaCppQuantized(cfg.typeK) || llamaCppQuantized(cfg.typeV);
  return cfg.backend == Backend::LlamaCpp && cfg.rotation == Rotation::Off && rotatable ? "LLAMA_ATTN_ROT_DISABLE=1"
                                                                                        : "";
}

FlagExport flags(LlamaCppType kt, LlamaCppType vt, std::string env, std::vector<std::string> notes) {
  FlagExport e;
  e.flags = fmt::format("-ctk {} -ctv {}", llamaCppTypeName(kt), llamaCppTypeName(vt));
  if (llamaCppQuantized(vt)) e.flags += " -fa on";
  e.env = std::move(env);
  e.notes = std::move(notes);
  return e;
}

}  // namespace

FlagExport toLlamaCppFlags(const CacheConfig& cfg, const LayerWindows& windows) {
  FlagExport e = toLlamaCppFlags(cfg);
  const std::vector<int> sliding = detail::slidingLayers(windows);
  if (sliding.empty()) return e;
  // llama.cpp's iSWA cache: the sliding layers in a cache of their own, of the same -ctk/-ctv types (keeping it in f16,
  // #21277, was reverted by #21332), sized to the window and one batch unless --swa-full sizes it to the context.
  e.notes.push_back(fmt::format(
      "llama.cpp stores the sliding-window layers ({}) with the same -ctk/-ctv, in a cache of the window and one "
      "batch of cells, as kvscope keeps their window; --swa-full (not exported) would size it to the whole context",
      util::layerRanges(sliding)));
  return e;
}

FlagExport toLlamaCppFlags(const CacheConfig& cfg) {
  validate(cfg);
  if (cfg.tiered())
    return detail::exportOldestTier<FlagExport>(cfg, "llama.cpp",
                                                [](const CacheConfig& c) { return toLlamaCppFlags(c); });
  std::vector<std::string> notes;
  const auto addUnique = [&](std::vector<std::string> more) {
    for (auto& n : more)
      if (std::find(notes.begin(), notes.end(), n) == notes.end()) notes.push_back(std::move(n));
  };
  if (!cfg.mixed()) {
    const LlamaCppType kt = cacheType(cfg, true, notes), vt = cacheType(cfg, false, notes);
    addUnique(detail::optionNotes(cfg, &detail::OptionField::llamaCppWhy, false));
    // (A quantized V needs flash attention: the flags carry `-fa on`. That is expressed, so it is no note: notes are
    // what the target does not express.)
    return flags(kt, vt, rotationEnv(cfg), std::move(notes));
  }
  const LayerRule* all = detail::wildcardRule(cfg);
  if (!all) throw ConfigError("layers", "llama.cpp takes one K and one V cache type: add a `*` rule");
  const FlagExport k = toLlamaCppFlags(all->keys), v = toLlamaCppFlags(all->values);
  addUnique(k.notes);
  addUnique(v.notes);
  for (const auto& r : cfg.layers)
    if (!r.wildcard()) notes.push_back(detail::notExported(r, "llama.cpp's cache types apply to every layer"));
  std::vector<std::string> said;  // the sides' notes, already added with their flags
  const LlamaCppType kt = cacheType(all->keys, true, said), vt = cacheType(all->values, false, said);
  // LLAMA_ATTN_ROT_DISABLE is one switch for K and V: a side that rotates cannot keep rotating beside one that does
  // not.
  std::string env = k.env.empty() ? v.env : k.env;
  const auto rotates = [](const CacheConfig& c, LlamaCppType type) {
    return c.backend == Backend::LlamaCpp && c.rotation != Rotation::Off && llamaCppQuantized(type);
  };
  if (!env.empty() && (rotates(all->keys, kt) || rotates(all->values, vt)))
    notes.push_back(
        fmt::format("{} turns off llama.cpp's rotation of K and V together: the side this config rotates "
                    "is stored unrotated there",
                    env));
  return flags(kt, vt, std::move(env), std::move(notes));
}

}  // namespace kvscope::cache
