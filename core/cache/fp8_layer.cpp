// `fp8`: transformers' Fp8QuantizedLayer (REFERENCE §2) bit for bit in its default mode: per-tensor float32 scale
// max(amax / 448, FLT_MIN) calibrated on the first update and then frozen, states appended with no residual window,
// the first update returning its inputs. Beyond it: per-head and per-channel scales, e5m2, headroom, and what to do
// with values beyond the frozen scale (NaN as PyTorch's cast, saturate, or recalibrate).
//
// Storage: uint8 codes in a growing buffer. In reference mode also a dequantized mirror that each update extends by
// the new tokens only (the scale is frozen, so earlier tokens dequantize to the same values every step; the seed
// dequantizes the whole cache on every step instead, and the values are identical). In fused mode (the default) no
// mirror: attention reads the codes and scales (stage()).
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <array>
#include <cfloat>

#include "cache/detail/attention_sources.h"
#include "cache/detail/error_stats.h"
#include "cache/detail/layers.h"
#include "cache/detail/seq_buffer.h"
#include "kernels/fp8_tensor.h"

namespace kvscope::cache::detail {
namespace {

using kernels::Fp8Counts;

class Fp8Layer final : public CacheLayer {
 public:
  Fp8Layer(const CacheConfig& cfg, const StatsOptions& s, kernels::KernelPath path)
      : CacheLayer(s, cfg.attention, path),
        format_(cfg.fp8Format),
        granularity_(cfg.granularity),
        headroom_(cfg.headroom),
        policy_(cfg.overflow),
        unitScale_(cfg.fp8Scale == Fp8Scale::Unit) {
    // Scales calibrated offline (kvscope-cli calibrate): the first update encodes with them instead of its own amax.
    if (cfg.keyScales.size() > 1 || cfg.valueScales.size() > 1)
      throw ConfigError("key_scales", fmt::format("calibrated scales for {} layers: build the whole cache (KvCache), "
                                                  "which gives each layer its own",
                                                  std::max(cfg.keyScales.size(), cfg.valueScales.size())));
    if (!cfg.keyScales.empty()) calibratedK_ = at::tensor(cfg.keyScales.front(), at::kFloat);
    if (!cfg.valueScales.empty()) calibratedV_ = at::tensor(cfg.valueScales.front(), at::kFloat);
  }

  std::pair<at::Tensor, at::Tensor> updateReference(const at::Tensor& kIn, const at::Tensor& vIn) override {
    const bool first = store(kIn, vIn);
    if (first) return {kIn, vIn};
    return {k_.deq.view(), v_.deq.view()};
  }

  Staged stage(const at::Tensor& kIn, const at::Tensor& vIn) override {
    if (!fused()) return CacheLayer::stage(kIn, vIn);
    // The first update attends over its inputs, as transformers' layer returns them.
    if (store(kIn, vIn)) return stagedAsIs(kIn, vIn);
    Staged s;
    s.keys = fp8Source(k_.q.view(), k_.expanded, format_);
    s.values = fp8Source(v_.q.view(), v_.expanded, format_);
    return s;
  }

  void reorder(const at::Tensor& beamIdx) override {
    if (!k_.q.defined()) return;
    const at::Tensor idx = checkBeamIndex(beamIdx, k_.q.view().size(0), k_.q.view().device());
    // One scale per tensor, head or channel is shared by every batch row: the codes move as they are.
    for (Side* s : {&k_, &v_}) {
      s->q.reorderBatch(idx);
      s->deq.reorderBatch(idx);
    }
  }

  void reset() override {
    k_ = Side{};
    v_ = Side{};
    clearStats();
    unreadCounts_ = {};
  }

  void crop(std::int64_t n) override {
    const std::int64_t len = seqLength();
    const std::int64_t keep = n < 0 ? std::max<std::int64_t>(len + n, 0) : std::min(n, len);
    for (Side* s : {&k_, &v_}) {
      s->q.setLength(keep);
      s->deq.setLength(keep);
    }
  }

  std::int64_t seqLength() const override { return k_.q.length(); }
  std::int64_t quantizedLength() const override { return seqLength(); }
  // The scale is the layer's, not the tokens': dropping tokens leaves the others' codes and the scale as they are.
  bool canDropOldest() const override { return true; }
  void dropOldest(std::int64_t n) override {
    for (Side* s : {&k_, &v_}) {
      s->q.dropFront(n);
      if (s->deq.defined()) s->deq.dropFront(n);
    }
  }
  Backend backend() const override { return Backend::Fp8; }

  LayerMemory memory() const override {
    LayerMemory m;
    for (auto [mem, s] : {std::pair{&m.keys, &k_}, std::pair{&m.values, &v_}}) {
      mem->payload = s->q.bytesUsed();
      mem->metadata = s->scale.defined() ? s->scale.numel() * 4 : 0;
      mem->transient = s->deq.defined() ? s->deq.bytesUsed() : 0;
      mem->reserved = s->q.bytesReserved() + (s->deq.defined() ? s->deq.bytesReserved() : 0);
      mem->unquantized = s->q.length() * s->q.bytesPerToken() * s->inputBytes;
    }
    return m;
  }

 private:
  struct Side {
    SeqBuffer q;                  // uint8 codes [B, H, cap, D]
    SeqBuffer deq;                // dequantized mirror, input dtype (reference mode only)
    std::int64_t inputBytes = 0;  // bytes per value of the input dtype
    at::Tensor like;      // the first update's states, narrowed to 0 tokens: the layout later updates must continue
    at::Tensor scale;     // float32 [1], [H] or [H, D]
    at::Tensor expanded;  // float32 [H, D]: the scale of every (head, channel), what the kernels read
  };

  float fmax() const { return fp8Max(format_); }

  // An update's counts: the overflow of its first encode, the non-finite codes of what it stored.
  static void count(TensorStats& st, std::int64_t overflow, const Fp8Counts& stored) {
    st.overflow = overflow;
    st.nonFinite = stored.nonFinite;
    st.overflowTotal += overflow;
    st.nonFiniteTotal += stored.nonFinite;
  }

  // Checks that new states continue the stored ones and stores them (codes, and the mirror in reference mode).
  // Returns true for the first update.
  bool store(const at::Tensor& kIn, const at::Tensor& vIn) {
    const bool first = !k_.q.defined() || !k_.scale.defined();
    if (!first) {
      checkSameLayout(kIn, k_.like, "fp8 keys");
      checkSameLayout(vIn, v_.like, "fp8 values");
    }
    if (first) {
      checkCalibrated(calibratedK_, kIn, "key");
      checkCalibrated(calibratedV_, vIn, "value");
    }
    const at::Tensor k = kIn.contiguous(), v = vIn.contiguous();
    const std::int64_t start = k_.q.length();
    beginUpdate();
    append(k_, k, first, start, stats_.keys);
    append(v_, v, first, start, stats_.values);
    return first;
  }

  at::Tensor amaxForScale(const at::Tensor& x) const {
    switch (granularity_) {
      case Fp8Granularity::Tensor:
        return x.abs().amax().to(at::kFloat).reshape({1});
      case Fp8Granularity::Head:
        return x.abs().amax({0, 2, 3}).to(at::kFloat);
      case Fp8Granularity::Channel:
        return x.abs().amax({0, 2}).to(at::kFloat);
    }
    return {};
  }

  // transformers: (amax.float() / 448).clamp(min=FLT_MIN); the headroom factor multiplies amax first.
  at::Tensor scaleFromAmax(at::Tensor amax) const {
    if (headroom_ != 1.0) amax = amax * headroom_;
    // A tensor divisor: LibTorch's CUDA division by a scalar multiplies by its reciprocal (1/448 is inexact), which
    // would put a CUDA cache's scale one ulp away from the CPU's and transformers'.
    return (amax / at::full_like(amax, static_cast<double>(fmax()))).clamp_min(FLT_MIN);
  }

  void setScale(Side& s, at::Tensor scale, std::int64_t H, std::int64_t D) const {
    s.scale = std::move(scale);
    s.expanded =
        (granularity_ == Fp8Granularity::Channel ? s.scale : s.scale.reshape({-1, 1})).expand({H, D}).contiguous();
  }

  Fp8Counts encodeInto(const at::Tensor& x, const at::Tensor& dst, const at::Tensor& expanded, bool saturate) const {
    return kernels::fp8Encode(x, dst, expanded, format_, saturate);
  }

  void decodeInto(const at::Tensor& q, const at::Tensor& dst, const at::Tensor& expanded) const {
    kernels::fp8Decode(q, dst, expanded, format_);
  }

  void append(Side& s, const at::Tensor& x, bool first, std::int64_t start, TensorStats& st) {
    const std::int64_t H = x.size(1), T = x.size(2), D = x.size(3);
    if (first) {
      const at::Tensor& calibrated = &s == &k_ ? calibratedK_ : calibratedV_;
      const std::vector<std::int64_t> shape = granularity_ == Fp8Granularity::Channel ? std::vector<std::int64_t>{H, D}
                                              : granularity_ == Fp8Granularity::Head  ? std::vector<std::int64_t>{H}
                                                                                      : std::vector<std::int64_t>{1};
      setScale(s,
               calibrated.defined() ? calibrated.to(x.device()).reshape(shape)
               : unitScale_         ? at::ones(shape, x.options().dtype(at::kFloat))
                                    : scaleFromAmax(amaxForScale(x)),
               H, D);
      s.like = at::empty({x.size(0), H, 0, D}, x.options());  // no reference to x's storage
      s.inputBytes = static_cast<std::int64_t>(x.element_size());
    }
    at::Tensor slot = s.q.tail(T, x, at::kByte);
    bool recalibrated = false;
    if (policy_ != OverflowPolicy::Recalibrate) {
      kernels::Fp8CountsDeferred d =
          kernels::fp8EncodeDeferred(x, slot, s.expanded, format_, policy_ == OverflowPolicy::Saturate);
      s.q.commit(T);
      // The device path keeps the counts as a tensor until they are read, on the CPU in portable mode too.
      if (!hostPath() && !d.device.defined())
        d.device = at::tensor(std::vector<std::int64_t>{d.host.overflow, d.host.nonFinite}, at::kLong);
      if (d.device.defined()) {
        // Counted on the device: read with the other statistics (deferred_). The sum runs until they are read, so
        // an update whose values are dropped unread (beginUpdate) loses nothing of the totals.
        at::Tensor& sum = unreadCounts_[&s == &k_ ? 0 : 1];
        sum = sum.defined() ? sum + d.device : d.device;
        deferred_.add(at::cat({d.device, sum}), [&st, &sum](const double* h) {
          st.overflow = static_cast<std::int64_t>(h[0]);
          st.nonFinite = static_cast<std::int64_t>(h[1]);
          st.overflowTotal += static_cast<std::int64_t>(h[2]);
          st.nonFiniteTotal += static_cast<std::int64_t>(h[3]);
          sum = at::Tensor();
        });
      } else {
        count(st, d.host.overflow, d.host);
      }
    } else {  // whether to recalibrate depends on this update's overflow: counted on the host at once
      Fp8Counts c = encodeInto(x, slot, s.expanded, false);
      const std::int64_t overflow = c.overflow;
      if (!first && overflow > 0) {
        recalibrate(s, x, start);
        slot = s.q.tail(T, x, at::kByte);
        c = encodeInto(x, slot, s.expanded, false);
        ++st.recalibrations;
        recalibrated = true;
      }
      s.q.commit(T);
      count(st, overflow, c);
    }
    // What attention reads of the new tokens: kept in the mirror (reference), or decoded here for the statistics only.
    at::Tensor dslot;
    if (!fused()) {
      dslot = s.deq.tail(T, x);
      decodeInto(slot, dslot, s.expanded);
      s.deq.commit(T);
    } else if (statsOptions_.enabled) {
      dslot = at::empty_like(x);
      decodeInto(slot, dslot, s.expanded);
    }
    st.quantized = true;
    st.quantizedTokens = T;
    st.formatMax = fmax();
    if (first || st.scales.empty() || recalibrated) {  // the scale changes only then
      recordValues(st.scales, s.scale);
      st.scaleShape = s.scale.sizes().vec();
    }
    if (statsOptions_.enabled) {
      recordAmax(st, x);
      recordError(st, x, dslot, start);
    }
  }

  // Grows the scale wherever the new states exceed it, then re-encodes what is stored with the new scale (a second
  // rounding of those values) and refreshes the mirror.
  void recalibrate(Side& s, const at::Tensor& x, std::int64_t stored) {
    const std::int64_t H = x.size(1), D = x.size(3);
    const at::Tensor grown = at::maximum(s.scale, scaleFromAmax(amaxForScale(x)));
    const at::Tensor oldExpanded = s.expanded;
    setScale(s, grown, H, D);
    if (stored == 0) return;
    const at::Tensor codes = s.q.view().narrow(2, 0, stored);
    at::Tensor values = at::empty(codes.sizes(), codes.options().dtype(at::kFloat));
    decodeInto(codes, values, oldExpanded);
    encodeInto(values, codes, s.expanded, false);
    if (!fused()) decodeInto(codes, s.deq.view().narrow(2, 0, stored), s.expanded);
  }

  // Calibrated scales must fit the granularity and the states' heads/channels.
  void checkCalibrated(const at::Tensor& scale, const at::Tensor& x, const char* side) const {
    if (!scale.defined()) return;
    const std::int64_t H = x.size(1), D = x.size(3);
    const std::int64_t want = granularity_ == Fp8Granularity::Tensor ? 1
                              : granularity_ == Fp8Granularity::Head ? H
                                                                     : H * D;
    if (scale.numel() != want)
      throw CacheError(
          fmt::format("fp8: {} calibrated {} scales, but granularity={} on {} heads x {} channels needs {}",
                      scale.numel(), side, granularityName(granularity_), H, D, want));
  }

  Fp8Format format_;
  Fp8Granularity granularity_;
  double headroom_;
  OverflowPolicy policy_;
  bool unitScale_;  // scale=unit: 1.0 wherever no calibrated scale is given (vLLM without checkpoint scales)
  at::Tensor calibratedK_, calibratedV_;  // float32 [1], [H] or [H * D]; undefined: calibrate on the first update
  Side k_, v_;
  // The device counts (overflow, non-finite) summed since they were last read, keys then values.
  mutable std::array<at::Tensor, 2> unreadCounts_;
};

}  // namespace

std::unique_ptr<CacheLayer> makeFp8Layer(const CacheConfig& cfg, const StatsOptions& stats, kernels::KernelPath path) {
  return std::make_unique<Fp8Layer>(cfg, stats, path);
}

}  // namespace kvscope::cache::detail
