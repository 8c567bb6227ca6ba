// Block layouts as ggml defines them (ggml-common.h): a block is its scale(s) in fp16 followed by packed quants.
#include "kernels/cpu/blocks.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstring>

#include "kernels/cpu/kv_rows_simd.h"
#include "kernels/kv_block_codec.h"

namespace kvscope::kernels {

namespace {

inline std::uint16_t u16(const std::uint8_t* p) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}
inline float half(const std::uint8_t* p) {
  return static_cast<float>(c10::Half(u16(p), c10::Half::from_bits()));
}
inline std::uint32_t u32(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The legacy 32-value blocks: the codecs shared with the CUDA kernels.
template <std::uint32_t T>
void legacy(const std::uint8_t* b, float* y) {
  kvcodec::decodeBlock(T, b, y);
}

// Q4_K: d, dmin, scales[12], qs[128]; Q5_K adds qh[32] (the fifth bits) before qs. 8 groups of 32, each with a
// 6-bit scale and min.
template <bool Five>
void qk(const std::uint8_t* b, float* y) {
  const float d = half(b), dmin = half(b + 2);
  const std::uint8_t* qh = b + 16;
  const std::uint8_t* q = b + (Five ? 48 : 16);
  for (int j = 0; j < 8; ++j, y += 32) {
    int sc, mn;
    scaleMinK4(j, b + 4, sc, mn);
    const float dj = d * static_cast<float>(sc), mj = dmin * static_cast<float>(mn);
    const std::uint8_t* qj = q + std::ptrdiff_t{32} * (j / 2);
    for (int l = 0; l < 32; ++l) {
      const int v = (j % 2 ? qj[l] >> 4 : qj[l] & 0xF) + (Five && (qh[l] >> j) & 1 ? 16 : 0);
      y[l] = dj * static_cast<float>(v) - mj;
    }
  }
}
void q6_k(const std::uint8_t* b, float* y) {  // ql[128], qh[64], scales[16] (int8), d: 256 values
  const std::uint8_t* ql = b;
  const std::uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const std::int8_t*>(b + 192);
  const float d = half(b + 208);
  for (int n = 0; n < 256; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

template <void (*F)(const std::uint8_t*, float*)>
void blocks(const std::uint8_t* src, std::int64_t n, float* dst, std::int64_t values, std::int64_t bytes) {
  for (std::int64_t b = 0; b < n / values; ++b) F(src + b * bytes, dst + b * values);
}

bool halfFinite(std::uint16_t h) {
  return (h & 0x7C00u) != 0x7C00u;
}

// The 32-value blocks and the 16-bit types with AVX-512 where its paths run (kernels/cpu/kv_rows_simd.h decodes them
// as the scalar codec does, bit for bit; ggml numbers these types as the codec does), in rows of kvcodec::kMaxRow
// values and then a shorter row where it takes one (a whole number of 16 values). Returns how many of the n values it
// wrote (the first ones): 0 where the type has no such path or the AVX-512 paths do not run.
std::int64_t dequantizeSimd(std::uint32_t type, const std::uint8_t* src, std::int64_t n, float* dst) {
  const std::int64_t values = blockLayout(type).values;  // 1 (F16, BF16; F32 is a copy), 32, or 256 (the K types)
  if (static_cast<GgmlType>(type) == GgmlType::F32 || static_cast<GgmlType>(type) == GgmlType::MXFP4 ||
      (values != 1 && values != 32))
    return 0;  // F32 is a copy; MXFP4 (no KV-cache row type of its numbering) takes the scalar loop
  const std::int64_t row = kvcodec::kMaxRow, rows = n / row;
  if (rows > 0 && !readKvRowsSimd(type, src, kvcodec::rowBytes(type, row), rows, row, 0, false, 1.0f, dst)) return 0;
  const std::int64_t done = rows * row, rest = n - done;
  if (rest > 0 && readKvRowsSimd(type, src + kvcodec::rowBytes(type, done), 0, 1, rest, 0, false, 1.0f, dst + done))
    return n;
  return done;
}

}  // namespace

void dequantize(std::uint32_t type, const std::uint8_t* src, std::int64_t n, float* dst) {
  if (const std::int64_t done = n >= 32 ? dequantizeSimd(type, src, n, dst) : 0; done > 0) {
    if (done == n) return;
    src += kvcodec::rowBytes(type, done);  // the tail on the scalar loops below
    dst += done;
    n -= done;
  }
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::F32:
      std::memcpy(dst, src, static_cast<std::size_t>(n) * 4);
      return;
    case GgmlType::F16:
      for (std::int64_t i = 0; i < n; ++i) dst[i] = half(src + 2 * i);
      return;
    case GgmlType::BF16:
      for (std::int64_t i = 0; i < n; ++i)
        dst[i] = static_cast<float>(c10::BFloat16(u16(src + 2 * i), c10::BFloat16::from_bits()));
      return;
    case GgmlType::Q4_0:
      return blocks<legacy<kvcodec::Q4_0>>(src, n, dst, 32, 18);
    case GgmlType::Q4_1:
      return blocks<legacy<kvcodec::Q4_1>>(src, n, dst, 32, 20);
    case GgmlType::Q5_0:
      return blocks<legacy<kvcodec::Q5_0>>(src, n, dst, 32, 22);
    case GgmlType::Q5_1:
      return blocks<legacy<kvcodec::Q5_1>>(src, n, dst, 32, 24);
    case GgmlType::Q8_0:
      return blocks<legacy<kvcodec::Q8_0>>(src, n, dst, 32, 34);
    case GgmlType::Q4_K:
      return blocks<qk<false>>(src, n, dst, 256, 144);
    case GgmlType::Q5_K:
      return blocks<qk<true>>(src, n, dst, 256, 176);
    case GgmlType::Q6_K:
      return blocks<q6_k>(src, n, dst, 256, 210);
    case GgmlType::MXFP4:  // dequantize_row_mxfp4
      for (std::int64_t i = 0; i < n / 32; ++i) {
        const std::uint8_t* b = src + 17 * i;
        const float d = e8m0Half(b[0]);
        for (int j = 0; j < 16; ++j) {
          dst[32 * i + j] = static_cast<float>(kMxfp4Values[b[1 + j] & 0x0F]) * d;
          dst[32 * i + j + 16] = static_cast<float>(kMxfp4Values[b[1 + j] >> 4]) * d;
        }
      }
      return;
    default:  // the precondition: blockLayout(type).values > 0
      return;
  }
}

std::int64_t firstNonFiniteBlock(std::uint32_t type, const std::uint8_t* src, std::int64_t blocks) {
  const BlockLayout L = blockLayout(type);
  // Where each block's fp16 scales sit.
  int at0 = 0, at1 = -1;
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::F32:
      for (std::int64_t i = 0; i < blocks; ++i)
        if ((u32(src + 4 * i) & 0x7F800000u) == 0x7F800000u) return i;
      return -1;
    case GgmlType::F16:
      for (std::int64_t i = 0; i < blocks; ++i)
        if (!halfFinite(u16(src + 2 * i))) return i;
      return -1;
    case GgmlType::BF16:
      for (std::int64_t i = 0; i < blocks; ++i)
        if ((u16(src + 2 * i) & 0x7F80u) == 0x7F80u) return i;
      return -1;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
      at1 = 2;
      break;
    case GgmlType::Q6_K:
      at0 = 208;
      break;
    case GgmlType::MXFP4:  // an E8M0 scale and E2M1 codes: every value is finite
      return -1;
    default:
      break;
  }
  for (std::int64_t i = 0; i < blocks; ++i) {
    const std::uint8_t* b = src + i * L.bytes;
    if (!halfFinite(u16(b + at0)) || (at1 >= 0 && !halfFinite(u16(b + at1)))) return i;
  }
  return -1;
}

void unpackGroup(GgmlType type, const std::uint8_t* b, int g, std::uint8_t q[32], float D[2], float M[2]) {
  switch (type) {
    case GgmlType::Q4_0:
    case GgmlType::Q4_1: {
      const std::uint8_t* qs = b + (type == GgmlType::Q4_0 ? 2 : 4);
      for (int j = 0; j < 16; ++j) {
        q[j] = qs[j] & 0x0F;
        q[j + 16] = qs[j] >> 4;
      }
      D[0] = D[1] = half(b);
      M[0] = M[1] = type == GgmlType::Q4_0 ? -8.0f * D[0] : half(b + 2);
      return;
    }
    case GgmlType::Q5_0:
    case GgmlType::Q5_1: {
      const bool one = type == GgmlType::Q5_1;
      const std::uint32_t qh = u32(b + (one ? 4 : 2));
      const std::uint8_t* qs = b + (one ? 8 : 6);
      for (int j = 0; j < 16; ++j) {
        q[j] = static_cast<std::uint8_t>((qs[j] & 0x0F) | (((qh >> j) & 1u) << 4));
        q[j + 16] = static_cast<std::uint8_t>((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
      }
      D[0] = D[1] = half(b);
      M[0] = M[1] = one ? half(b + 2) : -16.0f * D[0];
      return;
    }
    case GgmlType::Q8_0:
      for (int j = 0; j < 32; ++j) q[j] = static_cast<std::uint8_t>(b[2 + j] ^ 0x80);
      D[0] = D[1] = half(b);
      M[0] = M[1] = -128.0f * D[0];
      return;
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {
      const bool five = type == GgmlType::Q5_K;
      const std::uint8_t* qs = b + (five ? 48 : 16) + std::ptrdiff_t{32} * (g / 2);
      for (int l = 0; l < 32; ++l) {
        int v = g % 2 ? qs[l] >> 4 : qs[l] & 0xF;
        if (five && (b[16 + l] >> g) & 1) v += 16;
        q[l] = static_cast<std::uint8_t>(v);
      }
      int sc, mn;
      scaleMinK4(g, b + 4, sc, mn);
      D[0] = D[1] = half(b) * static_cast<float>(sc);
      M[0] = M[1] = -(half(b + 2) * static_cast<float>(mn));
      return;
    }
    case GgmlType::MXFP4:
      for (int j = 0; j < 16; ++j) {
        q[j] = static_cast<std::uint8_t>(kMxfp4Values[b[1 + j] & 0x0F] + 12);
        q[j + 16] = static_cast<std::uint8_t>(kMxfp4Values[b[1 + j] >> 4] + 12);
      }
      D[0] = D[1] = e8m0Half(b[0]);
      M[0] = M[1] = -12.0f * D[0];
      return;
    case GgmlType::Q6_K: {
      const int n = g / 4, k = g % 4;
      const std::uint8_t* ql = b + std::ptrdiff_t{64} * n + (k & 1 ? 32 : 0);
      const std::uint8_t* qh = b + 128 + std::ptrdiff_t{32} * n;
      const auto* sc = reinterpret_cast<const std::int8_t*>(b + 192) + std::ptrdiff_t{8} * n + std::ptrdiff_t{2} * k;
      for (int l = 0; l < 32; ++l)
        q[l] = static_cast<std::uint8_t>((k >= 2 ? ql[l] >> 4 : ql[l] & 0xF) | (((qh[l] >> (2 * k)) & 3) << 4));
      const float d = half(b + 208);
      for (int h = 0; h < 2; ++h) {
        D[h] = d * static_cast<float>(sc[h]);
        M[h] = -32.0f * D[h];
      }
      return;
    }
    default:
      break;
  }
}

}  // namespace kvscope::kernels
