// Quantizers for the formats kvscope writes (model/weight.h: Weight::requantized), in the `gguf` Python package's
// arithmetic (gguf.quants), float32 throughout. Built without contraction into fused multiply-adds (CMake), like
// numpy's separate roundings.
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/cpu/blocks.h"

namespace kvscope::kernels {

namespace {

void putHalf(float v, std::uint8_t* p) {
  const std::uint16_t h = c10::Half(v).x;
  p[0] = static_cast<std::uint8_t>(h & 0xFF);
  p[1] = static_cast<std::uint8_t>(h >> 8);
}

// gguf.quants' np_roundf, in float32: floor(|x|) + floor(2 (|x| - floor(|x|))), with x's sign (halves away from
// zero, and no rounding up of |x| + 0.5 just below a half).
float roundAway(float x) {
  const float a = std::fabs(x), f = std::floor(a);
  return std::copysign(f + std::floor(2.0f * (a - f)), x);
}

void quantizeQ8_0(const float* x, std::uint8_t* b) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f, id = d == 0.0f ? 0.0f : 1.0f / d;
  putHalf(d, b);
  for (int i = 0; i < 32; ++i) b[2 + i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(roundAway(x[i] * id)));
}

// Codes of a 4- or 5-bit block into its bytes: low nibbles hold values 0..15, high nibbles 16..31; a 5-bit code's
// fifth bits go to qh (bit j for value j, little-endian), before the nibbles.
template <int Bits>
void putCodes(const std::uint8_t q[32], std::uint8_t* at) {
  if constexpr (Bits == 5) {
    std::uint32_t qh = 0;
    for (int i = 0; i < 32; ++i) qh |= static_cast<std::uint32_t>(q[i] >> 4) << i;
    for (int k = 0; k < 4; ++k) at[k] = static_cast<std::uint8_t>(qh >> (8 * k));
    at += 4;
  }
  for (int i = 0; i < 16; ++i) at[i] = static_cast<std::uint8_t>((q[i] & 0x0F) | ((q[i + 16] & 0x0F) << 4));
}

// The value of largest magnitude (the first of equals), d = max / -2^(Bits-1), codes trunc(x * id + 2^(Bits-1) + 0.5)
// clipped to 2^Bits - 1: gguf.quants' Q4_0 and Q5_0.
template <int Bits>
void quantizeSymmetric(const float* x, std::uint8_t* b) {
  constexpr float half = Bits == 4 ? 8.0f : 16.0f, top = Bits == 4 ? 15.0f : 31.0f;
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < 32; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
  const float d = max / -half, id = d == 0.0f ? 0.0f : 1.0f / d;
  putHalf(d, b);
  std::uint8_t q[32];
  for (int i = 0; i < 32; ++i) q[i] = static_cast<std::uint8_t>(std::min(top, std::trunc(x[i] * id + (half + 0.5f))));
  putCodes<Bits>(q, b + 2);
}

// d = (max - min) / (2^Bits - 1), m = min, codes trunc((x - min) * id + 0.5) in float32, clipped to 2^Bits - 1:
// gguf.quants' Q4_1 and Q5_1.
template <int Bits>
void quantizeAffine(const float* x, std::uint8_t* b) {
  constexpr float top = Bits == 4 ? 15.0f : 31.0f;
  float mn = x[0], mx = x[0];
  for (int i = 1; i < 32; ++i) mn = std::min(mn, x[i]), mx = std::max(mx, x[i]);
  const float d = (mx - mn) / top, id = d == 0.0f ? 0.0f : 1.0f / d;
  putHalf(d, b);
  putHalf(mn, b + 2);
  std::uint8_t q[32];
  for (int i = 0; i < 32; ++i)
    q[i] = static_cast<std::uint8_t>(std::min(top, std::max(0.0f, std::trunc((x[i] - mn) * id + 0.5f))));
  putCodes<Bits>(q, b + 4);
}

}  // namespace

void quantizeRows(std::uint32_t type, const float* src, std::int64_t n, std::uint8_t* dst) {
  const BlockLayout L = blockLayout(type);
  void (*f)(const float*, std::uint8_t*) = nullptr;
  switch (static_cast<BlockType>(type)) {
    case BlockType::Q8_0: f = quantizeQ8_0; break;
    case BlockType::Q4_0: f = quantizeSymmetric<4>; break;
    case BlockType::Q4_1: f = quantizeAffine<4>; break;
    case BlockType::Q5_0: f = quantizeSymmetric<5>; break;
    case BlockType::Q5_1: f = quantizeAffine<5>; break;
    default: throw std::invalid_argument("quantizeRows: kvscope writes Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 only");
  }
  if (n % L.values != 0) throw std::invalid_argument("quantizeRows: not whole blocks of 32");
  for (std::int64_t i = 0; i < n / L.values; ++i) f(src + i * L.values, dst + i * L.bytes);
}

}  // namespace kvscope::kernels
