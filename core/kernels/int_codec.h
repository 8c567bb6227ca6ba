// Group-wise integer quantization (quanto and hqq layouts) as scalar host/device functions, so that the CPU loops
// (kernels/cpu/int_cpu.cpp) and the CUDA kernels (kernels/cuda/int_cuda.cu) share one definition of every rounding.
//
// Layout: the codecs group a contiguous 2-D matrix [R, C] (the states reshaped/permuted as the Python package does);
// `dim` is the dimension a group runs along: dim 1 -> each row is a group (R groups of C values), dim 0 -> each
// column is a group (C groups of R values). Codes are packed in the matrix's row-major order, least significant bits
// first (kernels/cpu/bitpack.h): 8 codes always fill exactly `bits` bytes, the unit both the CPU loops and the
// kernels work in.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/fp8.h"  // KVS_HD, floatBits/bitsFloat
#if !defined(__CUDACC__)
#include <c10/util/Half.h>  // host half conversion, as LibTorch's CPU ops round (no _Float16 in every compiler)
#endif

namespace kvscope::kernels {

enum class IntScheme : std::uint8_t {
  /// optimum-quanto: in the states' dtype T: code = clamp(round(T(T(x + zero) / scale)), 0, 2^b - 1);
  /// value = T(T(scale * code) - zero). scale and zero are T values.
  Quanto,
  /// hqq: in float32: code = clamp(round(x * scale + zero), 0, 2^b - 1) with scale the inverse step; stored scale and
  /// zero are T values: value = T(T(code - zero) * scale).
  Hqq,
};

/// The element type of the states: selects the rounding after each quanto/hqq operation.
enum class IntElem : std::uint8_t { F32, BF16, F16 };

KVS_HD std::int64_t groupOf(std::int64_t i, std::int64_t C, int dim) {
  return dim == 1 ? i / C : i % C;
}

/// Rounds a float32 to the nearest T value (ties to even), returned as float32; NaN stays NaN.
KVS_HD float roundTo(float f, IntElem t) {
  if (t == IntElem::F32) return f;
  if (t == IntElem::BF16) {
    if (f != f) return f;
    std::uint32_t u = floatBits(f);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return bitsFloat(u & 0xFFFF0000u);
  }
#if defined(__CUDACC__)
  return __half2float(__float2half_rn(f));
#else
  return static_cast<float>(c10::Half(f));
#endif
}

KVS_HD float addRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
KVS_HD float mulRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
KVS_HD float divRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

/// The code of x (already a T value, as float) with its group's scale and zero. NaN (a zero-range quanto group: 0/0)
/// gives code 0; such a group's values dequantize to its minimum whatever the code.
KVS_HD std::uint8_t quantizeOne(float x, float scale, float zero, int bits, IntScheme s, IntElem t) {
  float v;
  if (s == IntScheme::Quanto) {
    v = roundTo(divRn(roundTo(addRn(x, zero), t), scale), t);
  } else {
    v = addRn(mulRn(x, scale), zero);
  }
#if defined(__CUDA_ARCH__)
  v = rintf(v);
#else
  v = std::nearbyint(v);
#endif
  const float top = static_cast<float>((1 << bits) - 1);
  if (!(v >= 0.0f)) return 0;  // negative or NaN
  return static_cast<std::uint8_t>(v > top ? top : v);
}

/// The value of a code (scale and zero as stored, T values), as float32 holding a T value.
KVS_HD float dequantizeOne(std::uint8_t code, float scale, float zero, IntScheme s, IntElem t) {
  const float c = static_cast<float>(code);
  if (s == IntScheme::Quanto) return roundTo(addRn(roundTo(mulRn(scale, c), t), -zero), t);
  return roundTo(mulRn(roundTo(addRn(c, -zero), t), scale), t);
}

/// Packs 8 codes into `bits` bytes (LSB first) as one 64-bit word.
KVS_HD std::uint64_t packEight(const std::uint8_t (&c)[8], int bits) {
  std::uint64_t w = 0;
  for (int j = 0; j < 8; ++j) w |= static_cast<std::uint64_t>(c[j]) << (j * bits);
  return w;
}

KVS_HD void unpackEight(std::uint64_t w, int bits, std::uint8_t (&c)[8]) {
  const std::uint64_t mask = (std::uint64_t{1} << bits) - 1u;
  for (int j = 0; j < 8; ++j) c[j] = static_cast<std::uint8_t>((w >> (j * bits)) & mask);
}

}  // namespace kvscope::kernels
