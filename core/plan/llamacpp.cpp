// llama.cpp's memory for a context, as llama_context, llama_kv_cache(_iswa) and llama_memory_recurrent size it
// (ggml-org/llama.cpp 82bb485, 2026-08-07; docs/capacity.md): n_ctx padded to 256, a stream per sequence unless the
// cache is unified, the sliding-window cache of pad256(min(n_ctx_seq, n_swa·(unified ? n_seq : 1) + n_ubatch))
// cells, MLA's K-only latent, the recurrent R and S states in f32 per sequence — and the lines it prints.
#include <fmt/format.h>

#include <algorithm>

#include "plan/plan.h"

namespace kvscope::plan::detail {

namespace {

using cache::ConfigError;
using cache::LlamaCppType;

std::int64_t pad256(std::int64_t x) {
  return (x + 255) / 256 * 256;
}

// ggml_row_size: bytes of `n` values of a type (n a whole number of blocks, else llama.cpp refuses the context).
std::int64_t rowBytes(LlamaCppType t, std::int64_t n) {
  const cache::LlamaCppBlock b = cache::llamaCppBlock(t);
  return n / b.values * b.bytes;
}

// llama.cpp prints (float)bytes / (1024.0f * 1024.0f) with %7.2f.
std::string mib(std::int64_t bytes, int width = 7) {
  const float v = static_cast<float>(bytes) / (1024.0f * 1024.0f);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%*.2f", width, static_cast<double>(v));
  return buf;
}
double mibValue(std::int64_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0);
}

struct Sides {
  LlamaCppType k = LlamaCppType::F16, v = LlamaCppType::F16;
};

// The -ctk / -ctv a config is, or why llama.cpp cannot store it.
std::optional<Sides> llamaTypes(const cache::CacheConfig& cfg, std::string& why) {
  const auto side = [](const cache::CacheConfig& c, bool key) -> std::optional<LlamaCppType> {
    if (c.tiered()) return std::nullopt;
    if (c.backend == cache::Backend::Dynamic) return LlamaCppType::F16;
    if (c.backend == cache::Backend::LlamaCpp) return key ? c.typeK : c.typeV;
    return std::nullopt;
  };
  const std::string types =
      "its cache types are f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0 and q5_1 (kvscope's "
      "`dynamic` and `llamacpp`)";
  if (cfg.tiered()) {
    why = "llama.cpp keeps one type per side for every token: tiers by age have no -ctk/-ctv form";
    return std::nullopt;
  }
  if (!cfg.mixed()) {
    const auto k = side(cfg, true), v = side(cfg, false);
    if (k && v) return Sides{*k, *v};
    why = fmt::format("llama.cpp has no `{}` cache: {}", cache::backendName(cfg.backend), types);
    return std::nullopt;
  }
  std::optional<Sides> seen;
  for (const auto& r : cfg.layers) {
    const auto k = side(r.keys, true), v = side(r.values, false);
    if (!k || !v) {
      why = "this per-layer config names a backend llama.cpp does not have: " + types;
      return std::nullopt;
    }
    if (seen && (seen->k != *k || seen->v != *v)) {
      why =
          "llama.cpp's -ctk/-ctv apply to every layer: a per-layer config with different types has no llama.cpp "
          "form";
      return std::nullopt;
    }
    seen = Sides{*k, *v};
  }
  return seen;
}

}  // namespace

ConfigPlan planLlamaCpp(const ModelLayout& model, const cache::CacheConfig& cfg, const PlanOptions& o) {
  ConfigPlan p;
  p.spec = cache::toSpec(cfg);
  // llama.cpp's llama, qwen2 and qwen3 architectures never read sliding_window: a Mistral or Qwen config's window
  // is cached in full there.
  ModelLayout m = model;
  static const char* const kNoWindow[] = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe"};
  if (m.source == "config.json" &&
      std::find(std::begin(kNoWindow), std::end(kNoWindow), m.arch) != std::end(kNoWindow) &&
      m.count(LayerKind::Sliding) > 0) {
    for (LayerSpec& s : m.layers)
      if (s.kind == LayerKind::Sliding) s.kind = LayerKind::Full, s.window = 0;
    p.notes.push_back(
        fmt::format("llama.cpp's {} architecture ignores sliding_window: every layer is cached in full", m.arch));
  }
  std::string why;
  const auto types = llamaTypes(cfg, why);
  if (!types) {
    p.expressible = false;
    p.notes.push_back(why);
    return p;
  }
  p.engineType = fmt::format("{}/{}", cache::llamaCppTypeName(types->k), cache::llamaCppTypeName(types->v));

  // llama_context: the context, the batch and the streams.
  const std::int64_t nSeq = o.parallel;
  std::int64_t nCtx = o.ctx == 0 ? m.contextLength : o.ctx;
  const std::int64_t nBatch = std::min<std::int64_t>(nCtx, o.batch);
  const std::int64_t nUbatch = std::min<std::int64_t>(nBatch, o.ubatch);
  nCtx = pad256(nCtx);
  std::int64_t nCtxSeq = nCtx;
  if (!o.kvUnified) {
    nCtxSeq = pad256(nCtx / nSeq);
    if (nCtxSeq * nSeq != nCtx) {
      p.log.push_back(
          fmt::format("llama_context: n_ctx is not divisible by n_seq_max - rounding down to {}", nCtxSeq * nSeq));
      nCtx = nCtxSeq * nSeq;
    }
  }
  const std::int64_t nStream = o.kvUnified ? 1 : nSeq;
  p.log.push_back(fmt::format("llama_context: n_seq_max     = {}", nSeq));
  p.log.push_back(fmt::format("llama_context: n_ctx         = {}", nCtx));
  p.log.push_back(fmt::format("llama_context: n_ctx_seq     = {}", nCtxSeq));
  p.log.push_back(fmt::format("llama_context: n_batch       = {}", nBatch));
  p.log.push_back(fmt::format("llama_context: n_ubatch      = {}", nUbatch));
  p.log.push_back(fmt::format("llama_context: kv_unified    = {}", o.kvUnified ? "true" : "false"));

  // Which layers each cache holds; a quantized type needs head sizes in whole blocks.
  const bool iswa = m.count(LayerKind::Sliding) > 0;
  const bool mla = m.count(LayerKind::Mla) > 0;
  if (mla && types->k != types->v) {
    p.expressible = false;
    p.notes.push_back(
        fmt::format("llama.cpp refuses different K ({}) and V ({}) types on an MLA model (the latent "
                    "is one tensor)",
                    cache::llamaCppTypeName(types->k), cache::llamaCppTypeName(types->v)));
    return p;
  }
  for (const LayerSpec& s : m.layers) {
    if (s.kind == LayerKind::Linear || s.kind == LayerKind::Shared) continue;
    for (const auto& [t, dim] : {std::pair{types->k, s.headDimK}, std::pair{types->v, s.headDimV}})
      if (dim % cache::llamaCppBlock(t).values != 0) {
        p.expressible = false;
        p.notes.push_back(fmt::format("layer {}: head size {} is not a whole number of {}'s blocks of {}", s.index, dim,
                                      cache::llamaCppTypeName(t), cache::llamaCppBlock(t).values));
        return p;
      }
  }
  if (cache::llamaCppQuantized(types->v))
    p.notes.push_back("a quantized V cache runs with flash attention (-fa auto turns it on; -fa off refuses it)");

  struct Part {
    std::int64_t k = 0, v = 0;
    int layers = 0;
  };
  auto sum = [&](bool swaPart, std::int64_t cells) {
    Part part;
    for (const LayerSpec& s : m.layers) {
      if (s.kind == LayerKind::Linear || s.kind == LayerKind::Shared) continue;
      if ((s.kind == LayerKind::Sliding) != swaPart) continue;
      ++part.layers;
      part.k += rowBytes(types->k, std::int64_t{s.kvHeads} * s.headDimK) * cells * nStream;
      if (s.kind != LayerKind::Mla)
        part.v += rowBytes(types->v, std::int64_t{s.kvHeads} * s.headDimV) * cells * nStream;
    }
    return part;
  };
  auto sizeLine = [&](const Part& part, std::int64_t cells) {
    return fmt::format(
        "llama_kv_cache: size = {} MiB ({:6} cells, {:3} layers, {:2}/{} seqs), K ({}): {} MiB, V ({}): "
        "{} MiB",
        mib(part.k + part.v), cells, part.layers, nSeq, nStream, cache::llamaCppTypeName(types->k), mib(part.k),
        cache::llamaCppTypeName(types->v), mib(part.v));
  };

  const Part base = sum(false, nCtxSeq);
  Part swa;
  p.cells = nCtxSeq;
  p.kvTokens = nCtxSeq * nStream;
  if (iswa) {
    int window = 0;
    for (const LayerSpec& s : m.layers)
      if (s.kind == LayerKind::Sliding) window = s.window;
    const std::int64_t sizeSwa =
        o.swaFull ? nCtxSeq : pad256(std::min<std::int64_t>(nCtxSeq, window * (o.kvUnified ? nSeq : 1) + nUbatch));
    swa = sum(true, sizeSwa);
    p.swaCells = sizeSwa;
    if (o.swaFull)
      p.log.push_back(
          "llama_kv_cache_iswa: using full-size SWA cache (ref: "
          "https://github.com/ggml-org/llama.cpp/pull/13194#issuecomment-2868343055)");
    p.log.push_back(fmt::format("llama_kv_cache_iswa: creating non-SWA KV cache, size = {} cells", nCtxSeq));
    p.log.push_back(sizeLine(base, nCtxSeq));
    p.log.push_back(fmt::format("llama_kv_cache_iswa: creating     SWA KV cache, size = {} cells", sizeSwa));
    p.log.push_back(sizeLine(swa, sizeSwa));
  } else if (base.layers > 0) {
    p.log.push_back(sizeLine(base, nCtxSeq));
  }
  if (mla) p.notes.push_back("MLA: llama.cpp caches the latent and the RoPE key as K alone, no V (since #19067)");
  if (m.mlaExpanded)
    p.notes.push_back(
        "this GGUF predates llama.cpp's MLA cache (no attention.key_length_mla): every head's K and V "
        "is cached; a GGUF converted since April 2025 caches the 576-value latent");

  // The recurrent states: f32, one cell per sequence, whatever -ctk/-ctv say.
  std::int64_t r = 0, st = 0;
  const int linear = m.count(LayerKind::Linear);
  if (linear > 0) {
    const std::int64_t cells = std::max<std::int64_t>(1, nSeq);
    for (const LayerSpec& s : m.layers)
      if (s.kind == LayerKind::Linear) {
        r += std::int64_t{s.convKernel - 1} * s.convChannels * 4 * cells;
        st += std::int64_t{s.stateDimK} * s.stateHeads * s.stateDimV * 4 * cells;
      }
    p.log.push_back(
        fmt::format("llama_memory_recurrent: size = {} MiB ({:6} cells, {:3} layers, {:2} seqs {:2} "
                    "rs_seq), R (f32): {} MiB, S (f32): {} MiB",
                    mib(r + st), cells, m.layers.size(), nSeq, 0, mib(r), mib(st)));
    p.stateMib = mibValue(r + st);
  }

  p.kMib = mibValue(base.k + swa.k);
  p.vMib = mibValue(base.v + swa.v);
  p.kvMib = mibValue(base.k + swa.k + base.v + swa.v);
  double perToken = 0;
  for (const LayerSpec& s : m.layers)
    if (s.kind == LayerKind::Full || s.kind == LayerKind::Mla)
      perToken +=
          static_cast<double>(rowBytes(types->k, std::int64_t{s.kvHeads} * s.headDimK)) +
          (s.kind == LayerKind::Mla ? 0.0
                                    : static_cast<double>(rowBytes(types->v, std::int64_t{s.kvHeads} * s.headDimV)));
  p.bytesPerToken = perToken;
  return p;
}

}  // namespace kvscope::plan::detail
