// `dynamic`: the full-precision baseline (transformers' DynamicLayer), with amortized O(1) appends.
#include <ATen/ATen.h>

#include "cache/detail/error_stats.h"
#include "cache/detail/layers.h"
#include "cache/detail/seq_buffer.h"

namespace kvscope::cache::detail {
namespace {

class DynamicLayer final : public CacheLayer {
 public:
  DynamicLayer(const CacheConfig& cfg, const StatsOptions& s, kernels::KernelPath path)
      : CacheLayer(s, cfg.attention, path) {}

  std::pair<at::Tensor, at::Tensor> updateReference(const at::Tensor& k, const at::Tensor& v) override {
    if (k_.defined()) {
      checkSameLayout(k, k_.view(), "dynamic keys");
      checkSameLayout(v, v_.view(), "dynamic values");
    }
    k_.append(k);
    v_.append(v);
    beginUpdate();
    if (statsOptions_.enabled) {
      recordAmax(stats_.keys, k);
      recordAmax(stats_.values, v);
    }
    return {k_.view(), v_.view()};
  }

  void reorder(const at::Tensor& beamIdx) override {
    if (!k_.defined()) return;
    const at::Tensor idx = checkBeamIndex(beamIdx, k_.view().size(0), k_.view().device());
    k_.reorderBatch(idx);
    v_.reorderBatch(idx);
  }

  void reset() override {
    k_.clear();
    v_.clear();
    clearStats();
  }

  void crop(std::int64_t n) override {
    const std::int64_t len = seqLength();
    const std::int64_t keep = n < 0 ? std::max<std::int64_t>(len + n, 0) : std::min(n, len);
    k_.setLength(keep);
    v_.setLength(keep);
  }

  std::int64_t seqLength() const override { return k_.length(); }
  std::int64_t quantizedLength() const override { return 0; }
  bool canDropOldest() const override { return true; }
  void dropOldest(std::int64_t n) override {
    k_.dropFront(n);
    v_.dropFront(n);
  }
  Backend backend() const override { return Backend::Dynamic; }

  LayerMemory memory() const override {
    LayerMemory m;
    for (auto [mem, buf] : {std::pair{&m.keys, &k_}, std::pair{&m.values, &v_}}) {
      mem->payload = buf->bytesUsed();
      mem->reserved = buf->bytesReserved();
      mem->unquantized = buf->bytesUsed();
    }
    return m;
  }

 private:
  SeqBuffer k_, v_;
};

}  // namespace

std::unique_ptr<CacheLayer> makeDynamicLayer(const CacheConfig& cfg, const StatsOptions& stats,
                                             kernels::KernelPath path) {
  return std::make_unique<DynamicLayer>(cfg, stats, path);
}

}  // namespace kvscope::cache::detail
