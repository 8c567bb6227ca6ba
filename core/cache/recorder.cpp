#include "cache/recorder.h"

#include "cache/kv_cache.h"

namespace kvscope::cache {

void CacheRecorder::record(const KvCache& kv) {
  const auto n = static_cast<std::size_t>(kv.numLayers());
  history_.resize(n);
  headErrors_.resize(n);
  for (std::size_t l = 0; l < n; ++l) {
    const LayerStats& st = kv.layer(static_cast<int>(l)).stats();
    for (auto [side, ts] : {std::pair{Keys, &st.keys}, std::pair{Values, &st.values}}) {
      history_[l][side].add(*ts);
      if (!ts->error.empty()) headErrors_[l][side] = ts->error.headRelL2;
    }
  }
}

void CacheRecorder::reset() {
  history_.clear();
  headErrors_.clear();
}

}  // namespace kvscope::cache
