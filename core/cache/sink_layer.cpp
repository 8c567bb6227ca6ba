// `sink=N` for the quantizing backends: the first N tokens of the sequence (attention sinks: the first token draws a
// large share of attention and some models collapse when it is quantized, transformers #35185) stay in full
// precision; the backend's layer sees only the tokens after them, as if the sequence started at token N. So its first
// update (the prompt minus the sinks) is what fp8 calibrates its scale on and what quanto/hqq/kivi quantize first.
//
// What attention reads is [sinks | the inner layer's states], one copy per update (the inner layer keeps its own
// buffers). With sink=0 no wrapper is built: the backend alone, bit for bit.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include "cache/detail/layers.h"
#include "cache/detail/seq_buffer.h"

namespace kvscope::cache::detail {
namespace {

class SinkLayer final : public CacheLayer {
 public:
  SinkLayer(std::int64_t sinks, std::unique_ptr<CacheLayer> inner, const StatsOptions& s)
      : CacheLayer(s), sinks_(sinks), inner_(std::move(inner)) {}

  std::pair<at::Tensor, at::Tensor> update(const at::Tensor& k, const at::Tensor& v) override {
    checkStates(k, "sink keys");
    checkStates(v, "sink values");
    checkSameLayout(v, k, "sink values");
    if (k_.defined()) {
      checkSameLayout(k, k_.view(), "sink keys");
      checkSameLayout(v, v_.view(), "sink values");
    }
    const std::int64_t T = k.size(2);
    const std::int64_t toSink = std::min(T, sinks_ - k_.length());
    std::pair<at::Tensor, at::Tensor> inner;
    if (toSink < T) {
      // The inner layer may throw (a group size that does not fit): nothing is stored before it has accepted.
      inner = inner_->update(k.narrow(2, toSink, T - toSink), v.narrow(2, toSink, T - toSink));
    }
    if (toSink > 0) {
      k_.append(k.narrow(2, 0, toSink));
      v_.append(v.narrow(2, 0, toSink));
    }
    copyStats(toSink < T);
    if (!inner.first.defined()) return {k_.view(), v_.view()};
    return {at::cat({k_.view(), inner.first}, 2), at::cat({v_.view(), inner.second}, 2)};
  }

  void reorder(const at::Tensor& beamIdx) override {
    if (!k_.defined()) return;
    const at::Tensor idx = checkBeamIndex(beamIdx, k_.view().size(0), k_.view().device());
    k_.reorderBatch(idx);
    v_.reorderBatch(idx);
    inner_->reorder(beamIdx);
    stats_.storeRows = inner_->stats().storeRows;
  }

  void reset() override {
    k_.clear();
    v_.clear();
    inner_->reset();
    stats_ = {};
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
  Backend backend() const override { return inner_->backend(); }

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
  // The inner layer's statistics, with positions counted from the start of the sequence.
  void copyStats(bool innerUpdated) {
    const std::int64_t updates = stats_.updates + 1;
    if (innerUpdated) {
      stats_ = inner_->stats();
      for (TensorStats* t : {&stats_.keys, &stats_.values})
        if (!t->error.empty()) t->error.tokenStart += k_.length();
    } else {
      for (TensorStats* t : {&stats_.keys, &stats_.values}) {
        t->quantized = false;
        t->quantizedTokens = 0;
        t->error = {};
      }
    }
    stats_.updates = updates;
  }

  std::int64_t sinks_;
  std::unique_ptr<CacheLayer> inner_;
  SeqBuffer k_, v_;  // the sink tokens, input dtype
};

}  // namespace

std::unique_ptr<CacheLayer> makeSinkLayer(std::int64_t sinks, std::unique_ptr<CacheLayer> inner,
                                          const StatsOptions& stats) {
  return std::make_unique<SinkLayer>(sinks, std::move(inner), stats);
}

}  // namespace kvscope::cache::detail
