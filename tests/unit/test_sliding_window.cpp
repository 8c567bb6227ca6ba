// Sliding-window layers (KvCache::setWindows): each query attends the `window` newest positions up to its own, the
// layer keeps about window - 1 tokens, and what attention returns equals attention over the whole history with the
// band mask drawn explicitly, for every config that can drop its oldest tokens, in reference and fused mode, over a
// prefill, decode steps, multi-token steps and a beam reorder. The configs that cannot slide are refused with the
// reason; crop, reset, the sequence length and the statistics' positions count every token given.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cache/config.h"
#include "cache/kv_cache.h"
#include "cache/layer.h"
#include "tensor_helpers.h"
#include "test_helpers.h"

using namespace kvscope;
using namespace kvscope::cache;

namespace {

at::Tensor randn(at::IntArrayRef shape, std::int64_t seed) {
  at::manual_seed(static_cast<std::uint64_t>(seed));
  return at::randn(shape);
}

// Attention of q [B, Hq, T, D] (the newest T positions) over k, v [B, Hkv, L, D] with the sliding-window band:
// query i at position L - T + i sees keys j with L - T + i - window < j <= L - T + i. Float64, by definition.
at::Tensor bandAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, std::int64_t window) {
  const std::int64_t T = q.size(2), L = k.size(2), rep = q.size(1) / k.size(1), D = q.size(3);
  const at::Tensor kk = k.to(at::kDouble).repeat_interleave(rep, 1), vv = v.to(at::kDouble).repeat_interleave(rep, 1);
  at::Tensor s = at::matmul(q.to(at::kDouble), kk.transpose(-1, -2)) / std::sqrt(static_cast<double>(D));
  const at::Tensor i = at::arange(T, at::kLong).view({T, 1}) + (L - T), j = at::arange(L, at::kLong).view({1, L});
  const at::Tensor visible = (j <= i) & (j > i - window);
  s = s.masked_fill(visible.logical_not(), -std::numeric_limits<double>::infinity());
  return at::matmul(at::softmax(s, -1), vv);
}

struct Step {
  std::int64_t tokens;
  bool reorder = false;
};

// The windowed cache against the same config unwindowed (whose update() gives every token as the config stores it)
// with the band drawn here: the same attention, step by step.
void checkWindow(const std::string& spec, AttentionMode mode, std::int64_t window, const std::vector<Step>& steps) {
  SCOPED_TRACE(spec + (mode == AttentionMode::Fused ? " fused" : " reference"));
  CacheConfig cfg = parseSpec(spec);
  cfg.attention = mode;
  for (auto& r : cfg.layers) r.keys.attention = r.values.attention = mode;
  KvCache windowed(cfg, 1), full(cfg, 1);
  windowed.setWindows({window});
  const std::int64_t B = 2, Hq = 4, Hkv = 2, D = 64;
  std::int64_t seen = 0, seed = 11;
  for (const Step& st : steps) {
    if (st.reorder) {
      const at::Tensor idx = at::tensor(std::vector<std::int64_t>{1, 1}, at::kLong);
      windowed.reorder(idx);
      full.reorder(idx);
    }
    const at::Tensor q = randn({B, Hq, st.tokens, D}, seed++), k = randn({B, Hkv, st.tokens, D}, seed++),
                     v = randn({B, Hkv, st.tokens, D}, seed++);
    const at::Tensor got = windowed.attend(0, q, k, v);
    const auto [hk, hv] = full.update(0, k, v);
    const at::Tensor want = bandAttention(windowed.layer(0).roundQueries(q), hk, hv, window);
    seen += st.tokens;
    ASSERT_EQ(windowed.seqLength(), seen);
    EXPECT_LT((got.to(at::kDouble) - want).abs().max().item<double>(), 2e-5) << "after " << seen << " tokens";
    // At most window - 1 + slack tokens held before the step's own.
    EXPECT_LE(windowed.layer(0).seqLength(), window - 1 + KvCache::kWindowSlack + st.tokens);
    EXPECT_EQ(windowed.layer(0).seqLength() + windowed.layer(0).dropped(), seen);
  }
  EXPECT_GT(windowed.layer(0).dropped(), 0) << "the steps never went past the window";
}

const std::vector<Step> kSteps = [] {
  std::vector<Step> s{{40}};                                   // a prefill longer than the window
  for (int i = 0; i < 90; ++i) s.push_back({1, i % 17 == 5});  // decode steps past the slack, beam reorders
  s.push_back({7});                                            // a multi-token step over the band
  for (int i = 0; i < 20; ++i) s.push_back({1});
  s.push_back({33});  // a chunk longer than the window
  s.push_back({1});
  return s;
}();

}  // namespace

TEST(SlidingWindow, AttentionIsTheBandOverWhatTheConfigStores) {
  for (const char* spec :
       {"dynamic", "fp8:overflow=saturate", "fp8:granularity=head,overflow=saturate",
        "llamacpp:type_k=q8_0,type_v=q4_0", "llamacpp:type_k=q4_0,type_v=q4_0,rot=off", "vllm:kv=fp8_per_token_head",
        "vllm:kv=nvfp4", "vllm:kv=turboquant_4bit_nc", "mxfp4", "layers=*:K=fp8:overflow=saturate,V=dynamic"})
    for (AttentionMode mode : {AttentionMode::Reference, AttentionMode::Fused}) checkWindow(spec, mode, 24, kSteps);
}

TEST(SlidingWindow, AWindowLongerThanTheSequenceIsFullAttention) {
  CacheConfig cfg = parseSpec("dynamic");
  KvCache windowed(cfg, 1), full(cfg, 1);
  windowed.setWindows({4096});
  const at::Tensor q = randn({1, 2, 30, 32}, 1), k = randn({1, 2, 30, 32}, 2), v = randn({1, 2, 30, 32}, 3);
  EXPECT_TRUE(at::equal(windowed.attend(0, q, k, v), full.attend(0, q, k, v)));
  EXPECT_EQ(windowed.layer(0).dropped(), 0);
}

TEST(SlidingWindow, ConfigsThatCannotDropTokensAreRefusedWithTheReason) {
  const auto refusal = [](const std::string& spec) {
    return testutil::errorOf<ConfigError>([&] { KvCache(parseSpec(spec), 3).setWindows({0, 16, 0}); });
  };
  EXPECT_NE(refusal("quanto:nbits=4").find("transformers' QuantizedCache refuses sliding-window layers"),
            std::string::npos)
      << refusal("quanto:nbits=4");
  EXPECT_NE(refusal("hqq:nbits=4").find("layer 1 is a sliding-window layer (window 16)"), std::string::npos);
  EXPECT_NE(refusal("kivi").find("per channel over groups of tokens"), std::string::npos);
  EXPECT_NE(refusal("fp8:sink=4").find("sink= keeps the first tokens"), std::string::npos);
  EXPECT_NE(refusal("tiers=256:bf16,*:nvfp4").find("tiers= moves the oldest tokens"), std::string::npos);
  EXPECT_NE(refusal("layers=*:K=fp8,V=quanto:nbits=4").find("QuantizedCache"), std::string::npos);
  // Full-attention layers take any config; the count must match.
  EXPECT_NO_THROW(KvCache(parseSpec("quanto:nbits=4"), 3).setWindows({0, 0, 0}));
  EXPECT_NE(testutil::errorOf<ConfigError>([] {
              KvCache(parseSpec("dynamic"), 3).setWindows({16});
            }).find("1 sliding windows for 3 layers"),
            std::string::npos);
}

TEST(SlidingWindow, CropResetAndPositionsCountEveryToken) {
  CacheConfig cfg = parseSpec("llamacpp:type_k=q8_0,type_v=q8_0");
  KvCache c(cfg, 2, StatsOptions{});
  c.setWindows({0, 8});
  const std::int64_t D = 32;
  std::int64_t seed = 3;
  auto step = [&](std::int64_t T) {
    const at::Tensor q = randn({1, 2, T, D}, seed++), k = randn({1, 1, T, D}, seed++), v = randn({1, 1, T, D}, seed++);
    for (int l = 0; l < 2; ++l) c.attend(l, q, k, v);
  };
  step(100);
  step(1);  // the window drops 100 - 7 tokens before this one
  EXPECT_EQ(c.seqLength(), 101);
  EXPECT_EQ(c.layer(1).dropped(), 93);
  EXPECT_EQ(c.layer(1).seqLength(), 8);
  EXPECT_EQ(c.layer(0).seqLength(), 101);
  // The newest update's error map starts at its absolute position.
  const LayerStats& st = c.layer(1).stats();
  ASSERT_FALSE(st.keys.error.empty());
  EXPECT_EQ(st.keys.error.tokenStart, 100);
  // Crop back within what the windowed layer holds; not past what it dropped.
  c.crop(-3);
  EXPECT_EQ(c.seqLength(), 98);
  EXPECT_EQ(c.layer(1).seqLength(), 5);
  EXPECT_NE(testutil::errorOf<CacheError>([&] { c.crop(50); }).find("has dropped its first 93"), std::string::npos);
  c.reset();
  EXPECT_EQ(c.seqLength(), 0);
  EXPECT_EQ(c.layer(1).dropped(), 0);
  step(4);
  EXPECT_EQ(c.seqLength(), 4);
}
