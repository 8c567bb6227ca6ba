#include "kernels/cpu/mxfp4_matmul.h"

#include "kernels/cpu/blocks.h"
#include "kernels/cpu/simd.h"

namespace kvscope::kernels {

#if KVS_HAVE_AVX2_PATHS
namespace {

constexpr std::int64_t kBlockBytes = 17;  // the E8M0 byte, then 16 bytes of two nibbles

// e8m0Half of every byte: one load where the decode is a few dependent integer steps.
struct HalfScales {
  float v[256];
  HalfScales() {
    for (int e = 0; e < 256; ++e) v[e] = e8m0Half(static_cast<std::uint8_t>(e));
  }
};
const HalfScales kHalf;

// The doubled E2M1 values (kMxfp4Values) as a vpshufb table.
KVS_AVX2 inline __m128i valueTable() {
  return _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
}

// A block's 32 signed values in order (low nibbles are values 0..15, high nibbles 16..31).
KVS_AVX2 inline __m256i values32(const std::uint8_t* b) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 1));
  const __m128i lo = _mm_set1_epi8(0x0F);
  const __m256i idx = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), lo), _mm_and_si128(x, lo));
  return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(valueTable()), idx);
}

// One group of row `r` for MT activation rows: sum_l |w_l| * (c_l with w_l's sign), exactly sum_l w_l * c_l (|w| <=
// 12 and |c| <= 127: a pair of products stays within int16), as float lanes times D * d.
template <int MT>
KVS_AVX2 inline void groupAvx2(const std::uint8_t* b, std::int64_t g, const std::int8_t* const* codes,
                               const float* const* scales, __m256* acc) {
  const __m256i s = values32(b);
  const __m256i a = _mm256_abs_epi8(s);
  const float D = kHalf.v[b[0]];
  const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 4
  for (int i = 0; i < MT; ++i) {
    const __m256i c = _mm256_sign_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes[i] + 32 * g)), s);
    const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(a, c), ones);
    acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(D * scales[i][g]), acc[i]);
  }
}

template <int MT>
KVS_AVX2 void rowsAvx2(const BlockMatrix& w, const Q8Rows& x, std::int64_t i0, float* y, std::int64_t ldy,
                       std::int64_t r0, std::int64_t r1) {
  const std::int64_t groups = w.cols / 32;
  const std::int8_t* codes[MT];
  const float* scales[MT];
  for (int i = 0; i < MT; ++i) {
    codes[i] = x.codes.data() + (i0 + i) * w.cols;
    scales[i] = x.scales.data() + (i0 + i) * groups;
  }
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::uint8_t* row = w.data + r * w.rowBytes;
    // Two sums a row, even and odd blocks: one activation row (a decode step) would otherwise wait on each FMA.
    __m256 acc[MT], odd[MT];
    for (int i = 0; i < MT; ++i) acc[i] = odd[i] = _mm256_setzero_ps();
    std::int64_t g = 0;
    for (; g + 2 <= groups; g += 2) {
      groupAvx2<MT>(row + g * kBlockBytes, g, codes, scales, acc);
      groupAvx2<MT>(row + (g + 1) * kBlockBytes, g + 1, codes, scales, odd);
    }
    if (g < groups) groupAvx2<MT>(row + g * kBlockBytes, g, codes, scales, acc);
    for (int i = 0; i < MT; ++i) y[(i0 + i) * ldy + r] = hsum(_mm256_add_ps(acc[i], odd[i]));
  }
}

// AVX-512 VNNI: two blocks a step, one 64-byte vpdpbusd for each activation row (the sign moved onto the activation
// codes by a masked negation), the odd last block with the AVX2 step.
template <int MT>
KVS_VNNI void rowsVnni(const BlockMatrix& w, const Q8Rows& x, std::int64_t i0, float* y, std::int64_t ldy,
                       std::int64_t r0, std::int64_t r1) {
  const std::int64_t groups = w.cols / 32, pairs = groups / 2;
  const std::int8_t* codes[MT];
  const float* scales[MT];
  for (int i = 0; i < MT; ++i) {
    codes[i] = x.codes.data() + (i0 + i) * w.cols;
    scales[i] = x.scales.data() + (i0 + i) * groups;
  }
  const __m512i table = _mm512_broadcast_i32x4(valueTable());
  const __m128i lo = _mm_set1_epi8(0x0F);
  // Lanes 0..7 from element 0 (the first block), lanes 8..15 from element 1.
  const __m512i halves = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::uint8_t* row = w.data + r * w.rowBytes;
    __m512 acc[MT];
    for (int i = 0; i < MT; ++i) acc[i] = _mm512_setzero_ps();
    for (std::int64_t p = 0; p < pairs; ++p) {
      const std::uint8_t* b0 = row + 2 * p * kBlockBytes;
      const std::uint8_t* b1 = b0 + kBlockBytes;
      const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + 1));
      const __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b1 + 1));
      const __m256i first = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x0, 4), lo), _mm_and_si128(x0, lo));
      const __m256i second = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x1, 4), lo), _mm_and_si128(x1, lo));
      const __m512i s = _mm512_shuffle_epi8(table, _mm512_inserti64x4(_mm512_castsi256_si512(first), second, 1));
      const __m512i a = _mm512_abs_epi8(s);
      const __mmask64 negative = _mm512_movepi8_mask(s);
      const __m128 D = _mm_unpacklo_ps(_mm_load_ss(kHalf.v + b0[0]), _mm_load_ss(kHalf.v + b1[0]));
#pragma GCC unroll 4
      for (int i = 0; i < MT; ++i) {
        const __m512i c0 = _mm512_loadu_si512(codes[i] + 64 * p);
        const __m512i c = _mm512_mask_sub_epi8(c0, negative, _mm512_setzero_si512(), c0);
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), a, c);
        // The two blocks' D * d, each over its eight lanes.
        // (loadl_epi64: an unaligned 8-byte load; _mm_load_sd reads through a double*, which must be aligned)
        const __m128 d = _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales[i] + 2 * p)));
        const __m512 scale = _mm512_permutexvar_ps(halves, _mm512_castps128_ps512(_mm_mul_ps(D, d)));
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[i]);
      }
    }
    float tail[MT] = {};
    if (groups % 2 != 0) {
      __m256 last[MT];
      for (int i = 0; i < MT; ++i) last[i] = _mm256_setzero_ps();
      groupAvx2<MT>(row + (groups - 1) * kBlockBytes, groups - 1, codes, scales, last);
      for (int i = 0; i < MT; ++i) tail[i] = hsum(last[i]);
    }
    for (int i = 0; i < MT; ++i) y[(i0 + i) * ldy + r] = _mm512_reduce_add_ps(acc[i]) + tail[i];
  }
}

}  // namespace
#endif

bool mxfp4MatmulQ8(const BlockMatrix& w, const Q8Rows& x, float* y, std::int64_t ldy, std::int64_t r0,
                   std::int64_t r1) {
#if KVS_HAVE_AVX2_PATHS
  if (w.type != static_cast<std::uint32_t>(GgmlType::MXFP4) || !avx2Paths()) return false;
  if (vnniPaths())
    forTiles(x.m, [&](auto mt, std::int64_t i) { rowsVnni<mt()>(w, x, i, y, ldy, r0, r1); });
  else
    forTiles(x.m, [&](auto mt, std::int64_t i) { rowsAvx2<mt()>(w, x, i, y, ldy, r0, r1); });
  return true;
#else
  (void)w, (void)x, (void)y, (void)ldy, (void)r0, (void)r1;
  return false;
#endif
}

}  // namespace kvscope::kernels
