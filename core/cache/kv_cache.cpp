#include "cache/kv_cache.h"

#include <fmt/format.h>

#include <algorithm>

#include "cache/detail/layers.h"

namespace kvscope::cache {

namespace {
std::unique_ptr<CacheLayer> makeBackendLayer(const CacheConfig& cfg, const StatsOptions& stats,
                                             kernels::KernelPath path) {
  switch (cfg.backend) {
    case Backend::Dynamic:
      return detail::makeDynamicLayer(cfg, stats, path);
    case Backend::Fp8:
      return detail::makeFp8Layer(cfg, stats, path);
    case Backend::Quanto:
      return detail::makeQuantoLayer(cfg, stats, path);
    case Backend::Hqq:
      return detail::makeHqqLayer(cfg, stats, path);
    case Backend::Kivi:
      return detail::makeKiviLayer(cfg, stats, path);
    case Backend::LlamaCpp:
    case Backend::Vllm:
    case Backend::Mxfp4:
      return detail::makeKvRowLayer(cfg, stats, path);
  }
  throw ConfigError("backend", "unknown backend");
}

// vLLM keeps the first and last min(2, L / 2) layers of a dense model unquantized under ultraquant_4bit and the
// TurboQuant presets (its TurboQuantConfig.get_boundary_skip_layers, merged into --kv-cache-dtype-skip-layers): such
// a side is `dynamic` here.
void applyVllmBoundarySkip(CacheConfig& side, int layer, int numLayers) {
  if (side.backend != Backend::Vllm || !vllmBoundarySkip(side.vllmKv)) return;
  const int n = std::min(2, numLayers / 2);
  if (layer >= n && layer < numLayers - n) return;
  CacheConfig unquantized;
  unquantized.attention = side.attention;
  side = unquantized;
}
}  // namespace

std::unique_ptr<CacheLayer> makeLayer(const CacheConfig& cfg, const StatsOptions& stats, kernels::KernelPath path) {
  validate(cfg);
  if (cfg.mixed()) throw ConfigError("layers", "a per-layer config builds a whole cache (KvCache), not a single layer");
  if (cfg.tiered()) return detail::makeTieredLayer(cfg, stats, path);
  auto layer = makeBackendLayer(cfg, stats, path);
  if (cfg.sink > 0) return detail::makeSinkLayer(cfg.sink, std::move(layer), stats);
  return layer;
}

KvCache::KvCache(const CacheConfig& cfg, int numLayers, const StatsOptions& stats, kernels::KernelPath path)
    : config_(cfg), path_(path) {
  if (numLayers <= 0)
    throw ConfigError("num_layers", fmt::format("a cache needs at least one layer, got {}", numLayers));
  validate(cfg);
  layers_.reserve(static_cast<std::size_t>(numLayers));
  for (int i = 0; i < numLayers; ++i) {
    auto [keys, values] = layerConfigs(cfg, i, numLayers);
    applyVllmBoundarySkip(keys, i, numLayers);
    applyVllmBoundarySkip(values, i, numLayers);
    // Calibrated fp8 scales are per layer: each layer gets its own.
    for (CacheConfig* side : {&keys, &values}) {
      if (side->keyScales.empty()) continue;
      if (side->keyScales.size() != static_cast<std::size_t>(numLayers))
        throw ConfigError("key_scales", fmt::format("calibrated scales for {} layers, but the model has {}",
                                                    side->keyScales.size(), numLayers));
      side->keyScales = {side->keyScales[static_cast<std::size_t>(i)]};
      side->valueScales = {side->valueScales[static_cast<std::size_t>(i)]};
    }
    if (keys == values)
      layers_.push_back(makeLayer(keys, stats, path));
    else
      layers_.push_back(detail::makeSplitLayer(makeLayer(keys, stats, path), makeLayer(values, stats, path), stats));
  }
}

void KvCache::setInterleavedRopePairs(bool on) {
  for (auto& l : layers_) l->setInterleavedRopePairs(on);
}

CacheLayer& KvCache::layer(int i) {
  if (i < 0 || i >= numLayers()) throw CacheError(fmt::format("layer {} out of range [0, {})", i, numLayers()));
  return *layers_[static_cast<std::size_t>(i)];
}
const CacheLayer& KvCache::layer(int i) const {
  return const_cast<KvCache*>(this)->layer(i);
}

std::pair<at::Tensor, at::Tensor> KvCache::update(int i, const at::Tensor& keys, const at::Tensor& values) {
  return layer(i).update(keys, values);
}

void KvCache::reorder(const at::Tensor& beamIdx) {
  for (auto& l : layers_) l->reorder(beamIdx);
}
void KvCache::reset() {
  for (auto& l : layers_) l->reset();
}
void KvCache::crop(std::int64_t n) {
  for (auto& l : layers_) l->crop(n);
}
std::int64_t KvCache::seqLength() const {
  return layers_.front()->seqLength();
}

std::vector<LayerMemory> KvCache::memory() const {
  std::vector<LayerMemory> m;
  m.reserve(layers_.size());
  for (const auto& l : layers_) m.push_back(l->memory());
  return m;
}

namespace {
std::vector<detail::DeferredStats*> deferredOf(const std::vector<std::unique_ptr<CacheLayer>>& layers) {
  std::vector<detail::DeferredStats*> sets;
  for (const auto& l : layers) l->deferredStats(sets);
  return sets;
}
}  // namespace

void KvCache::settleStats() const {
  detail::settle(deferredOf(layers_));
}

void KvCache::collectStats(std::vector<at::Tensor>& parts) const {
  for (const detail::DeferredStats* d : deferredOf(layers_)) d->collect(parts);
}

const double* KvCache::deliverStats(const double* h) const {
  for (detail::DeferredStats* d : deferredOf(layers_)) h = d->deliver(h);
  return h;
}

CacheSnapshot KvCache::snapshot() const {
  settleStats();
  CacheSnapshot s;
  s.seqLength = seqLength();
  s.memory = memory();
  s.stats.reserve(layers_.size());
  for (const auto& l : layers_) s.stats.push_back(l->stats());
  return s;
}

OverflowTotals KvCache::overflowTotals() const {
  settleStats();
  OverflowTotals o;
  for (int l = 0; l < numLayers(); ++l) o += layer(l).stats();
  return o;
}

TensorMemory KvCache::totalMemory() const {
  TensorMemory t;
  for (const auto& l : layers_) t += l->memory().total();
  return t;
}

}  // namespace kvscope::cache
