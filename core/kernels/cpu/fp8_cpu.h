// Bulk FP8 encode/decode on the CPU: contiguous runs of values, each divided by (encode) or multiplied by (decode)
// a per-channel scale that repeats with a period (the head dimension). No torch here: plain pointers.
#pragma once

#include <cstdint>

#include "kernels/fp8.h"

namespace kvscope::kernels {

enum class ElemType : std::uint8_t { F32, BF16, F16 };

struct Fp8Counts {
  std::int64_t overflow = 0;   ///< |x / scale| > format max (finite inputs)
  std::int64_t nonFinite = 0;  ///< codes written that are NaN (e4m3fn) or inf/NaN (e5m2)
  Fp8Counts& operator+=(const Fp8Counts& o) {
    overflow += o.overflow;
    nonFinite += o.nonFinite;
    return *this;
  }
};

/// out[i] = fp8(x[i] / scale[i % period]) for i < n (n a multiple of period). With `saturate`, x/scale is clamped to
/// +-max first (NaN stays NaN); otherwise PyTorch's cast applies (e4m3fn: NaN from 480 up; e5m2: inf).
Fp8Counts fp8EncodeRun(ElemType type, const void* x, const float* scale, std::int64_t period, std::int64_t n,
                       std::uint8_t* out, Fp8Format format, bool saturate);

/// out[i] = T(decode(q[i]) * scale[i % period]): float32 multiply, then the cast to T that PyTorch does.
void fp8DecodeRun(ElemType type, const std::uint8_t* q, const float* scale, std::int64_t period, std::int64_t n,
                  void* out, Fp8Format format);

}  // namespace kvscope::kernels
