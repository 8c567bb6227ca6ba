// Scalar float32 <-> FP8 (e4m3fn, e5m2) conversions, bit-exact with PyTorch's casts (REFERENCE §3).
// Header-only and usable from host and device code, so the CPU and CUDA codecs share one definition.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

#include "cache/fp8_format.h"  // Fp8Format and fp8Max: the config library's, one enum for the cache and the kernels
#include "util/host_device.h"

namespace kvscope::kernels {

using cache::Fp8Format;
using cache::fp8Max;

KVS_HD std::uint32_t floatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

KVS_HD float bitsFloat(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// The encoders are branch-free (every path computed, one selected by masks) so that the CPU loops vectorize; the
// exhaustive test compares them with PyTorch's cast for every float32 bit pattern.

/// float32 -> e4m3fn. |x| >= 480 (with inf and NaN) becomes NaN (0x7F | sign): no saturation, as PyTorch.
/// Normals round to nearest even; |x| < 2^-6 lands on the 2^-9 subnormal grid, also to nearest even.
KVS_HD std::uint8_t encodeE4M3FN(float x) {
  std::uint32_t u = floatBits(x);
  const std::uint32_t sign = u & 0x80000000u;
  u ^= sign;
  // Normal: rebias the exponent and round the 23-bit mantissa to 3 bits, half to even.
  const std::uint32_t normal = (u + (static_cast<std::uint32_t>(7 - 127) << 23) + 0x7FFFFu + ((u >> 20) & 1u)) >> 20;
  // Subnormal (|x| < 2^-6): add 2^14, whose ulp is 2^-9, and let the FPU round to the grid.
  const std::uint32_t sub = floatBits(bitsFloat(u) + 16384.0f) - 0x46800000u;
  const std::uint32_t isSub = 0u - static_cast<std::uint32_t>(u < 0x3C800000u);
  const std::uint32_t isNan = 0u - static_cast<std::uint32_t>(u >= 0x43F00000u);  // 480.0f and up, inf, NaN
  std::uint32_t r = (sub & isSub) | (normal & ~isSub);
  r = (0x7Fu & isNan) | (r & ~isNan);
  return static_cast<std::uint8_t>(r | (sign >> 24));
}

/// float32 -> e5m2. |x| >= 65536 becomes +-inf (0x7C), NaN becomes 0x7F | sign; round to nearest even.
KVS_HD std::uint8_t encodeE5M2(float x) {
  std::uint32_t u = floatBits(x);
  const std::uint32_t sign = u & 0x80000000u;
  u ^= sign;
  const std::uint32_t normal = (u + (static_cast<std::uint32_t>(15 - 127) << 23) + 0xFFFFFu + ((u >> 21) & 1u)) >> 21;
  const std::uint32_t sub = floatBits(bitsFloat(u) + 128.0f) - 0x43000000u;  // 2^7: ulp 2^-16
  const std::uint32_t isSub = 0u - static_cast<std::uint32_t>(u < 0x38800000u);
  const std::uint32_t isBig = 0u - static_cast<std::uint32_t>(u >= 0x47800000u);  // 65536.0f and up, inf, NaN
  const std::uint32_t big = 0x7Cu | (0x3u & (0u - static_cast<std::uint32_t>(u > 0x7F800000u)));
  std::uint32_t r = (sub & isSub) | (normal & ~isSub);
  r = (big & isBig) | (r & ~isBig);
  return static_cast<std::uint8_t>(r | (sign >> 24));
}

KVS_HD float decodeE4M3FN(std::uint8_t b) {
  const std::uint32_t sign = static_cast<std::uint32_t>(b & 0x80u) << 24;
  const std::uint32_t e = (b >> 3) & 0xFu, m = b & 0x7u;
  std::uint32_t u;
  if (e == 15 && m == 7) {
    u = 0x7FC00000u;
  } else if (e == 0) {  // subnormal: m * 2^-9, exact in float32
    return (sign ? -1.0f : 1.0f) * static_cast<float>(m) * (1.0f / 512.0f);
  } else {
    u = ((e + 127 - 7) << 23) | (m << 20);
  }
  return bitsFloat(u | sign);
}

KVS_HD float decodeE5M2(std::uint8_t b) {
  // e5m2 is the upper byte of an IEEE half: widen through the half layout.
  const std::uint32_t sign = static_cast<std::uint32_t>(b & 0x80u) << 24;
  const std::uint32_t e = (b >> 2) & 0x1Fu, m = b & 0x3u;
  std::uint32_t u;
  if (e == 31) {
    u = m == 0 ? 0x7F800000u : 0x7FC00000u;
  } else if (e == 0) {
    return (sign ? -1.0f : 1.0f) * static_cast<float>(m) * (1.0f / 65536.0f);
  } else {
    u = ((e + 127 - 15) << 23) | (m << 21);
  }
  return bitsFloat(u | sign);
}

KVS_HD std::uint8_t encodeFp8(float x, Fp8Format f) {
  return f == Fp8Format::E4M3FN ? encodeE4M3FN(x) : encodeE5M2(x);
}
KVS_HD float decodeFp8(std::uint8_t b, Fp8Format f) {
  return f == Fp8Format::E4M3FN ? decodeE4M3FN(b) : decodeE5M2(b);
}
/// True when the code is not a finite number (e4m3fn: NaN; e5m2: inf or NaN).
KVS_HD bool fp8NonFinite(std::uint8_t b, Fp8Format f) {
  return f == Fp8Format::E4M3FN ? (b & 0x7Fu) == 0x7Fu : (b & 0x7Cu) == 0x7Cu;
}

}  // namespace kvscope::kernels
