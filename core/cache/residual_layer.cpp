// `quanto` and `hqq`: transformers' QuantizedLayer semantics (REFERENCE §1). The first update quantizes the whole
// prompt and returns it unchanged; later updates return cat[dequantized store, residual, new]; once the residual
// holds residual_length - 1 tokens the whole concatenation is re-quantized and the residual emptied.
//
// Storage: the quantized store (packed codes + scales/zero-points) and one growing full-precision buffer that holds
// the dequantized store followed by the residual tokens: exactly the tensor attention reads, extended in place each
// step. The residual is therefore the buffer's tail, never a second copy, and a step between flushes costs O(1).
//
// Beam reorder: the buffer (dequantized store and residual) is reordered at once. The quantized store keeps its rows,
// and `storeRows` records which of them each beam now reads, composed over reorders; the next flush re-quantizes
// from the reordered buffer, as transformers' fix (#45510) does.
//
// Fused mode (the default) keeps no dequantized store: the buffer holds the residual window only, attention reads
// the packed codes through storeRows (stage()), and a flush dequantizes the history once, for the re-quantization
// transformers does at that step, then drops it.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <optional>

#include "cache/detail/attention_sources.h"
#include "cache/detail/error_stats.h"
#include "cache/detail/group_codec.h"
#include "cache/detail/layers.h"
#include "cache/detail/seq_buffer.h"
#include "util/process_memory.h"

namespace kvscope::cache::detail {
namespace {

class ResidualQuantizedLayer final : public CacheLayer {
 public:
  ResidualQuantizedLayer(Backend backend, std::unique_ptr<GroupCodec> codec, const CacheConfig& cfg,
                         const StatsOptions& s, kernels::KernelPath path)
      : CacheLayer(s, cfg.attention, path),
        backend_(backend),
        bits_(cfg.resolvedNbits()),
        codec_(std::move(codec)),
        residualLength_(cfg.resolvedResidualLength()) {
    k_.axis = cfg.resolvedAxisKey();
    v_.axis = cfg.resolvedAxisValue();
  }

  std::pair<at::Tensor, at::Tensor> updateReference(const at::Tensor& k, const at::Tensor& v) override {
    const char* name = backend_ == Backend::Quanto ? "quanto" : "hqq";
    if (!initialized_) {
      // Quantize both sides before storing either, so that a failure leaves the layer as it was.
      const at::Tensor kc = k.contiguous(), vc = v.contiguous();
      QuantizedBlock qk = codec_->quantize(kc, k_.axis);
      QuantizedBlock qv = codec_->quantize(vc, v_.axis);
      beginUpdate();
      setStore(k_, std::move(qk), kc, 0, stats_.keys);
      setStore(v_, std::move(qv), vc, 0, stats_.values);
      initialized_ = true;
      resetRows(k.size(0));
      return {k, v};
    }
    checkSameLayout(k, k_.buf.view(), fmt::format("{} keys", name).c_str());
    checkSameLayout(v, v_.buf.view(), fmt::format("{} values", name).c_str());
    const std::int64_t T = k.size(2);
    const std::int64_t residual = k_.buf.length() - k_.storeLen;
    beginUpdate();
    if (residual + T >= residualLength_) {
      // Flush: the returned tensor is the concatenation as it stands; the store and the buffer start afresh from it.
      at::Tensor retK = concat(k_, k), retV = concat(v_, v);
      QuantizedBlock qk = codec_->quantize(retK, k_.axis);
      QuantizedBlock qv = codec_->quantize(retV, v_.axis);
      setStore(k_, std::move(qk), retK, k_.storeLen, stats_.keys);
      setStore(v_, std::move(qv), retV, v_.storeLen, stats_.values);
      resetRows(k.size(0));
      util::releaseFreeMemory();
      return {retK, retV};
    }
    for (auto [s, x, st] : {std::tuple{&k_, &k, &stats_.keys}, std::tuple{&v_, &v, &stats_.values}}) {
      s->buf.append(*x);
      st->quantized = false;
      st->quantizedTokens = 0;
      st->error = {};
      if (statsOptions_.enabled) recordAmax(*st, *x);
    }
    return {k_.buf.view(), v_.buf.view()};
  }

  Staged stage(const at::Tensor& k, const at::Tensor& v) override {
    if (!fused()) return CacheLayer::stage(k, v);
    const char* name = backend_ == Backend::Quanto ? "quanto" : "hqq";
    Staged st;
    if (!initialized_) {
      const at::Tensor kc = k.contiguous(), vc = v.contiguous();
      QuantizedBlock qk = codec_->quantize(kc, k_.axis);
      QuantizedBlock qv = codec_->quantize(vc, v_.axis);
      beginUpdate();
      recordStore(stats_.keys, qk, kc, 0);
      recordStore(stats_.values, qv, vc, 0);
      installFused(k_, std::move(qk), kc);
      installFused(v_, std::move(qv), vc);
      initialized_ = true;
      resetRows(k.size(0));
      return stagedAsIs(k, v);  // the first update attends over its inputs
    }
    checkSameLayout(k, k_.like, fmt::format("{} keys", name).c_str());
    checkSameLayout(v, v_.like, fmt::format("{} values", name).c_str());
    const std::int64_t T = k.size(2);
    const std::int64_t residual = k_.buf.length();
    beginUpdate();
    if (residual + T >= residualLength_) {
      // This step reads [store, residual, new] as they stand; afterwards the whole of it is re-quantized (finish).
      const at::Tensor kc = k.contiguous(), vc = v.contiguous();
      st.keys = detail::concat({storeSource(k_), residualSource(k_), fpSource(kc)});
      st.values = detail::concat({storeSource(v_), residualSource(v_), fpSource(vc)});
      st.finish = [this, kc, vc] {
        // One side's history at a time: built, quantized, measured, dropped, before the other side's is built.
        at::Tensor fullK = history(k_, kc);
        QuantizedBlock qk = codec_->quantize(fullK, k_.axis);
        recordStore(stats_.keys, qk, fullK, k_.storeLen);
        fullK = at::Tensor();
        util::releaseFreeMemory();  // the keys' working buffers, before the values' are made
        at::Tensor fullV = history(v_, vc);
        QuantizedBlock qv = codec_->quantize(fullV, v_.axis);
        recordStore(stats_.values, qv, fullV, v_.storeLen);
        fullV = at::Tensor();
        installFused(k_, std::move(qk), kc);
        installFused(v_, std::move(qv), vc);
        resetRows(kc.size(0));
        util::releaseFreeMemory();  // the old stores' pages: the new ones, larger, never fit their holes
      };
      return st;
    }
    for (auto [s, x, ts] : {std::tuple{&k_, &k, &stats_.keys}, std::tuple{&v_, &v, &stats_.values}}) {
      s->buf.append(*x);
      ts->quantized = false;
      ts->quantizedTokens = 0;
      ts->error = {};
      if (statsOptions_.enabled) recordAmax(*ts, *x);
    }
    st.keys = detail::concat({storeSource(k_), residualSource(k_)});
    st.values = detail::concat({storeSource(v_), residualSource(v_)});
    return st;
  }

  void reorder(const at::Tensor& beamIdx) override {
    if (!initialized_) return;
    if (fused()) {
      const at::Tensor idx = checkBeamIndex(beamIdx, k_.like.size(0), k_.like.device());
      k_.buf.reorderBatch(idx);
      v_.buf.reorderBatch(idx);
      const at::Tensor rows = at::tensor(stats_.storeRows, at::kLong).index_select(0, beamIdx.to(at::kCPU, at::kLong));
      stats_.storeRows.assign(rows.const_data_ptr<std::int64_t>(), rows.const_data_ptr<std::int64_t>() + rows.numel());
      return;
    }
    const at::Tensor idx = checkBeamIndex(beamIdx, k_.buf.view().size(0), k_.buf.view().device());
    k_.buf.reorderBatch(idx);
    v_.buf.reorderBatch(idx);
    const at::Tensor rows = at::tensor(stats_.storeRows, at::kLong).index_select(0, beamIdx.to(at::kCPU, at::kLong));
    stats_.storeRows.assign(rows.const_data_ptr<std::int64_t>(), rows.const_data_ptr<std::int64_t>() + rows.numel());
  }

  void reset() override {
    const int axisKey = k_.axis, axisValue = v_.axis;
    k_ = Side{};
    v_ = Side{};
    k_.axis = axisKey;
    v_.axis = axisValue;
    initialized_ = false;
    clearStats();
  }

  void crop(std::int64_t n) override {
    if (!initialized_) return;
    const std::int64_t len = seqLength();
    const std::int64_t keep = n < 0 ? std::max<std::int64_t>(len + n, 0) : std::min(n, len);
    if (fused()) {
      if (keep == 0) return reset();
      if (keep >= k_.storeLen) {
        k_.buf.setLength(keep - k_.storeLen);
        v_.buf.setLength(keep - v_.storeLen);
        return;
      }
      // Cutting into the quantized part: the kept prefix is re-quantized from its dequantized values.
      const at::Tensor pk = dequantizedStore(k_).narrow(2, 0, keep).contiguous();
      const at::Tensor pv = dequantizedStore(v_).narrow(2, 0, keep).contiguous();
      QuantizedBlock qk = codec_->quantize(pk, k_.axis);
      QuantizedBlock qv = codec_->quantize(pv, v_.axis);
      recordStore(stats_.keys, qk, pk, keep);
      recordStore(stats_.values, qv, pv, keep);
      installFused(k_, std::move(qk), pk);
      installFused(v_, std::move(qv), pv);
      resetRows(pk.size(0));
      return;
    }
    if (keep >= k_.storeLen) {
      k_.buf.setLength(keep);
      v_.buf.setLength(keep);
      return;
    }
    if (keep == 0) {
      reset();
      return;
    }
    // Cutting into the quantized part: the kept prefix is re-quantized from its dequantized values.
    const at::Tensor pk = k_.buf.view().narrow(2, 0, keep).contiguous();
    const at::Tensor pv = v_.buf.view().narrow(2, 0, keep).contiguous();
    QuantizedBlock qk = codec_->quantize(pk, k_.axis);
    QuantizedBlock qv = codec_->quantize(pv, v_.axis);
    setStore(k_, std::move(qk), pk, keep, stats_.keys);
    setStore(v_, std::move(qv), pv, keep, stats_.values);
    resetRows(pk.size(0));
  }

  std::int64_t seqLength() const override { return fused() ? k_.storeLen + k_.buf.length() : k_.buf.length(); }
  std::int64_t quantizedLength() const override { return k_.storeLen; }
  Backend backend() const override { return backend_; }

  LayerMemory memory() const override {
    LayerMemory m;
    if (fused()) {
      for (auto [mem, s] : {std::pair{&m.keys, &k_}, std::pair{&m.values, &v_}}) {
        if (!s->like.defined()) continue;
        mem->payload = s->store ? s->store->payloadBytes() : 0;
        mem->metadata = s->store ? s->store->metadataBytes() : 0;
        mem->residual = s->buf.bytesUsed();
        mem->reserved = s->buf.bytesReserved();
        mem->unquantized = (s->storeLen + s->buf.length()) * s->bytesPerToken;
      }
      return m;
    }
    for (auto [mem, s] : {std::pair{&m.keys, &k_}, std::pair{&m.values, &v_}}) {
      if (!s->buf.defined()) continue;
      const std::int64_t bpt = s->buf.bytesPerToken();
      mem->payload = s->store ? s->store->payloadBytes() : 0;
      mem->metadata = s->store ? s->store->metadataBytes() : 0;
      mem->residual = (s->buf.length() - s->storeLen) * bpt;
      mem->transient = s->storeLen * bpt;
      mem->reserved = s->buf.bytesReserved();
      mem->unquantized = s->buf.bytesUsed();
    }
    return m;
  }

 private:
  struct Side {
    int axis = 0;
    std::optional<QuantizedBlock> store;
    std::int64_t storeLen = 0;  // tokens in the store; buf holds [dequantized store | residual] (fused: residual)
    SeqBuffer buf;
    at::Tensor like;  // fused: [B, H, 0, D] of the states' layout and dtype
    std::int64_t bytesPerToken = 0;
  };

  // Fused mode: the store read in place, each batch row through storeRows.
  SourcePtr storeSource(const Side& s) const {
    return groupSource(*s.store, backend_ == Backend::Quanto ? IntScheme::Quanto : IntScheme::Hqq, bits_, *codec_,
                       stats_.storeRows);
  }
  static SourcePtr residualSource(const Side& s) { return s.buf.length() > 0 ? fpSource(s.buf.view()) : SourcePtr(); }
  // The store dequantized, batch rows in the order attention reads them (a transient copy).
  at::Tensor dequantizedStore(const Side& s) const {
    at::Tensor d = at::empty(s.store->shape, s.like.options());
    codec_->dequantizeInto(*s.store, d);
    const std::vector<std::int64_t>& rows = stats_.storeRows;
    bool identity = true;
    for (std::size_t i = 0; i < rows.size(); ++i) identity = identity && rows[i] == static_cast<std::int64_t>(i);
    return identity ? d : d.index_select(0, at::tensor(rows, at::kLong).to(d.device()));
  }
  // [store, residual, x] as one contiguous tensor: what a flush re-quantizes.
  at::Tensor history(const Side& s, const at::Tensor& x) const {
    const at::Tensor st = dequantizedStore(s);
    const std::int64_t S = st.size(2), R = s.buf.length(), T = x.size(2);
    at::Tensor out = at::empty({x.size(0), x.size(1), S + R + T, x.size(3)}, x.options());
    out.narrow(2, 0, S).copy_(st);
    if (R > 0) out.narrow(2, S, R).copy_(s.buf.view());
    out.narrow(2, S + R, T).copy_(x);
    return out;
  }

  // Fused mode: installs a freshly quantized store; the residual window starts empty. `like` gives the states'
  // layout and dtype.
  void installFused(Side& s, QuantizedBlock q, const at::Tensor& like) {
    s.like = at::empty({like.size(0), like.size(1), 0, like.size(3)}, like.options());
    s.bytesPerToken = like.size(0) * like.size(1) * like.size(3) * static_cast<std::int64_t>(like.element_size());
    s.buf.clear();
    s.buf.reserve(std::max<std::int64_t>(residualLength_, 1), s.like);
    s.storeLen = q.shape[2];
    s.store = std::move(q);
  }

  // The statistics of a store `q` just quantized from `source` (its S tokens), whose first `before` tokens had been
  // quantized before (a flush, a crop): the error map of tokens [before, S) against the model's states, and the drift
  // map of [0, before), what the re-quantization changed, in a bounded number of ranges.
  void recordStore(TensorStats& st, const QuantizedBlock& q, const at::Tensor& source, std::int64_t before) {
    const std::int64_t S = source.size(2);
    st.quantized = true;
    st.quantizedTokens = S;
    if (!statsOptions_.enabled) return;
    at::Tensor deq = at::empty_like(source);
    codec_->dequantizeInto(q, deq);
    measureStore(st, source, deq, before);
  }
  void measureStore(TensorStats& st, const at::Tensor& source, const at::Tensor& deq, std::int64_t before) {
    const std::int64_t S = source.size(2);
    before = std::clamp<std::int64_t>(before, 0, S);
    recordAmax(st, source);
    recordError(st, source.narrow(2, before, S - before), deq.narrow(2, before, S - before), before);
    st.drift = {};
    if (before > 0) recordDrift(st, source.narrow(2, 0, before), deq.narrow(2, 0, before));
  }

  // [buffer | x] as one contiguous tensor: what transformers' torch.cat returns on a flush step.
  static at::Tensor concat(const Side& s, const at::Tensor& x) {
    const at::Tensor held = s.buf.view();
    at::Tensor out = at::empty({x.size(0), x.size(1), held.size(2) + x.size(2), x.size(3)}, x.options());
    out.narrow(2, 0, held.size(2)).copy_(held);
    out.narrow(2, held.size(2), x.size(2)).copy_(x);
    return out;
  }

  // Installs a freshly quantized store made from `source` and rebuilds the buffer as its dequantized values, with
  // room for the next residual window; its first `before` tokens had been quantized before (recordStore).
  void setStore(Side& s, QuantizedBlock q, const at::Tensor& source, std::int64_t before, TensorStats& st) {
    const std::int64_t S = source.size(2);
    SeqBuffer fresh;
    fresh.reserve(S + std::max<std::int64_t>(residualLength_, 1), source);
    at::Tensor slot = fresh.tail(S, source);
    codec_->dequantizeInto(q, slot);
    fresh.commit(S);
    s.buf = std::move(fresh);
    s.store = std::move(q);
    s.storeLen = S;
    st.quantized = true;
    st.quantizedTokens = S;
    if (statsOptions_.enabled) measureStore(st, source, slot, before);
  }

  void resetRows(std::int64_t batch) {
    stats_.storeRows.resize(static_cast<std::size_t>(batch));
    std::iota(stats_.storeRows.begin(), stats_.storeRows.end(), 0);
  }

  Backend backend_;
  int bits_;
  std::unique_ptr<GroupCodec> codec_;
  std::int64_t residualLength_;
  bool initialized_ = false;
  Side k_, v_;
};

}  // namespace

std::unique_ptr<CacheLayer> makeQuantoLayer(const CacheConfig& cfg, const StatsOptions& stats,
                                            kernels::KernelPath path) {
  return std::make_unique<ResidualQuantizedLayer>(
      Backend::Quanto, makeQuantoCodec(cfg.resolvedNbits(), cfg.resolvedGroupSize(), path), cfg, stats, path);
}

std::unique_ptr<CacheLayer> makeHqqLayer(const CacheConfig& cfg, const StatsOptions& stats, kernels::KernelPath path) {
  return std::make_unique<ResidualQuantizedLayer>(
      Backend::Hqq, makeHqqCodec(cfg.resolvedNbits(), cfg.resolvedGroupSize(), cfg.hqqOptimize, path), cfg, stats,
      path);
}

}  // namespace kvscope::cache::detail
