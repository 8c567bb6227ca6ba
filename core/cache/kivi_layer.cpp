// `kivi`: a KIVI-style cache (Liu et al., 2024). Keys are quantized per channel in groups of `q_group_size` tokens
// (one scale and zero-point per (row, head, channel, group)); values per token in groups of `q_group_size` channels.
// Asymmetric min/max, int2 or int4, round to nearest even, codes packed with kernels::packBits.
//
// Streaming: the newest tokens stay in a full-precision window. Before an update stores anything, every whole group of
// the oldest window tokens that the window can give up while keeping at least `residual_length` tokens is quantized,
// once: quantized history is never re-quantized (transformers' QuantizedLayer re-quantizes it all when its window
// fills). So attention in a step reads the tokens stored before it quantized, except the newest residual_length ..
// residual_length + group - 1, and the new tokens (and the whole first update, which is returned as it came) in full
// precision, as KIVI's decode does (it quantizes after attention).
//
// Storage per side: packed codes [B, H, T, packedBytes(D, bits)], scales and zero-points in the input dtype (keys
// [B, H, groups, D], values [B, H, T, D / group]), and one full-precision buffer holding [dequantized quantized part |
// window]: the tensor attention reads. A group leaving the window is quantized, packed, unpacked again from what was
// stored, and its dequantized values overwrite its slot in that buffer: O(group) work, no copy of the history.
// Fused mode (the default): that buffer holds the window only; attention reads the packed codes (stage()).
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "cache/detail/attention_sources.h"
#include "cache/detail/error_stats.h"
#include "cache/detail/layers.h"
#include "cache/detail/seq_buffer.h"
#include "kernels/cpu/bitpack.h"
#include "util/process_memory.h"

namespace kvscope::cache::detail {
namespace {

class KiviLayer final : public CacheLayer {
 public:
  KiviLayer(const CacheConfig& cfg, const StatsOptions& s, kernels::KernelPath path)
      : CacheLayer(s, cfg.attention, path),
        bits_(cfg.resolvedNbits()),
        group_(cfg.resolvedGroupSize()),
        window_(cfg.resolvedResidualLength()) {}

  std::pair<at::Tensor, at::Tensor> updateReference(const at::Tensor& k, const at::Tensor& v) override {
    const bool first = store(k, v);
    if (first) return {k, v};
    return {k_.out.view(), v_.out.view()};
  }

  Staged stage(const at::Tensor& k, const at::Tensor& v) override {
    if (!fused()) return CacheLayer::stage(k, v);
    if (store(k, v)) return stagedAsIs(k, v);  // the first update attends over its inputs
    Staged st;
    const std::int64_t D = k.size(3);
    st.keys = concat({quantizedSource(k_, true, D), fpSource(k_.out.view())});
    st.values = concat({quantizedSource(v_, false, D), fpSource(v_.out.view())});
    return st;
  }

  // Checks that new states continue the stored ones and stores them: whole groups leave the window first, then the
  // new states join it. Returns true for the first update.
  bool store(const at::Tensor& k, const at::Tensor& v) {
    const std::int64_t D = k.size(3);
    const std::int64_t vg = std::min<std::int64_t>(group_, D);
    if (D % vg != 0)
      throw CacheError(
          fmt::format("kivi: q_group_size {} does not divide head_dim {} (values are grouped along the "
                      "channels of each token)",
                      group_, D));
    const bool first = !k_.out.defined();
    if (!first) {
      checkSameLayout(k, k_.out.view(), "kivi keys");
      checkSameLayout(v, v_.out.view(), "kivi values");
    }
    beginUpdate();
    // What the previous steps stored leaves the window now, whole groups at a time.
    const std::int64_t before = quantized_;
    while (window() >= window_ + group_) {
      quantizeKeys(quantized_);
      quantizeValues(quantized_);
      quantized_ += group_;
      if (fused()) {  // the window buffer holds only the tokens after the quantized part
        k_.out.dropFront(group_);
        v_.out.dropFront(group_);
      }
    }
    if (fused() && quantized_ > before) {  // a long prompt has left the window: give its room back
      k_.out.compact(window_ + group_ + k.size(2));
      v_.out.compact(window_ + group_ + k.size(2));
    }
    for (auto [st, x] : {std::pair{&stats_.keys, &k}, std::pair{&stats_.values, &v}}) {
      st->quantized = quantized_ > before;
      st->quantizedTokens = quantized_ - before;
      if (!st->quantized) st->error = {};
      if (statsOptions_.enabled) recordAmax(*st, *x);
    }
    if (statsOptions_.enabled && quantized_ > before) {
      recordError(stats_.keys, pendingK_, pendingDeqK_, before);
      recordError(stats_.values, pendingV_, pendingDeqV_, before);
    }
    pendingK_ = pendingV_ = pendingDeqK_ = pendingDeqV_ = at::Tensor();
    k_.out.append(k);
    v_.out.append(v);
    // A prefill chunk quantized many groups through many short-lived buffers: give their pages back now, or the
    // holes they leave (30 layers' worth within a chunk) keep the resident size above what the cache holds.
    if (quantized_ - before > group_) util::releaseFreeMemory();
    if (first) resetRows(k.size(0));
    return first;
  }

  void reorder(const at::Tensor& beamIdx) override {
    if (!k_.out.defined()) return;
    const at::Tensor idx = checkBeamIndex(beamIdx, k_.out.view().size(0), k_.out.view().device());
    for (Side* s : {&k_, &v_}) {
      s->out.reorderBatch(idx);
      s->codes.reorderBatch(idx);
      s->scale.reorderBatch(idx);
      s->zero.reorderBatch(idx);
    }
  }

  void reset() override {
    k_ = Side{};
    v_ = Side{};
    quantized_ = 0;
    clearStats();
  }

  void crop(std::int64_t n) override {
    if (!k_.out.defined()) return;
    const std::int64_t len = seqLength();
    const std::int64_t keep = n < 0 ? std::max<std::int64_t>(len + n, 0) : std::min(n, len);
    if (keep == 0) {
      reset();
      return;
    }
    if (fused()) {
      if (keep < quantized_) {
        // Whole groups stay quantized; the tokens of a cut group return to the window with their dequantized values.
        const std::int64_t q = keep / group_ * group_;
        const at::Tensor like = k_.out.view();
        const std::int64_t B = like.size(0), H = like.size(1), D = like.size(3);
        const at::ScalarType dt = like.scalar_type();
        const at::Tensor backK = materialize(*quantizedSource(k_, true, D, keep), B, H, dt, kernelPath());
        const at::Tensor backV = materialize(*quantizedSource(v_, false, D, keep), B, H, dt, kernelPath());
        k_.out.setLength(0);
        v_.out.setLength(0);
        k_.out.append(backK.narrow(2, q, keep - q));
        v_.out.append(backV.narrow(2, q, keep - q));
        truncateCodes(q);
      } else {
        k_.out.setLength(keep - quantized_);
        v_.out.setLength(keep - quantized_);
      }
      return;
    }
    if (keep < quantized_) {
      // Whole groups stay quantized; the tokens of a cut group return to the window with their dequantized values.
      quantized_ = keep / group_ * group_;
      for (Side* s : {&k_, &v_}) s->codes.setLength(quantized_);
      k_.scale.setLength(quantized_ / group_);
      k_.zero.setLength(quantized_ / group_);
      v_.scale.setLength(quantized_);
      v_.zero.setLength(quantized_);
    }
    k_.out.setLength(keep);
    v_.out.setLength(keep);
  }

  std::int64_t seqLength() const override { return fused() ? quantized_ + k_.out.length() : k_.out.length(); }
  std::int64_t quantizedLength() const override { return quantized_; }
  Backend backend() const override { return Backend::Kivi; }

  LayerMemory memory() const override {
    LayerMemory m;
    for (auto [mem, s] : {std::pair{&m.keys, &k_}, std::pair{&m.values, &v_}}) {
      if (!s->out.defined()) continue;
      const std::int64_t bpt = s->out.bytesPerToken();
      mem->payload = s->codes.bytesUsed();
      mem->metadata = s->scale.bytesUsed() + s->zero.bytesUsed();
      mem->residual = window() * bpt;
      mem->transient = fused() ? 0 : quantized_ * bpt;
      mem->reserved =
          s->out.bytesReserved() + s->codes.bytesReserved() + s->scale.bytesReserved() + s->zero.bytesReserved();
      mem->unquantized = seqLength() * bpt;
    }
    return m;
  }

 private:
  struct Side {
    SeqBuffer out;    // [dequantized quantized part | window], input dtype
    SeqBuffer codes;  // uint8 [B, H, T, packedBytes(D, bits)]
    SeqBuffer scale;  // keys [B, H, groups, D]; values [B, H, T, D / group], input dtype
    SeqBuffer zero;   // the group minimum, same layout
  };

  std::int64_t levels() const { return (std::int64_t{1} << bits_) - 1; }
  // Tokens in the full-precision window.
  std::int64_t window() const { return fused() ? k_.out.length() : k_.out.length() - quantized_; }
  // The slot of the window's token `start` (an absolute position) in the full-precision buffer.
  at::Tensor slotOf(Side& s, std::int64_t start, std::int64_t n) {
    return s.out.view().narrow(2, fused() ? start - quantized_ : start, n);
  }

  // Fused mode: the quantized part (its first `upTo` tokens, default all) read from the packed codes.
  SourcePtr quantizedSource(const Side& s, bool keys, std::int64_t D, std::int64_t upTo = -1) const {
    const std::int64_t n = upTo < 0 ? quantized_ : std::min(upTo, quantized_);
    if (n == 0 || !s.codes.defined()) return SourcePtr();
    const std::int64_t groupsStored = keys ? (quantized_ / group_) : quantized_;
    return kiviSource(s.codes.view(), s.scale.view().narrow(2, 0, groupsStored),
                      s.zero.view().narrow(2, 0, groupsStored), bits_, group_, keys, D, n);
  }

  // Keeps the first q quantized tokens (a multiple of the group) of the codes and their scales.
  void truncateCodes(std::int64_t q) {
    quantized_ = q;
    for (Side* s : {&k_, &v_}) s->codes.setLength(q);
    k_.scale.setLength(q / group_);
    k_.zero.setLength(q / group_);
    v_.scale.setLength(q);
    v_.zero.setLength(q);
  }

  // min/max over `dim` of x (float32), rounded to the storage dtype; returns (scale, min) as float32.
  std::pair<at::Tensor, at::Tensor> minMax(const at::Tensor& x, std::int64_t dim, at::ScalarType dt) const {
    const at::Tensor mn = x.amin({dim}, true), mx = x.amax({dim}, true);
    const at::Tensor scale = ((mx - mn) / static_cast<double>(levels())).to(dt).to(at::kFloat);
    return {scale, mn.to(dt).to(at::kFloat)};
  }

  at::Tensor codesOf(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& mn) const {
    // A constant group (scale 0) takes code 0 and dequantizes to its minimum exactly.
    const at::Tensor safe = at::where(scale > 0, scale, at::ones_like(scale));
    return at::round((x - mn) / safe).clamp(0, levels()).to(at::kByte);
  }

  // Stores the packed codes and returns them as read back from storage (as uint8 [B, H, G, D] on x's device).
  at::Tensor storeCodes(Side& s, const at::Tensor& codes) {
    s.codes.append(packRows(codes, bits_, kernelPath()));  // on the codes' device
    const std::int64_t n = codes.size(2);
    return unpackRows(s.codes.view().narrow(2, s.codes.length() - n, n), codes.size(3), bits_, kernelPath());
  }

  void quantizeKeys(std::int64_t start) {
    const at::Tensor slot = slotOf(k_, start, group_);
    const at::ScalarType dt = slot.scalar_type();
    const at::Tensor x = slot.to(at::kFloat);
    auto [scale, mn] = minMax(x, 2, dt);  // [B, H, 1, D]: per channel over the group's tokens
    const at::Tensor stored = storeCodes(k_, codesOf(x, scale, mn));
    k_.scale.append(scale.to(dt));
    k_.zero.append(mn.to(dt));
    const at::Tensor deq = (stored.to(at::kFloat) * scale + mn).to(dt);
    keepPending(pendingK_, pendingDeqK_, slot, deq);
    if (!fused()) slot.copy_(deq);
  }

  void quantizeValues(std::int64_t start) {
    const at::Tensor slot = slotOf(v_, start, group_);
    const at::ScalarType dt = slot.scalar_type();
    const std::int64_t B = slot.size(0), H = slot.size(1), T = slot.size(2), D = slot.size(3);
    const std::int64_t vg = std::min<std::int64_t>(group_, D);
    const at::Tensor x = slot.to(at::kFloat).reshape({B, H, T, D / vg, vg});
    auto [scale, mn] = minMax(x, 4, dt);  // [B, H, T, D / vg, 1]: per token and channel group
    const at::Tensor stored = storeCodes(v_, codesOf(x, scale, mn).reshape({B, H, T, D}));
    v_.scale.append(scale.reshape({B, H, T, D / vg}).to(dt));
    v_.zero.append(mn.reshape({B, H, T, D / vg}).to(dt));
    const at::Tensor deq =
        (stored.to(at::kFloat).reshape({B, H, T, D / vg, vg}) * scale + mn).reshape({B, H, T, D}).to(dt);
    keepPending(pendingV_, pendingDeqV_, slot, deq);
    if (!fused()) slot.copy_(deq);
  }

  // The states about to be replaced by their dequantized values, and those values, for this update's error map.
  void keepPending(at::Tensor& pending, at::Tensor& pendingDeq, const at::Tensor& slot, const at::Tensor& deq) const {
    if (!statsOptions_.enabled) return;
    pending = pending.defined() ? at::cat({pending, slot}, 2) : slot.clone();
    pendingDeq = pendingDeq.defined() ? at::cat({pendingDeq, deq}, 2) : deq;
  }

  void resetRows(std::int64_t batch) {
    stats_.storeRows.resize(static_cast<std::size_t>(batch));
    std::iota(stats_.storeRows.begin(), stats_.storeRows.end(), 0);
  }

  int bits_;
  std::int64_t group_, window_;
  std::int64_t quantized_ = 0;  // tokens quantized (a multiple of group_), the same for keys and values
  Side k_, v_;
  at::Tensor pendingK_, pendingV_, pendingDeqK_, pendingDeqV_;
};

}  // namespace

std::unique_ptr<CacheLayer> makeKiviLayer(const CacheConfig& cfg, const StatsOptions& stats, kernels::KernelPath path) {
  return std::make_unique<KiviLayer>(cfg, stats, path);
}

}  // namespace kvscope::cache::detail
