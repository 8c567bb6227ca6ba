// SGLang's KV pool for a model, as v0.5.9 sizes it (mem_cache/memory_pool.py, model_runner_kv_cache_mixin.py;
// docs/capacity.md): a cell of every cached layer's K and V per token, #tokens = memory // cell rounded down to the
// page, buffers of #tokens + page rows, gpt-oss's split sliding-window pool, the hybrids' Mamba pool beside the KV —
// and its "KV Cache is allocated" lines (GB there is GiB).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "plan/plan.h"

namespace kvscope::plan::detail {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string gb(double bytes) {
  return fixed2(bytes / kGiB);
}

}  // namespace

ConfigPlan planSglang(const ModelLayout& m, const cache::CacheConfig& cfg, const PlanOptions& o, double kvBytes) {
  ConfigPlan p;
  p.spec = cache::toSpec(cfg);
  double elem = dtypeBytes(m.dtype) == 4 ? 2 : dtypeBytes(m.dtype);
  if (cfg.backend == cache::Backend::Dynamic && !cfg.mixed() && !cfg.tiered()) {
    p.engineType = "auto";
  } else if (cfg.backend == cache::Backend::Fp8 && !cfg.mixed() && !cfg.tiered()) {
    p.engineType = cfg.fp8Format == cache::Fp8Format::E5M2 ? "fp8_e5m2" : "fp8_e4m3";
    elem = 1;
  } else {
    p.expressible = false;
    p.notes.push_back(
        fmt::format("SGLang's --kv-cache-dtype is one of auto, fp8_e4m3 and fp8_e5m2 for every layer: "
                    "`{}` has no SGLang form",
                    p.spec));
    return p;
  }
  const std::int64_t page = o.pageSize;
  const int tp = o.tp;
  const bool mla = m.count(LayerKind::Mla) > 0;
  // gpt-oss gets SGLang's split sliding-window pool; Gemma's sliding layers are cached in full (hybrid SWA memory
  // is disabled for them).
  const bool swaPool = m.arch == "gpt_oss" || m.arch == "gpt-oss";

  double full = 0, swa = 0;  // bytes per token of every full and sliding layer
  double fullLayerK = 0, fullLayerV = 0, swaLayerK = 0, swaLayerV = 0;
  int nFull = 0, nSwa = 0;
  bool indexer = false;
  double mlaWidth = 0, indexWidth = 0;
  for (const LayerSpec& s : m.layers) {
    if (s.kind == LayerKind::Linear || s.kind == LayerKind::Shared) continue;
    if (s.kind == LayerKind::Mla) {
      // DeepSeek-V3.2's fp8 latent: 512 e4m3 values, 4 fp32 tile scales, 64 bf16 RoPE values (656 bytes).
      const double w = s.indexDim > 0 && elem == 1 ? 656.0 : (s.latent + s.ropeDim) * elem;
      mlaWidth = w;
      full += w;
      ++nFull;
      if (s.indexDim > 0) indexer = true, indexWidth = static_cast<double>(s.indexDim + quot(s.indexDim, 128) * 4);
      continue;
    }
    const double h = std::max(1, s.kvHeads / tp);
    const double k = h * s.headDimK * elem, v = h * s.headDimV * elem;
    if (swaPool && s.kind == LayerKind::Sliding)
      swa += k + v, ++nSwa, swaLayerK = k, swaLayerV = v;
    else
      full += k + v, ++nFull, fullLayerK = k, fullLayerV = v;
  }
  if (m.count(LayerKind::Shared) > 0)
    p.notes.push_back("layers that read another layer's KV are left out of the pool (as vLLM and llama.cpp do)");
  double cell = full + swa;
  if (indexer) cell += indexWidth * nFull;

  // The hybrids' Mamba pool takes mamba_full_memory_ratio / (1 + ratio) of the memory first (handle_max_mamba_cache).
  double rest = kvBytes;
  const int linear = m.count(LayerKind::Linear);
  if (linear > 0) {
    double conv = 0, ssm = 0;
    const double ssmBytes = m.ssmDtype.empty() ? 4 : dtypeBytes(m.ssmDtype);
    for (const LayerSpec& s : m.layers)
      if (s.kind == LayerKind::Linear) {
        const std::int64_t ch = (s.convChannels + tp - 1) / tp;
        conv += static_cast<double>(ch) * (s.convKernel - 1) * 2;  // bfloat16
        ssm += static_cast<double>(quot(s.stateHeads, tp)) * s.stateDimK * s.stateDimV * ssmBytes;
      }
    const double perReq = conv + ssm;
    const double ratio = 0.9;
    const double mambaMem = rest / kGiB * ratio / (1 + ratio);
    const auto cacheSize = static_cast<std::int64_t>(std::floor(mambaMem * kGiB / perReq));
    rest -= static_cast<double>(cacheSize) * perReq;
    p.log.push_back(fmt::format(
        "Mamba Cache is allocated. max_mamba_cache_size: {}, conv_state size: {}GB, "
        "ssm_state size: {}GB ",
        cacheSize, gb(conv * static_cast<double>(cacheSize + 1)), gb(ssm * static_cast<double>(cacheSize + 1))));
    p.stateMib = perReq * static_cast<double>(cacheSize + 1) / (1024.0 * 1024.0);
    p.notes.push_back(fmt::format("the Mamba pool holds {} requests' states (mamba_full_memory_ratio 0.9)", cacheSize));
  }
  if (cell <= 0) {
    p.notes.push_back("no layer of this model has a KV cache");
    return p;
  }
  std::int64_t tokens = static_cast<std::int64_t>(std::floor(std::floor(rest) / cell));
  tokens = tokens / page * page;
  const double rows = static_cast<double>(tokens + page);
  if (swaPool && nSwa > 0) {
    // set_num_tokens_hybrid_swa: the full layers get `full` tokens, the sliding ones 0.8 of them.
    const double r = 0.8;
    const double total = static_cast<double>(tokens) * cell;
    auto fullTokens = static_cast<std::int64_t>(total / (full + r * swa));
    auto swaTokens = static_cast<std::int64_t>(static_cast<double>(fullTokens) * r);
    fullTokens = fullTokens / page * page, swaTokens = swaTokens / page * page;
    p.log.push_back(fmt::format("Use sliding window memory pool. full_layer_tokens={}, swa_layer_tokens={}", fullTokens,
                                swaTokens));
    const double sRows = static_cast<double>(swaTokens + page), fRows = static_cast<double>(fullTokens + page);
    const double ks = sRows * swaLayerK * nSwa, vs = sRows * swaLayerV * nSwa;
    const double kf = fRows * fullLayerK * nFull, vf = fRows * fullLayerV * nFull;
    p.log.push_back(
        fmt::format("KV Cache is allocated. #tokens: {}, K size: {} GB, V size: {} GB", swaTokens, gb(ks), gb(vs)));
    p.log.push_back(
        fmt::format("KV Cache is allocated. #tokens: {}, K size: {} GB, V size: {} GB", fullTokens, gb(kf), gb(vf)));
    p.log.push_back(fmt::format("SWAKVPool mem usage: {} GB, swa size: {}, full size: {}", gb(ks + vs + kf + vf),
                                swaTokens, fullTokens));
    p.kMib = (ks + kf) / (1024.0 * 1024.0), p.vMib = (vs + vf) / (1024.0 * 1024.0);
    p.kvMib = *p.kMib + *p.vMib;
    p.kvTokens = fullTokens;
    p.swaCells = swaTokens;
  } else if (mla) {
    double bytes = rows * mlaWidth * nFull;
    if (indexer)
      bytes += static_cast<double>(nFull) * static_cast<double>(quot(tokens + page + 1, page) * page) * indexWidth;
    p.log.push_back(fmt::format("KV Cache is allocated. #tokens: {}, KV size: {} GB", tokens, gb(bytes)));
    p.kvMib = bytes / (1024.0 * 1024.0);
    p.kvTokens = tokens;
  } else {
    double k = 0, v = 0;
    for (const LayerSpec& s : m.layers) {
      if (s.kind != LayerKind::Full && s.kind != LayerKind::Sliding) continue;
      const double h = std::max(1, s.kvHeads / tp);
      k += rows * h * s.headDimK * elem;
      v += rows * h * s.headDimV * elem;
    }
    p.log.push_back(
        fmt::format("KV Cache is allocated. #tokens: {}, K size: {} GB, V size: {} GB", tokens, gb(k), gb(v)));
    p.kMib = k / (1024.0 * 1024.0), p.vMib = v / (1024.0 * 1024.0), p.kvMib = (k + v) / (1024.0 * 1024.0);
    p.kvTokens = tokens;
  }
  if (m.count(LayerKind::Sliding) > 0 && !swaPool)
    p.notes.push_back("SGLang disables hybrid sliding-window memory for this family: every layer is cached in full");
  p.blockSize = page;
  p.bytesPerToken = cell;
  return p;
}

}  // namespace kvscope::plan::detail
