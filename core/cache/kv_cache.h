// The cache of a whole model: one layer per decoder layer, each built from its config (a per-layer config may give
// layers, and keys and values, different ones).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "cache/layer.h"

namespace kvscope::cache {

class KvCache {
 public:
  /// Validates cfg (throws ConfigError). `path`: the kernels every layer runs (CacheLayer::kernelPath), chosen from
  /// the execution context (ExecutionContext::kernelPath): a model makes its caches with its context's
  /// (LlamaModel::makeCache).
  KvCache(const CacheConfig& cfg, int numLayers, const StatsOptions& stats = {},
          kernels::KernelPath path = kernels::KernelPath::Host);

  std::pair<at::Tensor, at::Tensor> update(int layer, const at::Tensor& keys, const at::Tensor& values);
  void reorder(const at::Tensor& beamIdx);
  void reset();
  void crop(std::int64_t n);
  std::int64_t seqLength() const;

  int numLayers() const { return static_cast<int>(layers_.size()); }
  CacheLayer& layer(int i);
  const CacheLayer& layer(int i) const;
  const CacheConfig& config() const { return config_; }
  /// Every layer's CacheLayer::setInterleavedRopePairs (LlamaModel::makeCache: on for the Llama family, whose Q/K
  /// llama.cpp's converter permutes; off for Qwen2/Qwen3, which llama.cpp runs with NeoX RoPE in the file's order).
  void setInterleavedRopePairs(bool on);
  kernels::KernelPath kernelPath() const { return path_; }

  /// Copies every layer's deferred statistics (CacheLayer::stats) to the host in one copy.
  void settleStats() const;
  /// The same values for a copy the caller makes with its own (generate()'s step copy): appended to `parts` as flat
  /// float64 tensors on the cache's device; deliverStats() takes the copied values back, in the same order, and
  /// returns `h` past them. Nothing may change the cache between the two.
  void collectStats(std::vector<at::Tensor>& parts) const;
  const double* deliverStats(const double* h) const;

  std::vector<LayerMemory> memory() const;
  /// Memory and statistics of every layer, copied (for views on another thread).
  CacheSnapshot snapshot() const;
  TensorMemory totalMemory() const;
  /// Every layer's overflow counters, summed.
  OverflowTotals overflowTotals() const;

 private:
  CacheConfig config_;
  kernels::KernelPath path_ = kernels::KernelPath::Host;
  std::vector<std::unique_ptr<CacheLayer>> layers_;
};

}  // namespace kvscope::cache
