// Learned attention sinks (gpt-oss): each query head's sink logit joins its softmax's denominator and reads no value,
// unscaled, unmasked. What every attention path returns (reference mode's eager attention, fused mode's tile reader
// for decode steps, LibTorch's attention for prefills, the block-wise prefill after a long history, the band of a
// sliding window) equals that softmax computed here in float64 over the values the config stores, and a sink of -inf
// gives attention without sinks.
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

using testutil::drawn;

// softmax([q k^T / sqrt(D) (masked), sink]) without the sink's column, times V; float64, by definition. Query i sits at
// position L - T + i and sees keys j <= that position (and j > position - window where window > 0).
at::Tensor sinkAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& sinks,
                         std::int64_t window) {
  const std::int64_t B = q.size(0), H = q.size(1), T = q.size(2), L = k.size(2), rep = q.size(1) / k.size(1);
  const at::Tensor kk = k.to(at::kDouble).repeat_interleave(rep, 1), vv = v.to(at::kDouble).repeat_interleave(rep, 1);
  at::Tensor s = at::matmul(q.to(at::kDouble), kk.transpose(-1, -2)) / std::sqrt(static_cast<double>(q.size(3)));
  const at::Tensor i = at::arange(T, at::kLong).view({T, 1}) + (L - T), j = at::arange(L, at::kLong).view({1, L});
  at::Tensor visible = j <= i;
  if (window > 0) visible = visible & (j > i - window);
  s = s.masked_fill(visible.logical_not(), -std::numeric_limits<double>::infinity());
  const at::Tensor col = sinks.to(at::kDouble).view({1, H, 1, 1}).expand({B, H, T, 1});
  return at::matmul(at::softmax(at::cat({s, col}, -1), -1).narrow(-1, 0, L), vv);
}

// The cache with sinks against the same config without them (whose update() gives every stored token), step by step.
void checkSinks(const std::string& spec, AttentionMode mode, std::int64_t window,
                const std::vector<std::int64_t>& steps, double tol) {
  SCOPED_TRACE(spec + (mode == AttentionMode::Fused ? " fused" : " reference") + " window " + std::to_string(window));
  CacheConfig cfg = parseSpec(spec);
  cfg.attention = mode;
  for (auto& r : cfg.layers) r.keys.attention = r.values.attention = mode;
  KvCache sunk(cfg, 1), plain(cfg, 1);
  const std::int64_t B = 1, Hq = 4, Hkv = 2, D = 64;
  const at::Tensor sinks = at::tensor(std::vector<float>{2.5f, -1.0f, 0.5f, 4.0f});
  std::int64_t seed = 21;
  for (const std::int64_t T : steps) {
    const at::Tensor q = drawn(seed++, B, Hq, T, D), k = drawn(seed++, B, Hkv, T, D), v = drawn(seed++, B, Hkv, T, D);
    if (window > 0) sunk.setWindows({window});
    const at::Tensor got = sunk.attend(0, q, k, v, sinks);
    const auto [hk, hv] = plain.update(0, k, v);
    const at::Tensor want = sinkAttention(sunk.layer(0).roundQueries(q), hk, hv, sinks, window);
    EXPECT_LT((got.to(at::kDouble) - want).abs().max().item<double>(), tol) << "a step of " << T << " tokens";
  }
}

}  // namespace

TEST(AttentionSinks, EveryPathAddsTheSinkToTheDenominator) {
  const std::vector<std::int64_t> steps{37, 1, 1, 5, 1, 20, 1};  // prefill, decode, short and long multi-token steps
  for (const char* spec : {"dynamic", "fp8:overflow=saturate", "llamacpp:type_k=q8_0,type_v=q4_0", "mxfp4",
                           "vllm:kv=fp8_per_token_head", "vllm:kv=turboquant_4bit_nc", "quanto:nbits=4"})
    for (AttentionMode mode : {AttentionMode::Reference, AttentionMode::Fused}) checkSinks(spec, mode, 0, steps, 2e-5);
}

TEST(AttentionSinks, SlidingWindowLayersWithSinks) {
  const std::vector<std::int64_t> steps{40, 1, 1, 7, 1, 33, 1};
  for (const char* spec : {"dynamic", "llamacpp:type_k=q8_0,type_v=q8_0"})
    for (AttentionMode mode : {AttentionMode::Reference, AttentionMode::Fused}) checkSinks(spec, mode, 16, steps, 2e-5);
}

TEST(AttentionSinks, APrefillAfterALongHistoryMergesTheSinkOnce) {
  // More than 4096 held tokens before a 24-token chunk: fused mode's block-wise attention.
  for (const char* spec : {"dynamic", "llamacpp:type_k=q8_0,type_v=q8_0"})
    checkSinks(spec, AttentionMode::Fused, 0, {4200, 24, 1}, 5e-5);
}

TEST(AttentionSinks, ASinkOfMinusInfinityIsNoSinkAndTheShapeIsChecked) {
  for (AttentionMode mode : {AttentionMode::Reference, AttentionMode::Fused}) {
    CacheConfig cfg = parseSpec("dynamic");
    cfg.attention = mode;
    KvCache a(cfg, 1), b(cfg, 1);
    const at::Tensor none = at::full({4}, -std::numeric_limits<float>::infinity());
    for (std::int64_t T : {9, 1}) {
      const at::Tensor q = drawn(T, 1, 4, T, 32), k = drawn(T + 1, 1, 2, T, 32), v = drawn(T + 2, 1, 2, T, 32);
      EXPECT_LT((a.attend(0, q, k, v, none) - b.attend(0, q, k, v)).abs().max().item<double>(), 1e-6);
    }
    const at::Tensor q = drawn(5, 1, 4, 1, 32), k = drawn(6, 1, 2, 1, 32);
    EXPECT_NE(testutil::errorOf<CacheError>([&] { a.attend(0, q, k, k, at::zeros({2})); }).find("2 sink logits for 4"),
              std::string::npos);
  }
}
