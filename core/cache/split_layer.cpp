// A layer whose keys and values use different configs (`layers=*:K=fp8:granularity=head,V=quanto:nbits=4`): one
// inner layer per side, each fed the layer's keys and values, of which the keys are read from the keys' layer and
// the values from the values' layer. memory() and stats() report only the side each inner layer serves (what a cache
// of that design stores); this version still computes and holds the other side of each inner layer as well.
#include <ATen/ATen.h>

#include <algorithm>

#include "cache/detail/layers.h"

namespace kvscope::cache::detail {
namespace {

class SplitLayer final : public CacheLayer {
 public:
  SplitLayer(std::unique_ptr<CacheLayer> keys, std::unique_ptr<CacheLayer> values, const StatsOptions& s)
      : CacheLayer(s,
                   keys->attentionMode() == AttentionMode::Fused && values->attentionMode() == AttentionMode::Fused
                       ? AttentionMode::Fused
                       : AttentionMode::Reference,
                   keys->kernelPath()),
        k_(std::move(keys)),
        v_(std::move(values)) {}

  Staged stage(const at::Tensor& k, const at::Tensor& v) override {
    if (!fused()) return CacheLayer::stage(k, v);
    Staged rk = k_->stage(k, v), rv;
    try {
      rv = v_->stage(k, v);
    } catch (...) {
      k_->reset();
      throw;
    }
    Staged st;
    st.keys = rk.keys;
    st.values = rv.values;
    // Dense only when both sides are (otherwise attention reads both through their sources).
    if (rk.denseKeys.defined() && rv.denseValues.defined()) {
      st.denseKeys = rk.denseKeys;
      st.denseValues = rv.denseValues;
    }
    auto fk = rk.finish, fv = rv.finish;
    if (fk || fv)
      st.finish = [fk, fv] {
        if (fk) fk();
        if (fv) fv();
      };
    return st;
  }

  std::pair<at::Tensor, at::Tensor> updateReference(const at::Tensor& k, const at::Tensor& v) override {
    // A failure of the values' layer resets both: sides holding different numbers of tokens would be worse.
    auto rk = updateInner(*k_, k, v);
    std::pair<at::Tensor, at::Tensor> rv;
    try {
      rv = updateInner(*v_, k, v);
    } catch (...) {
      k_->reset();
      throw;
    }
    return {rk.first, rv.second};
  }

  void reorder(const at::Tensor& beamIdx) override {
    k_->reorder(beamIdx);
    v_->reorder(beamIdx);
  }
  void reset() override {
    k_->reset();
    v_->reset();
    clearStats();
  }
  void crop(std::int64_t n) override {
    k_->crop(n);
    v_->crop(n);
  }
  std::int64_t seqLength() const override { return k_->seqLength(); }
  std::int64_t quantizedLength() const override { return std::max(k_->quantizedLength(), v_->quantizedLength()); }
  bool readsWhatItStores() const override { return k_->readsWhatItStores() || v_->readsWhatItStores(); }
  bool canDropOldest() const override { return k_->canDropOldest() && v_->canDropOldest(); }
  void dropOldest(std::int64_t n) override {
    k_->discardOldest(n);
    v_->discardOldest(n);
  }
  at::Tensor roundQueries(const at::Tensor& q) const override { return k_->roundQueries(q); }  // the keys' layer
  void setInterleavedRopePairs(bool on) override {
    k_->setInterleavedRopePairs(on);
    v_->setInterleavedRopePairs(on);
  }
  Backend backend() const override { return k_->backend(); }
  LayerMemory memory() const override { return {k_->memory().keys, v_->memory().values}; }

 private:
  // The inner layers' statistics as they stand when read (after a fused step's finish too), one side from each.
  void refreshStats() const override {
    const LayerStats& ks = k_->stats();
    stats_.updates = ks.updates;
    stats_.keys = ks.keys;
    stats_.values = v_->stats().values;
    stats_.storeRows = ks.storeRows;
  }
  void deferredStats(std::vector<DeferredStats*>& out) const override {
    CacheLayer::deferredStats(out);
    k_->deferredStats(out);
    v_->deferredStats(out);
  }

  std::unique_ptr<CacheLayer> k_, v_;
};

}  // namespace

std::unique_ptr<CacheLayer> makeSplitLayer(std::unique_ptr<CacheLayer> keys, std::unique_ptr<CacheLayer> values,
                                           const StatsOptions& stats) {
  return std::make_unique<SplitLayer>(std::move(keys), std::move(values), stats);
}

}  // namespace kvscope::cache::detail
