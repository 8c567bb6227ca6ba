#include "kernels/cpu/int_cpu.h"

#include <c10/util/Half.h>

#include <cstring>

#include "kernels/cpu/bitpack.h"

namespace kvscope::kernels {
namespace {

inline float load(IntElem t, const void* x, std::int64_t i) {
  switch (t) {
    case IntElem::F32:
      return static_cast<const float*>(x)[i];
    case IntElem::BF16:
      return bitsFloat(static_cast<std::uint32_t>(static_cast<const std::uint16_t*>(x)[i]) << 16);
    case IntElem::F16:
      return static_cast<float>(static_cast<const c10::Half*>(x)[i]);
  }
  return 0.0f;
}

inline void store(IntElem t, void* out, std::int64_t i, float v) {  // v is already a T value
  switch (t) {
    case IntElem::F32:
      static_cast<float*>(out)[i] = v;
      break;
    case IntElem::BF16:
      static_cast<std::uint16_t*>(out)[i] = static_cast<std::uint16_t>(floatBits(v) >> 16);
      break;
    case IntElem::F16:
      static_cast<c10::Half*>(out)[i] = c10::Half(v);
      break;
  }
}

}  // namespace

void groupMinMaxCpu(IntElem t, const void* x, std::int64_t R, std::int64_t C, int dim, float* mn, float* mx) {
  const std::int64_t groups = dim == 1 ? R : C;
  for (std::int64_t g = 0; g < groups; ++g) mn[g] = INFINITY, mx[g] = -INFINITY;
  for (std::int64_t i = 0; i < R * C; ++i) {
    const std::int64_t g = groupOf(i, C, dim);
    const float v = load(t, x, i);
    if (v != v || mn[g] != mn[g]) {
      mn[g] = mx[g] = NAN;
      continue;
    }
    mn[g] = v < mn[g] ? v : mn[g];
    mx[g] = v > mx[g] ? v : mx[g];
  }
}

void quantizePackCpu(IntElem t, const void* x, std::int64_t R, std::int64_t C, int dim, const float* scale,
                     const float* zero, IntScheme s, int bits, std::uint8_t* out) {
  const std::int64_t n = R * C, chunks = (n + 7) / 8, bytes = packedBytes(n, bits);
  for (std::int64_t k = 0; k < chunks; ++k) {
    std::uint8_t c[8] = {};
    for (int j = 0; j < 8 && k * 8 + j < n; ++j) {
      const std::int64_t i = k * 8 + j, g = groupOf(i, C, dim);
      c[j] = quantizeOne(load(t, x, i), scale[g], zero[g], bits, s, t);
    }
    const std::uint64_t w = packEight(c, bits);
    const std::int64_t take = k * bits + bits <= bytes ? bits : bytes - k * bits;
    for (std::int64_t b = 0; b < take; ++b) out[k * bits + b] = static_cast<std::uint8_t>(w >> (8 * b));
  }
}

void unpackDequantizeCpu(const std::uint8_t* packed, std::int64_t R, std::int64_t C, int dim, const float* scale,
                         const float* zero, IntScheme s, int bits, IntElem t, void* out) {
  const std::int64_t n = R * C, chunks = (n + 7) / 8, bytes = packedBytes(n, bits);
  for (std::int64_t k = 0; k < chunks; ++k) {
    std::uint64_t w = 0;
    const std::int64_t take = k * bits + bits <= bytes ? bits : bytes - k * bits;
    for (std::int64_t b = 0; b < take; ++b) w |= static_cast<std::uint64_t>(packed[k * bits + b]) << (8 * b);
    std::uint8_t c[8];
    unpackEight(w, bits, c);
    for (int j = 0; j < 8 && k * 8 + j < n; ++j) {
      const std::int64_t i = k * 8 + j, g = groupOf(i, C, dim);
      store(t, out, i, dequantizeOne(c[j], scale[g], zero[g], s, t));
    }
  }
}

}  // namespace kvscope::kernels
