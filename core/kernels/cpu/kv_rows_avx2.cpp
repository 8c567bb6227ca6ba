// The AVX2 read of stored cache rows (kv_rows_simd.h), the AVX-512 read's twin for CPUs without AVX-512. Eight values
// per vector, the same float32 operations in the same order as the scalar codec (kernels/kv_block_codec.h), built
// without contraction into fused multiply-adds (CMake): bit for bit the scalar read, as the AVX-512 one is.
// - E2M1's and IQ4_NL's values are bfloat16 numbers: sixteen codes at a time look up the two bytes of their upper
//   halves with a byte shuffle. TurboQuant's centroids (any float) are two 8-lane permutes, chosen by the code's bit 3.
// - e4m3 codes go through the half-precision conversion (F16C): the code's exponent and mantissa at fp16's bits 7..13
//   are an fp16 of the value / 2^8, exact (subnormals included), then times 256; NaN codes by mask.
// - The Walsh-Hadamard transform runs its strides 1, 2, 4 inside a vector and the longer ones across vectors.
#include <cstddef>

#include "kernels/cpu/kv_rows_paths.h"
#include "kernels/cpu/simd.h"

#if KVS_HAVE_AVX2_PATHS
namespace kvscope::kernels::kvrows {
namespace {

namespace kvc = kvcodec;

// ---- codes into 32-bit lanes ----

// 16 nibbles of 8 bytes, in the order (low, high) of byte 0, then of byte 1, ..., as 16 bytes.
KVS_AVX2 inline __m128i nibbleBytes16(const std::uint8_t* p) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)), m = _mm_set1_epi8(15);
  return _mm_unpacklo_epi8(_mm_and_si128(b, m), _mm_and_si128(_mm_srli_epi16(b, 4), m));
}
// A 16-entry table of bfloat16 numbers as the high and low bytes of their upper 16 bits.
struct Bf16Table {
  __m128i hi, lo;
};
KVS_AVX2 inline Bf16Table bf16Table(const std::uint8_t* hi, const std::uint8_t* lo) {
  return {_mm_load_si128(reinterpret_cast<const __m128i*>(hi)), _mm_load_si128(reinterpret_cast<const __m128i*>(lo))};
}
// table[code] for 16 codes in [0, 16) (bytes): the first eight in v[0], the next in v[1].
KVS_AVX2 inline void lookupBf16(__m128i codes, const Bf16Table& t, __m256* v) {
  const __m128i h = _mm_shuffle_epi8(t.hi, codes), l = _mm_shuffle_epi8(t.lo, codes);
  v[0] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_unpacklo_epi8(l, h)), 16));
  v[1] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_unpackhi_epi8(l, h)), 16));
}
// 8 bytes as unsigned lanes.
KVS_AVX2 inline __m256i bytes8(const std::uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
// 8 bytes as signed lanes.
KVS_AVX2 inline __m256i signedBytes8(const std::uint8_t* p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
// 8 three-bit codes of an LSB-first bit stream (3 bytes): value i at bit 3i.
KVS_AVX2 inline __m256i codes3(const std::uint8_t* p) {
  const __m256i w = _mm256_set1_epi32(static_cast<int>(p[0] | (p[1] << 8) | (p[2] << 16)));
  const __m256i shifts = _mm256_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21);
  return _mm256_and_si256(_mm256_srlv_epi32(w, shifts), _mm256_set1_epi32(7));
}
// Codes of b bits (3 or 4) for values [i, i + 16) of a TurboQuant row, eight in each of c[0], c[1].
KVS_AVX2 inline void tqCodes(const std::uint8_t* in, std::int64_t i, int b, __m256i* c) {
  if (b == 4) {
    const __m128i n = nibbleBytes16(in + i / 2);
    c[0] = _mm256_cvtepu8_epi32(n);
    c[1] = _mm256_cvtepu8_epi32(_mm_srli_si128(n, 8));
  } else {
    c[0] = codes3(in + i / 8 * 3);
    c[1] = codes3(in + i / 8 * 3 + 3);
  }
}
KVS_AVX2 inline __m256 lanesFloat(__m256i x) {
  return _mm256_cvtepi32_ps(x);
}
// table[idx] for 8 codes in [0, 16): the low or high eight entries by the code's bit 3 (moved to the sign bit).
KVS_AVX2 inline __m256 lookup16(__m256i idx, __m256 lo, __m256 hi) {
  return _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, idx), _mm256_permutevar8x32_ps(hi, idx),
                          _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}
struct Table16 {
  __m256 lo, hi;
};
KVS_AVX2 inline Table16 table16(const float* t) {
  return {_mm256_loadu_ps(t), _mm256_loadu_ps(t + 8)};
}

// ---- the Walsh-Hadamard transform ----

// One butterfly stage inside a vector: lanes with the stride's bit clear get a + b, the others a - b (a the lower
// lane of the pair, b the upper), as the scalar loop writes them.
template <int Upper>
KVS_AVX2 inline __m256 butterfly(__m256 x, __m256 swapped) {
  return _mm256_blend_ps(_mm256_add_ps(x, swapped), _mm256_sub_ps(swapped, x), Upper);
}
KVS_AVX2 inline __m256 fwht8(__m256 x) {
  x = butterfly<0xAA>(x, _mm256_permute_ps(x, 0xB1));
  x = butterfly<0xCC>(x, _mm256_permute_ps(x, 0x4E));
  return butterfly<0xF0>(x, _mm256_permute2f128_ps(x, x, 0x01));
}
// kvcodec::fwht on each chunk of 8·N values of y[0, count), in registers, then each value times signs[i] (where
// given) and times s: the transform's normalisation.
template <int N>
KVS_AVX2 void fwhtChunks(float* y, std::int64_t count, const float* signs, float s) {
  const __m256 sv = _mm256_set1_ps(s);
  for (float* c = y; c < y + count; c += std::ptrdiff_t{8} * N) {
    __m256 x[N];
    for (int k = 0; k < N; ++k) x[k] = fwht8(_mm256_loadu_ps(c + std::ptrdiff_t{8} * k));
    for (int h = 1; h < N; h *= 2)
      for (int i = 0; i < N; i += 2 * h)
        for (int j = i; j < i + h; ++j) {
          const __m256 a = x[j], b = x[j + h];
          x[j] = _mm256_add_ps(a, b);
          x[j + h] = _mm256_sub_ps(a, b);
        }
    for (int k = 0; k < N; ++k) {
      if (signs) x[k] = _mm256_mul_ps(x[k], _mm256_loadu_ps(signs + std::ptrdiff_t{8} * k));
      _mm256_storeu_ps(c + std::ptrdiff_t{8} * k, _mm256_mul_ps(x[k], sv));
    }
  }
}
// The transform in chunks of c values (a power of two from 16 to kMaxRow).
KVS_AVX2 void fwhtChunks(float* y, std::int64_t count, int c, const float* signs, float s) {
  switch (c) {
    case 16:
      return fwhtChunks<2>(y, count, signs, s);
    case 32:
      return fwhtChunks<4>(y, count, signs, s);
    case 64:
      return fwhtChunks<8>(y, count, signs, s);
    case 128:
      return fwhtChunks<16>(y, count, signs, s);
    case 256:
      return fwhtChunks<32>(y, count, signs, s);
    default:
      return fwhtChunks<64>(y, count, signs, s);
  }
}
// kvcodec::hadamardChunks.
KVS_AVX2 void hadamardChunks(float* y, std::int64_t count, int c) {
  fwhtChunks(y, count, c, nullptr, kvc::hadamardScale(c));
}

// ---- one row of each format ----

// Sixteen values (one scale) at a time: every FP4 block holds 16 or 32 values.
KVS_AVX2 void decodeFp4(std::uint32_t t, const std::uint8_t* in, std::int64_t D, float global, float* y) {
  const Bf16Table lut = bf16Table(tables().e2m1Hi, tables().e2m1Lo);
  const std::uint8_t* scales = in + D / 2;
  const int bv = kvc::blockValues(t);
  const fp4::Format f = kvc::fp4Format(t);
  for (std::int64_t i = 0; i < D; i += 16) {
    const float scale = fp4::blockScale(f, scales[i / bv], global);
    __m256 v[2];
    lookupBf16(nibbleBytes16(in + i / 2), lut, v);
    const __m256 sv = _mm256_set1_ps(scale);
    _mm256_storeu_ps(y + i, _mm256_mul_ps(v[0], sv));
    _mm256_storeu_ps(y + i + 8, _mm256_mul_ps(v[1], sv));
  }
}

// ggml's blocks of 32: values 0-15 from the low nibbles (or first 16 bytes), 16-31 from the high ones; here in four
// runs of eight: q[0..8), q[8..16) of each half.
KVS_AVX2 void decodeGgml(std::uint32_t t, const std::uint8_t* in, std::int64_t D, float* y) {
  const int bytes = kvc::blockBytes(t);
  const __m256i low4 = _mm256_set1_epi32(15), one = _mm256_set1_epi32(1);
  const __m256i first = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (std::int64_t blk = 0; blk < D / 32; ++blk, in += bytes, y += 32) {
    const __m256 d = _mm256_set1_ps(kvc::halfValue(kvc::load16(in)));
    __m256 v[4];
    switch (t) {
      case kvc::Q8_0:
        for (int k = 0; k < 4; ++k) v[k] = lanesFloat(signedBytes8(in + 2 + std::ptrdiff_t{8} * k));
        break;
      case kvc::Q4_0:
      case kvc::Q4_1: {
        const std::uint8_t* q = in + (t == kvc::Q4_0 ? 2 : 4);
        const __m256i off = _mm256_set1_epi32(t == kvc::Q4_0 ? 8 : 0);
        for (int k = 0; k < 2; ++k) {
          const __m256i b = bytes8(q + std::ptrdiff_t{8} * k);
          v[k] = lanesFloat(_mm256_sub_epi32(_mm256_and_si256(b, low4), off));
          v[k + 2] = lanesFloat(_mm256_sub_epi32(_mm256_srli_epi32(b, 4), off));
        }
        break;
      }
      case kvc::Q5_0:
      case kvc::Q5_1: {
        const bool q50 = t == kvc::Q5_0;
        const __m256i qh = _mm256_set1_epi32(static_cast<int>(kvc::load32(in + (q50 ? 2 : 4))));
        const std::uint8_t* q = in + (q50 ? 6 : 8);
        const __m256i off = _mm256_set1_epi32(q50 ? 16 : 0);
        for (int k = 0; k < 2; ++k) {
          const __m256i b = bytes8(q + std::ptrdiff_t{8} * k);
          const __m256i bitLo = _mm256_add_epi32(first, _mm256_set1_epi32(8 * k));
          const __m256i hLo = _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(qh, bitLo), one), 4);
          const __m256i hHi = _mm256_slli_epi32(
              _mm256_and_si256(_mm256_srlv_epi32(qh, _mm256_add_epi32(bitLo, _mm256_set1_epi32(16))), one), 4);
          v[k] = lanesFloat(_mm256_sub_epi32(_mm256_or_si256(_mm256_and_si256(b, low4), hLo), off));
          v[k + 2] = lanesFloat(_mm256_sub_epi32(_mm256_or_si256(_mm256_srli_epi32(b, 4), hHi), off));
        }
        break;
      }
      default: {  // IQ4_NL
        const Bf16Table lut = bf16Table(tables().iq4Hi, tables().iq4Lo);
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2)), m = _mm_set1_epi8(15);
        lookupBf16(_mm_and_si128(b, m), lut, v);
        lookupBf16(_mm_and_si128(_mm_srli_epi16(b, 4), m), lut, v + 2);
        break;
      }
    }
    const bool withMin = t == kvc::Q4_1 || t == kvc::Q5_1;
    const __m256 m = _mm256_set1_ps(withMin ? kvc::halfValue(kvc::load16(in + 2)) : 0.0f);
    for (int k = 0; k < 4; ++k) {
      __m256 x = _mm256_mul_ps(v[k], d);
      if (withMin) x = _mm256_add_ps(x, m);
      _mm256_storeu_ps(y + std::ptrdiff_t{8} * k, x);
    }
  }
}

KVS_AVX2 void decodeHalf(bool bf16, const std::uint8_t* in, std::int64_t D, float* y) {
  for (std::int64_t i = 0; i < D; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
    _mm256_storeu_ps(y + i,
                     bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)) : _mm256_cvtph_ps(h));
  }
}

// e4m3fn bytes (times `scale` where given), 16 at a time (D a multiple of 16): the fp16 of value / 2^8 from the code's
// bits (the sign at 15, exponent and mantissa at 7..13), converted and times 256; the NaN codes (0x7F, 0xFF) by mask,
// as the codec's quiet NaN with the code's sign.
KVS_AVX2 void decodeE4m3(const std::uint8_t* in, std::int64_t D, const float* scale, float* y) {
  const __m128i low7 = _mm_set1_epi8(0x7F), signBit = _mm_set1_epi8(static_cast<char>(0x80));
  const __m256i clear14 = _mm256_set1_epi16(static_cast<short>(0xBFFF));
  const __m256i quietNan = _mm256_set1_epi32(0x7FC00000);
  const __m256 k256 = _mm256_set1_ps(256.0f);
  for (std::int64_t i = 0; i < D; i += 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    const __m256i h = _mm256_and_si256(_mm256_srai_epi16(_mm256_slli_epi16(_mm256_cvtepu8_epi16(x), 8), 1), clear14);
    __m256 v[2] = {_mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), k256),
                   _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), k256)};
    const __m128i special = _mm_cmpeq_epi8(_mm_and_si128(x, low7), low7);
    if (_mm_movemask_epi8(special) != 0) {
      const __m128i signs = _mm_and_si128(x, signBit);
      for (int k = 0; k < 2; ++k) {
        const __m128i sk = k == 0 ? signs : _mm_srli_si128(signs, 8),
                      mk = k == 0 ? special : _mm_srli_si128(special, 8);
        const __m256 nan =
            _mm256_castsi256_ps(_mm256_or_si256(_mm256_slli_epi32(_mm256_cvtepu8_epi32(sk), 24), quietNan));
        v[k] = _mm256_blendv_ps(v[k], nan, _mm256_castsi256_ps(_mm256_cvtepi8_epi32(mk)));
      }
    }
    for (int k = 0; k < 2; ++k) {
      if (scale) v[k] = _mm256_mul_ps(v[k], _mm256_set1_ps(*scale));
      _mm256_storeu_ps(y + i + std::ptrdiff_t{8} * k, v[k]);
    }
  }
}

KVS_AVX2 void decodePerTokenHead(bool fp8, const std::uint8_t* in, std::int64_t D, float* y) {
  const float scale = bitsFloat(kvc::load32(in + D));
  if (fp8) return decodeE4m3(in, D, &scale, y);
  for (std::int64_t i = 0; i < D; i += 8)
    _mm256_storeu_ps(y + i, _mm256_mul_ps(lanesFloat(signedBytes8(in + i)), _mm256_set1_ps(scale)));
}

KVS_AVX2 void decodeInt4PerTokenHead(const std::uint8_t* in, std::int64_t D, bool stored, float* y) {
  const std::uint32_t u = kvc::load32(in + D / 2);
  const __m256 scale = _mm256_set1_ps(bitsFloat(u & ~0xFu));
  const __m256i zp = _mm256_set1_epi32(static_cast<int>(u & 0xFu));
  const int blk = kvc::rhtBlock(D);
  for (std::int64_t i = 0; i < D; i += 16) {
    const __m128i n = nibbleBytes16(in + i / 2);
    const __m256i c[2] = {_mm256_cvtepu8_epi32(n), _mm256_cvtepu8_epi32(_mm_srli_si128(n, 8))};
    for (int k = 0; k < 2; ++k)
      _mm256_storeu_ps(y + i + std::ptrdiff_t{8} * k, _mm256_mul_ps(lanesFloat(_mm256_sub_epi32(c[k], zp)), scale));
  }
  if (stored) return;
  // (y · sign) / blk: the product by ±1 is exact, and dividing by a power of two is multiplying by its inverse.
  fwhtChunks(y, D, blk, tables().signs, 1.0f / static_cast<float>(blk));
}

// kvcodec::decodeTqKeyRotated, then rotated back: its sum of squares in the scalar code's order (16 running sums by
// position mod 16, here two vectors of eight, then halves added). `centroids`: the 2^b centroids of D (then zeros).
KVS_AVX2 void decodeTqKey(std::uint32_t t, const std::uint8_t* in, std::int64_t D, const float* centroids, bool stored,
                          float* y) {
  const int b = kvc::tqBits(t);
  const Table16 lut = table16(centroids);
  __m256 ss[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (std::int64_t i = 0; i < D; i += 16) {
    __m256i c[2];
    tqCodes(in, i, b, c);
    for (int k = 0; k < 2; ++k) {
      const __m256 v = lookup16(c[k], lut.lo, lut.hi);
      ss[k] = _mm256_add_ps(ss[k], _mm256_mul_ps(v, v));
      _mm256_storeu_ps(y + i + std::ptrdiff_t{8} * k, v);
    }
  }
  const __m256 s8 = _mm256_add_ps(ss[0], ss[1]);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const float sum = _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
  const __m256 inv = _mm256_set1_ps(divRn(1.0f, kvc::sqrtRn(addRn(sum, 1e-16f))));
  const __m256 norm = _mm256_set1_ps(kvc::halfValue(kvc::load16(in + D * b / 8)));
  for (std::int64_t i = 0; i < D; i += 8)
    _mm256_storeu_ps(y + i, _mm256_mul_ps(norm, _mm256_mul_ps(_mm256_loadu_ps(y + i), inv)));
  if (!stored) hadamardChunks(y, D, static_cast<int>(D));
}

KVS_AVX2 void decodeTqValue(std::uint32_t t, const std::uint8_t* in, std::int64_t D, float* y) {
  const int b = kvc::tqBits(t);
  const __m256 scale = _mm256_set1_ps(kvc::halfValue(kvc::load16(in + D * b / 8)));
  const __m256 zero = _mm256_set1_ps(kvc::halfValue(kvc::load16(in + D * b / 8 + 2)));
  for (std::int64_t i = 0; i < D; i += 16) {
    __m256i c[2];
    tqCodes(in, i, b, c);
    for (int k = 0; k < 2; ++k)
      _mm256_storeu_ps(y + i + std::ptrdiff_t{8} * k, _mm256_add_ps(_mm256_mul_ps(lanesFloat(c[k]), scale), zero));
  }
}

KVS_AVX2 void readRow(std::uint32_t t, const std::uint8_t* in, std::int64_t D, int rotation, float scale, bool stored,
                      const float* centroids, float* y) {
  if (kvc::isFp4(t))
    decodeFp4(t, in, D, scale, y);
  else if (kvc::isPerTokenHead(t))
    decodePerTokenHead(t == kvc::FP8_PER_TOKEN_HEAD, in, D, y);
  else if (kvc::isInt4PerTokenHead(t))
    decodeInt4PerTokenHead(in, D, stored, y);
  else if (t == kvc::TQ_KEY_FP8)
    decodeE4m3(in, D, nullptr, y);
  else if (t == kvc::TQ_KEY3 || t == kvc::TQ_KEY4)
    decodeTqKey(t, in, D, centroids, stored, y);
  else if (kvc::isTurboQuant(t))
    decodeTqValue(t, in, D, y);
  else if (kvc::isHalfWidth(t))
    decodeHalf(t == kvc::BF16, in, D, y);
  else
    decodeGgml(t, in, D, y);
  if (rotation > 0) hadamardChunks(y, D, rotation);
}

// y[i] = r[2i], y[D/2 + i] = r[2i + 1]: within each 128-bit half the even (odd) lanes of a and b, then the halves'
// 64-bit pairs in order.
KVS_AVX2 void deinterleave(const float* r, std::int64_t D, float* y) {
  for (std::int64_t i = 0; i < D / 2; i += 8) {
    const __m256 a = _mm256_loadu_ps(r + 2 * i), b = _mm256_loadu_ps(r + 2 * i + 8);
    const __m256d even = _mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88));
    const __m256d odd = _mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD));
    _mm256_storeu_ps(y + i, _mm256_castpd_ps(_mm256_permute4x64_pd(even, 0xD8)));
    _mm256_storeu_ps(y + D / 2 + i, _mm256_castpd_ps(_mm256_permute4x64_pd(odd, 0xD8)));
  }
}

}  // namespace

KVS_AVX2 void readRowsAvx2(std::uint32_t t, const std::uint8_t* rows, std::int64_t stride, std::int64_t n,
                           std::int64_t D, int rotation, bool interleaved, float scale, bool stored, float* out) {
  alignas(32) float tmp[kvc::kMaxRow];
  alignas(32) float centroids[16];
  tqKeyCentroids(t, D, centroids);
  for (std::int64_t r = 0; r < n; ++r, rows += stride, out += D) {
    readRow(t, rows, D, rotation, scale, stored, centroids, interleaved ? tmp : out);
    if (interleaved) deinterleave(tmp, D, out);
  }
}

}  // namespace kvscope::kernels::kvrows
#endif
