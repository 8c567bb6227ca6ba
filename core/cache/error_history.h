// Quantization error per (token, head, channel) over a whole run, for one layer's keys or values: each update's error
// map (stats.h) is written at the positions it quantized, so a token keeps the error of the latest quantization that
// covered it (a quanto/hqq flush re-quantizes the whole history and overwrites; fp8 writes each token once).
// Torch-free: the GUI's engine keeps one per layer and side and sends the selected layer's to the views.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cache/stats.h"

namespace kvscope::cache {

class ErrorHistory {
 public:
  std::int64_t tokens() const { return tokens_; }
  std::int64_t heads() const { return heads_; }
  std::int64_t channels() const { return channels_; }
  /// [tokens][heads][channels] relative L2 error; NaN where no update has quantized the token (yet).
  const std::vector<float>& values() const { return rel_; }
  float at(std::int64_t token, std::int64_t head, std::int64_t channel) const {
    return rel_[static_cast<std::size_t>((token * heads_ + head) * channels_ + channel)];
  }

  /// Records what the update described by `s` quantized (nothing when it quantized nothing). A change of head count
  /// or head dim starts the history again.
  void add(const TensorStats& s) {
    const ErrorMap& m = s.error;
    if (!s.quantized || m.empty() || s.quantizedTokens <= 0) return;
    if (m.heads != heads_ || m.channels != channels_) {
      reset();
      heads_ = m.heads;
      channels_ = m.channels;
    }
    const std::int64_t end = m.tokenStart + s.quantizedTokens;
    if (end > tokens_) {
      rel_.resize(static_cast<std::size_t>(end * heads_ * channels_), std::nanf(""));
      tokens_ = end;
    }
    for (std::int64_t r = 0; r < m.ranges; ++r) {
      const std::int64_t t0 = m.tokenStart + r * m.tokenBin, t1 = std::min(t0 + m.tokenBin, end);
      for (std::int64_t t = t0; t < t1; ++t)
        for (std::int64_t h = 0; h < heads_; ++h)
          std::copy_n(&m.relL2[static_cast<std::size_t>((h * m.ranges + r) * channels_)], channels_,
                      &rel_[static_cast<std::size_t>((t * heads_ + h) * channels_)]);
    }
  }

  /// Forgets tokens from position n on (a crop, or a new prompt after it).
  void truncate(std::int64_t n) {
    if (n >= tokens_) return;
    tokens_ = std::max<std::int64_t>(n, 0);
    rel_.resize(static_cast<std::size_t>(tokens_ * heads_ * channels_));
  }

  void reset() {
    tokens_ = heads_ = channels_ = 0;
    rel_.clear();
  }

 private:
  std::int64_t tokens_ = 0, heads_ = 0, channels_ = 0;
  std::vector<float> rel_;
};

}  // namespace kvscope::cache
