// Block layouts as ggml defines them (ggml-common.h): a block is its scale(s) in fp16 followed by packed quants.
#include "model/dequant.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <fmt/format.h>

#include <cstring>

namespace kvscope::model {

namespace {

inline float half(const std::uint8_t* p) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return static_cast<float>(c10::Half(h, c10::Half::from_bits()));
}

void q4_0(const std::uint8_t* b, float* y) {  // d, 16 bytes: low nibbles 0..15, high 16..31, offset 8
  const float d = half(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((b[2 + j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((b[2 + j] >> 4) - 8) * d;
  }
}
void q4_1(const std::uint8_t* b, float* y) {  // d, m, 16 bytes
  const float d = half(b), m = half(b + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(b[4 + j] & 0x0F) * d + m;
    y[j + 16] = static_cast<float>(b[4 + j] >> 4) * d + m;
  }
}
void q5_0(const std::uint8_t* b, float* y) {  // d, qh (32 fifth bits), 16 bytes, offset 16
  const float d = half(b);
  std::uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  for (int j = 0; j < 16; ++j) {
    const int x0 = ((b[6 + j] & 0x0F) | (((qh >> j) << 4) & 0x10)) - 16;
    const int x1 = ((b[6 + j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
    y[j] = static_cast<float>(x0) * d;
    y[j + 16] = static_cast<float>(x1) * d;
  }
}
void q5_1(const std::uint8_t* b, float* y) {  // d, m, qh, 16 bytes
  const float d = half(b), m = half(b + 2);
  std::uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  for (int j = 0; j < 16; ++j) {
    const int x0 = (b[8 + j] & 0x0F) | (((qh >> j) << 4) & 0x10);
    const int x1 = (b[8 + j] >> 4) | ((qh >> (j + 12)) & 0x10);
    y[j] = static_cast<float>(x0) * d + m;
    y[j + 16] = static_cast<float>(x1) * d + m;
  }
}
void q8_0(const std::uint8_t* b, float* y) {  // d, 32 int8
  const float d = half(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<std::int8_t>(b[2 + j])) * d;
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
void blocks(const std::uint8_t* src, std::int64_t n, float* dst, std::int64_t elems, std::int64_t bytes) {
  at::parallel_for(0, n / elems, 256, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) F(src + b * bytes, dst + b * elems);
  });
}

}  // namespace

void dequantizeRow(std::uint32_t type, const std::uint8_t* src, std::int64_t n, float* dst) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::F32: std::memcpy(dst, src, static_cast<std::size_t>(n) * 4); return;
    case GgmlType::F16:
      for (std::int64_t i = 0; i < n; ++i) dst[i] = half(src + 2 * i);
      return;
    case GgmlType::BF16:
      for (std::int64_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = static_cast<float>(c10::BFloat16(h, c10::BFloat16::from_bits()));
      }
      return;
    case GgmlType::Q4_0: return blocks<q4_0>(src, n, dst, 32, 18);
    case GgmlType::Q4_1: return blocks<q4_1>(src, n, dst, 32, 20);
    case GgmlType::Q5_0: return blocks<q5_0>(src, n, dst, 32, 22);
    case GgmlType::Q5_1: return blocks<q5_1>(src, n, dst, 32, 24);
    case GgmlType::Q8_0: return blocks<q8_0>(src, n, dst, 32, 34);
    case GgmlType::Q6_K: return blocks<q6_k>(src, n, dst, 256, 210);
    default: break;
  }
  throw FormatError(fmt::format("tensor type {} is not supported (kvscope reads F32, F16, BF16, Q4_0, Q4_1, Q5_0, "
                                "Q5_1, Q8_0, Q6_K)",
                                ggmlTypeName(type)));
}

at::Tensor toTensor(const GgufFile::Tensor& t, at::ScalarType dtype) {
  std::vector<std::int64_t> shape(t.dims.rbegin(), t.dims.rend());
  at::Tensor out = at::empty(shape, at::kFloat);
  try {
    dequantizeRow(t.type, t.data, t.numel(), out.data_ptr<float>());
  } catch (const FormatError& e) {
    throw FormatError(fmt::format("tensor `{}`: {}", t.name, e.what()));
  }
  return dtype == at::kFloat ? out : out.to(dtype);
}

}  // namespace kvscope::model
