// What a run's cache did, for the views: every layer's token x channel error history (error_history.h) and the
// latest per-head error of its keys and values, recorded from the cache's statistics after each step. generate()
// brings those statistics to the host in the step's one copy (KvCache::collectStats), so recording reads host memory
// only: on a device, observing the cache adds no copy to a step. The GUI's engine records with one; anything else
// that shows a run's history can too.
#pragma once

#include <array>
#include <vector>

#include "cache/error_history.h"

namespace kvscope::cache {

class KvCache;

class CacheRecorder {
 public:
  enum Side { Keys = 0, Values = 1 };
  /// Adds what every layer's latest update quantized.
  void record(const KvCache& kv);
  /// Adds what layer `layer`'s latest update quantized (a prefill chunk: GenerateOptions::onPrefillChunk).
  void recordLayer(const KvCache& kv, int layer);
  /// Forgets everything (a new run).
  void reset();
  int layers() const { return static_cast<int>(history_.size()); }
  /// Throws std::out_of_range for a layer that was never recorded.
  const ErrorHistory& history(int layer, Side side) const { return history_.at(static_cast<std::size_t>(layer))[side]; }
  /// ||x̂ - x|| / ||x|| per head of the latest update that quantized this side (empty before any).
  const std::vector<float>& headError(int layer, Side side) const {
    return headErrors_.at(static_cast<std::size_t>(layer))[side];
  }

 private:
  std::vector<std::array<ErrorHistory, 2>> history_;
  std::vector<std::array<std::vector<float>, 2>> headErrors_;
};

}  // namespace kvscope::cache
