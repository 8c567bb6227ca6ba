// `sink=N` for the quantizing backends: the first N tokens of the sequence (attention sinks: the first token draws a
// large share of attention and some models collapse when it is quantized, transformers #35185) stay in full
// precision; the backend's layer sees only the tokens after them, as if the sequence started at token N. So its first
// update (the prompt minus the sinks) is what fp8 calibrates its scale on and what quanto/hqq/kivi quantize first.
//
// What attention reads is [sinks | the inner layer's states], one copy per update (the inner layer keeps its own
// buffers). With sink=0 no wrapper is built: the backend alone, bit for bit.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include "cache/detail/attention_sources.h"
#include "cache/detail/layers.h"
#include "cache/detail/seq_buffer.h"

namespace kvscope::cache::detail {
namespace {

class SinkLayer final : public CacheLayer {
 public:
  SinkLayer(std::int64_t sinks, std::unique_ptr<CacheLayer> inner, const StatsOptions& s)
      : CacheLayer(s, inner->attentionMode(), inner->kernelPath()), sinks_(sinks), inner_(std::move(inner)) {}

  std::pair<at::Tensor, at::Tensor> updateReference(const at::Tensor& k, const at::Tensor& v) override {
    const std::int64_t toSink = check(k, v);
    std::pair<at::Tensor, at::Tensor> inner;
    const std::int64_t T = k.size(2);
    if (toSink < T) {
      // The inner layer may throw (a group size that does not fit): nothing is stored before it has accepted.
      inner = updateInner(*inner_, k.narrow(2, toSink, T - toSink), v.narrow(2, toSink, T - toSink));
    }
    storeSinks(k, v, toSink);
    if (!inner.first.defined()) return {k_.view(), v_.view()};
    return {at::cat({k_.view(), inner.first}, 2), at::cat({v_.view(), inner.second}, 2)};
  }

  Staged stage(const at::Tensor& k, const at::Tensor& v) override {
    if (!fused()) return CacheLayer::stage(k, v);
    const std::int64_t toSink = check(k, v);
    const std::int64_t T = k.size(2);
    Staged inner;
    if (toSink < T) inner = inner_->stage(k.narrow(2, toSink, T - toSink), v.narrow(2, toSink, T - toSink));
    storeSinks(k, v, toSink);
    Staged st;
    st.finish = inner.finish;
    if (!inner.keys && !inner.denseKeys.defined()) {  // everything so far is a sink token
      st.denseKeys = k_.view();
      st.denseValues = v_.view();
      st.keys = fpSource(k_.view());
      st.values = fpSource(v_.view());
      return st;
    }
    if (inner.denseKeys.defined()) {  // the inner layer's first update: its inputs, as update() returns them
      st.denseKeys = at::cat({k_.view(), inner.denseKeys}, 2);
      st.denseValues = at::cat({v_.view(), inner.denseValues}, 2);
    }
    if (inner.keys) {
      st.keys = concat({k_.length() > 0 ? fpSource(k_.view()) : SourcePtr(), inner.keys});
      st.values = concat({v_.length() > 0 ? fpSource(v_.view()) : SourcePtr(), inner.values});
    }
    return st;
  }

  void reorder(const at::Tensor& beamIdx) override {
    if (!k_.defined()) return;
    const at::Tensor idx = checkBeamIndex(beamIdx, k_.view().size(0), k_.view().device());
    k_.reorderBatch(idx);
    v_.reorderBatch(idx);
    inner_->reorder(beamIdx);
  }

  void reset() override {
    k_.clear();
    v_.clear();
    inner_->reset();
    clearStats();
    updates_ = 0;
    innerUpdated_ = false;
  }

  void crop(std::int64_t n) override {
    const std::int64_t len = seqLength();
    const std::int64_t keep = n < 0 ? std::max<std::int64_t>(len + n, 0) : std::min(n, len);
    if (keep <= k_.length()) {
      inner_->reset();
      k_.setLength(keep);
      v_.setLength(keep);
    } else {
      inner_->crop(keep - k_.length());
    }
  }

  std::int64_t seqLength() const override { return k_.length() + inner_->seqLength(); }
  std::int64_t quantizedLength() const override { return inner_->quantizedLength(); }
  bool readsWhatItStores() const override { return inner_->readsWhatItStores(); }
  Backend backend() const override { return inner_->backend(); }
  at::Tensor roundQueries(const at::Tensor& q) const override { return inner_->roundQueries(q); }
  void setInterleavedRopePairs(bool on) override { inner_->setInterleavedRopePairs(on); }

  LayerMemory memory() const override {
    LayerMemory m = inner_->memory();
    for (auto [mem, s] : {std::pair{&m.keys, &k_}, std::pair{&m.values, &v_}}) {
      mem->residual += s->bytesUsed();
      mem->unquantized += s->bytesUsed();
      mem->reserved += s->bytesReserved();
    }
    return m;
  }

 private:
  // Checks that the states continue the stored ones; returns how many of them are sink tokens.
  std::int64_t check(const at::Tensor& k, const at::Tensor& v) const {
    if (k_.defined()) {
      checkSameLayout(k, k_.view(), "sink keys");
      checkSameLayout(v, v_.view(), "sink values");
    }
    return std::min(k.size(2), sinks_ - k_.length());
  }

  void storeSinks(const at::Tensor& k, const at::Tensor& v, std::int64_t toSink) {
    if (toSink > 0) {
      k_.append(k.narrow(2, 0, toSink));
      v_.append(v.narrow(2, 0, toSink));
    }
    ++updates_;
    innerUpdated_ = toSink < k.size(2);
    innerOffset_ = k_.length();
  }

  // The inner layer's statistics as they stand when read (after a fused step's finish too), with positions counted
  // from the start of the sequence; an update of sink tokens alone quantized nothing.
  void refreshStats() const override {
    stats_ = inner_->stats();
    stats_.updates = updates_;
    for (TensorStats* t : {&stats_.keys, &stats_.values}) {
      if (!innerUpdated_) {
        t->quantized = false;
        t->quantizedTokens = 0;
        t->error = {};
        t->drift = {};
      } else {
        for (ErrorMap* m : {&t->error, &t->drift})
          if (!m->empty()) m->tokenStart += innerOffset_;
      }
    }
  }
  void deferredStats(std::vector<DeferredStats*>& out) const override {
    CacheLayer::deferredStats(out);
    inner_->deferredStats(out);
  }

  std::int64_t sinks_;
  std::int64_t updates_ = 0;      // updates of this layer (sink tokens alone count too)
  bool innerUpdated_ = false;     // the latest update reached the inner layer
  std::int64_t innerOffset_ = 0;  // sink tokens before the inner layer's positions then
  std::unique_ptr<CacheLayer> inner_;
  SeqBuffer k_, v_;  // the sink tokens, input dtype
};

}  // namespace

std::unique_ptr<CacheLayer> makeSinkLayer(std::int64_t sinks, std::unique_ptr<CacheLayer> inner,
                                          const StatsOptions& stats) {
  return std::make_unique<SinkLayer>(sinks, std::move(inner), stats);
}

}  // namespace kvscope::cache::detail
