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

  /// Sliding-window layers, one entry per layer (the model's layer specs; 0: full attention). A windowed layer
  /// attends each query's `window` newest positions and keeps about window - 1 tokens: before an update it drops
  /// those no query can see again once it holds kWindowSlack more (so a token moves O(1) times). Throws ConfigError
  /// naming the layer where its config cannot drop tokens: quanto, hqq and kivi re-quantize groups of tokens
  /// (transformers' QuantizedCache refuses sliding-window layers), sinks and tiers keep the oldest.
  void setWindows(const std::vector<std::int64_t>& windows);
  std::int64_t window(int layer) const;
  /// Tokens held beyond window - 1 before a windowed layer drops its oldest.
  static constexpr std::int64_t kWindowSlack = 64;

  /// Layer `layer`'s attention (CacheLayer::attend) with its window; a windowed layer first drops what no query can
  /// see again (setWindows). `sinks`: the layer's learned sink logits (CacheLayer::attend), or undefined.
  at::Tensor attend(int layer, const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                    const at::Tensor& sinks = {});

  /// Shared KV (Gemma 4's last layers; the model's layer specs), one entry per layer: the layer whose cache it reads,
  /// or -1 for a layer with its own. A shared layer stores nothing and is never updated; its source must come earlier.
  /// Throws ConfigError naming a bad link.
  void setSharedKv(const std::vector<int>& sources);
  /// The layer whose cache `layer` reads (itself where it has its own).
  int kvSource(int layer) const;
  /// A shared layer's attention: its queries over exactly the keys and values its source layer's attend() read in
  /// this forward (CacheLayer::attendKept), with the source's window. The source keeps them until its last reader
  /// in the step has read (or anything else changes the cache).
  at::Tensor attendShared(int layer, const at::Tensor& q, const at::Tensor& sinks = {});
  std::pair<at::Tensor, at::Tensor> update(int layer, const at::Tensor& keys, const at::Tensor& values);
  void reorder(const at::Tensor& beamIdx);
  void reset();
  /// Keeps the first n tokens of the sequence (n < 0: drops -n from the end); throws CacheError where a windowed layer
  /// has already dropped tokens it would have to keep.
  void crop(std::int64_t n);
  /// Tokens of the sequence so far (a windowed layer's dropped ones included).
  std::int64_t seqLength() const;
  /// The most tokens any layer holds only in quantized form (CacheLayer::quantizedLength; shared layers store
  /// nothing): 0 when the next forward reads no quantized state.
  std::int64_t quantizedLength() const;
  /// Whether any layer with a cache of its own reads new states as it stored them (CacheLayer::readsWhatItStores).
  bool readsWhatItStores() const;

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
  std::vector<std::int64_t> windows_;  // per layer; 0: full attention
  std::vector<int> sources_;           // per layer: the layer whose KV it reads (empty: every layer its own)
  std::vector<int> lastReader_;        // per layer: the last layer reading its KV (-1: none)
  /// Releases every layer's kept read (CacheLayer::releaseKept): before anything changes the cache.
  void releaseKept();
  /// Before T new tokens reach a windowed layer: its oldest dropped down to window - 1 once it holds more than
  /// window - 1 + kWindowSlack.
  void trim(int layer);
};

}  // namespace kvscope::cache
