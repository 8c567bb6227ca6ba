// Fused attention (attention=fused, the default) against reference mode (attention=reference, transformers' exact
// computation) for every backend, sinks, per-layer K/V configs, beams, crop and reset:
// - what update() returns in fused mode (dequantized from the stored form for that call) is bit for bit what the
//   reference mirror holds (fp32 states): the stored forms are read exactly;
// - attend() agrees with reference mode within 2e-5 (absolute, on attention outputs of magnitude ~1): only the
//   accumulation order differs;
// - fused layers hold no full-precision history (transient 0) and less than reference layers.
// Also the kernel alone against LibTorch's scaled_dot_product_attention (GQA, causal blocks, sequence splits).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cache/detail/attention_sources.h"
#include "cache/kv_cache.h"
#include "cache/layer.h"
#include "isa_helpers.h"
#include "kernels/cpu/segmented_attention.h"
#include "kernels/cpu/simd.h"
#include "tensor_helpers.h"
#include "test_helpers.h"

using namespace kvscope;
using namespace kvscope::cache;
using testutil::sameBits;

namespace {

constexpr float kTolerance = 2e-5f;

CacheConfig configFor(const std::string& spec, AttentionMode mode) {
  CacheConfig c = parseSpec(spec);
  c.attention = mode;
  for (auto& r : c.layers) {
    r.keys.attention = mode;
    r.values.attention = mode;
  }
  return c;
}

float maxDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<float>();
}

// One scripted run on two caches (2 layers, batch 3, 2 KV heads, 6 query heads, head_dim 32): a prompt, single
// tokens, a 3-token step, beam reorders, a crop, more tokens. `check` compares each step's two results.
struct Step {
  std::int64_t tokens = 1;
  std::vector<std::int64_t> reorder;  // applied before the step when non-empty
  std::int64_t crop = 0;              // applied before the step when non-zero
};

std::vector<Step> script() {
  std::vector<Step> s;
  s.push_back({37});
  for (int i = 0; i < 14; ++i) s.push_back({1});
  s.push_back({3});
  s.push_back({1, {2, 0, 0}});
  for (int i = 0; i < 9; ++i) s.push_back({1});
  s.push_back({1, {1, 1, 2}});
  s.push_back({2});
  s.push_back({1, {}, -5});
  for (int i = 0; i < 12; ++i) s.push_back({1});
  s.push_back({1, {}, 30});
  for (int i = 0; i < 6; ++i) s.push_back({1});
  return s;
}

constexpr std::int64_t B = 3, Hkv = 2, Hq = 6, D = 32;

// A step's beam reorder and crop, applied to both caches before its states.
void prepare(const Step& s, KvCache& ref, KvCache& fused) {
  if (!s.reorder.empty()) {
    ref.reorder(at::tensor(s.reorder, at::kLong));
    fused.reorder(at::tensor(s.reorder, at::kLong));
  }
  if (s.crop != 0) {
    ref.crop(s.crop);
    fused.crop(s.crop);
  }
}

class FusedVsReference : public ::testing::TestWithParam<const char*> {};

TEST_P(FusedVsReference, UpdateReadsTheStoredFormExactly) {
  at::manual_seed(11);
  const std::string spec = GetParam();
  KvCache ref(configFor(spec, AttentionMode::Reference), 2), fused(configFor(spec, AttentionMode::Fused), 2);
  int step = 0;
  for (const Step& s : script()) {
    SCOPED_TRACE(fmt::format("{} step {}", spec, step++));
    prepare(s, ref, fused);
    for (int l = 0; l < 2; ++l) {
      const at::Tensor k = at::randn({B, Hkv, s.tokens, D}) * 2, v = at::randn({B, Hkv, s.tokens, D});
      auto [rk, rv] = ref.update(l, k, v);
      auto [fk, fv] = fused.update(l, k, v);
      ASSERT_TRUE(sameBits(rk, fk)) << "keys, layer " << l << ": max diff " << maxDiff(rk, fk);
      ASSERT_TRUE(sameBits(rv, fv)) << "values, layer " << l << ": max diff " << maxDiff(rv, fv);
    }
    ASSERT_EQ(ref.seqLength(), fused.seqLength());
    const TensorMemory r = ref.totalMemory(), f = fused.totalMemory();
    EXPECT_EQ(f.payload, r.payload);
    EXPECT_EQ(f.metadata, r.metadata);
    EXPECT_EQ(f.unquantized, r.unquantized);
    EXPECT_EQ(f.transient, 0);
  }
}

TEST_P(FusedVsReference, AttentionAgreesWithinTolerance) {
  at::manual_seed(12);
  const std::string spec = GetParam();
  KvCache ref(configFor(spec, AttentionMode::Reference), 2), fused(configFor(spec, AttentionMode::Fused), 2);
  int step = 0;
  float worst = 0.0f;
  for (const Step& s : script()) {
    SCOPED_TRACE(fmt::format("{} step {}", spec, step++));
    prepare(s, ref, fused);
    for (int l = 0; l < 2; ++l) {
      const at::Tensor q = at::randn({B, Hq, s.tokens, D});
      const at::Tensor k = at::randn({B, Hkv, s.tokens, D}) * 2, v = at::randn({B, Hkv, s.tokens, D});
      const at::Tensor r = ref.layer(l).attend(q, k, v), f = fused.layer(l).attend(q, k, v);
      ASSERT_EQ(r.sizes(), f.sizes());
      ASSERT_TRUE(at::equal(r.isnan(), f.isnan()));
      const float d = maxDiff(at::nan_to_num(r), at::nan_to_num(f));
      worst = std::max(worst, d);
      ASSERT_LE(d, kTolerance) << "layer " << l;
    }
    const TensorMemory r = ref.totalMemory(), f = fused.totalMemory();
    EXPECT_EQ(f.stored(), r.stored());
    EXPECT_EQ(f.transient, 0);
    if (r.transient > 0) EXPECT_LT(f.held(), r.held());
  }
  std::printf("[fused] %-45s max |fused - reference| %.2g\n", spec.c_str(), worst);
}

INSTANTIATE_TEST_SUITE_P(
    Backends, FusedVsReference,
    ::testing::Values("dynamic", "fp8", "fp8:granularity=head,overflow=saturate",
                      "fp8:granularity=channel,format=e5m2,overflow=saturate", "fp8:overflow=recalibrate",
                      "quanto:nbits=4,q_group_size=32,residual_length=8",
                      "quanto:nbits=2,axis_key=-1,axis_value=-1,q_group_size=2,residual_length=5",
                      "hqq:nbits=4,q_group_size=32,residual_length=8",
                      "hqq:nbits=3,axis_key=1,axis_value=1,q_group_size=16,residual_length=6",
                      "hqq:nbits=2,q_group_size=64,residual_length=7,optimize=false",
                      "kivi:q_group_size=8,residual_length=8", "kivi:nbits=4,q_group_size=16,residual_length=4",
                      "fp8:sink=4,overflow=saturate", "quanto:nbits=4,q_group_size=32,residual_length=8,sink=3",
                      "kivi:q_group_size=8,residual_length=8,sink=40",
                      "layers=0:dynamic;*:K=fp8:granularity=head,V=quanto:nbits=4,q_group_size=32,residual_length=8",
                      "layers=0:K=kivi:q_group_size=8,V=hqq:nbits=4,q_group_size=32;1:fp8",
                      "layers=*:K=dynamic,V=fp8:overflow=saturate"),
    [](const auto& info) { return fmt::format("c{}", info.index); });

// Prefill chunks after a history longer than one key block (4,096): fused attention reads the history a block at a
// time and merges the partial results by their log-sum-exp; reference mode attends over the whole layer at once. Both
// agree within the tolerance, for unquantized, quantized, per-side and llama.cpp layers.
TEST(FusedAttention, LongHistoryChunksAttendBlockByBlock) {
  at::manual_seed(13);
  for (const char* spec : {"dynamic", "fp8:overflow=saturate", "quanto:nbits=4,q_group_size=32,residual_length=8",
                           "kivi:q_group_size=8,residual_length=8", "layers=*:K=fp8,V=hqq:nbits=4,q_group_size=32",
                           "llamacpp:type_k=q4_0,type_v=q8_0"}) {
    SCOPED_TRACE(spec);
    KvCache ref(configFor(spec, AttentionMode::Reference), 1), fused(configFor(spec, AttentionMode::Fused), 1);
    float worst = 0.0f;
    for (std::int64_t t : {512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 100, 700}) {
      const at::Tensor q = at::randn({1, Hq, t, D});
      const at::Tensor k = at::randn({1, Hkv, t, D}) * 2, v = at::randn({1, Hkv, t, D});
      const at::Tensor r = ref.layer(0).attend(q, k, v), f = fused.layer(0).attend(q, k, v);
      ASSERT_EQ(r.sizes(), f.sizes());
      worst = std::max(worst, maxDiff(r, f));
    }
    EXPECT_EQ(fused.seqLength(), 5920);
    EXPECT_LE(worst, kTolerance);
  }
}

TEST(FusedAttention, NanInTheStoredCodesReachesTheOutputAsInReference) {
  // fp8 with overflow=nan (the seed's policy): a later value past the frozen scale is stored as NaN; attention over it
  // is NaN in both modes.
  KvCache ref(configFor("fp8", AttentionMode::Reference), 1), fused(configFor("fp8", AttentionMode::Fused), 1);
  const at::Tensor q = at::randn({1, 2, 1, 8});
  const at::Tensor k0 = at::randn({1, 1, 5, 8}), v0 = at::randn({1, 1, 5, 8});
  ref.layer(0).attend(at::randn({1, 2, 5, 8}), k0, v0);
  fused.layer(0).attend(at::randn({1, 2, 5, 8}), k0, v0);
  const at::Tensor big = at::full({1, 1, 1, 8}, 1e4f);
  const at::Tensor r = ref.layer(0).attend(q, big, big), f = fused.layer(0).attend(q, big, big);
  EXPECT_TRUE(r.isnan().all().item<bool>());
  EXPECT_TRUE(f.isnan().all().item<bool>());
}

TEST(FusedAttention, ReferenceIsTheDefaultOnlyWhenAsked) {
  EXPECT_EQ(parseSpec("fp8").attention, AttentionMode::Fused);
  EXPECT_EQ(parseSpec("quanto:attention=reference").attention, AttentionMode::Reference);
  EXPECT_EQ(toSpec(parseSpec("hqq:attention=reference")), "hqq:attention=reference");
  EXPECT_EQ(toSpec(parseSpec("hqq:attention=fused")), "hqq");
  EXPECT_THROW(parseSpec("fp8:attention=fast"), ConfigError);
  EXPECT_EQ(configFromJson(toKvscopeJson(parseSpec("kivi:attention=reference"))).attention, AttentionMode::Reference);
  EXPECT_TRUE(allFused(parseSpec("layers=0:dynamic;*:K=fp8,V=quanto")));
  EXPECT_FALSE(allFused(parseSpec("layers=0:dynamic;*:K=fp8:attention=reference,V=quanto")));
}

// The portable path for one scope where `on` (else the path that runs: the best the CPU has, or KVSCOPE_ISA's).
struct PortableOnly {
  explicit PortableOnly(bool on) : scope(on ? kernels::Isa::Scalar : kernels::isa()) {}
  kernels::IsaScope scope;
};

// The kernel alone: full-precision sources against LibTorch's attention, with GQA, causal query blocks, long
// sequences (several splits) and strided buffers; the AVX2 path (head_dim 64 and 24) and the portable one (also
// head_dim 12, which the AVX2 path leaves to it).
TEST(SegmentedAttention, MatchesSdpaOnFullPrecisionStates) {
  at::manual_seed(5);
  for (bool portable : {false, true})
    for (std::int64_t d : {64, 24, 12})
      for (std::int64_t L : {1, 5, 64, 257, 3000})
        for (std::int64_t T : {1, 4, 16})
          for (int threads : {1, 4}) {
            if (T > L) continue;
            SCOPED_TRACE(fmt::format("portable {} D {} L {} T {} threads {}", portable, d, L, T, threads));
            const PortableOnly mode(portable);
            const std::int64_t b = 2, hq = 9, hkv = 3;
            const at::Tensor buf = at::randn({b, hkv, L + 9, d}), vbuf = at::randn({b, hkv, L + 9, d});
            const at::Tensor k = buf.narrow(2, 0, L), v = vbuf.narrow(2, 0, L);
            const at::Tensor q = at::randn({b, hq, T, d});
            at::Tensor out = at::empty({b, hq, T, d});
            kernels::SegmentedAttentionArgs a;
            a.q = q.const_data_ptr<float>();
            a.B = b, a.Hq = hq, a.Hkv = hkv, a.T = T, a.D = d;
            a.smScale = 1.0f / std::sqrt(static_cast<float>(d));
            a.out = out.mutable_data_ptr<float>();
            a.threads = threads;
            const auto src = cache::detail::fpSource(k), vsrc = cache::detail::fpSource(v);
            kernels::segmentedAttention(a, *src, *vsrc,
                                        [](std::int64_t n, const auto& fn) { at::parallel_for(0, n, 1, fn); });
            std::optional<at::Tensor> mask;
            if (T > 1) mask = at::ones({T, L}, at::kBool).tril(L - T).view({1, 1, T, L});
            const at::Tensor want = at::scaled_dot_product_attention(q, k, v, mask, 0.0, false, std::nullopt, true);
            EXPECT_LE(maxDiff(out, want), 1e-5f);
          }
}

TEST(SegmentedAttention, Fp8SourceDecodesEveryCode) {
  // All 256 codes of both formats, through the vectorized decode, against the scalar decoder the codec tests prove
  // equal to LibTorch's cast.
  for (bool portable : {false, true})
    for (auto f : {kernels::Fp8Format::E4M3FN, kernels::Fp8Format::E5M2}) {
      const PortableOnly mode(portable);
      at::Tensor codes = at::arange(0, 256, at::kInt).to(at::kByte).view({1, 1, 4, 64});
      const at::Tensor scale = at::full({1, 64}, 0.75f);
      const auto src = cache::detail::fp8Source(codes, scale, f);
      std::vector<float> out(256);
      src->read(0, 0, 0, 4, out.data());
      for (int c = 0; c < 256; ++c) {
        const float want = kernels::decodeFp8(static_cast<std::uint8_t>(c), f) * 0.75f;
        if (std::isnan(want))
          EXPECT_TRUE(std::isnan(out[c])) << c;
        else
          EXPECT_EQ(out[c], want) << "code " << c;
      }
    }
}

// Random codes (NaN and e5m2's infinities among them) with per-channel scales: the AVX2 decode gives the portable
// loop's floats bit for bit, NaN bits included.
TEST(SegmentedAttention, Fp8Avx2DecodeIsThePortableOneBitForBit) {
  KVS_RUN_ON_ISA(kernels::Isa::Avx2);
  at::manual_seed(11);
  for (auto f : {kernels::Fp8Format::E4M3FN, kernels::Fp8Format::E5M2}) {
    const at::Tensor codes = at::randint(0, 256, {2, 3, 100, 64}, at::kLong).to(at::kByte);
    const at::Tensor scale = at::rand({3, 64}) * 0.1 + 1e-3;
    const auto src = cache::detail::fp8Source(codes, scale, f);
    std::vector<float> fast(std::size_t{100} * 64), slow(std::size_t{100} * 64);
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t h = 0; h < 3; ++h) {
        src->read(b, h, 7, 93, fast.data());
        {
          const PortableOnly mode(true);
          src->read(b, h, 7, 93, slow.data());
        }
        // Bit for bit, NaN payloads included: the bytes are what is compared.
        // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison)
        EXPECT_EQ(std::memcmp(fast.data(), slow.data(), std::size_t{93} * 64 * sizeof(float)), 0) << b << " " << h;
      }
  }
}

TEST(SegmentedAttention, RejectsMismatchedSides) {
  const auto k = cache::detail::fpSource(at::randn({1, 1, 4, 8})), v = cache::detail::fpSource(at::randn({1, 1, 5, 8}));
  const at::Tensor q = at::randn({1, 1, 1, 8});
  at::Tensor out = at::empty({1, 1, 1, 8});
  kernels::SegmentedAttentionArgs a;
  a.q = q.const_data_ptr<float>();
  a.B = 1, a.Hq = 1, a.Hkv = 1, a.T = 1, a.D = 8;
  a.out = out.mutable_data_ptr<float>();
  EXPECT_ERROR_CODE(kernels::segmentedAttention(a, *k, *v, [](std::int64_t n, const auto& fn) { fn(0, n); }),
                    ErrorCode::Internal);
}

}  // namespace
