#include "cache/kv_cache.h"

#include <fmt/format.h>

#include <algorithm>

#include "cache/detail/layers.h"
#include "cache/tune.h"

static_assert(kvscope::cache::KvCache::kWindowSlack == kvscope::cache::ScanFeed::kWindowSlack,
              "the tuner's pricing (cache/tune.h) simulates the cache's trimming");

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
  if (side.backend != Backend::Vllm || !vllmBoundarySkip(side.vllmKv) || !vllmBoundaryLayer(layer, numLayers)) return;
  CacheConfig unquantized;
  unquantized.attention = side.attention;
  side = unquantized;
}

// Why a layer of `c` cannot slide (it cannot drop its oldest tokens alone); empty where it can.
std::string windowRefusal(const CacheConfig& c) {
  if (c.tiered()) return "tiers= moves the oldest tokens to older tiers, which a window drops";
  if (c.sink > 0) return "sink= keeps the first tokens, which a window drops";
  switch (c.backend) {
    case Backend::Quanto:
    case Backend::Hqq:
      return "it re-quantizes groups of tokens together; transformers' QuantizedCache refuses sliding-window layers";
    case Backend::Kivi:
      return "it quantizes keys per channel over groups of tokens together";
    default:
      return "";
  }
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

void KvCache::setWindows(const std::vector<std::int64_t>& windows) {
  if (windows.size() != layers_.size())
    throw ConfigError("window", fmt::format("{} sliding windows for {} layers", windows.size(), layers_.size()));
  for (std::size_t l = 0; l < windows.size(); ++l) {
    if (windows[l] < 0) throw ConfigError("window", fmt::format("layer {}: window {} < 0", l, windows[l]));
    if (windows[l] > 0 && kvSource(static_cast<int>(l)) == static_cast<int>(l) && !layers_[l]->canDropOldest()) {
      const auto [k, v] = layerConfigs(config_, static_cast<int>(l), numLayers());
      std::string why = windowRefusal(k);
      if (why.empty()) why = windowRefusal(v);
      throw ConfigError("backend",
                        fmt::format("layer {} is a sliding-window layer (window {}): `{}` cannot run it ({})", l,
                                    windows[l], toSpec(k), why));
    }
  }
  windows_ = windows;
}

std::int64_t KvCache::window(int l) const {
  return windows_.empty() ? 0 : windows_[static_cast<std::size_t>(l)];
}

void KvCache::trim(int l) {
  const std::int64_t w = window(l);
  if (w <= 0) return;
  CacheLayer& L = layer(l);
  const std::int64_t held = L.seqLength();
  if (held > w - 1 + kWindowSlack) L.discardOldest(held - (w - 1));
}

void KvCache::setSharedKv(const std::vector<int>& sources) {
  if (sources.size() != layers_.size())
    throw ConfigError("kv_shared", fmt::format("{} shared-KV entries for {} layers", sources.size(), layers_.size()));
  std::vector<int> last(layers_.size(), -1);
  bool any = false;
  for (std::size_t l = 0; l < sources.size(); ++l) {
    const int src = sources[l];
    if (src < 0) continue;
    if (src >= static_cast<int>(l) || sources[static_cast<std::size_t>(src)] >= 0)
      throw ConfigError(
          "kv_shared",
          fmt::format("layer {} reads layer {}'s KV: a source must be an earlier layer with its own", l, src));
    last[static_cast<std::size_t>(src)] = static_cast<int>(l);
    any = true;
  }
  releaseKept();
  sources_ = any ? sources : std::vector<int>{};
  lastReader_ = any ? last : std::vector<int>{};
}

int KvCache::kvSource(int l) const {
  if (l < 0 || l >= numLayers()) throw CacheError(fmt::format("layer {} out of range [0, {})", l, numLayers()));
  return sources_.empty() || sources_[static_cast<std::size_t>(l)] < 0 ? l : sources_[static_cast<std::size_t>(l)];
}

void KvCache::releaseKept() {
  if (sources_.empty()) return;
  for (auto& l : layers_) l->releaseKept();
}

at::Tensor KvCache::attend(int i, const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                           const at::Tensor& sinks) {
  if (kvSource(i) != i)
    throw CacheError(fmt::format("layer {} reads layer {}'s KV: it stores none (attendShared)", i, kvSource(i)));
  trim(i);
  if (!lastReader_.empty() && lastReader_[static_cast<std::size_t>(i)] >= 0)
    return layer(i).attendKeeping(q, keys, values, window(i), sinks);
  return layer(i).attend(q, keys, values, window(i), sinks);
}

at::Tensor KvCache::attendShared(int i, const at::Tensor& q, const at::Tensor& sinks) {
  const int src = kvSource(i);
  if (src == i) throw CacheError(fmt::format("layer {} has a cache of its own (attend)", i));
  CacheLayer& s = layer(src);
  at::Tensor out = s.attendKept(q, window(src), sinks);
  if (lastReader_[static_cast<std::size_t>(src)] == i) s.releaseKept();
  return out;
}

std::pair<at::Tensor, at::Tensor> KvCache::update(int i, const at::Tensor& keys, const at::Tensor& values) {
  if (kvSource(i) != i) throw CacheError(fmt::format("layer {} reads layer {}'s KV: it stores none", i, kvSource(i)));
  trim(i);
  return layer(i).update(keys, values);
}

void KvCache::reorder(const at::Tensor& beamIdx) {
  releaseKept();
  for (int l = 0; l < numLayers(); ++l)
    if (kvSource(l) == l) layer(l).reorder(beamIdx);
}
void KvCache::reset() {
  releaseKept();
  for (auto& l : layers_) l->reset();
}
void KvCache::crop(std::int64_t n) {
  releaseKept();
  const std::int64_t total = seqLength(), keep = n < 0 ? std::max<std::int64_t>(total + n, 0) : std::min(n, total);
  for (std::size_t l = 0; l < layers_.size(); ++l)
    if (keep < layers_[l]->dropped())
      throw CacheError(fmt::format("crop to {} tokens: sliding-window layer {} has dropped its first {}", keep, l,
                                   layers_[l]->dropped()));
  for (int l = 0; l < numLayers(); ++l)
    if (kvSource(l) == l) layer(l).crop(keep - layer(l).dropped());
}
std::int64_t KvCache::seqLength() const {
  return layers_.front()->seqLength() + layers_.front()->dropped();
}

std::int64_t KvCache::quantizedLength() const {
  std::int64_t n = 0;
  for (int l = 0; l < numLayers(); ++l)
    if (kvSource(l) == l) n = std::max(n, layers_[static_cast<std::size_t>(l)]->quantizedLength());
  return n;
}

bool KvCache::readsWhatItStores() const {
  for (int l = 0; l < numLayers(); ++l)
    if (kvSource(l) == l && layers_[static_cast<std::size_t>(l)]->readsWhatItStores()) return true;
  return false;
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
  s.windows = windows_;
  s.kvSources = sources_;
  if (!windows_.empty())
    for (const auto& l : layers_) s.dropped.push_back(l->dropped());
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
