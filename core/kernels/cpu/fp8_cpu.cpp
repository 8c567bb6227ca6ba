#include "kernels/cpu/fp8_cpu.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "kernels/cpu/simd.h"

namespace kvscope::kernels {
namespace {

constexpr std::int64_t kChunk = 1024;

// Fills rep with the scale repeated over as many whole periods as fit in kChunk and in n; returns the chunk length
// (just `period` when no repetition is worth it).
inline std::int64_t repeatScale(const float* scale, std::int64_t period, std::int64_t n, float* rep) {
  const std::int64_t periods = std::min(n, kChunk) / period;
  if (periods <= 1) return period;
  for (std::int64_t p = 0; p < periods; ++p) std::memcpy(rep + p * period, scale, static_cast<std::size_t>(period) * 4);
  return periods * period;
}

template <class T>
inline float toFloat(T v) {
  return static_cast<float>(v);
}

// Bit patterns of |a| (sign cleared) at the format's edges: the largest finite value, and the largest value whose
// code is still finite (e4m3fn: 464 rounds to 448, anything above is NaN; e5m2: 61440 and up round to inf).
template <Fp8Format F>
constexpr std::uint32_t kMaxBits = F == Fp8Format::E4M3FN ? 0x43E00000u : 0x47600000u;
template <Fp8Format F>
constexpr std::uint32_t kLastFiniteBits = F == Fp8Format::E4M3FN ? 0x43E80000u : 0x476FFFFFu;

template <class T, Fp8Format F, bool Saturate>
KVS_BODY Fp8Counts encodeLoop(const T* __restrict x, const float* __restrict scale, std::int64_t period, std::int64_t n,
                              std::uint8_t* __restrict out) {
  constexpr float kMax = fp8Max(F);
  Fp8Counts total;
  for (std::int64_t base = 0; base < n; base += period) {
    const T* __restrict xr = x + base;
    std::uint8_t* __restrict orow = out + base;
    // Integer compares on the bit patterns, 32-bit counters and select-only code keep this loop vectorized.
    std::uint32_t overflow = 0, nonFinite = 0;
    for (std::int64_t j = 0; j < period; ++j) {
      float a = toFloat(xr[j]) / scale[j];
      const std::uint32_t mag = floatBits(a) & 0x7FFFFFFFu;
      overflow += static_cast<std::uint32_t>(mag > kMaxBits<F>) & static_cast<std::uint32_t>(mag <= 0x7F800000u);
      if constexpr (Saturate) a = a > kMax ? kMax : (a < -kMax ? -kMax : a);
      nonFinite += static_cast<std::uint32_t>((floatBits(a) & 0x7FFFFFFFu) > kLastFiniteBits<F>);
      orow[j] = F == Fp8Format::E4M3FN ? encodeE4M3FN(a) : encodeE5M2(a);
    }
    total.overflow += overflow;
    total.nonFinite += nonFinite;
  }
  return total;
}

struct Lut {
  std::array<float, 256> e4m3fn{}, e5m2{};
  Lut() {
    for (int i = 0; i < 256; ++i) {
      e4m3fn[i] = decodeE4M3FN(static_cast<std::uint8_t>(i));
      e5m2[i] = decodeE5M2(static_cast<std::uint8_t>(i));
    }
  }
};
const Lut& lut() {
  static const Lut l;
  return l;
}

template <class T>
KVS_BODY void decodeLoop(const std::uint8_t* __restrict q, const float* __restrict scale, std::int64_t period,
                         std::int64_t n, T* __restrict out, const float* __restrict table) {
  float rep[kChunk];
  const std::int64_t chunk = repeatScale(scale, period, n, rep);
  const float* __restrict sc = chunk > period ? rep : scale;
  for (std::int64_t base = 0; base < n; base += chunk) {
    const std::int64_t len = std::min(chunk, n - base);
    for (std::int64_t j = 0; j < len; ++j) out[base + j] = T(table[q[base + j]] * sc[j]);
  }
}

#define KVS_ENC(T, F, S)                                                                                   \
  KVS_BODY Fp8Counts enc_##T##_##F##_##S##Body(const T* x, const float* s, std::int64_t p, std::int64_t n, \
                                               std::uint8_t* o) {                                          \
    return encodeLoop<T, Fp8Format::F, S>(x, s, p, n, o);                                                  \
  }                                                                                                        \
  KVS_MULTIVERSION(Fp8Counts, enc_##T##_##F##_##S,                                                         \
                   (const T* x, const float* s, std::int64_t p, std::int64_t n, std::uint8_t* o), (x, s, p, n, o))
using bf16 = c10::BFloat16;
using f16 = c10::Half;
KVS_ENC(float, E4M3FN, false)
KVS_ENC(float, E4M3FN, true)
KVS_ENC(float, E5M2, false)
KVS_ENC(float, E5M2, true)
KVS_ENC(bf16, E4M3FN, false)
KVS_ENC(bf16, E4M3FN, true)
KVS_ENC(bf16, E5M2, false)
KVS_ENC(bf16, E5M2, true)
KVS_ENC(f16, E4M3FN, false)
KVS_ENC(f16, E4M3FN, true)
KVS_ENC(f16, E5M2, false)
KVS_ENC(f16, E5M2, true)
#undef KVS_ENC

KVS_BODY void dec_floatBody(const std::uint8_t* q, const float* s, std::int64_t p, std::int64_t n, float* o,
                            const float* t) {
  decodeLoop(q, s, p, n, o, t);
}
KVS_MULTIVERSION(void, dec_float,
                 (const std::uint8_t* q, const float* s, std::int64_t p, std::int64_t n, float* o, const float* t),
                 (q, s, p, n, o, t))
KVS_BODY void dec_bf16Body(const std::uint8_t* q, const float* s, std::int64_t p, std::int64_t n, bf16* o,
                           const float* t) {
  decodeLoop(q, s, p, n, o, t);
}
KVS_MULTIVERSION(void, dec_bf16,
                 (const std::uint8_t* q, const float* s, std::int64_t p, std::int64_t n, bf16* o, const float* t),
                 (q, s, p, n, o, t))
KVS_BODY void dec_f16Body(const std::uint8_t* q, const float* s, std::int64_t p, std::int64_t n, f16* o,
                          const float* t) {
  decodeLoop(q, s, p, n, o, t);
}
KVS_MULTIVERSION(void, dec_f16,
                 (const std::uint8_t* q, const float* s, std::int64_t p, std::int64_t n, f16* o, const float* t),
                 (q, s, p, n, o, t))

template <class T>
Fp8Counts dispatchEncode(const T* x, const float* s, std::int64_t p, std::int64_t n, std::uint8_t* o, Fp8Format f,
                         bool sat);
#define KVS_DISPATCH(T)                                                                                    \
  template <>                                                                                              \
  Fp8Counts dispatchEncode<T>(const T* x, const float* s, std::int64_t p, std::int64_t n, std::uint8_t* o, \
                              Fp8Format f, bool sat) {                                                     \
    if (f == Fp8Format::E4M3FN)                                                                            \
      return sat ? enc_##T##_E4M3FN_true(x, s, p, n, o) : enc_##T##_E4M3FN_false(x, s, p, n, o);           \
    return sat ? enc_##T##_E5M2_true(x, s, p, n, o) : enc_##T##_E5M2_false(x, s, p, n, o);                 \
  }
KVS_DISPATCH(float)
KVS_DISPATCH(bf16)
KVS_DISPATCH(f16)
#undef KVS_DISPATCH

}  // namespace

Fp8Counts fp8EncodeRun(ElemType type, const void* x, const float* scale, std::int64_t period, std::int64_t n,
                       std::uint8_t* out, Fp8Format format, bool saturate) {
  switch (type) {
    case ElemType::F32:
      return dispatchEncode(static_cast<const float*>(x), scale, period, n, out, format, saturate);
    case ElemType::BF16:
      return dispatchEncode(static_cast<const bf16*>(x), scale, period, n, out, format, saturate);
    case ElemType::F16:
      return dispatchEncode(static_cast<const f16*>(x), scale, period, n, out, format, saturate);
  }
  return {};
}

void fp8DecodeRun(ElemType type, const std::uint8_t* q, const float* scale, std::int64_t period, std::int64_t n,
                  void* out, Fp8Format format) {
  const float* table = format == Fp8Format::E4M3FN ? lut().e4m3fn.data() : lut().e5m2.data();
  switch (type) {
    case ElemType::F32:
      dec_float(q, scale, period, n, static_cast<float*>(out), table);
      break;
    case ElemType::BF16:
      dec_bf16(q, scale, period, n, static_cast<bf16*>(out), table);
      break;
    case ElemType::F16:
      dec_f16(q, scale, period, n, static_cast<f16*>(out), table);
      break;
  }
}

}  // namespace kvscope::kernels
