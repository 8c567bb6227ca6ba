// The vector reads of stored cache rows (kv_rows_simd.h): the preconditions, the path isa() picks (this file's
// AVX-512 read, or kv_rows_avx2.cpp's twin), and the AVX-512 read. Sixteen values per vector: codes widened to 32-bit
// lanes, looked up in a 16-entry table by a lane permute (E2M1, IQ4_NL's levels, TurboQuant's centroids) or converted,
// then scaled with the same float32 operations, in the same order, as the scalar codec (kernels/kv_block_codec.h);
// built without contraction into fused multiply-adds (CMake), so each product and sum rounds on its own as there. The
// Walsh-Hadamard transform runs its strides 1, 2, 4, 8 inside a vector (lane swaps) and the longer ones across
// vectors, each butterfly the scalar one's a + b and a - b.
#include "kernels/cpu/kv_rows_simd.h"

// GCC 12 at -O3 reports the _mm512_undefined_* inside its own AVX-512 intrinsics as "may be used uninitialized" (GCC
// bug 105593); nothing of ours is.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <cstddef>

#include "kernels/cpu/kv_rows_paths.h"
#include "kernels/cpu/simd.h"
#include "kernels/fp8.h"
#include "kernels/kv_block_codec.h"

namespace kvscope::kernels {

#if KVS_HAVE_AVX2_PATHS
namespace {

namespace kvc = kvcodec;

using kvrows::Tables;
using kvrows::tables;

// ---- codes into 32-bit lanes ----

// 16 nibbles of 8 bytes in the order (low, high) of byte 0, then of byte 1, ... (FP4's, int4's and 4-bit
// TurboQuant's order).
KVS_AVX512 inline __m512i nibblesInterleaved(const std::uint8_t* p) {
  __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  b = _mm_unpacklo_epi8(b, b);
  const __m512i shifts = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
  return _mm512_and_si512(_mm512_srlv_epi32(_mm512_cvtepu8_epi32(b), shifts), _mm512_set1_epi32(15));
}
// 16 bytes as unsigned lanes.
KVS_AVX512 inline __m512i bytes16(const std::uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// 16 three-bit codes of an LSB-first bit stream (6 bytes): value i at bit 3i.
KVS_AVX512 inline __m512i codes3(const std::uint8_t* p) {
  const auto w0 = static_cast<int>(p[0] | (p[1] << 8) | (p[2] << 16));
  const auto w1 = static_cast<int>(p[3] | (p[4] << 8) | (p[5] << 16));
  const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(w0)), _mm256_set1_epi32(w1), 1);
  const __m512i shifts = _mm512_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21, 0, 3, 6, 9, 12, 15, 18, 21);
  return _mm512_and_si512(_mm512_srlv_epi32(w, shifts), _mm512_set1_epi32(7));
}
// Codes of b bits (3 or 4) for values [i, i + 16) of a TurboQuant row.
KVS_AVX512 inline __m512i tqCodes(const std::uint8_t* in, std::int64_t i, int b) {
  return b == 4 ? nibblesInterleaved(in + i / 2) : codes3(in + i / 8 * 3);
}
KVS_AVX512 inline __m512 lanesFloat(__m512i x) {
  return _mm512_cvtepi32_ps(x);
}

// ---- the Walsh-Hadamard transform ----

// One butterfly stage inside a vector: lanes with the stride's bit clear get a + b, the others a - b (a the lower
// lane of the pair, b the upper), as the scalar loop writes them.
KVS_AVX512 inline __m512 butterfly(__m512 x, __m512 swapped, __mmask16 upper) {
  return _mm512_mask_sub_ps(_mm512_add_ps(x, swapped), upper, swapped, x);
}
KVS_AVX512 inline __m512 fwht16(__m512 x) {
  x = butterfly(x, _mm512_permute_ps(x, 0xB1), 0xAAAA);
  x = butterfly(x, _mm512_permute_ps(x, 0x4E), 0xCCCC);
  x = butterfly(x, _mm512_shuffle_f32x4(x, x, 0xB1), 0xF0F0);
  return butterfly(x, _mm512_shuffle_f32x4(x, x, 0x4E), 0xFF00);
}
// kvcodec::fwht on each chunk of 16·N values of y[0, count), in registers, then each value times signs[i] (where
// given) and times s: the transform's normalisation.
template <int N>
KVS_AVX512 void fwhtChunks(float* y, std::int64_t count, const float* signs, float s) {
  const __m512 sv = _mm512_set1_ps(s);
  for (float* c = y; c < y + count; c += std::ptrdiff_t{16} * N) {
    __m512 x[N];
    for (int k = 0; k < N; ++k) x[k] = fwht16(_mm512_loadu_ps(c + std::ptrdiff_t{16} * k));
    for (int h = 1; h < N; h *= 2)
      for (int i = 0; i < N; i += 2 * h)
        for (int j = i; j < i + h; ++j) {
          const __m512 a = x[j], b = x[j + h];
          x[j] = _mm512_add_ps(a, b);
          x[j + h] = _mm512_sub_ps(a, b);
        }
    for (int k = 0; k < N; ++k) {
      if (signs) x[k] = _mm512_mul_ps(x[k], _mm512_loadu_ps(signs + std::ptrdiff_t{16} * k));
      _mm512_storeu_ps(c + std::ptrdiff_t{16} * k, _mm512_mul_ps(x[k], sv));
    }
  }
}
// The transform in chunks of c values (a power of two from 16 to kMaxRow).
KVS_AVX512 void fwhtChunks(float* y, std::int64_t count, int c, const float* signs, float s) {
  switch (c) {
    case 16:
      return fwhtChunks<1>(y, count, signs, s);
    case 32:
      return fwhtChunks<2>(y, count, signs, s);
    case 64:
      return fwhtChunks<4>(y, count, signs, s);
    case 128:
      return fwhtChunks<8>(y, count, signs, s);
    case 256:
      return fwhtChunks<16>(y, count, signs, s);
    default:
      return fwhtChunks<32>(y, count, signs, s);
  }
}
// kvcodec::hadamardChunks.
KVS_AVX512 void hadamardChunks(float* y, std::int64_t count, int c) {
  fwhtChunks(y, count, c, nullptr, kvc::hadamardScale(c));
}

// ---- one row of each format ----

KVS_AVX512 void decodeFp4(std::uint32_t t, const std::uint8_t* in, std::int64_t D, float global, float* y) {
  const __m512 lut = _mm512_load_ps(tables().e2m1);
  const std::uint8_t* scales = in + D / 2;
  const int bv = kvc::blockValues(t);
  const fp4::Format f = kvc::fp4Format(t);
  for (std::int64_t i = 0; i < D; i += 16) {
    const float scale = fp4::blockScale(f, scales[i / bv], global);
    const __m512 v = _mm512_permutexvar_ps(nibblesInterleaved(in + i / 2), lut);
    _mm512_storeu_ps(y + i, _mm512_mul_ps(v, _mm512_set1_ps(scale)));
  }
}

// ggml's blocks of 32: the first 16 values from the low nibbles (or first 16 bytes), the next 16 from the high ones.
KVS_AVX512 void decodeGgml(std::uint32_t t, const std::uint8_t* in, std::int64_t D, float* y) {
  const int bytes = kvc::blockBytes(t);
  const __m512i low4 = _mm512_set1_epi32(15);
  for (std::int64_t blk = 0; blk < D / 32; ++blk, in += bytes, y += 32) {
    const __m512 d = _mm512_set1_ps(kvc::halfValue(kvc::load16(in)));
    __m512 lo, hi;
    switch (t) {
      case kvc::Q8_0:
        lo = lanesFloat(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2))));
        hi = lanesFloat(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 18))));
        break;
      case kvc::Q4_0:
      case kvc::Q4_1: {
        const __m512i b = bytes16(in + (t == kvc::Q4_0 ? 2 : 4));
        const __m512i off = _mm512_set1_epi32(t == kvc::Q4_0 ? 8 : 0);
        lo = lanesFloat(_mm512_sub_epi32(_mm512_and_si512(b, low4), off));
        hi = lanesFloat(_mm512_sub_epi32(_mm512_srli_epi32(b, 4), off));
        break;
      }
      case kvc::Q5_0:
      case kvc::Q5_1: {
        const bool q50 = t == kvc::Q5_0;
        const __m512i qh = _mm512_set1_epi32(static_cast<int>(kvc::load32(in + (q50 ? 2 : 4))));
        const __m512i b = bytes16(in + (q50 ? 6 : 8));
        const __m512i first = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        const __m512i one = _mm512_set1_epi32(1), off = _mm512_set1_epi32(q50 ? 16 : 0);
        const __m512i hLo = _mm512_slli_epi32(_mm512_and_si512(_mm512_srlv_epi32(qh, first), one), 4);
        const __m512i hHi = _mm512_slli_epi32(
            _mm512_and_si512(_mm512_srlv_epi32(qh, _mm512_add_epi32(first, _mm512_set1_epi32(16))), one), 4);
        lo = lanesFloat(_mm512_sub_epi32(_mm512_or_si512(_mm512_and_si512(b, low4), hLo), off));
        hi = lanesFloat(_mm512_sub_epi32(_mm512_or_si512(_mm512_srli_epi32(b, 4), hHi), off));
        break;
      }
      default: {  // IQ4_NL
        const __m512 lut = _mm512_load_ps(tables().iq4);
        const __m512i b = bytes16(in + 2);
        lo = _mm512_permutexvar_ps(_mm512_and_si512(b, low4), lut);
        hi = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), lut);
        break;
      }
    }
    lo = _mm512_mul_ps(lo, d);
    hi = _mm512_mul_ps(hi, d);
    if (t == kvc::Q4_1 || t == kvc::Q5_1) {
      const __m512 m = _mm512_set1_ps(kvc::halfValue(kvc::load16(in + 2)));
      lo = _mm512_add_ps(lo, m);
      hi = _mm512_add_ps(hi, m);
    }
    _mm512_storeu_ps(y, lo);
    _mm512_storeu_ps(y + 16, hi);
  }
}

KVS_AVX512 void decodeHalf(bool bf16, const std::uint8_t* in, std::int64_t D, float* y) {
  for (std::int64_t i = 0; i < D; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 2 * i));
    _mm512_storeu_ps(y + i,
                     bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)) : _mm512_cvtph_ps(h));
  }
}

// e4m3 bytes (times `scale` where given) through the decode table: the magnitude's 128 entries as four lane
// permutes of two vectors each (bits 0-4), chosen by bits 5 and 6; then the sign bit.
KVS_AVX512 void decodeE4m3(const std::uint8_t* in, std::int64_t D, const float* scale, float* y) {
  const float* table = tables().e4m3;
  __m512 t[8];
  for (int k = 0; k < 8; ++k) t[k] = _mm512_load_ps(table + std::ptrdiff_t{16} * k);
  const __m512i b5 = _mm512_set1_epi32(32), b6 = _mm512_set1_epi32(64), sign = _mm512_set1_epi32(0x80);
  for (std::int64_t i = 0; i < D; i += 16) {
    const __m512i c = bytes16(in + i);
    const __m512 r0 = _mm512_permutex2var_ps(t[0], c, t[1]), r1 = _mm512_permutex2var_ps(t[2], c, t[3]);
    const __m512 r2 = _mm512_permutex2var_ps(t[4], c, t[5]), r3 = _mm512_permutex2var_ps(t[6], c, t[7]);
    const __mmask16 m5 = _mm512_test_epi32_mask(c, b5), m6 = _mm512_test_epi32_mask(c, b6);
    const __m512 mag = _mm512_mask_blend_ps(m6, _mm512_mask_blend_ps(m5, r0, r1), _mm512_mask_blend_ps(m5, r2, r3));
    __m512 v = _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_castps_si512(mag), _mm512_slli_epi32(_mm512_and_si512(c, sign), 24)));
    if (scale) v = _mm512_mul_ps(v, _mm512_set1_ps(*scale));
    _mm512_storeu_ps(y + i, v);
  }
}

KVS_AVX512 void decodePerTokenHead(bool fp8, const std::uint8_t* in, std::int64_t D, float* y) {
  const float scale = bitsFloat(kvc::load32(in + D));
  if (fp8) return decodeE4m3(in, D, &scale, y);
  for (std::int64_t i = 0; i < D; i += 16) {
    const __m512 v = lanesFloat(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
    _mm512_storeu_ps(y + i, _mm512_mul_ps(v, _mm512_set1_ps(scale)));
  }
}

KVS_AVX512 void decodeInt4PerTokenHead(const std::uint8_t* in, std::int64_t D, bool stored, float* y) {
  const std::uint32_t u = kvc::load32(in + D / 2);
  const __m512 scale = _mm512_set1_ps(bitsFloat(u & ~0xFu));
  const __m512i zp = _mm512_set1_epi32(static_cast<int>(u & 0xFu));
  const int blk = kvc::rhtBlock(D);
  for (std::int64_t i = 0; i < D; i += 16)
    _mm512_storeu_ps(y + i, _mm512_mul_ps(lanesFloat(_mm512_sub_epi32(nibblesInterleaved(in + i / 2), zp)), scale));
  if (stored) return;
  // (y · sign) / blk: the product by ±1 is exact, and dividing by a power of two is multiplying by its inverse.
  fwhtChunks(y, D, blk, tables().signs, 1.0f / static_cast<float>(blk));
}

// kvcodec::decodeTqKeyRotated, then rotated back: its sum of squares in the scalar code's order (16 running sums by
// lane, then halves added).
// `centroids`: the 2^b centroids of D (then zeros).
KVS_AVX512 void decodeTqKey(std::uint32_t t, const std::uint8_t* in, std::int64_t D, const float* centroids,
                            bool stored, float* y) {
  const int b = kvc::tqBits(t);
  const __m512 lut = _mm512_load_ps(centroids);
  __m512 ss = _mm512_setzero_ps();
  for (std::int64_t i = 0; i < D; i += 16) {
    const __m512 v = _mm512_permutexvar_ps(tqCodes(in, i, b), lut);
    ss = _mm512_add_ps(ss, _mm512_mul_ps(v, v));
    _mm512_storeu_ps(y + i, v);
  }
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(ss), _mm512_extractf32x8_ps(ss, 1));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const float sum = _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
  const __m512 inv = _mm512_set1_ps(divRn(1.0f, kvc::sqrtRn(addRn(sum, 1e-16f))));
  const __m512 norm = _mm512_set1_ps(kvc::halfValue(kvc::load16(in + D * b / 8)));
  for (std::int64_t i = 0; i < D; i += 16)
    _mm512_storeu_ps(y + i, _mm512_mul_ps(norm, _mm512_mul_ps(_mm512_loadu_ps(y + i), inv)));
  if (!stored) hadamardChunks(y, D, static_cast<int>(D));
}

KVS_AVX512 void decodeTqValue(std::uint32_t t, const std::uint8_t* in, std::int64_t D, float* y) {
  const int b = kvc::tqBits(t);
  const __m512 scale = _mm512_set1_ps(kvc::halfValue(kvc::load16(in + D * b / 8)));
  const __m512 zero = _mm512_set1_ps(kvc::halfValue(kvc::load16(in + D * b / 8 + 2)));
  for (std::int64_t i = 0; i < D; i += 16)
    _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_mul_ps(lanesFloat(tqCodes(in, i, b)), scale), zero));
}

KVS_AVX512 void readRow(std::uint32_t t, const std::uint8_t* in, std::int64_t D, int rotation, float scale, bool stored,
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

// y[i] = r[2i], y[D/2 + i] = r[2i + 1].
KVS_AVX512 void deinterleave(const float* r, std::int64_t D, float* y) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (std::int64_t i = 0; i < D / 2; i += 16) {
    const __m512 a = _mm512_loadu_ps(r + 2 * i), b = _mm512_loadu_ps(r + 2 * i + 16);
    _mm512_storeu_ps(y + i, _mm512_permutex2var_ps(a, even, b));
    _mm512_storeu_ps(y + D / 2 + i, _mm512_permutex2var_ps(a, odd, b));
  }
}

}  // namespace
}  // namespace kvscope::kernels

namespace kvscope::kernels::kvrows {

const Tables& tables() {
  static const Tables t;
  return t;
}

KVS_AVX512 void readRowsAvx512(std::uint32_t t, const std::uint8_t* rows, std::int64_t stride, std::int64_t n,
                               std::int64_t D, int rotation, bool interleaved, float scale, bool stored, float* out) {
  alignas(64) float tmp[kvc::kMaxRow];
  alignas(64) float centroids[16];
  tqKeyCentroids(t, D, centroids);
  for (std::int64_t r = 0; r < n; ++r, rows += stride, out += D) {
    readRow(t, rows, D, rotation, scale, stored, centroids, interleaved ? tmp : out);
    if (interleaved) deinterleave(tmp, D, out);
  }
}

}  // namespace kvscope::kernels::kvrows
#endif

namespace kvscope::kernels {
namespace {

bool isPowerOfTwo(std::int64_t x) {
  return x > 0 && (x & (x - 1)) == 0;
}

}  // namespace

bool readKvRowsSimd(std::uint32_t type, const std::uint8_t* rows, std::int64_t stride, std::int64_t n, std::int64_t D,
                    int rotation, bool interleaved, float scale, float* out, bool stored) {
#if KVS_HAVE_AVX2_PATHS
  if (!avx2Paths() || !kvcodec::isKvType(type) || D <= 0 || D % 16 != 0 || D > kvcodec::kMaxRow) return false;
  if (interleaved && D % 32 != 0) return false;
  if (rotation > 0 && (rotation < 16 || !isPowerOfTwo(rotation) || D % rotation != 0)) return false;
  if ((type == kvcodec::TQ_KEY3 || type == kvcodec::TQ_KEY4) && !isPowerOfTwo(D)) return false;
  if (kvcodec::blockValues(type) > 16 && D % kvcodec::blockValues(type) != 0) return false;
  if (avx512Paths())
    kvrows::readRowsAvx512(type, rows, stride, n, D, rotation, interleaved, scale, stored, out);
  else
    kvrows::readRowsAvx2(type, rows, stride, n, D, rotation, interleaved, scale, stored, out);
  return true;
#else
  (void)type, (void)rows, (void)stride, (void)n, (void)D, (void)rotation, (void)interleaved, (void)scale, (void)out,
      (void)stored;
  return false;
#endif
}

}  // namespace kvscope::kernels
