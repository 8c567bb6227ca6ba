#include "cache/recorder.h"

#include "cache/kv_cache.h"

namespace kvscope::cache {

void CacheRecorder::record(const KvCache& kv) {
  for (int l = 0; l < kv.numLayers(); ++l) recordLayer(kv, l);
}

void CacheRecorder::recordLayer(const KvCache& kv, int layer) {
  const auto n = static_cast<std::size_t>(kv.numLayers());
  history_.resize(n);
  headErrors_.resize(n);
  const auto l = static_cast<std::size_t>(layer);
  const LayerStats& st = kv.layer(layer).stats();
  for (auto [side, ts] : {std::pair{Keys, &st.keys}, std::pair{Values, &st.values}}) {
    history_.at(l)[side].add(*ts);
    if (!ts->error.empty()) headErrors_[l][side] = ts->error.headRelL2;
  }
}

void CacheRecorder::reset() {
  history_.clear();
  headErrors_.clear();
}

}  // namespace kvscope::cache
