// Absolute quantization error |x̂ - x| per (token, head, channel) over a whole run (max over the batch), for one
// layer's keys or values, against the states the model produced. Absolute, because a relative error of one value
// explodes where the value is near 0. Each update's error map (stats.h, maxAbs) is written where it quantized:
// - a token quantized for the first time gets that update's error (exact: the map compares with the original states);
// - a quanto/hqq flush re-quantizes the dequantized history: its error map covers the tokens it quantized for the
//   first time, and its drift map (coarser ranges) what it changed in the tokens quantized before; that drift is
//   added to what the token had, which bounds the error against the original states from above (triangle
//   inequality) and equals it when the drift is 0, as it usually is.
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
  /// [tokens][heads][channels] absolute error; NaN where no update has quantized the token (yet).
  const std::vector<float>& values() const { return rel_; }
  float at(std::int64_t token, std::int64_t head, std::int64_t channel) const {
    return rel_[static_cast<std::size_t>((token * heads_ + head) * channels_ + channel)];
  }

  /// Records what the update described by `s` quantized: its error map, and the drift of a flush (nothing when it
  /// quantized nothing). A change of head count or head dim starts the history again; a new sequence in the same
  /// cache needs reset() first.
  void add(const TensorStats& s) {
    if (!s.quantized) return;
    for (const ErrorMap* m : {&s.error, &s.drift}) {
      if (m->empty() || m->tokens <= 0) continue;
      if (m->heads != heads_ || m->channels != channels_) {
        reset();
        heads_ = m->heads;
        channels_ = m->channels;
      }
      add(*m);
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
  // A token's first map sets its error; a later one (a drift) adds to it.
  void add(const ErrorMap& m) {
    const std::int64_t end = m.tokenStart + m.tokens;
    if (end > tokens_) {
      rel_.resize(static_cast<std::size_t>(end * heads_ * channels_), std::nanf(""));
      tokens_ = end;
    }
    for (std::int64_t r = 0; r < m.ranges; ++r) {
      const std::int64_t t0 = m.tokenStart + r * m.tokenBin, t1 = std::min(t0 + m.tokenBin, end);
      for (std::int64_t t = t0; t < t1; ++t)
        for (std::int64_t h = 0; h < heads_; ++h) {
          const float* src = &m.maxAbs[static_cast<std::size_t>((h * m.ranges + r) * channels_)];
          float* dst = &rel_[static_cast<std::size_t>((t * heads_ + h) * channels_)];
          for (std::int64_t c = 0; c < channels_; ++c) dst[c] = std::isnan(dst[c]) ? src[c] : dst[c] + src[c];
        }
    }
  }

  std::int64_t tokens_ = 0, heads_ = 0, channels_ = 0;
  std::vector<float> rel_;
};

}  // namespace kvscope::cache
