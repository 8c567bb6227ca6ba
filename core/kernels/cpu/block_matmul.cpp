#include "kernels/cpu/block_matmul.h"

#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/blocks.h"
#include "kernels/cpu/mxfp4_matmul.h"
#include "kernels/cpu/simd.h"

namespace kvscope::kernels {

namespace {

// ---- portable twin ------------------------------------------------------------------------------------------------

void densePortable(const BlockMatrix& w, const float* x, std::int64_t m, std::int64_t ldx, float* y, std::int64_t ldy,
                   std::int64_t r0, std::int64_t r1) {
  std::vector<float> row(static_cast<std::size_t>(w.cols));
  for (std::int64_t r = r0; r < r1; ++r) {
    dequantize(w.type, w.data + r * w.rowBytes, w.cols, row.data());
    for (std::int64_t i = 0; i < m; ++i) {
      const float* xr = x + i * ldx;
      float s = 0;
      for (std::int64_t k = 0; k < w.cols; ++k) s += row[static_cast<std::size_t>(k)] * xr[k];
      y[i * ldy + r] = s;
    }
  }
}

void blocksPortable(const BlockMatrix& w, const float* x, std::int64_t m, std::int64_t ldx, const float* xs, float* y,
                    std::int64_t ldy, std::int64_t r0, std::int64_t r1) {
  const BlockLayout L = blockLayout(w.type);
  const auto t = static_cast<GgmlType>(w.type);
  const std::int64_t groups = w.cols / 32, perBlock = L.values / 32, ldxs = w.cols / 16;
  std::vector<float> acc(static_cast<std::size_t>(m));
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::uint8_t* row = w.data + r * w.rowBytes;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (std::int64_t gi = 0; gi < groups; ++gi) {
      std::uint8_t q[32];
      float D[2], M[2];
      unpackGroup(t, row + (gi / perBlock) * L.bytes, static_cast<int>(gi % perBlock), q, D, M);
      for (std::int64_t i = 0; i < m; ++i) {
        const float* xr = x + i * ldx + gi * 32;
        float s0 = 0, s1 = 0;
        for (int l = 0; l < 16; ++l) {
          s0 += static_cast<float>(q[l]) * xr[l];
          s1 += static_cast<float>(q[l + 16]) * xr[l + 16];
        }
        const float* s = xs + i * ldxs + 2 * gi;
        acc[static_cast<std::size_t>(i)] += D[0] * s0 + D[1] * s1 + M[0] * s[0] + M[1] * s[1];
      }
    }
    for (std::int64_t i = 0; i < m; ++i) y[i * ldy + r] = acc[static_cast<std::size_t>(i)];
  }
}

#if KVS_HAVE_AVX2_PATHS
// ---- AVX2 + FMA + F16C (and AVX-512 below)
// --------------------------------------------------------------------------------------------

// A dense row's last cols - body values (fewer than one vector) added to each activation row's vector sum, stored.
void finishDenseRow(const BlockMatrix& w, const std::uint8_t* row, std::int64_t body, const float* x, std::int64_t ldx,
                    int m, const float* sums, float* y, std::int64_t ldy) {
  const std::int64_t es = blockLayout(w.type).bytes;
  float tail[16];
  if (body < w.cols) dequantize(w.type, row + body * es, w.cols - body, tail);
  for (int i = 0; i < m; ++i) {
    float s = sums[i];
    for (std::int64_t k = body; k < w.cols; ++k) s += tail[k - body] * x[i * ldx + k];
    y[i * ldy] = s;
  }
}

KVS_AVX2 inline float halfAt(const std::uint8_t* p) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// 16 packed bytes -> 32 nibbles in value order (low nibbles are values 0..15, high nibbles 16..31).
KVS_AVX2 inline __m256i nibbles16(const std::uint8_t* p) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i lo = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), lo), _mm_and_si128(x, lo));
}

// Bit j of qh -> 0x10 in byte j (Q5_0 / Q5_1's fifth bits).
KVS_AVX2 inline __m256i fifthBits(std::uint32_t qh) {
  const __m256i v = _mm256_set1_epi32(static_cast<int>(qh));
  const __m256i pick =
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(v, pick), bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// Group g of one block as 32 unsigned bytes, with D and M of its two halves (blocks.h's affine view).
template <GgmlType T>
KVS_AVX2 inline __m256i group(const std::uint8_t* b, int g, float D[2], float M[2]) {
  if constexpr (T == GgmlType::Q4_0 || T == GgmlType::Q4_1) {
    D[0] = D[1] = halfAt(b);
    M[0] = M[1] = T == GgmlType::Q4_0 ? -8.0f * D[0] : halfAt(b + 2);
    return nibbles16(b + (T == GgmlType::Q4_0 ? 2 : 4));
  } else if constexpr (T == GgmlType::Q5_0 || T == GgmlType::Q5_1) {
    constexpr bool one = T == GgmlType::Q5_1;
    std::uint32_t qh;
    std::memcpy(&qh, b + (one ? 4 : 2), 4);
    D[0] = D[1] = halfAt(b);
    M[0] = M[1] = one ? halfAt(b + 2) : -16.0f * D[0];
    return _mm256_or_si256(nibbles16(b + (one ? 8 : 6)), fifthBits(qh));
  } else if constexpr (T == GgmlType::Q8_0) {
    D[0] = D[1] = halfAt(b);
    M[0] = M[1] = -128.0f * D[0];
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)), _mm256_set1_epi8(-128));
  } else if constexpr (T == GgmlType::MXFP4) {  // kMxfp4Values + 12 by a table lookup in each 128-bit lane
    D[0] = D[1] = e8m0Half(b[0]);
    M[0] = M[1] = -12.0f * D[0];
    const __m256i lut = _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0, 12, 13, 14, 15, 16,
                                         18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
    return _mm256_shuffle_epi8(lut, nibbles16(b + 1));
  } else if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) {
    constexpr bool five = T == GgmlType::Q5_K;
    int sc, mn;
    scaleMinK4(g, b + 4, sc, mn);
    D[0] = D[1] = halfAt(b) * static_cast<float>(sc);
    M[0] = M[1] = -(halfAt(b + 2) * static_cast<float>(mn));
    const __m256i x =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + (five ? 48 : 16) + 32 * std::ptrdiff_t{g / 2}));
    const __m256i lo = _mm256_set1_epi8(0x0F);
    __m256i q = g % 2 ? _mm256_and_si256(_mm256_srli_epi16(x, 4), lo) : _mm256_and_si256(x, lo);
    if constexpr (five) {
      const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << g));
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
      q = _mm256_or_si256(q,
                          _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, bit), bit), _mm256_set1_epi8(0x10)));
    }
    return q;
  } else {  // Q6_K
    const int n = g / 4, k = g % 4;
    const __m256i ql =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + std::ptrdiff_t{64} * n + (k & 1 ? 32 : 0)));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + std::ptrdiff_t{32} * n));
    const __m256i lo = _mm256_set1_epi8(0x0F);
    const __m256i low = k >= 2 ? _mm256_and_si256(_mm256_srli_epi16(ql, 4), lo) : _mm256_and_si256(ql, lo);
    const __m256i high = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k)), _mm256_set1_epi8(3));
    const auto* sc = reinterpret_cast<const std::int8_t*>(b + 192) + std::ptrdiff_t{8} * n + std::ptrdiff_t{2} * k;
    const float d = halfAt(b + 208);
    for (int h = 0; h < 2; ++h) {
      D[h] = d * static_cast<float>(sc[h]);
      M[h] = -32.0f * D[h];
    }
    return _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
  }
}

// MT activation rows at once: each weight group is widened to float once and used MT times.
template <GgmlType T, int MT>
KVS_AVX2 void blocksAvx2(const BlockMatrix& w, const float* x, std::int64_t ldx, const float* xs, float* y,
                         std::int64_t ldy, std::int64_t r0, std::int64_t r1) {
  constexpr BlockLayout L = blockLayout(T);
  constexpr int perBlock = static_cast<int>(L.values / 32);
  constexpr bool twoScales = T == GgmlType::Q6_K;
  const std::int64_t blocks = w.cols / L.values, ldxs = w.cols / 16;
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::uint8_t* row = w.data + r * w.rowBytes;
    __m256 acc[MT];
    float macc[MT];
    for (int i = 0; i < MT; ++i) {
      acc[i] = _mm256_setzero_ps();
      macc[i] = 0.0f;
    }
    for (std::int64_t bi = 0; bi < blocks; ++bi) {
      const std::uint8_t* b = row + bi * L.bytes;
      for (int g = 0; g < perBlock; ++g) {
        float D[2], M[2];
        const __m256i q = group<T>(b, g, D, M);
        const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
        const __m256 f0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
        const __m256 f1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
        const __m256 f2 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
        const __m256 f3 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
        const std::int64_t col = (bi * perBlock + g) * 32;
#pragma GCC unroll 4
        for (int i = 0; i < MT; ++i) {
          const float* xr = x + i * ldx + col;
          const __m256 p0 = _mm256_fmadd_ps(f1, _mm256_loadu_ps(xr + 8), _mm256_mul_ps(f0, _mm256_loadu_ps(xr)));
          const __m256 p1 = _mm256_fmadd_ps(f3, _mm256_loadu_ps(xr + 24), _mm256_mul_ps(f2, _mm256_loadu_ps(xr + 16)));
          const float* s = xs + i * ldxs + col / 16;
          if constexpr (twoScales) {
            acc[i] = _mm256_fmadd_ps(p1, _mm256_set1_ps(D[1]), _mm256_fmadd_ps(p0, _mm256_set1_ps(D[0]), acc[i]));
            macc[i] += M[0] * s[0] + M[1] * s[1];
          } else {
            acc[i] = _mm256_fmadd_ps(_mm256_add_ps(p0, p1), _mm256_set1_ps(D[0]), acc[i]);
            macc[i] += M[0] * (s[0] + s[1]);
          }
        }
      }
    }
    for (int i = 0; i < MT; ++i) y[i * ldy + r] = hsum(acc[i]) + macc[i];
  }
}

template <GgmlType T>
KVS_AVX2 inline __m256 load8(const std::uint8_t* p) {
  if constexpr (T == GgmlType::F32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  } else if constexpr (T == GgmlType::F16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {  // BF16: the upper half of a float32
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
}

template <GgmlType T, int MT>
KVS_AVX2 void denseAvx2(const BlockMatrix& w, const float* x, std::int64_t ldx, float* y, std::int64_t ldy,
                        std::int64_t r0, std::int64_t r1) {
  constexpr std::int64_t es = T == GgmlType::F32 ? 4 : 2;
  const std::int64_t body = w.cols / 8 * 8;
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::uint8_t* row = w.data + r * w.rowBytes;
    __m256 acc[MT];
    for (int i = 0; i < MT; ++i) acc[i] = _mm256_setzero_ps();
    for (std::int64_t k = 0; k < body; k += 8) {
      const __m256 wv = load8<T>(row + k * es);
      for (int i = 0; i < MT; ++i) acc[i] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i * ldx + k), acc[i]);
    }
    float sums[MT];
    for (int i = 0; i < MT; ++i) sums[i] = hsum(acc[i]);
    finishDenseRow(w, row, body, x, ldx, MT, sums, y + r, ldy);
  }
}

constexpr bool isFloatType(GgmlType T) {
  return T == GgmlType::F32 || T == GgmlType::F16 || T == GgmlType::BF16;
}

template <GgmlType T>
void tilesAvx2(const BlockMatrix& w, const float* x, std::int64_t m, std::int64_t ldx, const float* xs, float* y,
               std::int64_t ldy, std::int64_t r0, std::int64_t r1) {
  const std::int64_t ldxs = w.cols / 16;
  forTiles(m, [&](auto mt, std::int64_t i) {
    if constexpr (isFloatType(T))
      denseAvx2<T, mt()>(w, x + i * ldx, ldx, y + i * ldy, ldy, r0, r1);
    else
      blocksAvx2<T, mt()>(w, x + i * ldx, ldx, xs + i * ldxs, y + i * ldy, ldy, r0, r1);
  });
}

// ---- AVX-512 ------------------------------------------------------------------------------------------------------
// A group's two halves are one 16-lane vector each: widened straight from 16 bytes, and Q8_0 sign-extended (M = 0).

KVS_AVX512 inline __m512 widen(__m128i v) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v));
}
KVS_AVX512 inline __m128i load(const std::uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// 16 six-bit values of Q6_K (group k of a half: low nibbles from ql, two high bits from qh).
KVS_AVX512 inline __m128i six16(const std::uint8_t* ql, const std::uint8_t* qh, int k) {
  __m128i l = load(ql);
  if (k >= 2) l = _mm_srli_epi16(l, 4);
  const __m128i h = _mm_and_si128(_mm_srl_epi16(load(qh), _mm_cvtsi32_si128(2 * k)), _mm_set1_epi8(3));
  return _mm_or_si128(_mm_and_si128(l, _mm_set1_epi8(0x0F)), _mm_slli_epi16(h, 4));
}

template <GgmlType T>
KVS_AVX512 inline void group512(const std::uint8_t* b, int g, float D[2], float M[2], __m512& lo, __m512& hi) {
  const __m128i nib = _mm_set1_epi8(0x0F);
  if constexpr (T == GgmlType::Q8_0) {
    D[0] = D[1] = halfAt(b);
    M[0] = M[1] = 0.0f;
    lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load(b + 2)));
    hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load(b + 18)));
  } else if constexpr (T == GgmlType::MXFP4) {  // the signed values by a table lookup, sign-extended (M = 0)
    D[0] = D[1] = e8m0Half(b[0]);
    M[0] = M[1] = 0.0f;
    const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const __m128i x = load(b + 1);
    lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_shuffle_epi8(lut, _mm_and_si128(x, nib))));
    hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(x, 4), nib))));
  } else if constexpr (T == GgmlType::Q4_0 || T == GgmlType::Q4_1 || T == GgmlType::Q5_0 || T == GgmlType::Q5_1) {
    constexpr bool minimum = T == GgmlType::Q4_1 || T == GgmlType::Q5_1;
    constexpr bool five = T == GgmlType::Q5_0 || T == GgmlType::Q5_1;
    constexpr int qs = (minimum ? 4 : 2) + (five ? 4 : 0);
    D[0] = D[1] = halfAt(b);
    M[0] = M[1] = minimum ? halfAt(b + 2) : (five ? -16.0f : -8.0f) * D[0];
    const __m128i x = load(b + qs);
    __m128i l = _mm_and_si128(x, nib), h = _mm_and_si128(_mm_srli_epi16(x, 4), nib);
    if constexpr (five) {
      std::uint32_t qh;
      std::memcpy(&qh, b + (minimum ? 4 : 2), 4);
      const __m128i bit = _mm_set1_epi8(0x10);
      l = _mm_mask_add_epi8(l, static_cast<__mmask16>(qh & 0xFFFF), l, bit);
      h = _mm_mask_add_epi8(h, static_cast<__mmask16>(qh >> 16), h, bit);
    }
    lo = widen(l);
    hi = widen(h);
  } else if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) {
    constexpr bool five = T == GgmlType::Q5_K;
    int sc, mn;
    scaleMinK4(g, b + 4, sc, mn);
    D[0] = D[1] = halfAt(b) * static_cast<float>(sc);
    M[0] = M[1] = -(halfAt(b + 2) * static_cast<float>(mn));
    const std::uint8_t* q = b + (five ? 48 : 16) + 32 * std::ptrdiff_t{g / 2};
    __m128i l = load(q), h = load(q + 16);
    if (g % 2) {
      l = _mm_srli_epi16(l, 4);
      h = _mm_srli_epi16(h, 4);
    }
    l = _mm_and_si128(l, nib);
    h = _mm_and_si128(h, nib);
    if constexpr (five) {
      const __m128i bit = _mm_set1_epi8(static_cast<char>(1 << g)), add = _mm_set1_epi8(0x10);
      l = _mm_mask_add_epi8(l, _mm_test_epi8_mask(load(b + 16), bit), l, add);
      h = _mm_mask_add_epi8(h, _mm_test_epi8_mask(load(b + 32), bit), h, add);
    }
    lo = widen(l);
    hi = widen(h);
  } else {  // Q6_K
    const int n = g / 4, k = g % 4;
    const std::uint8_t* ql = b + std::ptrdiff_t{64} * n + (k & 1 ? 32 : 0);
    const std::uint8_t* qh = b + 128 + std::ptrdiff_t{32} * n;
    lo = widen(six16(ql, qh, k));
    hi = widen(six16(ql + 16, qh + 16, k));
    const auto* sc = reinterpret_cast<const std::int8_t*>(b + 192) + std::ptrdiff_t{8} * n + std::ptrdiff_t{2} * k;
    const float d = halfAt(b + 208);
    for (int j = 0; j < 2; ++j) {
      D[j] = d * static_cast<float>(sc[j]);
      M[j] = -32.0f * D[j];
    }
  }
}

template <GgmlType T, int MT>
KVS_AVX512 void blocksAvx512(const BlockMatrix& w, const float* x, std::int64_t ldx, const float* xs, float* y,
                             std::int64_t ldy, std::int64_t r0, std::int64_t r1) {
  constexpr BlockLayout L = blockLayout(T);
  constexpr int perBlock = static_cast<int>(L.values / 32);
  constexpr bool twoScales = T == GgmlType::Q6_K, noMin = T == GgmlType::Q8_0 || T == GgmlType::MXFP4;
  const std::int64_t blocks = w.cols / L.values, ldxs = w.cols / 16;
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::uint8_t* row = w.data + r * w.rowBytes;
    __m512 acc[MT];
    float macc[MT];
    for (int i = 0; i < MT; ++i) {
      acc[i] = _mm512_setzero_ps();
      macc[i] = 0.0f;
    }
    for (std::int64_t bi = 0; bi < blocks; ++bi) {
      const std::uint8_t* b = row + bi * L.bytes;
      for (int g = 0; g < perBlock; ++g) {
        float D[2], M[2];
        __m512 lo, hi;
        group512<T>(b, g, D, M, lo, hi);
        const std::int64_t col = (bi * perBlock + g) * 32;
#pragma GCC unroll 4
        for (int i = 0; i < MT; ++i) {
          const float* xr = x + i * ldx + col;
          if constexpr (twoScales) {
            acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(lo, _mm512_loadu_ps(xr)), _mm512_set1_ps(D[0]), acc[i]);
            acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(hi, _mm512_loadu_ps(xr + 16)), _mm512_set1_ps(D[1]), acc[i]);
            const float* s = xs + i * ldxs + col / 16;
            macc[i] += M[0] * s[0] + M[1] * s[1];
          } else {
            const __m512 p = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xr + 16), _mm512_mul_ps(lo, _mm512_loadu_ps(xr)));
            acc[i] = _mm512_fmadd_ps(p, _mm512_set1_ps(D[0]), acc[i]);
            if constexpr (!noMin) {
              const float* s = xs + i * ldxs + col / 16;
              macc[i] += M[0] * (s[0] + s[1]);
            }
          }
        }
      }
    }
    for (int i = 0; i < MT; ++i) y[i * ldy + r] = _mm512_reduce_add_ps(acc[i]) + macc[i];
  }
}

template <GgmlType T, int MT>
KVS_AVX512 void denseAvx512(const BlockMatrix& w, const float* x, std::int64_t ldx, float* y, std::int64_t ldy,
                            std::int64_t r0, std::int64_t r1) {
  constexpr std::int64_t es = T == GgmlType::F32 ? 4 : 2;
  const std::int64_t body = w.cols / 16 * 16;
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::uint8_t* row = w.data + r * w.rowBytes;
    __m512 acc[MT];
    for (int i = 0; i < MT; ++i) acc[i] = _mm512_setzero_ps();
    for (std::int64_t k = 0; k < body; k += 16) {
      __m512 wv;
      if constexpr (T == GgmlType::F32) {
        wv = _mm512_loadu_ps(reinterpret_cast<const float*>(row + k * es));
      } else if constexpr (T == GgmlType::F16) {
        wv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + k * es)));
      } else {
        const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + k * es)));
        wv = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
      }
      for (int i = 0; i < MT; ++i) acc[i] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + i * ldx + k), acc[i]);
    }
    float sums[MT];
    for (int i = 0; i < MT; ++i) sums[i] = _mm512_reduce_add_ps(acc[i]);
    finishDenseRow(w, row, body, x, ldx, MT, sums, y + r, ldy);
  }
}

template <GgmlType T>
void tilesAvx512(const BlockMatrix& w, const float* x, std::int64_t m, std::int64_t ldx, const float* xs, float* y,
                 std::int64_t ldy, std::int64_t r0, std::int64_t r1) {
  const std::int64_t ldxs = w.cols / 16;
  forTiles(m, [&](auto mt, std::int64_t i) {
    if constexpr (isFloatType(T))
      denseAvx512<T, mt()>(w, x + i * ldx, ldx, y + i * ldy, ldy, r0, r1);
    else
      blocksAvx512<T, mt()>(w, x + i * ldx, ldx, xs + i * ldxs, y + i * ldy, ldy, r0, r1);
  });
}

// ---- 8-bit activations ---------------------------------------------------------------------------------------------
// Per group: the 32 weight bytes (group<T>, the affine view) times the 32 activation codes as one integer dot product
// (VNNI's vpdpbusd), scaled by D * d, plus M times the group's code sums. Without VNNI, the AVX2 twin below (maddubs
// and madd), then the portable loop.

template <GgmlType T, int MT>
KVS_VNNI void q8Rows(const BlockMatrix& w, const Q8Rows& x, std::int64_t i0, float* y, std::int64_t ldy,
                     std::int64_t r0, std::int64_t r1) {
  constexpr BlockLayout L = blockLayout(T);
  constexpr int perBlock = static_cast<int>(L.values / 32);
  const std::int64_t blocks = w.cols / L.values, groups = w.cols / 32;
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::uint8_t* row = w.data + r * w.rowBytes;
    __m256 acc[MT];
    float macc[MT];
    for (int i = 0; i < MT; ++i) {
      acc[i] = _mm256_setzero_ps();
      macc[i] = 0.0f;
    }
    for (std::int64_t bi = 0; bi < blocks; ++bi) {
      for (int g = 0; g < perBlock; ++g) {
        float D[2], M[2];
        const __m256i q = group<T>(row + bi * L.bytes, g, D, M);
        const std::int64_t gi = bi * perBlock + g;
#pragma GCC unroll 4
        for (int i = 0; i < MT; ++i) {
          const std::int64_t xr = i0 + i;
          const __m256i c =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.codes.data() + xr * w.cols + gi * 32));
          const float d = x.scales[static_cast<std::size_t>(xr * groups + gi)];
          // Lanes 0..3 hold values 0..15, lanes 4..7 values 16..31.
          const __m256 scale = _mm256_set_m128(_mm_set1_ps(D[1] * d), _mm_set1_ps(D[0] * d));
          const __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, c);
          acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, acc[i]);
          const float* s = x.sums.data() + xr * (w.cols / 16) + 2 * gi;
          macc[i] += M[0] * s[0] + M[1] * s[1];
        }
      }
    }
    for (int i = 0; i < MT; ++i) y[(i0 + i) * ldy + r] = hsum(acc[i]) + macc[i];
  }
}

// The AVX2 twin: vpmaddubsw sums the byte products in pairs into int16 and vpmaddwd those pairs into the same int32
// lanes vpdpbusd fills. A pair cannot saturate where the weight bytes are at most 63 (every type's affine bytes but
// Q8_0's); Q8_0's are its signed codes, multiplied as |q| times the activation code with q's sign (ggml's trick), with
// no offset M.
template <GgmlType T, int MT>
KVS_AVX2 void q8RowsAvx2(const BlockMatrix& w, const Q8Rows& x, std::int64_t i0, float* y, std::int64_t ldy,
                         std::int64_t r0, std::int64_t r1) {
  constexpr BlockLayout L = blockLayout(T);
  constexpr int perBlock = static_cast<int>(L.values / 32);
  constexpr bool q8 = T == GgmlType::Q8_0;
  const std::int64_t blocks = w.cols / L.values, groups = w.cols / 32;
  const __m256i ones = _mm256_set1_epi16(1);
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::uint8_t* row = w.data + r * w.rowBytes;
    __m256 acc[MT];
    float macc[MT];
    for (int i = 0; i < MT; ++i) {
      acc[i] = _mm256_setzero_ps();
      macc[i] = 0.0f;
    }
    for (std::int64_t bi = 0; bi < blocks; ++bi) {
      for (int g = 0; g < perBlock; ++g) {
        float D[2], M[2];
        __m256i q = group<T>(row + bi * L.bytes, g, D, M);
        __m256i sign = q;
        if constexpr (q8) {
          sign = _mm256_xor_si256(q, _mm256_set1_epi8(-128));  // the signed codes
          q = _mm256_sign_epi8(sign, sign);                    // their magnitudes
        }
        const std::int64_t gi = bi * perBlock + g;
#pragma GCC unroll 4
        for (int i = 0; i < MT; ++i) {
          const std::int64_t xr = i0 + i;
          __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.codes.data() + xr * w.cols + gi * 32));
          if constexpr (q8) c = _mm256_sign_epi8(c, sign);
          const float d = x.scales[static_cast<std::size_t>(xr * groups + gi)];
          // Lanes 0..3 hold values 0..15, lanes 4..7 values 16..31.
          const __m256 scale = _mm256_set_m128(_mm_set1_ps(D[1] * d), _mm_set1_ps(D[0] * d));
          const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(q, c), ones);
          acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, acc[i]);
          if constexpr (!q8) {
            const float* s = x.sums.data() + xr * (w.cols / 16) + 2 * gi;
            macc[i] += M[0] * s[0] + M[1] * s[1];
          }
        }
      }
    }
    for (int i = 0; i < MT; ++i) y[(i0 + i) * ldy + r] = hsum(acc[i]) + macc[i];
  }
}

template <GgmlType T>
void tilesQ8(const BlockMatrix& w, const Q8Rows& x, float* y, std::int64_t ldy, std::int64_t r0, std::int64_t r1) {
  if (vnniPaths())
    forTiles(x.m, [&](auto mt, std::int64_t i) { q8Rows<T, mt()>(w, x, i, y, ldy, r0, r1); });
  else
    forTiles(x.m, [&](auto mt, std::int64_t i) { q8RowsAvx2<T, mt()>(w, x, i, y, ldy, r0, r1); });
}

#define KVS_QUANTIZED_TYPES(X) X(Q4_0) X(Q4_1) X(Q5_0) X(Q5_1) X(Q8_0) X(Q4_K) X(Q5_K) X(Q6_K) X(MXFP4)

bool simdMatmul(const BlockMatrix& w, const float* x, std::int64_t m, std::int64_t ldx, const float* xs, float* y,
                std::int64_t ldy, std::int64_t r0, std::int64_t r1) {
  const bool wide = avx512Paths();
  switch (static_cast<GgmlType>(w.type)) {
#define KVS_CASE(T)                                               \
  case GgmlType::T:                                               \
    if (wide)                                                     \
      tilesAvx512<GgmlType::T>(w, x, m, ldx, xs, y, ldy, r0, r1); \
    else                                                          \
      tilesAvx2<GgmlType::T>(w, x, m, ldx, xs, y, ldy, r0, r1);   \
    return true;
    // clang-format off
    KVS_CASE(F32) KVS_CASE(F16) KVS_CASE(BF16) KVS_QUANTIZED_TYPES(KVS_CASE)
#undef KVS_CASE
    default:  // a type without a vector path: the caller's portable loop
      break;
    // clang-format on
  }
  return false;
}

bool simdMatmulQ8(const BlockMatrix& w, const Q8Rows& x, float* y, std::int64_t ldy, std::int64_t r0, std::int64_t r1) {
  switch (static_cast<GgmlType>(w.type)) {
#define KVS_CASE(T)                             \
  case GgmlType::T:                             \
    tilesQ8<GgmlType::T>(w, x, y, ldy, r0, r1); \
    return true;
    KVS_QUANTIZED_TYPES(KVS_CASE)
#undef KVS_CASE
    default:
      break;
  }
  return false;
}
#endif

}  // namespace

#if KVS_HAVE_AVX2_PATHS
namespace {

// quantizeRowsQ8's groups with AVX-512, value for value: the same amax (the maximum skips NaNs as std::max does),
// scale and products, std::round's half away from zero as truncation plus the carry of a remainder of at least 0.5
// (exact below 2^23), and a NaN or out-of-range product as the scalar cast gives it (INT_MIN, clamped to -127).
KVS_AVX512 inline __m512i roundedCodes(__m512 v) {
  const __m512 absMask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(v, t);
  const __mmask16 up = _mm512_cmp_ps_mask(_mm512_and_ps(f, absMask), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  const __m512 one = _mm512_or_ps(_mm512_set1_ps(1.0f), _mm512_andnot_ps(absMask, v));  // copysign(1, v)
  const __m512 r = _mm512_mask_add_ps(t, up, t, one);
  return _mm512_min_epi32(_mm512_max_epi32(_mm512_cvttps_epi32(r), _mm512_set1_epi32(-127)), _mm512_set1_epi32(127));
}

KVS_AVX512 void quantizeRowsQ8Avx512(const float* x, std::int64_t m, std::int64_t ldx, std::int64_t cols, Q8Rows& out) {
  const std::int64_t groups = cols / 32;
  const __m512 absMask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t g = 0; g < groups; ++g) {
      const float* p = x + i * ldx + 32 * g;
      const __m512 a = _mm512_loadu_ps(p), b = _mm512_loadu_ps(p + 16);
      // max_ps(x, y) returns y where x is NaN: the NaN lanes drop out, as in the scalar loop.
      const __m512 mx =
          _mm512_max_ps(_mm512_and_ps(b, absMask), _mm512_max_ps(_mm512_and_ps(a, absMask), _mm512_setzero_ps()));
      const float amax = _mm512_reduce_max_ps(mx);
      const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
      const __m512 idv = _mm512_set1_ps(id);
      const __m512i ca = roundedCodes(_mm512_mul_ps(a, idv)), cb = roundedCodes(_mm512_mul_ps(b, idv));
      std::int8_t* c = out.codes.data() + i * cols + 32 * g;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(c), _mm512_cvtsepi32_epi8(ca));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(c + 16), _mm512_cvtsepi32_epi8(cb));
      const std::size_t at = static_cast<std::size_t>(i * groups + g);
      out.scales[at] = d;
      out.sums[2 * at] = d * static_cast<float>(_mm512_reduce_add_epi32(ca));
      out.sums[2 * at + 1] = d * static_cast<float>(_mm512_reduce_add_epi32(cb));
    }
}

}  // namespace
#endif

void quantizeRowsQ8(const float* x, std::int64_t m, std::int64_t ldx, std::int64_t cols, Q8Rows& out) {
  const std::int64_t groups = cols / 32;
  out.m = m;
  out.cols = cols;
  out.codes.resize(static_cast<std::size_t>(m * cols));
  out.scales.resize(static_cast<std::size_t>(m * groups));
  out.sums.resize(static_cast<std::size_t>(m * groups * 2));
#if KVS_HAVE_AVX2_PATHS
  if (avx512Paths()) {
    quantizeRowsQ8Avx512(x, m, ldx, cols, out);
    return;
  }
#endif
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t g = 0; g < groups; ++g) {
      const float* p = x + i * ldx + 32 * g;
      float amax = 0.0f;
      for (int l = 0; l < 32; ++l) amax = std::max(amax, std::abs(p[l]));
      const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
      std::int8_t* c = out.codes.data() + i * cols + 32 * g;
      int s[2] = {0, 0};
      for (int l = 0; l < 32; ++l) {
        const int q = static_cast<int>(std::round(p[l] * id));
        c[l] = static_cast<std::int8_t>(std::clamp(q, -127, 127));
        s[l / 16] += c[l];
      }
      const std::size_t at = static_cast<std::size_t>(i * groups + g);
      out.scales[at] = d;
      out.sums[2 * at] = d * static_cast<float>(s[0]);
      out.sums[2 * at + 1] = d * static_cast<float>(s[1]);
    }
}

void blockMatmulQ8(const BlockMatrix& w, const Q8Rows& x, float* y, std::int64_t ldy, std::int64_t r0,
                   std::int64_t r1) {
  if (x.m <= 0 || r0 >= r1) return;
#if KVS_HAVE_AVX2_PATHS
  if (mxfp4MatmulQ8(w, x, y, ldy, r0, r1) || (avx2Paths() && simdMatmulQ8(w, x, y, ldy, r0, r1))) return;
#endif
  const BlockLayout L = blockLayout(w.type);
  const auto t = static_cast<GgmlType>(w.type);
  const std::int64_t groups = w.cols / 32, perBlock = L.values / 32;
  std::vector<float> acc(static_cast<std::size_t>(x.m));
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::uint8_t* row = w.data + r * w.rowBytes;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (std::int64_t gi = 0; gi < groups; ++gi) {
      std::uint8_t q[32];
      float D[2], M[2];
      unpackGroup(t, row + (gi / perBlock) * L.bytes, static_cast<int>(gi % perBlock), q, D, M);
      for (std::int64_t i = 0; i < x.m; ++i) {
        const std::int8_t* c = x.codes.data() + i * w.cols + gi * 32;
        int s[2] = {0, 0};
        for (int l = 0; l < 32; ++l) s[l / 16] += q[l] * c[l];
        const std::size_t at = static_cast<std::size_t>(i * groups + gi);
        const float d = x.scales[at];
        acc[static_cast<std::size_t>(i)] += D[0] * d * static_cast<float>(s[0]) + D[1] * d * static_cast<float>(s[1]) +
                                            M[0] * x.sums[2 * at] + M[1] * x.sums[2 * at + 1];
      }
    }
    for (std::int64_t i = 0; i < x.m; ++i) y[i * ldy + r] = acc[static_cast<std::size_t>(i)];
  }
}

bool q8KernelsTakeBatches(std::uint32_t type) {
  return type == static_cast<std::uint32_t>(GgmlType::MXFP4) && avx2Paths();
}

void rowSums16(const float* x, std::int64_t m, std::int64_t ldx, std::int64_t cols, float* out) {
  const std::int64_t n = cols / 16;
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      const float* p = x + i * ldx + 16 * j;
      float s = 0;
      for (int l = 0; l < 16; ++l) s += p[l];
      out[i * n + j] = s;
    }
}

void blockMatmul(const BlockMatrix& w, const float* x, std::int64_t m, std::int64_t ldx, const float* xsum, float* y,
                 std::int64_t ldy, std::int64_t r0, std::int64_t r1) {
  if (m <= 0 || r0 >= r1) return;
#if KVS_HAVE_AVX2_PATHS
  if (avx2Paths() && simdMatmul(w, x, m, ldx, xsum, y, ldy, r0, r1)) return;
#endif
  if (blockLayout(w.type).quantized())
    blocksPortable(w, x, m, ldx, xsum, y, ldy, r0, r1);
  else
    densePortable(w, x, m, ldx, y, ldy, r0, r1);
}

}  // namespace kvscope::kernels
