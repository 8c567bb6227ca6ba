// One decoder layer's KV cache. Tensors are [batch, kv_heads, seq, head_dim] in fp32, bf16 or fp16; what update()
// returns has the input's dtype. Returned tensors may alias the layer's buffers: they stay valid until the next call
// that changes the layer (update, reorder, crop, reset).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <stdexcept>
#include <utility>

#include "cache/config.h"
#include "cache/stats.h"

namespace kvscope::cache {

/// A call the layer cannot honour (shape change mid-sequence, group size that does not divide, bad beam index).
class CacheError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class CacheLayer {
 public:
  virtual ~CacheLayer() = default;

  /// Stores the new states and returns the keys and values attention should use now.
  virtual std::pair<at::Tensor, at::Tensor> update(const at::Tensor& keys, const at::Tensor& values) = 0;
  /// Beam search: batch row i becomes the old row beamIdx[i] (int64, length = batch).
  virtual void reorder(const at::Tensor& beamIdx) = 0;
  /// Drops every state (and, for fp8, the calibrated scale).
  virtual void reset() = 0;
  /// Keeps the first n tokens (n < 0: drops -n tokens from the end).
  virtual void crop(std::int64_t n) = 0;
  virtual std::int64_t seqLength() const = 0;
  virtual LayerMemory memory() const = 0;
  virtual Backend backend() const = 0;

  const LayerStats& stats() const { return stats_; }

 protected:
  explicit CacheLayer(StatsOptions opts) : statsOptions_(opts) {}
  LayerStats stats_;
  StatsOptions statsOptions_;
};

/// A layer for `cfg` (validated here; throws ConfigError).
std::unique_ptr<CacheLayer> makeLayer(const CacheConfig& cfg, const StatsOptions& stats = {});

}  // namespace kvscope::cache
