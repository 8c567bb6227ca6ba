// One decoder layer's KV cache. Tensors are [batch, kv_heads, seq, head_dim] in fp32, bf16 or fp16; what update()
// returns has the input's dtype. Returned tensors may alias the layer's buffers: they stay valid until the next call
// that changes the layer (update, reorder, crop, reset).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <utility>

#include "cache/config.h"
#include "cache/stats.h"
#include "kernels/cpu/segmented_attention.h"

namespace kvscope::cache {

/// A call the layer cannot honour (shape change mid-sequence, group size that does not divide, bad beam index).
class CacheError : public Error {
 public:
  explicit CacheError(const std::string& what) : Error(ErrorCode::BadInput, what) {}
};

/// What fused attention reads after a layer stored new states: its keys and values in their stored form, and the
/// work the layer does once attention has read them (quanto/hqq re-quantize the history after the step that reads it).
struct Staged {
  std::shared_ptr<const kernels::TokenSource> keys, values;
  /// The same states as dense tensors, where the layer has them at no cost (the first update's inputs, `dynamic`):
  /// a prefill then goes through LibTorch's attention without a copy.
  at::Tensor denseKeys, denseValues;
  std::function<void()> finish;
};

class CacheLayer {
 public:
  virtual ~CacheLayer() = default;

  /// Stores the new states and returns the keys and values attention should use now (transformers' update()). In
  /// fused mode the returned history is dequantized from the stored form for this call only.
  std::pair<at::Tensor, at::Tensor> update(const at::Tensor& keys, const at::Tensor& values);

  /// Stores keys/values [B, Hkv, T, D] and returns attention [B, Hq, T, D] (q's dtype) of the queries q
  /// [B, Hq, T, D] at the newest T positions over everything the layer holds, causally. Reference mode: update()
  /// then LibTorch's scaled_dot_product_attention, exactly what transformers computes. Fused mode: the layer's
  /// stored form read tile by tile (no full-precision history); the values attention sees are the same as in
  /// reference mode, only the accumulation order differs (docs/attention.md).
  at::Tensor attend(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values);
  AttentionMode attentionMode() const { return mode_; }

  /// Fused mode: stores the states as update() does (the same semantics) and returns what attention reads now,
  /// without building the full-precision history. The default: update()'s result as it is.
  virtual Staged stage(const at::Tensor& keys, const at::Tensor& values);
  /// Beam search: batch row i becomes the old row beamIdx[i] (int64, length = batch).
  virtual void reorder(const at::Tensor& beamIdx) = 0;
  /// Drops every state (and, for fp8, the calibrated scale).
  virtual void reset() = 0;
  /// Keeps the first n tokens (n < 0: drops -n tokens from the end).
  virtual void crop(std::int64_t n) = 0;
  virtual std::int64_t seqLength() const = 0;
  virtual LayerMemory memory() const = 0;
  virtual Backend backend() const = 0;

  /// The statistics of the latest update and the totals (counters a layer kept on its device are read here, in one
  /// copy: encoding waits for nothing).
  const LayerStats& stats() const {
    settleStats();
    return stats_;
  }

  /// Whether attention may use kvscope's CPU kernels on CPU states (the execution context's hostKernels(): on by
  /// default); off, attention takes the device path (layers dequantized whole for LibTorch's attention, fp8 decode
  /// steps through the fused kernel) on the CPU too. A wrapping layer passes it on to the layers it holds.
  virtual void setHostKernels(bool on) { hostKernels_ = on; }

  /// The queries [B, Hq, T, D] as this layer's attention multiplies them with its keys: `llamacpp` rounds them as
  /// llama.cpp's attention does (to the keys' dot type); the others, and wrappers of none, leave them as they are.
  /// attend() calls it after the update, so the layer knows its keys' form.
  virtual at::Tensor roundQueries(const at::Tensor& q) const { return q; }

  /// Whether the model's keys, as llama.cpp holds them, interleave each head's two rotary halves: llama.cpp's converter
  /// permutes the Q/K rows of Llama-family models for its adjacent-pair RoPE, so channel j * D/2 + i of a key here is
  /// channel 2i + j there. `llamacpp` blocks its keys (and rounds the queries) in that order, as llama.cpp does; the
  /// other layers ignore it. Set before the first update (KvCache::setInterleavedRopePairs); wrappers pass it on.
  virtual void setInterleavedRopePairs(bool on) { (void)on; }

 protected:
  /// update() in reference mode: the layer's own storage, with its full-precision working copy.
  virtual std::pair<at::Tensor, at::Tensor> updateReference(const at::Tensor& keys, const at::Tensor& values) = 0;

  explicit CacheLayer(StatsOptions opts, AttentionMode mode = AttentionMode::Reference)
      : statsOptions_(opts), mode_(mode) {}
  bool fused() const { return mode_ == AttentionMode::Fused; }
  /// Brings counters left on the device into stats_; a no-op for layers that count on the host.
  virtual void settleStats() const {}
  mutable LayerStats stats_;
  StatsOptions statsOptions_;
  AttentionMode mode_;
  bool hostKernels_ = true;
};

/// A layer for `cfg` (validated here; throws ConfigError).
std::unique_ptr<CacheLayer> makeLayer(const CacheConfig& cfg, const StatsOptions& stats = {});

}  // namespace kvscope::cache
