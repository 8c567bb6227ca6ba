// CacheLayer's statistics: computed on the layer's kernel path, a device's results deferred until they are read.
#include "cache/layer.h"

#include <algorithm>

#include "cache/detail/error_stats.h"

namespace kvscope::cache {

const LayerStats& CacheLayer::stats() const {
  std::vector<detail::DeferredStats*> sets;
  deferredStats(sets);
  detail::settle(sets);
  refreshStats();
  return stats_;
}

void CacheLayer::recordAmax(TensorStats& st, const at::Tensor& x) {
  detail::amaxPerHead(x, path_, st.amaxPerHead, deferred_);
}

void CacheLayer::recordError(TensorStats& st, const at::Tensor& x, const at::Tensor& xq, std::int64_t tokenStart) {
  detail::errorMap(x, xq, dropped_ + tokenStart, statsOptions_.tokenBin, path_, st.error, deferred_);
}

void CacheLayer::recordDrift(TensorStats& st, const at::Tensor& x, const at::Tensor& xq) {
  const std::int64_t T = x.size(2), ranges = std::max<std::int64_t>(statsOptions_.driftRanges, 1);
  const std::int64_t bin = std::max(statsOptions_.tokenBin, (T + ranges - 1) / ranges);
  detail::errorMap(x, xq, dropped_, bin, path_, st.drift, deferred_);
}

void CacheLayer::recordValues(std::vector<float>& out, const at::Tensor& t) {
  detail::valuesOf(t, path_, out, deferred_);
}

}  // namespace kvscope::cache
