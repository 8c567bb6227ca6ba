#include "kernels/cpu/bitpack.h"

#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace kvscope::kernels {
namespace {

template <int Bits>
void packFixed(const std::uint8_t* v, std::int64_t n, std::uint8_t* out) {
  constexpr int per = 8 / Bits;
  const std::int64_t full = n / per;
  for (std::int64_t i = 0; i < full; ++i) {
    std::uint8_t b = 0;
    for (int j = 0; j < per; ++j) b |= static_cast<std::uint8_t>(v[i * per + j] << (j * Bits));
    out[i] = b;
  }
  if (const std::int64_t rest = n - full * per; rest > 0) {
    std::uint8_t b = 0;
    for (std::int64_t j = 0; j < rest; ++j) b |= static_cast<std::uint8_t>(v[full * per + j] << (j * Bits));
    out[full] = b;
  }
}

template <int Bits>
void unpackFixed(const std::uint8_t* in, std::int64_t n, std::uint8_t* v) {
  constexpr int per = 8 / Bits;
  constexpr std::uint8_t mask = (1u << Bits) - 1u;
  const std::int64_t full = n / per;
  for (std::int64_t i = 0; i < full; ++i) {
    const std::uint8_t b = in[i];
    for (int j = 0; j < per; ++j) v[i * per + j] = (b >> (j * Bits)) & mask;
  }
  for (std::int64_t j = full * per; j < n; ++j) v[j] = (in[full] >> ((j - full * per) * Bits)) & mask;
}

#if defined(__SSE2__)
// The 2- and 4-bit unpacks run for every cached code at every fused decode step: 16 packed bytes at a time with
// SSE2 (baseline x86-64), the same codes as the scalar loop, which takes the tail.
template <>
void unpackFixed<4>(const std::uint8_t* in, std::int64_t n, std::uint8_t* v) {
  const __m128i mask = _mm_set1_epi8(0x0F);
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32, in += 16, v += 32) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in));
    const __m128i lo = _mm_and_si128(x, mask), hi = _mm_and_si128(_mm_srli_epi16(x, 4), mask);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(v), _mm_unpacklo_epi8(lo, hi));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(v + 16), _mm_unpackhi_epi8(lo, hi));
  }
  for (std::int64_t j = 0; j < n - i; ++j) v[j] = (in[j / 2] >> ((j % 2) * 4)) & 0x0F;
}

template <>
void unpackFixed<2>(const std::uint8_t* in, std::int64_t n, std::uint8_t* v) {
  const __m128i mask = _mm_set1_epi8(0x03);
  std::int64_t i = 0;
  for (; i + 64 <= n; i += 64, in += 16, v += 64) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in));
    const __m128i c0 = _mm_and_si128(x, mask), c1 = _mm_and_si128(_mm_srli_epi16(x, 2), mask);
    const __m128i c2 = _mm_and_si128(_mm_srli_epi16(x, 4), mask), c3 = _mm_and_si128(_mm_srli_epi16(x, 6), mask);
    // Byte b's four codes next to each other: (c0, c1) and (c2, c3) interleaved, then the two pairs.
    const __m128i a = _mm_unpacklo_epi8(c0, c1), b = _mm_unpacklo_epi8(c2, c3);
    const __m128i a2 = _mm_unpackhi_epi8(c0, c1), b2 = _mm_unpackhi_epi8(c2, c3);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(v), _mm_unpacklo_epi16(a, b));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(v + 16), _mm_unpackhi_epi16(a, b));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(v + 32), _mm_unpacklo_epi16(a2, b2));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(v + 48), _mm_unpackhi_epi16(a2, b2));
  }
  for (std::int64_t j = 0; j < n - i; ++j) v[j] = (in[j / 4] >> ((j % 4) * 2)) & 0x03;
}
#endif

void packStream(const std::uint8_t* v, std::int64_t n, int bits, std::uint8_t* out) {
  std::memset(out, 0, static_cast<std::size_t>(packedBytes(n, bits)));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t bit = i * bits;
    const std::uint32_t w = static_cast<std::uint32_t>(v[i]) << (bit & 7);
    out[bit >> 3] |= static_cast<std::uint8_t>(w);
    if ((bit & 7) + bits > 8) out[(bit >> 3) + 1] |= static_cast<std::uint8_t>(w >> 8);
  }
}

void unpackStream(const std::uint8_t* in, std::int64_t n, int bits, std::uint8_t* v) {
  const std::uint32_t mask = (1u << bits) - 1u;
  const std::int64_t bytes = packedBytes(n, bits);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t bit = i * bits, byte = bit >> 3;
    std::uint32_t w = in[byte];
    if (byte + 1 < bytes) w |= static_cast<std::uint32_t>(in[byte + 1]) << 8;
    v[i] = static_cast<std::uint8_t>((w >> (bit & 7)) & mask);
  }
}

}  // namespace

void packBits(const std::uint8_t* v, std::int64_t n, int bits, std::uint8_t* out) {
  if (n <= 0) return;  // nothing to pack (and the pointers may be null)
  switch (bits) {
    case 1:
      packFixed<1>(v, n, out);
      break;
    case 2:
      packFixed<2>(v, n, out);
      break;
    case 4:
      packFixed<4>(v, n, out);
      break;
    case 8:
      std::memcpy(out, v, static_cast<std::size_t>(n));
      break;
    default:
      packStream(v, n, bits, out);
      break;
  }
}

void unpackBits(const std::uint8_t* in, std::int64_t n, int bits, std::uint8_t* v) {
  if (n <= 0) return;
  switch (bits) {
    case 1:
      unpackFixed<1>(in, n, v);
      break;
    case 2:
      unpackFixed<2>(in, n, v);
      break;
    case 4:
      unpackFixed<4>(in, n, v);
      break;
    case 8:
      std::memcpy(v, in, static_cast<std::size_t>(n));
      break;
    default:
      unpackStream(in, n, bits, v);
      break;
  }
}

}  // namespace kvscope::kernels
