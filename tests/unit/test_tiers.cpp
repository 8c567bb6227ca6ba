// Tiers by age (`tiers=AGE:FORMAT,...,*:FORMAT`): parsing and its errors, the SPEC and JSON round trips, the layer
// (the newest tokens in the first tier's rows, whole pages of 16 moved down and re-stored from their stored form,
// attention over every tier in token order, crop, beam reorder, memory per tier), a whole cache, and the exports.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "cache/config.h"
#include "cache/error_history.h"
#include "cache/kv_cache.h"
#include "cache/layer.h"
#include "tensor_helpers.h"
#include "test_helpers.h"

using namespace kvscope;
using namespace kvscope::cache;
using kvscope::testutil::randn;

namespace {

std::string errorOf(const std::string& spec) {
  return testutil::errorOf<ConfigError>([&] { parseSpec(spec); });
}

// What a tier format makes of x (its own layer, alone): x as that tier's rows read it back.
at::Tensor through(const std::string& format, const at::Tensor& x) {
  return makeLayer(tierFormatConfig(format))->update(x, x).first;
}

}  // namespace

TEST(Tiers, ParseRoundTripAndNameTheirOldestFormat) {
  const CacheConfig c = parseSpec("tiers=256:bf16,4096:fp8,*:nvfp4");
  ASSERT_TRUE(c.tiered());
  ASSERT_EQ(c.tiers.size(), 3u);
  EXPECT_EQ(c.tiers[0], (AgeTier{256, "bf16"}));
  EXPECT_EQ(c.tiers[1], (AgeTier{4096, "fp8"}));
  EXPECT_EQ(c.tiers[2], (AgeTier{0, "nvfp4"}));
  EXPECT_EQ(c.backend, Backend::Vllm);  // the oldest tier's format: what the exports speak of
  EXPECT_EQ(toSpec(c), "tiers=256:bf16,4096:fp8,*:nvfp4");
  EXPECT_EQ(parseSpec(toSpec(c)), c);
  EXPECT_EQ(configFromJson(toKvscopeJson(c)), c);
  EXPECT_EQ(parseSpec(" tiers= 64:q8_0 , *:q4_0 ").tiers.back().format, "q4_0");
  EXPECT_EQ(expandGrid("tiers=64:q8_0,*:q4_0"), std::vector<std::string>{"tiers=64:q8_0,*:q4_0"});
  EXPECT_DOUBLE_EQ(bitsPerValue(c), 4.5);
  EXPECT_EQ(tierFormatConfig("int4").vllmKv, VllmKv::Int4PerTokenHead);
  EXPECT_EQ(tierFormatConfig("iq4_nl").typeK, LlamaCppType::IQ4_NL);
}

TEST(Tiers, BadTiersAreOneLineNamingTheProblem) {
  EXPECT_NE(errorOf("tiers=256:bf16").find("at least two tiers"), std::string::npos);
  EXPECT_NE(errorOf("tiers=256:bf16,128:fp8,*:nvfp4").find("ages must grow"), std::string::npos);
  EXPECT_NE(errorOf("tiers=256:bf17,*:nvfp4").find("unknown tier format `bf17` (one of f16, bf16"), std::string::npos)
      << errorOf("tiers=256:bf17,*:nvfp4");
  EXPECT_NE(errorOf("tiers=*:bf16,*:nvfp4").find("only the last tier is `*`"), std::string::npos);
  EXPECT_NE(errorOf("tiers=256:bf16,512:fp8").find("only the last tier is `*`"), std::string::npos);
  EXPECT_NE(errorOf("tiers=0:bf16,*:fp8").find("bad tier age `0`"), std::string::npos);
  EXPECT_NE(errorOf("tiers=256,*:fp8").find("write AGE:FORMAT"), std::string::npos);
  EXPECT_NE(errorOf("tiers=256:turboquant_4bit_nc,*:fp8").find("unknown tier format"), std::string::npos);
}

TEST(Tiers, PagesMoveDownOnceTheyPassTheirTiersAgeAndAreStoredAgainThere) {
  at::manual_seed(41);
  const at::Tensor x = randn(1, 2, 60, 64);
  auto layer = makeLayer(parseSpec("tiers=32:bf16,*:q8_0"));
  layer->update(x.narrow(2, 0, 20), x.narrow(2, 0, 20));  // 20 tokens: all in bf16
  EXPECT_EQ(layer->memory().keys.tiers, (std::vector<std::int64_t>{std::int64_t{20} * 2 * 128, 0}));
  for (std::int64_t t = 20; t < 50; ++t) layer->update(x.narrow(2, t, 1), x.narrow(2, t, 1));
  // 50 tokens: 18 beyond bf16's 32 -> one page of 16 moved to q8_0 (34 bytes per 32 values), 34 stay in bf16.
  const LayerMemory m = layer->memory();
  EXPECT_EQ(m.keys.tiers, (std::vector<std::int64_t>{std::int64_t{34} * 2 * 128, std::int64_t{16} * 2 * 2 * 34}));
  EXPECT_EQ(m.keys.stored(), std::int64_t{34} * 2 * 128 + std::int64_t{16} * 2 * 2 * 34);
  EXPECT_EQ(layer->seqLength(), 50);
  // What attention reads: the moved page as q8_0 made it from its bf16 rows, then the bf16 tokens, in token order.
  const auto [k, v] = layer->update(x.narrow(2, 50, 1), x.narrow(2, 50, 1));
  const at::Tensor bf = through("bf16", x.narrow(2, 0, 51));
  const at::Tensor want = at::cat({through("q8_0", bf.narrow(2, 0, 16)), bf.narrow(2, 16, 35)}, 2);
  EXPECT_TRUE(at::equal(k, want));
  EXPECT_TRUE(at::equal(v, want));
  EXPECT_EQ(layer->backend(), Backend::LlamaCpp);
  // Crop drops the newest tokens first: the bf16 tier, then the older one.
  layer->crop(10);
  EXPECT_EQ(layer->seqLength(), 10);
  EXPECT_EQ(layer->memory().keys.tiers, (std::vector<std::int64_t>{0, std::int64_t{10} * 2 * 2 * 34}));
  layer->reset();
  EXPECT_EQ(layer->seqLength(), 0);
}

// A page move re-quantizes tokens from their stored form: the update that moves pages reports what each move changed
// (the drift map, in ranges of a page, 0 for the tokens between two moves), and the error history adds it to those
// tokens' errors.
TEST(Tiers, AnUpdateThatMovesPagesReportsWhatTheMoveChanged) {
  at::manual_seed(43);
  const at::Tensor x = randn(1, 2, 120, 64) * 4;
  auto layer = makeLayer(parseSpec("tiers=16:q8_0,48:fp8,*:q4_0"));
  ErrorHistory history;
  std::int64_t moves = 0, twoMoves = 0;
  at::Tensor before, k;  // the keys attention read at the previous update, and at this one
  for (std::int64_t t = 0; t < 120; ++t, before = k) {
    k = layer->update(x.narrow(2, t, 1), x.narrow(2, t, 1)).first;
    const LayerStats& st = layer->stats();
    history.add(st.keys);
    const ErrorMap& d = st.keys.drift;
    if (d.empty()) continue;
    ++moves;
    ASSERT_EQ(d.tokenBin, 16);
    ASSERT_EQ(d.heads, 2);
    ASSERT_EQ(d.channels, 64);
    // Where the keys changed between the two reads, the map's range has that change as its max |new - old|.
    const at::Tensor change = (k.narrow(2, 0, t) - before).abs();
    const std::int64_t first = d.tokenStart, end = d.tokenStart + d.tokens;
    if (first > 0) EXPECT_EQ(change.narrow(2, 0, first).max().item<float>(), 0.0f);
    if (end < t) EXPECT_EQ(change.narrow(2, end, t - end).max().item<float>(), 0.0f);
    int moved = 0;
    for (std::int64_t r = 0; r < d.ranges; ++r) {
      const at::Tensor c = change.narrow(2, first + r * 16, 16);  // [1, 2, 16, 64]
      for (std::int64_t h = 0; h < 2; ++h)
        for (std::int64_t ch = 0; ch < 64; ch += 9)
          EXPECT_EQ(d.max(h, r, ch), c[0][h].select(1, ch).max().item<float>()) << t << " " << r;
      moved += c.max().item<float>() > 0;
    }
    twoMoves += moved == 2;
  }
  EXPECT_GE(moves, 5);
  EXPECT_GE(twoMoves, 1);  // a page into fp8 and one into q4_0 in the same update: one map over both
  // The history: each key's error is its q8_0 error plus what its moves added, at least its q4_0 error alone.
  const at::Tensor err = (k - x).abs();
  for (std::int64_t t : {0, 20, 40, 60}) {
    const float stored = err[0][1][t][5].item<float>();
    EXPECT_GE(history.at(t, 1, 5) * (1 + 1e-5f) + 1e-6f, stored) << t;
  }
}

TEST(Tiers, FusedAttentionReadsEveryTierAndBeamsReorderThemAll) {
  at::manual_seed(42);
  CacheConfig ref = parseSpec("tiers=16:bf16,48:fp8,*:nvfp4");
  ref.attention = AttentionMode::Reference;
  auto fused = makeLayer(parseSpec("tiers=16:bf16,48:fp8,*:nvfp4"));
  auto reference = makeLayer(ref);
  for (std::int64_t T : {40, 1, 30, 1, 1, 9}) {
    const at::Tensor q = randn(2, 4, T, 64), k = randn(2, 2, T, 64), v = randn(2, 2, T, 64);
    EXPECT_LT((fused->attend(q, k, v) - reference->attend(q, k, v)).abs().max().item<double>(), 2e-5) << T;
  }
  EXPECT_EQ(fused->memory().keys.tiers.size(), 3u);
  EXPECT_GT(fused->memory().keys.tiers[2], 0);  // 82 tokens: pages reached nvfp4
  const at::Tensor idx = at::tensor({1, 1}, at::kLong);
  fused->reorder(idx);
  reference->reorder(idx);
  const at::Tensor q = randn(2, 4, 1, 64), k = randn(2, 2, 1, 64), v = randn(2, 2, 1, 64);
  EXPECT_LT((fused->attend(q, k, v) - reference->attend(q, k, v)).abs().max().item<double>(), 2e-5);
  const auto [rk, rv] = reference->update(randn(2, 2, 1, 64), randn(2, 2, 1, 64));
  const std::int64_t held = rk.size(2) - 2;  // both beams continue row 1: the same history (but the two newest tokens)
  EXPECT_TRUE(at::equal(rk[0].narrow(1, 0, held), rk[1].narrow(1, 0, held)));
  EXPECT_FALSE(at::equal(rk[0], rk[1]));  // the new token differs
}

TEST(Tiers, AWholeCacheAndItsExports) {
  KvCache cache(parseSpec("tiers=256:bf16,4096:fp8,*:nvfp4"), 4);
  at::manual_seed(43);
  for (int l = 0; l < 4; ++l) cache.update(l, randn(1, 2, 300, 64), randn(1, 2, 300, 64));
  for (const LayerMemory& m : cache.memory()) EXPECT_EQ(m.keys.tiers.size(), 3u);
  const FlagExport vllm = toVllmFlags(parseSpec("tiers=256:bf16,4096:fp8,*:nvfp4"));
  EXPECT_EQ(vllm.flags, "--kv-cache-dtype nvfp4");
  EXPECT_NE(vllm.notes.front().find("vLLM 0.33 has no tiers by age"), std::string::npos) << vllm.notes.front();
  EXPECT_EQ(toLlamaCppFlags(parseSpec("tiers=64:f16,*:q4_0")).flags, "-ctk q4_0 -ctv q4_0 -fa on");
  EXPECT_THROW(toHfCacheConfig(parseSpec("tiers=64:f16,*:q4_0")), ConfigError);
  EXPECT_EQ(toModelOptConfig(parseSpec("tiers=64:bf16,*:nvfp4")).kvCacheQuantAlgo, "NVFP4");
}
