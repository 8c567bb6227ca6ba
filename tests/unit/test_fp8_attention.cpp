// Decode attention read straight from FP8 codes (the CPU reference of the fused CUDA kernel) against LibTorch's
// scaled_dot_product_attention on the dequantized K/V: grouped-query heads, per-tensor/head/channel scales, both
// formats, a strided cache view, bf16 queries, and the errors.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "kernels/fp8_attention.h"
#include "test_helpers.h"

using namespace kvscope;
using kernels::Fp8Format;

namespace {

struct Cache {
  at::Tensor kCodes, vCodes, kScale, vScale, kDeq, vDeq;
};

at::ScalarType torchFp8(Fp8Format f) {
  return f == Fp8Format::E4M3FN ? at::kFloat8_e4m3fn : at::kFloat8_e5m2;
}

// Codes as the fp8 layer stores them ((x / scale) cast to fp8), inside a buffer with spare capacity (a strided view).
Cache makeCache(std::int64_t B, std::int64_t Hkv, std::int64_t L, std::int64_t D, Fp8Format f, at::Tensor kScale,
                at::Tensor vScale) {
  // |x / scale| stays below 480 for the scales the tests use (NaN codes are the codec's business, not attention's).
  const at::Tensor k = at::randn({B, Hkv, L, D}).clamp(-3, 3) * 1.5, v = at::randn({B, Hkv, L, D}).clamp(-3, 3) * 0.5;
  Cache c;
  c.kScale = kScale, c.vScale = vScale;
  const auto view = [&](const at::Tensor& x, const at::Tensor& s) {
    at::Tensor buf = at::zeros({B, Hkv, L + 17, D}, at::kByte);
    const at::Tensor codes = buf.narrow(2, 0, L);
    codes.copy_((x / s.view({1, Hkv, 1, D})).to(torchFp8(f)).view(at::kByte));
    return codes;
  };
  c.kCodes = view(k, kScale);
  c.vCodes = view(v, vScale);
  c.kDeq = c.kCodes.view(torchFp8(f)).to(at::kFloat) * kScale.view({1, Hkv, 1, D});
  c.vDeq = c.vCodes.view(torchFp8(f)).to(at::kFloat) * vScale.view({1, Hkv, 1, D});
  return c;
}

at::Tensor sdpa(const at::Tensor& q, const Cache& c) {
  return at::scaled_dot_product_attention(q.to(at::kFloat), c.kDeq, c.vDeq, std::nullopt, 0.0, false, std::nullopt,
                                          q.size(1) != c.kCodes.size(1));
}

}  // namespace

TEST(Fp8Attention, CpuReferenceMatchesSdpaOnDequantizedStates) {
  at::manual_seed(3);
  const std::int64_t B = 2, Hq = 9, Hkv = 3, D = 64;
  for (Fp8Format f : {Fp8Format::E4M3FN, Fp8Format::E5M2})
    for (int gran = 0; gran < 3; ++gran)
      for (std::int64_t L : {1, 7, 300, 2049}) {
        SCOPED_TRACE("format " + std::to_string(static_cast<int>(f)) + " granularity " + std::to_string(gran) + " L " +
                     std::to_string(L));
        const auto scaleOf = [&](double base) {
          if (gran == 0) return at::full({Hkv, D}, base / 448.0);
          if (gran == 1) return (at::rand({Hkv, 1}) + 0.5).expand({Hkv, D}).contiguous() * (base / 448.0);
          return (at::rand({Hkv, D}) + 0.5) * (base / 448.0);
        };
        const Cache c = makeCache(B, Hkv, L, D, f, scaleOf(12.0), scaleOf(4.0));
        const at::Tensor q = at::randn({B, Hq, 1, D});
        const at::Tensor mine = kernels::fp8DecodeAttention(q, c.kCodes, c.vCodes, c.kScale, c.vScale, f);
        const at::Tensor ref = sdpa(q, c);
        ASSERT_EQ(mine.sizes(), ref.sizes());
        EXPECT_TRUE(at::allclose(mine, ref, 1e-4, 1e-5)) << (mine - ref).abs().max().item<float>();
      }
}

TEST(Fp8Attention, MultiHeadAttentionBf16QueryAndCustomScale) {
  at::manual_seed(4);
  const std::int64_t B = 1, H = 4, D = 32, L = 513;
  const Cache c = makeCache(B, H, L, D, Fp8Format::E4M3FN, at::full({H, D}, 0.01), at::full({H, D}, 0.004));
  const at::Tensor q = at::randn({B, H, 1, D});
  const at::Tensor mine =
      kernels::fp8DecodeAttention(q, c.kCodes, c.vCodes, c.kScale, c.vScale, Fp8Format::E4M3FN, 0.3);
  const at::Tensor ref = at::scaled_dot_product_attention(q, c.kDeq, c.vDeq, std::nullopt, 0.0, false, 0.3);
  EXPECT_TRUE(at::allclose(mine, ref, 1e-4, 1e-5));
  const at::Tensor qb = q.to(at::kBFloat16);
  const at::Tensor mb = kernels::fp8DecodeAttention(qb, c.kCodes, c.vCodes, c.kScale, c.vScale, Fp8Format::E4M3FN);
  EXPECT_EQ(mb.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::allclose(mb.to(at::kFloat), sdpa(qb, c), 1e-2, 1e-2));
}

TEST(Fp8Attention, BadInputsAreClearErrors) {
  const Cache c = makeCache(1, 2, 5, 16, Fp8Format::E4M3FN, at::full({2, 16}, 0.01), at::full({2, 16}, 0.01));
  const at::Tensor q = at::randn({1, 4, 1, 16});
  const auto call = [&](const at::Tensor& qq, const at::Tensor& ks) {
    return kernels::fp8DecodeAttention(qq, c.kCodes, c.vCodes, ks, c.vScale, Fp8Format::E4M3FN);
  };
  EXPECT_NO_THROW(call(q, c.kScale));
  EXPECT_ERROR_CODE(call(at::randn({1, 4, 2, 16}), c.kScale), ErrorCode::Internal);  // two query tokens
  EXPECT_ERROR_CODE(call(at::randn({1, 3, 1, 16}), c.kScale), ErrorCode::Internal);  // 3 heads over 2 KV heads
  EXPECT_ERROR_CODE(call(q, at::ones({2})), ErrorCode::Internal);                    // a bare per-head scale
  EXPECT_ERROR_CODE(call(q.to(at::kDouble), c.kScale), ErrorCode::Internal);
  try {
    kernels::fp8DecodeAttention(q, c.kCodes.narrow(2, 0, 0), c.vCodes.narrow(2, 0, 0), c.kScale, c.vScale,
                                Fp8Format::E4M3FN);
    FAIL() << "an empty cache was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Internal);
    EXPECT_NE(std::string(e.what()).find("empty cache"), std::string::npos);
  }
}
