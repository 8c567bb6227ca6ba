// The FP8 codec against LibTorch's own casts: every float32 bit pattern, every code, and the bulk runs with scales.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/fp8_cpu.h"
#include "kernels/fp8.h"

using namespace kvscope::kernels;

namespace {

// Compares encode(x) with at::Tensor::to(fp8) over all 2^32 float32 inputs, in chunks.
void exhaustive(Fp8Format f) {
  const at::ScalarType target = f == Fp8Format::E4M3FN ? at::kFloat8_e4m3fn : at::kFloat8_e5m2;
  constexpr std::int64_t chunk = std::int64_t{1} << 24;
  at::Tensor bits = at::empty({chunk}, at::kInt);
  std::vector<std::uint8_t> ours(chunk);
  std::int64_t mismatches = 0;
  for (std::int64_t base = 0; base < (std::int64_t{1} << 32); base += chunk) {
    auto* p = reinterpret_cast<std::uint32_t*>(bits.data_ptr<std::int32_t>());
    for (std::int64_t i = 0; i < chunk; ++i) p[i] = static_cast<std::uint32_t>(base + i);
    const at::Tensor ref = bits.view(at::kFloat).to(target).view(at::kByte).contiguous();
    const auto* r = ref.data_ptr<std::uint8_t>();
    const auto* x = reinterpret_cast<const float*>(p);
    for (std::int64_t i = 0; i < chunk; ++i) ours[i] = encodeFp8(x[i], f);
    if (std::memcmp(ours.data(), r, chunk) != 0) {
      for (std::int64_t i = 0; i < chunk && mismatches < 5; ++i)
        if (ours[i] != r[i]) {
          ADD_FAILURE() << std::hex << "bits 0x" << p[i] << ": ours 0x" << int(ours[i]) << " torch 0x" << int(r[i]);
          ++mismatches;
        }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

std::uint8_t torchCode(float x, at::ScalarType t) {
  return at::full({1}, x, at::kFloat).to(t).view(at::kByte).item<std::uint8_t>();
}

}  // namespace

TEST(Fp8Codec, E4M3FNBitExactForAllFloat32) {
  exhaustive(Fp8Format::E4M3FN);
}
TEST(Fp8Codec, E5M2BitExactForAllFloat32) {
  exhaustive(Fp8Format::E5M2);
}

TEST(Fp8Codec, E4M3FNSpotValues) {
  // REFERENCE §3, and each checked against LibTorch too.
  const std::pair<float, std::uint8_t> cases[] = {
      {448.0f, 0x7E},
      {456.0f, 0x7E},
      {464.0f, 0x7E},
      {std::nextafter(464.0f, 500.0f), 0x7F},
      {479.99f, 0x7F},
      {480.0f, 0x7F},
      {0x1p-9f, 0x01},
      {0x1p-10f, 0x00},
      {std::nextafter(0x1p-10f, 1.0f), 0x01},
      {3 * 0x1p-10f, 0x02},
      {1.0625f, 0x38},
      {1.1875f, 0x3A},
      {-0.0f, 0x80},
      {-448.0f, 0xFE},
      {INFINITY, 0x7F},
      {-INFINITY, 0xFF},
  };
  for (auto [x, code] : cases) {
    EXPECT_EQ(encodeE4M3FN(x), code) << x;
    EXPECT_EQ(torchCode(x, at::kFloat8_e4m3fn), code) << x;
  }
  EXPECT_EQ(encodeE5M2(65536.0f), 0x7C);
  EXPECT_EQ(encodeE5M2(-65536.0f), 0xFC);
  EXPECT_EQ(encodeE5M2(57344.0f), 0x7B);
}

TEST(Fp8Codec, DecodeEveryCodeAsTorch) {
  for (auto [f, t] : {std::pair{Fp8Format::E4M3FN, at::kFloat8_e4m3fn}, std::pair{Fp8Format::E5M2, at::kFloat8_e5m2}}) {
    const at::Tensor codes = at::arange(256, at::kInt).to(at::kByte);
    const at::Tensor ref = codes.view(t).to(at::kFloat);
    for (int i = 0; i < 256; ++i) {
      const float r = ref[i].item<float>(), ours = decodeFp8(static_cast<std::uint8_t>(i), f);
      if (std::isnan(r)) {
        EXPECT_TRUE(std::isnan(ours)) << i;
      } else {
        EXPECT_EQ(std::memcmp(&r, &ours, 4), 0) << "code " << i << ": torch " << r << " ours " << ours;
      }
    }
  }
}

TEST(Fp8Codec, FormatMaxIsTheLargestFiniteCode) {
  // One Fp8Format for the kernels and the config (cache/fp8_format.h), and its max is each format's largest finite.
  static_assert(std::is_same_v<Fp8Format, kvscope::cache::Fp8Format>);
  for (Fp8Format f : {Fp8Format::E4M3FN, Fp8Format::E5M2}) {
    float largest = 0.0f;
    for (int i = 0; i < 256; ++i)
      if (!fp8NonFinite(static_cast<std::uint8_t>(i), f))
        largest = std::max(largest, decodeFp8(static_cast<std::uint8_t>(i), f));
    EXPECT_EQ(largest, fp8Max(f));
  }
}

TEST(Fp8Codec, RunsWithScalesMatchTorchForEveryDtype) {
  at::manual_seed(7);
  const std::int64_t D = 64, T = 37;
  const at::Tensor scale = at::rand({D}, at::kFloat) * 0.05f + 1e-3f;
  for (auto [dt, et] : {std::pair{at::kFloat, ElemType::F32}, std::pair{at::kBFloat16, ElemType::BF16},
                        std::pair{at::kHalf, ElemType::F16}}) {
    for (auto [f, t] :
         {std::pair{Fp8Format::E4M3FN, at::kFloat8_e4m3fn}, std::pair{Fp8Format::E5M2, at::kFloat8_e5m2}}) {
      at::Tensor x = (at::randn({T, D}) * 8).to(dt).contiguous();
      // Values at the formats' edges: 448, 464, just above, 480, 57344, 61440, inf, NaN (times the scale).
      const float edges[] = {448.f, 464.f, 464.0001f, 479.f, 480.f, 57344.f, 61439.f, 61440.f, INFINITY, NAN};
      for (int e = 0; e < 10; ++e) x[0][e] = edges[e] * scale[e].item<float>();
      for (int e = 0; e < 10; ++e) x[1][e] = -edges[e] * scale[e].item<float>();
      at::Tensor codes = at::empty({T, D}, at::kByte);
      const Fp8Counts c =
          fp8EncodeRun(et, x.data_ptr(), scale.data_ptr<float>(), D, T * D, codes.data_ptr<std::uint8_t>(), f, false);
      const at::Tensor ratio = x.to(at::kFloat) / scale;
      const at::Tensor ref = ratio.to(t).view(at::kByte);
      EXPECT_TRUE(at::equal(codes, ref));
      EXPECT_EQ(c.overflow, (ratio.abs() > fp8Max(f)).sum().item<std::int64_t>());
      EXPECT_EQ(c.nonFinite, (~ref.view(t).to(at::kFloat).isfinite()).sum().item<std::int64_t>());
      // Decode: (code.float() * scale).to(dtype), as transformers' _dequantize.
      at::Tensor out = at::empty({T, D}, dt);
      fp8DecodeRun(et, codes.data_ptr<std::uint8_t>(), scale.data_ptr<float>(), D, T * D, out.data_ptr(), f);
      const at::Tensor dref = (ref.view(t).to(at::kFloat) * scale).to(dt);
      EXPECT_TRUE(at::equal(out.isnan(), dref.isnan()));
      EXPECT_TRUE(at::equal(at::nan_to_num(out), at::nan_to_num(dref)));
    }
  }
}

TEST(Fp8Codec, SaturateClampsInsteadOfNan) {
  const float x[4] = {1000.0f, -1000.0f, 10.0f, NAN};
  const float s[4] = {1.0f, 1.0f, 1.0f, 1.0f};
  std::uint8_t q[4];
  Fp8Counts c = fp8EncodeRun(ElemType::F32, x, s, 4, 4, q, Fp8Format::E4M3FN, true);
  EXPECT_EQ(q[0], 0x7E);
  EXPECT_EQ(q[1], 0xFE);
  EXPECT_EQ(c.overflow, 2);
  EXPECT_EQ(c.nonFinite, 1);  // the NaN input stays NaN
  c = fp8EncodeRun(ElemType::F32, x, s, 4, 4, q, Fp8Format::E4M3FN, false);
  EXPECT_EQ(q[0], 0x7F);
  EXPECT_EQ(c.nonFinite, 3);
}
