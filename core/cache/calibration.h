// FP8 scales calibrated offline on a text: the K/V states of each layer are collected (per tensor, head or channel),
// and a scale = statistic x headroom / format max is taken from their magnitudes (the amax, or a percentile that
// lets the rarest outliers saturate or overflow). Also: how many values a given scale would push past the format.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "cache/config.h"

namespace kvscope::cache {

struct CalibrationOptions {
  Fp8Granularity granularity = Fp8Granularity::Tensor;
  Fp8Format format = Fp8Format::E4M3FN;
  bool percentile = false;         ///< false: amax
  double percentileValue = 99.99;  ///< in (0, 100]
  double headroom = 1.0;
};

class Fp8Calibrator {
 public:
  /// Throws ConfigError for bad options.
  Fp8Calibrator(int layers, const CalibrationOptions& options);
  /// Adds states x [B, H, T, D] of `layer` (keys or values). Throws CacheError when the layout changes.
  void add(int layer, bool keys, const at::Tensor& x);
  /// Per layer: [1], [H] or [H * D] scales. Throws CacheError when a layer saw nothing, unless it reads another
  /// layer's KV (setSources): it takes that layer's scales.
  std::vector<std::vector<float>> scales(bool keys) const;
  /// Per layer: the earlier layer whose KV it reads (Gemma 4's shared layers), or -1.
  void setSources(std::vector<int> sources) { sources_ = std::move(sources); }
  std::int64_t valuesSeen() const { return seen_; }

 private:
  struct Groups {
    std::int64_t H = 0, D = 0;
    std::vector<float> amax;                 // per group
    std::vector<std::vector<float>> values;  // per group, |x| (percentile only)
  };
  CalibrationOptions opt_;
  std::vector<Groups> keys_, values_;
  std::vector<int> sources_;
  std::int64_t seen_ = 0;
};

struct OverflowCount {
  std::int64_t values = 0;     ///< values examined
  std::int64_t beyondMax = 0;  ///< |x / scale| > format max (clipped by a saturating cast)
  std::int64_t nonFinite = 0;  ///< NaN (e4m3fn) or inf (e5m2) after PyTorch's cast, as the seed stores them
};

/// What encoding x [B, H, T, D] with `scale` ([1], [H] or [H * D] per granularity) would give.
OverflowCount countOverflow(const at::Tensor& x, const std::vector<float>& scale, Fp8Granularity granularity,
                            Fp8Format format);
/// The seed's scale for a prompt: max(amax(|x|) / 448, FLT_MIN), per tensor.
float seedScale(const at::Tensor& prompt);

}  // namespace kvscope::cache
