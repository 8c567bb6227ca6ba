// Behaviour of the cache layers: what they return, store, count and report.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cfloat>
#include <set>

#include "cache/kv_cache.h"
#include "cache/layer.h"
#include "tensor_helpers.h"

using namespace kvscope::cache;
using kvscope::testutil::randn;
using kvscope::testutil::sameBits;

namespace {

// transformers' fp8 reference: (x.float() / scale).to(e4m3fn) then (q.float() * scale).to(dtype).
at::Tensor fp8RoundTrip(const at::Tensor& x, const at::Tensor& scale) {
  return ((x.to(at::kFloat) / scale).to(at::kFloat8_e4m3fn).to(at::kFloat) * scale).to(x.scalar_type());
}

}  // namespace

TEST(DynamicLayer, ConcatenatesWithAmortizedGrowth) {
  at::manual_seed(0);
  auto layer = makeLayer(parseSpec("dynamic"));
  const at::Tensor p = randn(2, 3, 5, 8);
  auto [k, v] = layer->update(p, p * 2);
  EXPECT_TRUE(at::equal(k, p));
  std::vector<at::Tensor> all{p};
  std::set<const void*> storages;
  for (int i = 0; i < 1000; ++i) {
    const at::Tensor t = randn(2, 3, 1, 8);
    all.push_back(t);
    std::tie(k, v) = layer->update(t, t * 2);
    storages.insert(k.storage().data());
  }
  EXPECT_TRUE(at::equal(k, at::cat(all, 2)));
  EXPECT_TRUE(at::equal(v, at::cat(all, 2) * 2));
  EXPECT_EQ(layer->seqLength(), 1005);
  // Capacity doubles: a handful of reallocations for 1000 appends, not one per step.
  EXPECT_LE(storages.size(), 10u);
  const LayerMemory m = layer->memory();
  EXPECT_EQ(m.keys.payload, 2 * 3 * 1005 * 8 * 4);
  EXPECT_EQ(m.keys.unquantized, m.keys.payload);
}

TEST(DynamicLayer, RejectsAChangedLayout) {
  auto layer = makeLayer(parseSpec("dynamic"));
  layer->update(randn(1, 2, 4, 8), randn(1, 2, 4, 8));
  try {
    layer->update(randn(1, 3, 1, 8), randn(1, 3, 1, 8));
    FAIL();
  } catch (const CacheError& e) {
    EXPECT_NE(std::string(e.what()).find("does not continue the cached states"), std::string::npos) << e.what();
  }
  EXPECT_THROW(layer->update(at::randn({2, 8}), at::randn({2, 8})), CacheError);
  EXPECT_THROW(layer->update(randn(1, 2, 1, 8).to(at::kInt), randn(1, 2, 1, 8)), CacheError);
  // attend() checks the queries against the states before it stores them: head size, KV head groups, tokens.
  EXPECT_THROW(layer->attend(randn(1, 4, 1, 16), randn(1, 2, 1, 8), randn(1, 2, 1, 8)), CacheError);
  EXPECT_THROW(layer->attend(randn(1, 3, 1, 8), randn(1, 2, 1, 8), randn(1, 2, 1, 8)), CacheError);
  EXPECT_THROW(layer->attend(randn(1, 4, 2, 8), randn(1, 2, 1, 8), randn(1, 2, 1, 8)), CacheError);
  EXPECT_EQ(layer->seqLength(), 4);  // nothing was lost
}

TEST(Fp8Layer, SeedSemanticsBitForBit) {
  at::manual_seed(1);
  for (auto dt : {at::kFloat, at::kBFloat16, at::kHalf}) {
    auto layer = makeLayer(parseSpec("fp8"));
    const at::Tensor pk = randn(2, 3, 7, 16, dt), pv = randn(2, 3, 7, 16, dt) * 3;
    auto [k, v] = layer->update(pk, pv);
    EXPECT_TRUE(k.is_same(pk));  // the first update returns its inputs
    const at::Tensor sk = (pk.abs().amax().to(at::kFloat) / 448.0).clamp_min(FLT_MIN);
    const at::Tensor sv = (pv.abs().amax().to(at::kFloat) / 448.0).clamp_min(FLT_MIN);
    ASSERT_EQ(layer->stats().keys.scales.size(), 1u);
    EXPECT_EQ(layer->stats().keys.scales[0], sk.item<float>());
    std::vector<at::Tensor> hk{pk}, hv{pv};
    for (int i = 0; i < 20; ++i) {
      const at::Tensor nk = randn(2, 3, 1, 16, dt), nv = randn(2, 3, 1, 16, dt);
      hk.push_back(nk);
      hv.push_back(nv);
      std::tie(k, v) = layer->update(nk, nv);
    }
    EXPECT_EQ(k.scalar_type(), dt);
    EXPECT_TRUE(sameBits(k, fp8RoundTrip(at::cat(hk, 2), sk)));
    EXPECT_TRUE(sameBits(v, fp8RoundTrip(at::cat(hv, 2), sv)));
    const LayerMemory m = layer->memory();
    EXPECT_EQ(m.keys.payload, 2 * 3 * 27 * 16);
    EXPECT_EQ(m.keys.metadata, 4);
    EXPECT_EQ(m.keys.unquantized, 2 * 3 * 27 * 16 * static_cast<std::int64_t>(c10::elementSize(dt)));
  }
}

TEST(Fp8Layer, AllZeroPromptGetsTheTinyScale) {
  auto layer = makeLayer(parseSpec("fp8"));
  layer->update(at::zeros({1, 1, 4, 8}), at::zeros({1, 1, 4, 8}));
  EXPECT_EQ(layer->stats().keys.scales[0], FLT_MIN);
}

TEST(Fp8Layer, OverflowPolicies) {
  const at::Tensor prompt = at::full({1, 2, 4, 8}, 1.0f);
  at::Tensor big = at::full({1, 2, 1, 8}, 0.5f);
  big.index_put_({0, 0, 0, 0}, 10.0f);  // 10 / (1/448) = 4480: far beyond e4m3fn
  big.index_put_({0, 1, 0, 3}, 1.03f);  // 461.4: rounds to 448, counted as overflow, not NaN
  {
    auto layer = makeLayer(parseSpec("fp8"));
    layer->update(prompt, prompt);
    auto [k, v] = layer->update(big, big);
    EXPECT_TRUE(std::isnan(k[0][0][4][0].item<float>()));  // PyTorch's cast, as transformers: silent NaN
    EXPECT_EQ(layer->stats().keys.overflow, 2);
    EXPECT_EQ(layer->stats().keys.nonFinite, 1);
    EXPECT_EQ(layer->stats().keys.nonFiniteTotal, 1);
  }
  {
    auto layer = makeLayer(parseSpec("fp8:overflow=saturate"));
    layer->update(prompt, prompt);
    auto [k, v] = layer->update(big, big);
    EXPECT_FLOAT_EQ(k[0][0][4][0].item<float>(), 1.0f);  // clamped to 448 * scale = the prompt's amax
    EXPECT_EQ(layer->stats().keys.overflow, 2);
    EXPECT_EQ(layer->stats().keys.nonFinite, 0);
  }
  {
    auto layer = makeLayer(parseSpec("fp8:overflow=recalibrate"));
    layer->update(prompt, prompt);
    auto [k, v] = layer->update(big, big);
    EXPECT_EQ(layer->stats().keys.recalibrations, 1);
    EXPECT_FLOAT_EQ(layer->stats().keys.scales[0], 10.0f / 448.0f);
    EXPECT_NEAR(k[0][0][4][0].item<float>(), 10.0f, 0.5f);
    EXPECT_NEAR(k[0][0][0][0].item<float>(), 1.0f, 0.07f);  // stored states re-encoded with the grown scale
    EXPECT_EQ(layer->stats().keys.nonFinite, 0);
  }
}

TEST(Fp8Layer, FinerGranularities) {
  at::manual_seed(2);
  at::Tensor p = randn(2, 3, 6, 8);
  p.select(1, 2).mul_(100);  // one loud head
  {
    auto layer = makeLayer(parseSpec("fp8:granularity=head"));
    layer->update(p, p);
    EXPECT_EQ(layer->stats().keys.scaleShape, (std::vector<std::int64_t>{3}));
    const at::Tensor scale = (p.abs().amax({0, 2, 3}) / 448.0).clamp_min(FLT_MIN);
    const at::Tensor n = randn(2, 3, 1, 8);
    auto [k, v] = layer->update(n, n);
    EXPECT_TRUE(sameBits(k, fp8RoundTrip(at::cat({p, n}, 2), scale.view({1, 3, 1, 1}))));
  }
  {
    auto layer = makeLayer(parseSpec("fp8:granularity=channel"));
    layer->update(p, p);
    EXPECT_EQ(layer->stats().keys.scaleShape, (std::vector<std::int64_t>{3, 8}));
    EXPECT_EQ(layer->memory().keys.metadata, 3 * 8 * 4);
    const at::Tensor scale = (p.abs().amax({0, 2}) / 448.0).clamp_min(FLT_MIN);
    const at::Tensor n = randn(2, 3, 1, 8);
    auto [k, v] = layer->update(n, n);
    EXPECT_TRUE(sameBits(k, fp8RoundTrip(at::cat({p, n}, 2), scale.view({1, 3, 1, 8}))));
  }
}

TEST(Fp8Layer, ResetDropsTheScale) {
  auto layer = makeLayer(parseSpec("fp8"));
  layer->update(at::full({1, 1, 2, 4}, 1.0f), at::full({1, 1, 2, 4}, 1.0f));
  layer->reset();
  EXPECT_EQ(layer->seqLength(), 0);
  auto [k, v] = layer->update(at::full({1, 1, 2, 4}, 7.0f), at::full({1, 1, 2, 4}, 7.0f));
  EXPECT_FLOAT_EQ(layer->stats().keys.scales[0], 7.0f / 448.0f);
}

TEST(Layers, BeamReorderMovesEveryPart) {
  at::manual_seed(3);
  for (const char* spec : {"dynamic", "fp8", "quanto:nbits=4,q_group_size=16,residual_length=4",
                           "hqq:nbits=4,q_group_size=16,residual_length=4"}) {
    auto layer = makeLayer(parseSpec(spec));
    layer->update(randn(3, 2, 8, 16), randn(3, 2, 8, 16));
    at::Tensor k, v;
    for (int i = 0; i < 2; ++i) std::tie(k, v) = layer->update(randn(3, 2, 1, 16), randn(3, 2, 1, 16));
    const at::Tensor before = k.clone();
    const at::Tensor idx = at::tensor({2, 2, 0}, at::kLong);
    layer->reorder(idx);
    const at::Tensor n = randn(3, 2, 1, 16);
    std::tie(k, v) = layer->update(n, n);  // residual 2 + 1 < 4: no flush, history as stored
    EXPECT_TRUE(sameBits(k.narrow(2, 0, before.size(2)), before.index_select(0, idx))) << spec;
    if (std::string(spec) != "fp8") EXPECT_TRUE(at::equal(k.narrow(2, before.size(2), 1), n)) << spec;  // residual
    if (std::string(spec).rfind("quanto", 0) == 0 || std::string(spec).rfind("hqq", 0) == 0) {
      EXPECT_EQ(layer->stats().storeRows, (std::vector<std::int64_t>{2, 2, 0})) << spec;
      std::tie(k, v) = layer->update(n, n);  // flush: the store now follows the reordered rows
      EXPECT_EQ(layer->stats().storeRows, (std::vector<std::int64_t>{0, 1, 2})) << spec;
    }
    EXPECT_THROW(layer->reorder(at::tensor({0, 1}, at::kLong)), CacheError) << spec;
    EXPECT_THROW(layer->reorder(at::tensor({0, 1, 3}, at::kLong)), CacheError) << spec;
  }
}

TEST(Layers, CropKeepsAPrefix) {
  at::manual_seed(4);
  for (const char* spec : {"dynamic", "fp8", "quanto:q_group_size=16,residual_length=8", "hqq:q_group_size=16"}) {
    auto layer = makeLayer(parseSpec(spec));
    layer->update(randn(1, 2, 10, 16), randn(1, 2, 10, 16));
    at::Tensor k, v;
    for (int i = 0; i < 3; ++i) std::tie(k, v) = layer->update(randn(1, 2, 1, 16), randn(1, 2, 1, 16));
    const at::Tensor before = k.clone();
    layer->crop(11);  // inside the residual for quanto/hqq
    EXPECT_EQ(layer->seqLength(), 11) << spec;
    const at::Tensor n = randn(1, 2, 1, 16);
    std::tie(k, v) = layer->update(n, n);
    EXPECT_EQ(k.size(2), 12) << spec;
    EXPECT_TRUE(at::equal(k.narrow(2, 0, 11), before.narrow(2, 0, 11))) << spec;
    layer->crop(-4);
    EXPECT_EQ(layer->seqLength(), 8) << spec;
  }
}

TEST(ResidualLayers, FlushEveryResidualLengthSteps) {
  at::manual_seed(5);
  auto layer = makeLayer(parseSpec("quanto:nbits=4,q_group_size=16,residual_length=4"));
  const at::Tensor p = randn(1, 2, 8, 16);
  layer->update(p, p);
  EXPECT_TRUE(layer->stats().keys.quantized);
  EXPECT_EQ(layer->stats().keys.quantizedTokens, 8);
  std::vector<bool> flushed;
  for (int i = 0; i < 8; ++i) {
    layer->update(randn(1, 2, 1, 16), randn(1, 2, 1, 16));
    flushed.push_back(layer->stats().keys.quantized);
  }
  // residual holds at most residual_length - 1 tokens: steps 4 and 8 re-quantize the whole history.
  EXPECT_EQ(flushed, (std::vector<bool>{false, false, false, true, false, false, false, true}));
  EXPECT_EQ(layer->stats().keys.quantizedTokens, 16);
  const LayerMemory m = layer->memory();
  EXPECT_EQ(m.keys.payload, 16 * 2 * 16 / 2);    // int4: two values a byte
  EXPECT_EQ(m.keys.metadata, 2 * (16 * 2) * 4);  // one fp32 scale and shift per 16-value group
  EXPECT_EQ(m.keys.residual, 0);
  layer->update(randn(1, 2, 1, 16), randn(1, 2, 1, 16));
  EXPECT_EQ(layer->memory().keys.residual, 2 * 16 * 4);
}

TEST(ResidualLayers, GroupSizeThatDoesNotDivideIsAClearError) {
  auto layer = makeLayer(parseSpec("quanto:axis_key=-1,q_group_size=64"));
  try {
    layer->update(randn(1, 2, 5, 16), randn(1, 2, 5, 16));
    FAIL();
  } catch (const CacheError& e) {
    EXPECT_NE(std::string(e.what()).find("Group size (64) must be a divisor of (10)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(layer->seqLength(), 0);
  auto hqq = makeLayer(parseSpec("hqq:q_group_size=64"));
  EXPECT_THROW(hqq->update(randn(1, 1, 3, 7), randn(1, 1, 3, 7)), CacheError);
}

TEST(Stats, ErrorMapsAndAmax) {
  at::manual_seed(6);
  StatsOptions so;
  so.tokenBin = 4;
  auto layer = makeLayer(parseSpec("fp8"), so);
  const at::Tensor p = randn(2, 3, 10, 8);
  layer->update(p, p);
  const TensorStats& st = layer->stats().keys;
  ASSERT_EQ(st.error.heads, 3);
  EXPECT_EQ(st.error.ranges, 3);
  EXPECT_EQ(st.error.channels, 8);
  EXPECT_EQ(st.error.tokenBin, 4);
  const at::Tensor e = (fp8RoundTrip(p, (p.abs().amax() / 448.0)) - p);
  const float expected = (e.select(1, 1).narrow(1, 4, 4).select(2, 5).square().sum() /
                          p.select(1, 1).narrow(1, 4, 4).select(2, 5).square().sum())
                             .sqrt()
                             .item<float>();
  EXPECT_NEAR(st.error.rel(1, 1, 5), expected, 1e-6);
  EXPECT_LT(st.error.rel(0, 0, 0), 0.1f);
  ASSERT_EQ(st.amaxPerHead.size(), 3u);
  EXPECT_FLOAT_EQ(st.amaxPerHead[2], p.select(1, 2).abs().max().item<float>());
  layer->update(randn(2, 3, 1, 8), randn(2, 3, 1, 8));
  EXPECT_EQ(layer->stats().keys.error.tokenStart, 10);
  EXPECT_EQ(layer->stats().keys.error.ranges, 1);
}

TEST(KvCache, HoldsOneLayerPerDecoderLayer) {
  KvCache cache(parseSpec("quanto:nbits=2,q_group_size=16"), 3);
  EXPECT_EQ(cache.numLayers(), 3);
  for (int l = 0; l < 3; ++l) cache.update(l, randn(1, 2, 32, 16), randn(1, 2, 32, 16));
  EXPECT_EQ(cache.seqLength(), 32);
  const TensorMemory t = cache.totalMemory();
  EXPECT_EQ(t.payload, 3 * 2 * (32 * 2 * 16) / 4);  // int2: four values a byte, K and V, three layers
  EXPECT_EQ(t.unquantized, 3 * 2 * 32 * 2 * 16 * 4);
  EXPECT_THROW(cache.update(3, randn(1, 2, 1, 16), randn(1, 2, 1, 16)), CacheError);
  EXPECT_THROW(KvCache(parseSpec("fp8"), 0), ConfigError);
  cache.reset();
  EXPECT_EQ(cache.seqLength(), 0);
}
