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

// The value of largest magnitude (the first of equals), d = max / -8, codes trunc(x * id + 8.5) clipped to 15:
// gguf.quants' Q4_0. Low nibbles hold values 0..15, high nibbles 16..31.
void quantizeQ4_0(const float* x, std::uint8_t* b) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < 32; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
  const float d = max / -8.0f, id = d == 0.0f ? 0.0f : 1.0f / d;
  putHalf(d, b);
  auto code = [&](float v) { return static_cast<std::uint8_t>(std::min(15.0f, std::trunc(v * id + 8.5f))); };
  for (int i = 0; i < 16; ++i) b[2 + i] = static_cast<std::uint8_t>(code(x[i]) | (code(x[i + 16]) << 4));
}

// d = (max - min) / 15, m = min, codes trunc((x - min) * id + 0.5) in float32, clipped to 15: gguf.quants' Q4_1.
void quantizeQ4_1(const float* x, std::uint8_t* b) {
  float mn = x[0], mx = x[0];
  for (int i = 1; i < 32; ++i) mn = std::min(mn, x[i]), mx = std::max(mx, x[i]);
  const float d = (mx - mn) / 15.0f, id = d == 0.0f ? 0.0f : 1.0f / d;
  putHalf(d, b);
  putHalf(mn, b + 2);
  auto code = [&](float v) {
    const float q = std::trunc((v - mn) * id + 0.5f);
    return static_cast<std::uint8_t>(std::min(15.0f, std::max(0.0f, q)));
  };
  for (int i = 0; i < 16; ++i) b[4 + i] = static_cast<std::uint8_t>(code(x[i]) | (code(x[i + 16]) << 4));
}

}  // namespace

void quantizeRows(std::uint32_t type, const float* src, std::int64_t n, std::uint8_t* dst) {
  const BlockLayout L = blockLayout(type);
  void (*f)(const float*, std::uint8_t*) = nullptr;
  switch (static_cast<BlockType>(type)) {
    case BlockType::Q8_0: f = quantizeQ8_0; break;
    case BlockType::Q4_0: f = quantizeQ4_0; break;
    case BlockType::Q4_1: f = quantizeQ4_1; break;
    default: throw std::invalid_argument("quantizeRows: kvscope writes Q8_0, Q4_0 and Q4_1 only");
  }
  if (n % L.values != 0) throw std::invalid_argument("quantizeRows: not whole blocks of 32");
  for (std::int64_t i = 0; i < n / L.values; ++i) f(src + i * L.values, dst + i * L.bytes);
}

}  // namespace kvscope::kernels
