// llama.cpp's KV cache block types (kv_blocks.h). Built without contraction into fused multiply-adds (CMake), as the
// reference quantizers round each operation on its own.
#include "kernels/cpu/kv_blocks.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/blocks.h"

namespace kvscope::kernels {

namespace {

constexpr std::uint32_t kF16 = static_cast<std::uint32_t>(BlockType::F16);
constexpr std::uint32_t kBF16 = static_cast<std::uint32_t>(BlockType::BF16);

[[noreturn]] void unsupported(std::uint32_t type) {
  throw std::invalid_argument("kv cache blocks: ggml type " + std::to_string(type) +
                              " is not a llama.cpp KV cache type kvscope writes (f16, bf16, q8_0, q4_0, q4_1, q5_0, "
                              "q5_1, iq4_nl)");
}

void checkWhole(std::int64_t n) {
  if (n % 32 != 0) throw std::invalid_argument("kv cache blocks: " + std::to_string(n) + " values are not whole blocks of 32");
}

// ggml's quantize_row_iq4_nl_impl for one block of 32 without importance weights: weights x², the scale from the
// value of largest magnitude, refined by weighted least squares over its levels, then 15 trial scales
// (itry = -7..7) kept when they fit better; the indices are recomputed from the final (fp32) scale.
void quantizeIq4NlBlock(const float* x, std::uint8_t* b) {
  constexpr int kTries = 7;
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j)
    if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
  if (amax < 1e-15f) {  // ggml's GROUP_MAX_EPS: d = 0, and every index the level nearest to 0 * x (index 8)
    std::memset(b, 0, 2);
    const auto zero = static_cast<std::uint8_t>(iq4NlNearestLevel(0.0f));
    std::memset(b + 2, zero | (zero << 4), 16);
    return;
  }
  float w[32];
  for (int j = 0; j < 32; ++j) w[j] = x[j] * x[j];
  const float first = static_cast<float>(kIq4NlLevels[0]);
  const auto fit = [&](float id, float& sumqx, float& sumq2) {
    sumqx = 0.0f, sumq2 = 0.0f;
    for (int j = 0; j < 32; ++j) {
      const float q = static_cast<float>(kIq4NlLevels[iq4NlNearestLevel(id * x[j])]);
      sumqx += w[j] * q * x[j];
      sumq2 += w[j] * q * q;
    }
  };
  float sumqx, sumq2;
  fit(1.0f / (-max / first), sumqx, sumq2);
  float d = sumqx / sumq2, best = d * sumqx;
  for (int t = -kTries; t <= kTries; ++t) {
    fit((static_cast<float>(t) + first) / max, sumqx, sumq2);
    if (sumq2 > 0.0f && sumqx * sumqx > best * sumq2) d = sumqx / sumq2, best = d * sumqx;
  }
  const std::uint16_t h = c10::Half(d).x;
  b[0] = static_cast<std::uint8_t>(h & 0xFF);
  b[1] = static_cast<std::uint8_t>(h >> 8);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < 16; ++j)
    b[2 + j] = static_cast<std::uint8_t>(iq4NlNearestLevel(id * x[j]) | (iq4NlNearestLevel(id * x[j + 16]) << 4));
}

void dequantizeIq4NlBlock(const std::uint8_t* b, float* y) {
  std::uint16_t h;
  std::memcpy(&h, b, 2);
  const float d = static_cast<float>(c10::Half(h, c10::Half::from_bits()));
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kIq4NlLevels[b[2 + j] & 0x0F]);
    y[j + 16] = d * static_cast<float>(kIq4NlLevels[b[2 + j] >> 4]);
  }
}

}  // namespace

int iq4NlNearestLevel(float x) {
  const std::int8_t* v = kIq4NlLevels;
  if (x <= v[0]) return 0;
  if (x >= v[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < v[mid]) hi = mid;
    else lo = mid;
  }
  return x - v[hi - 1] < v[hi] - x ? hi - 1 : hi;
}

std::int64_t kvRowBytes(std::uint32_t type, std::int64_t n) {
  if (type == kF16 || type == kBF16) return 2 * n;
  checkWhole(n);
  return n / 32 * kvBlockBytes(type).block;
}

KvBlockBytes kvBlockBytes(std::uint32_t type) {
  if (type == kF16 || type == kBF16) return {64, 0};
  if (type == kTypeIq4Nl) return {18, 2};
  if (!quantizable(type)) unsupported(type);
  const BlockLayout L = blockLayout(type);
  const bool withMin = type == static_cast<std::uint32_t>(BlockType::Q4_1) || type == static_cast<std::uint32_t>(BlockType::Q5_1);
  return {L.bytes, withMin ? 4 : 2};
}

void quantizeKvRow(std::uint32_t type, const float* src, std::int64_t n, std::uint8_t* dst) {
  if (type != kF16 && type != kBF16) checkWhole(n);
  if (type == kF16) {
    for (std::int64_t i = 0; i < n; ++i) {
      const std::uint16_t h = c10::Half(src[i]).x;
      std::memcpy(dst + 2 * i, &h, 2);
    }
  } else if (type == kBF16) {
    for (std::int64_t i = 0; i < n; ++i) {
      const std::uint16_t h = c10::BFloat16(src[i]).x;
      std::memcpy(dst + 2 * i, &h, 2);
    }
  } else if (type == kTypeIq4Nl) {
    for (std::int64_t i = 0; i < n / 32; ++i) quantizeIq4NlBlock(src + 32 * i, dst + 18 * i);
  } else if (quantizable(type)) {
    quantizeRows(type, src, n, dst);
  } else {
    unsupported(type);
  }
}

void dequantizeKvRow(std::uint32_t type, const std::uint8_t* src, std::int64_t n, float* dst) {
  if (type != kF16 && type != kBF16) checkWhole(n);
  if (type == kTypeIq4Nl) {
    for (std::int64_t i = 0; i < n / 32; ++i) dequantizeIq4NlBlock(src + 18 * i, dst + 32 * i);
  } else if (type == kF16 || type == kBF16 || quantizable(type)) {
    dequantize(type, src, n, dst);
  } else {
    unsupported(type);
  }
}

}  // namespace kvscope::kernels
