#include "kernels/cpu/fp8_attention_cpu.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

namespace kvscope::kernels {
namespace {

// decode() of every code, once per format.
const std::array<float, 256>& table(Fp8Format f) {
  static const auto make = [](Fp8Format fmt) {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[static_cast<std::size_t>(c)] = decodeFp8(static_cast<std::uint8_t>(c), fmt);
    return t;
  };
  static const std::array<float, 256> e4 = make(Fp8Format::E4M3FN), e5 = make(Fp8Format::E5M2);
  return f == Fp8Format::E4M3FN ? e4 : e5;
}

}  // namespace

void fp8DecodeAttentionHead(const float* q, const std::uint8_t* kc, std::int64_t kStride, const std::uint8_t* vc,
                            std::int64_t vStride, const float* ks, const float* vs, std::int64_t L, std::int64_t D,
                            float smScale, Fp8Format format, float* out, float* scores) {
  const auto& lut = table(format);
  // The key scale folds into the query: q . (decode(k) * ks) = (q * ks) . decode(k).
  std::vector<float> qk(static_cast<std::size_t>(D));
  for (std::int64_t d = 0; d < D; ++d) qk[d] = q[d] * ks[d] * smScale;
  float m = -INFINITY;
  for (std::int64_t t = 0; t < L; ++t) {
    const std::uint8_t* row = kc + t * kStride;
    float s = 0.0f;
    for (std::int64_t d = 0; d < D; ++d) s += qk[d] * lut[row[d]];
    scores[t] = s;
    m = std::max(m, s);
  }
  float sum = 0.0f;
  for (std::int64_t t = 0; t < L; ++t) {
    scores[t] = std::exp(scores[t] - m);
    sum += scores[t];
  }
  std::fill(out, out + D, 0.0f);
  for (std::int64_t t = 0; t < L; ++t) {
    const std::uint8_t* row = vc + t * vStride;
    const float p = scores[t];
    for (std::int64_t d = 0; d < D; ++d) out[d] += p * lut[row[d]];
  }
  // The value scale and the softmax's denominator apply once per channel.
  for (std::int64_t d = 0; d < D; ++d) out[d] = out[d] / sum * vs[d];
}

}  // namespace kvscope::kernels
