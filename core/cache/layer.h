// One decoder layer's KV cache. Tensors are [batch, kv_heads, seq, head_dim] in fp32, bf16 or fp16; what update()
// returns has the input's dtype. Returned tensors may alias the layer's buffers: they stay valid until the next call
// that changes the layer (update, reorder, crop, reset).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "cache/config.h"
#include "cache/detail/deferred_stats.h"
#include "cache/stats.h"
#include "kernels/path.h"

namespace kvscope::cache {

namespace detail {
class StoredSource;  // cache/detail/attention_sources.h
}

/// A call the layer cannot honour (shape change mid-sequence, group size that does not divide, bad beam index).
class CacheError : public Error {
 public:
  explicit CacheError(const std::string& what) : Error(ErrorCode::BadInput, what) {}
};

/// What fused attention reads after a layer stored new states: its keys and values in their stored form, and the
/// work the layer does once attention has read them (quanto/hqq re-quantize the history after the step that reads it).
struct Staged {
  std::shared_ptr<const detail::StoredSource> keys, values;
  /// The same states as dense tensors, where the layer has them at no cost (the first update's inputs, `dynamic`):
  /// a prefill then goes through LibTorch's attention without a copy.
  at::Tensor denseKeys, denseValues;
  std::function<void()> finish;
};

class CacheLayer {
 public:
  virtual ~CacheLayer() = default;

  /// Stores the new states and returns the keys and values attention should use now (transformers' update()). In
  /// fused mode the returned history is dequantized from the stored form for this call only. The states are
  /// validated here, once (floating [B, H, T, D], values like keys; on the host path in the CPU's memory): the
  /// layers below check only that they continue what is stored.
  std::pair<at::Tensor, at::Tensor> update(const at::Tensor& keys, const at::Tensor& values);

  /// Stores keys/values [B, Hkv, T, D] and returns attention [B, Hq, T, D] (q's dtype) of the queries q
  /// [B, Hq, T, D] at the newest T positions over everything the layer holds, causally. Reference mode: update()
  /// then LibTorch's scaled_dot_product_attention, exactly what transformers computes. Fused mode: the layer's
  /// stored form read tile by tile (no full-precision history); the values attention sees are the same as in
  /// reference mode, only the accumulation order differs (docs/attention.md). Validates q and the states once, as
  /// update() does. `window` > 0: sliding-window attention, each query attends the `window` newest positions up to
  /// its own (transformers' sliding_window, llama.cpp's n_swa), of what the layer holds. `sinks` (defined: float32
  /// [Hq]): each query head's learned sink logit, one more term exp(sink) in the softmax's denominator that reads
  /// no value (gpt-oss: transformers' eager attention concatenates it to the scores, llama.cpp's soft_max and flash
  /// attention add it to the sum); not scaled by 1/sqrt(D).
  at::Tensor attend(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, std::int64_t window = 0,
                    const at::Tensor& sinks = {});
  /// attend(), keeping what this step's attention read for the layers that share this layer's KV (Gemma 4's last
  /// layers): attendKept() attends other queries over exactly the same keys and values, in the same mode, until
  /// releaseKept(), which also runs the work the layer does once attention has read (Staged::finish). update() and
  /// attend() release first; KvCache releases before any other change.
  at::Tensor attendKeeping(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                           std::int64_t window = 0, const at::Tensor& sinks = {});
  /// Queries [B, Hq, T, D] of another layer over what the last attendKeeping() read (its T tokens' window);
  /// throws CacheError where nothing is kept.
  at::Tensor attendKept(const at::Tensor& q, std::int64_t window = 0, const at::Tensor& sinks = {});
  void releaseKept();
  bool keeps() const { return kept_ != nullptr; }
  AttentionMode attentionMode() const { return mode_; }

  /// Fused mode: stores the states as update() does (the same semantics) and returns what attention reads now,
  /// without building the full-precision history. The default: update()'s result as it is. The states were
  /// validated by the update() or attend() that stages them (a wrapping layer stages its inner layers' with them).
  virtual Staged stage(const at::Tensor& keys, const at::Tensor& values);
  /// Beam search: batch row i becomes the old row beamIdx[i] (int64, length = batch).
  virtual void reorder(const at::Tensor& beamIdx) = 0;
  /// Drops every state (and, for fp8, the calibrated scale).
  virtual void reset() = 0;
  /// Keeps the first n tokens (n < 0: drops -n tokens from the end).
  virtual void crop(std::int64_t n) = 0;
  virtual std::int64_t seqLength() const = 0;
  /// Tokens of the history held only in the config's quantized form, which the next read takes dequantized (a
  /// residual window's, sinks' and 16-bit copies are not): 0 for `dynamic`. What says whether a scored token read
  /// quantized states (eval's and probe's "quantized reads").
  virtual std::int64_t quantizedLength() const = 0;
  /// Whether an update's attention reads the new states in the form it stored them (llama.cpp's and vLLM's caches:
  /// the block rows, the prompt included) rather than as they came (transformers' first update, fp8, KIVI's window).
  virtual bool readsWhatItStores() const { return false; }
  /// Drops the n oldest tokens (a sliding-window layer's, KvCache::setWindows): what a layer whose tokens are stored
  /// each on its own (dynamic, fp8, the block rows) can do without changing the others. canDropOldest() says whether
  /// it can; the rest throw CacheError.
  virtual bool canDropOldest() const { return false; }
  virtual void dropOldest(std::int64_t n);
  /// dropOldest(n), counted: seqLength() + dropped() is every token the layer was given, and the statistics' token
  /// positions count from the first of them.
  void discardOldest(std::int64_t n) {
    dropOldest(n);
    dropped_ += n;
  }
  std::int64_t dropped() const { return dropped_; }
  virtual LayerMemory memory() const = 0;
  virtual Backend backend() const = 0;

  /// The statistics of the latest update and the totals. What the device path computed on the device is copied
  /// here, in one copy, if no one copied it before (KvCache::settleStats: a whole cache's in one): updates wait for
  /// nothing.
  const LayerStats& stats() const;
  /// Appends this layer's deferred statistics, and its inner layers', to `out` (KvCache settles a cache's at once).
  virtual void deferredStats(std::vector<detail::DeferredStats*>& out) const { out.push_back(&deferred_); }

  /// The kernels the layer runs, chosen when it was made (makeLayer; a model's caches: its execution context's).
  /// Host: kvscope's CPU kernels, attention reading the stored form in place; CPU states only. Device: the codecs'
  /// device passes, layers dequantized whole for LibTorch's attention, fp8 decode steps through the fused kernel, on
  /// the states' device (the CPU too, in portable mode).
  kernels::KernelPath kernelPath() const { return path_; }

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
  /// update() in reference mode: the layer's own storage, with its full-precision working copy. The states were
  /// validated (update()).
  virtual std::pair<at::Tensor, at::Tensor> updateReference(const at::Tensor& keys, const at::Tensor& values) = 0;

  CacheLayer(StatsOptions opts, AttentionMode mode, kernels::KernelPath path)
      : statsOptions_(opts), mode_(mode), path_(path) {}
  bool fused() const { return mode_ == AttentionMode::Fused; }
  bool hostPath() const { return path_ == kernels::KernelPath::Host; }
  /// `inner`'s update() on states its wrapper has validated: the wrapper's call validates them once.
  static std::pair<at::Tensor, at::Tensor> updateInner(CacheLayer& inner, const at::Tensor& keys,
                                                       const at::Tensor& values) {
    return inner.updateValidated(keys, values);
  }
  /// After the deferred statistics arrived (stats()): a wrapper copies its inner layers' into stats_ here.
  virtual void refreshStats() const {}
  /// An update begins: counts it, and drops what the update before left deferred (only the latest one's values wait).
  void beginUpdate() {
    ++stats_.updates;
    stats_.keys.drift = {};
    stats_.values.drift = {};
    deferred_.clear();
  }
  /// Forgets every statistic and the tokens dropped, whose count places them (reset(); inner layers' too).
  void clearStats() {
    stats_ = {};
    deferred_.clear();
    dropped_ = 0;
  }
  /// stats_.amaxPerHead-style helpers on this layer's kernel path (cache/detail/error_stats.h), their device results
  /// deferred: max |x| per head; the error map of xq against x from position tokenStart; t's values.
  void recordAmax(TensorStats& st, const at::Tensor& x);
  void recordError(TensorStats& st, const at::Tensor& x, const at::Tensor& xq, std::int64_t tokenStart);
  /// st.drift: xq against x for the tokens [0, T) that a re-quantization changed, in at most driftRanges ranges.
  void recordDrift(TensorStats& st, const at::Tensor& x, const at::Tensor& xq);
  void recordValues(std::vector<float>& out, const at::Tensor& t);
  mutable LayerStats stats_;
  mutable detail::DeferredStats deferred_;
  StatsOptions statsOptions_;
  AttentionMode mode_;

 private:
  /// Throws CacheError unless keys and values are floating [B, H, T, D] of one layout (any T), in the CPU's memory
  /// on the host path.
  void validateStates(const at::Tensor& keys, const at::Tensor& values) const;
  std::pair<at::Tensor, at::Tensor> updateValidated(const at::Tensor& keys, const at::Tensor& values);

  /// What one step's attention reads: the reference mode's keys and values, or the fused mode's staged form.
  struct Read;
  Read store(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, const at::Tensor& sinks);
  at::Tensor attendOver(const Read& r, const at::Tensor& queries, std::int64_t window, const at::Tensor& sinks);
  at::Tensor attendImpl(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, std::int64_t window,
                        const at::Tensor& sinks, bool keep);

  kernels::KernelPath path_;
  std::int64_t dropped_ = 0;
  std::shared_ptr<Read> kept_;
};

/// A layer for `cfg` (validated here; throws ConfigError) running the kernels of `path`.
std::unique_ptr<CacheLayer> makeLayer(const CacheConfig& cfg, const StatsOptions& stats = {},
                                      kernels::KernelPath path = kernels::KernelPath::Host);

}  // namespace kvscope::cache
