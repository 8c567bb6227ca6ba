// The AVX-512 and AVX2 reads of stored cache rows (kernels/cpu/kv_rows_simd.h) against the scalar codec, bit for bit,
// on every row type and on each path this CPU runs: rows the codecs wrote from random values (with llama.cpp's rotation
// and interleaved halves), and random bytes (every code, NaN and infinite scales); and the bases fused attention reads
// rotated rows in (kernels::RowBasis): B and its transpose, and attention over them against the reference.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cache/config.h"
#include "cache/layer.h"
#include "isa_helpers.h"
#include "kernels/cpu/kv_blocks.h"
#include "kernels/cpu/kv_rows_simd.h"
#include "kernels/cpu/segmented_attention.h"
#include "kernels/cpu/simd.h"
#include "kernels/kv_block_codec.h"
#include "tensor_helpers.h"

using namespace kvscope;
namespace kvc = kvscope::kernels::kvcodec;

namespace {

constexpr std::uint32_t kTypes[] = {kvc::F16,
                                    kvc::BF16,
                                    kvc::Q8_0,
                                    kvc::Q4_0,
                                    kvc::Q4_1,
                                    kvc::Q5_0,
                                    kvc::Q5_1,
                                    kvc::IQ4_NL,
                                    kvc::NVFP4,
                                    kvc::NVFP4_4OVER6,
                                    kvc::MXFP4,
                                    kvc::ULTRAQUANT,
                                    kvc::INT8_PER_TOKEN_HEAD,
                                    kvc::FP8_PER_TOKEN_HEAD,
                                    kvc::INT4_PER_TOKEN_HEAD,
                                    kvc::TQ_KEY3,
                                    kvc::TQ_KEY4,
                                    kvc::TQ_KEY_FP8,
                                    kvc::TQ_VALUE3,
                                    kvc::TQ_VALUE4};

bool quantizedByBlocks(std::uint32_t t) {
  return !kvc::isHalfWidth(t);
}

// Same bits, or both NaN (a NaN's payload is not a value).
int mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  int bad = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    std::uint32_t x, y;
    std::memcpy(&x, &a[i], 4);
    std::memcpy(&y, &b[i], 4);
    bad += x != y;
  }
  return bad;
}

// The scalar read KvRowSource falls back to: readRow, then the halves from the even and odd channels.
void scalarRead(std::uint32_t t, const std::uint8_t* row, std::int64_t D, int rotation, bool interleaved, float scale,
                bool stored, float* y) {
  std::vector<float> r(static_cast<std::size_t>(D));
  if (stored)
    kvc::decodeStored(t, row, D, r.data(), scale);
  else
    kvc::readRow(t, row, D, rotation, r.data(), scale);
  for (std::int64_t i = 0; i < D; ++i)
    y[i] = interleaved
               ? (i < D / 2 ? r[static_cast<std::size_t>(2 * i)] : r[static_cast<std::size_t>(2 * (i - D / 2) + 1)])
               : r[static_cast<std::size_t>(i)];
}

}  // namespace

// Each vector path: AVX2 and AVX-512 (a path this CPU lacks is skipped, and says so).
class KvRowsSimdPath : public ::testing::TestWithParam<kernels::Isa> {};

TEST_P(KvRowsSimdPath, EveryRowTypeReadsAsTheScalarCodec) {
  KVS_RUN_ON_ISA(GetParam());
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  int checked = 0;
  for (std::uint32_t t : kTypes)
    for (std::int64_t D : {16, 32, 64, 128, 256}) {
      if (kvc::blockValues(t) > D || D % kvc::blockValues(t) != 0) continue;
      const bool tqKey = t == kvc::TQ_KEY3 || t == kvc::TQ_KEY4;
      for (int rotation : {0, 16, 32, 64}) {
        if (rotation > D || (rotation > 0 && (tqKey || kvc::isInt4PerTokenHead(t)))) continue;
        for (bool interleaved : {false, true}) {
          if (interleaved && D % 32 != 0) continue;
          for (bool stored : {false, true}) {
            if (stored && (rotation > 0 || interleaved)) continue;
            const std::int64_t rb = kernels::kvRowBytes(t, D), n = 24;
            std::vector<std::uint8_t> rows(static_cast<std::size_t>(rb * n));
            std::vector<float> x(static_cast<std::size_t>(D)), tmp(static_cast<std::size_t>(D));
            const float nvfp4Scale = t == kvc::NVFP4 || t == kvc::NVFP4_4OVER6 ? 0.0371f : 1.0f;
            for (std::int64_t r = 0; r < n; ++r) {
              std::uint8_t* row = rows.data() + r * rb;
              if (r % 3 == 2 && quantizedByBlocks(t)) {  // any bytes: every code, odd scales
                for (std::int64_t i = 0; i < rb; ++i) row[i] = static_cast<std::uint8_t>(byte(rng));
              } else {
                const float spread = r % 3 == 0 ? 1.0f : 40.0f;
                for (auto& v : x) v = normal(rng) * spread;
                if (r == 1) x[3] = 300.0f;  // an outlier channel
                kvc::storeRow(t, x.data(), D, rotation, tmp.data(), row, nullptr, nvfp4Scale);
              }
            }
            std::vector<float> want(static_cast<std::size_t>(D * n)), got(want.size(), -1.0f);
            for (std::int64_t r = 0; r < n; ++r)
              scalarRead(t, rows.data() + r * rb, D, rotation, interleaved, nvfp4Scale, stored, want.data() + r * D);
            ASSERT_TRUE(kernels::readKvRowsSimd(t, rows.data(), rb, n, D, rotation, interleaved, nvfp4Scale, got.data(),
                                                stored))
                << t << " D " << D;
            EXPECT_EQ(mismatches(want, got), 0) << "type " << t << " D " << D << " rotation " << rotation
                                                << (interleaved ? " interleaved" : "") << (stored ? " stored" : "");
            ++checked;
          }
        }
      }
    }
  EXPECT_GT(checked, 150);
}

INSTANTIATE_TEST_SUITE_P(Paths, KvRowsSimdPath, ::testing::Values(kernels::Isa::Avx2, kernels::Isa::Avx512),
                         testutil::isaParamName);

// The one switch: the three names, a scope that restores the path before it, a path the CPU lacks clamped to the best
// it has, and the line the model card, bench and doctor print.
TEST(KernelPaths, NamesScopesAndClamping) {
  kernels::Isa p{};
  for (kernels::Isa want : {kernels::Isa::Scalar, kernels::Isa::Avx2, kernels::Isa::Avx512}) {
    ASSERT_TRUE(kernels::parseIsa(kernels::isaName(want), p));
    EXPECT_EQ(p, want);
  }
  EXPECT_FALSE(kernels::parseIsa("avx9", p));
  EXPECT_FALSE(kernels::parseIsa("AVX2", p));
  const kernels::Isa before = kernels::isa();
  {
    const kernels::IsaScope scalar(kernels::Isa::Scalar);
    EXPECT_EQ(kernels::isa(), kernels::Isa::Scalar);
    EXPECT_FALSE(kernels::avx2Paths());
    EXPECT_FALSE(kernels::vnniPaths());
    EXPECT_EQ(kernels::isaSummary().rfind("scalar (", 0), 0u) << kernels::isaSummary();
    {
      const kernels::IsaScope top(kernels::Isa::Avx512);  // clamped where the CPU has less
      EXPECT_EQ(kernels::isa(), kernels::bestIsa());
    }
    EXPECT_EQ(kernels::isa(), kernels::Isa::Scalar);
  }
  EXPECT_EQ(kernels::isa(), before);
  EXPECT_EQ(kernels::runnableIsas().front(), kernels::Isa::Scalar);
  EXPECT_EQ(kernels::runnableIsas().back(), kernels::bestIsa());
}

TEST(KvRowsSimd, DeclinesWhatItHasNoPathFor) {
  std::vector<std::uint8_t> row(256);
  std::vector<float> out(64);
  // Head sizes off its vectors, and a switched-off path: the caller's scalar codec runs.
  EXPECT_FALSE(kernels::readKvRowsSimd(kvc::F16, row.data(), 16, 1, 8, 0, false, 1.0f, out.data()));
  EXPECT_FALSE(kernels::readKvRowsSimd(kvc::F16, row.data(), 48, 1, 24, 0, false, 1.0f, out.data()));
  EXPECT_FALSE(kernels::readKvRowsSimd(kvc::F16, row.data(), 96, 1, 48, 0, true, 1.0f, out.data()));
  EXPECT_FALSE(kernels::readKvRowsSimd(kvc::Q8_0, row.data(), 34, 1, 32, 8, false, 1.0f, out.data()));
  const kernels::IsaScope scalar(kernels::Isa::Scalar);
  EXPECT_FALSE(kernels::readKvRowsSimd(kvc::Q8_0, row.data(), 34, 1, 32, 0, false, 1.0f, out.data()));
}

TEST(RowBasis, IntoIsTheTransposeOfFrom) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr std::int64_t D = 64;
  kernels::RowBasis withSigns;
  withSigns.chunk = 32;
  for (int i = 0; i < 32; ++i) withSigns.signs.push_back(kvc::rhtSign(i));
  withSigns.scale = 1.0f / 32;
  kernels::RowBasis hadamard;
  hadamard.chunk = 64;
  hadamard.scale = kvc::hadamardScale(64);
  hadamard.interleaved = true;
  for (const auto& basis : {withSigns, hadamard}) {
    std::vector<float> q(D), r(D), x, qb;
    for (auto& v : q) v = normal(rng);
    for (auto& v : r) v = normal(rng);
    x = r, qb = q;
    kernels::fromBasis(basis, x.data(), D);   // x = B r
    kernels::intoBasis(basis, qb.data(), D);  // B^T q
    double lhs = 0, rhs = 0;
    for (std::int64_t i = 0; i < D; ++i) lhs += double(q[i]) * x[i], rhs += double(qb[i]) * r[i];
    EXPECT_NEAR(lhs, rhs, 1e-4 * (1 + std::abs(lhs)));
  }
}

// Fused attention reads rotated rows unrotated (queries into the keys' basis, the output out of the values'): the
// same attention as the reference mode's dequantized copy, for every format that stores rotated rows, on each path.
class RowBasisPath : public ::testing::TestWithParam<kernels::Isa> {};

TEST_P(RowBasisPath, FusedAttentionOverRotatedRowsMatchesTheReference) {
  KVS_RUN_ON_ISA(GetParam());
  for (const char* spec :
       {"llamacpp:type_k=q4_0,type_v=q8_0", "llamacpp:type_k=q4_1,type_v=iq4_nl", "vllm:kv=int4_per_token_head",
        "vllm:kv=turboquant_4bit_nc", "vllm:kv=turboquant_3bit_nc", "vllm:kv=ultraquant_4bit"}) {
    cache::StatsOptions so;
    so.enabled = false;
    auto fused = cache::makeLayer(cache::parseSpec(spec), so);
    auto reference = cache::makeLayer(cache::parseSpec(std::string(spec) + ",attention=reference"), so);
    at::manual_seed(11);
    for (std::int64_t T : {40, 1, 1, 7}) {
      const at::Tensor q = at::randn({1, 6, T, 64}), k = at::randn({1, 2, T, 64}) * 3, v = at::randn({1, 2, T, 64});
      const double diff = (fused->attend(q, k, v) - reference->attend(q, k, v)).abs().max().item<double>();
      EXPECT_LT(diff, 2e-5) << spec << " " << kernels::isaName(GetParam()) << " T " << T;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, RowBasisPath,
                         ::testing::Values(kernels::Isa::Scalar, kernels::Isa::Avx2, kernels::Isa::Avx512),
                         testutil::isaParamName);
