// ErrorHistory: the token x channel error a view shows equals the error recomputed from what the layer returns; the
// per-head relative error of an update equals the one computed over the whole head.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "cache/error_history.h"
#include "cache/kv_cache.h"
#include "cache/layer.h"
#include "cache/recorder.h"
#include "generate/generate.h"
#include "model/llama.h"
#include "random_model.h"

namespace kvscope::cache {
namespace {

// max |xq - x| over the tokens [t0, t1) of head h, channel c (batch 1).
float absError(const at::Tensor& x, const at::Tensor& xq, std::int64_t t0, std::int64_t t1, std::int64_t h,
               std::int64_t c) {
  const at::Tensor a = x.index({0, h, at::indexing::Slice(t0, t1), c}).to(at::kDouble);
  const at::Tensor b = xq.index({0, h, at::indexing::Slice(t0, t1), c}).to(at::kDouble);
  return static_cast<float>((b - a).abs().max().item<double>());
}

TEST(ErrorHistory, Fp8PromptBinsThenOneRowPerDecodedToken) {
  at::manual_seed(3);
  StatsOptions so;
  so.tokenBin = 4;
  auto layer = makeLayer(parseSpec("fp8:overflow=saturate"), so);
  ErrorHistory hk, hv;
  const at::Tensor k0 = at::randn({1, 2, 10, 8}), v0 = at::randn({1, 2, 10, 8});
  layer->update(k0, v0);
  hk.add(layer->stats().keys);
  hv.add(layer->stats().values);
  ASSERT_EQ(hk.tokens(), 10);
  ASSERT_EQ(hk.heads(), 2);
  ASSERT_EQ(hk.channels(), 8);
  at::Tensor kAll = k0;
  at::Tensor kq;
  for (int step = 0; step < 3; ++step) {
    const at::Tensor k = at::randn({1, 2, 1, 8}) * 3.0, v = at::randn({1, 2, 1, 8});
    kq = layer->update(k, v).first;
    hk.add(layer->stats().keys);
    hv.add(layer->stats().values);
    kAll = at::cat({kAll, k}, 2);
  }
  ASSERT_EQ(hk.tokens(), 13);
  ASSERT_EQ(hv.tokens(), 13);
  for (std::int64_t h = 0; h < 2; ++h)
    for (std::int64_t c = 0; c < 8; ++c) {
      // Prompt: bins of 4 tokens (the last holds 2); every token of a bin carries the bin's error.
      for (std::int64_t t = 0; t < 10; ++t) {
        const std::int64_t b0 = t / 4 * 4, b1 = std::min<std::int64_t>(b0 + 4, 10);
        EXPECT_NEAR(hk.at(t, h, c), absError(kAll, kq, b0, b1, h, c), 1e-5) << t << " " << h << " " << c;
      }
      for (std::int64_t t = 10; t < 13; ++t)
        EXPECT_NEAR(hk.at(t, h, c), absError(kAll, kq, t, t + 1, h, c), 1e-5) << t << " " << h << " " << c;
    }
  hk.truncate(11);
  EXPECT_EQ(hk.tokens(), 11);
  EXPECT_EQ(hk.values().size(), 11u * 2 * 8);
}

// The recorder keeps, per layer and side, the history its own ErrorHistory would, on the host path and on the device
// path (whose statistics wait on the device until they are read) alike, and the latest per-head error.
TEST(CacheRecorder, RecordsEveryLayerAsItsOwnHistoryWouldOnEitherPath) {
  at::manual_seed(9);
  StatsOptions so;
  so.tokenBin = 1;
  const CacheConfig cfg = parseSpec("quanto:nbits=2,residual_length=4,q_group_size=8");
  KvCache host(cfg, 2, so), dev(cfg, 2, so, kernels::KernelPath::Device);
  CacheRecorder onHost, onDevice;
  std::vector<std::array<ErrorHistory, 2>> direct(2);
  for (int step = 0; step < 6; ++step) {
    const std::int64_t T = step == 0 ? 6 : 1;
    for (int l = 0; l < 2; ++l) {
      const at::Tensor k = at::randn({1, 2, T, 8}), v = at::randn({1, 2, T, 8});
      host.update(l, k, v);
      dev.update(l, k, v);
      direct[l][0].add(host.layer(l).stats().keys);
      direct[l][1].add(host.layer(l).stats().values);
    }
    onHost.record(host);
    onDevice.record(dev);
  }
  ASSERT_EQ(onHost.layers(), 2);
  ASSERT_EQ(onDevice.layers(), 2);
  for (int l = 0; l < 2; ++l)
    for (auto side : {CacheRecorder::Keys, CacheRecorder::Values}) {
      const ErrorHistory &h = onHost.history(l, side), &d = onDevice.history(l, side);
      EXPECT_EQ(h.values(), direct[l][side].values());
      EXPECT_EQ(h.tokens(), 10);
      ASSERT_EQ(d.values().size(), h.values().size());
      for (std::size_t i = 0; i < h.values().size(); ++i) EXPECT_NEAR(d.values()[i], h.values()[i], 1e-5) << i;
      EXPECT_EQ(onHost.headError(l, side).size(), 2u);
      EXPECT_EQ(onDevice.headError(l, side).size(), 2u);
    }
  onHost.reset();
  EXPECT_EQ(onHost.layers(), 0);
}

TEST(ErrorHistory, QuantoFlushAddsItsDriftAndBoundsTheTrueError) {
  at::manual_seed(5);
  StatsOptions so;
  so.tokenBin = 1;
  auto layer = makeLayer(parseSpec("quanto:nbits=2,residual_length=4,q_group_size=8"), so);
  ErrorHistory h;
  at::Tensor all = at::randn({1, 1, 6, 8});
  layer->update(all, all);  // prefill quantizes all 6 tokens
  h.add(layer->stats().keys);
  ASSERT_EQ(h.tokens(), 6);
  const float before = h.at(0, 0, 0);
  EXPECT_GT(before, 0.0f);
  at::Tensor kq;
  for (int step = 0; step < 4; ++step) {
    const at::Tensor k = at::randn({1, 1, 1, 8}) * 4.0;  // louder: the flush's groups change, so does token 0
    all = at::cat({all, k}, 2);
    kq = layer->update(k, k).first;
    const bool flushed = layer->stats().keys.quantized;
    h.add(layer->stats().keys);
    // Residual steps leave the history as it was; the flush on the 4th step re-quantizes all 10 tokens.
    EXPECT_EQ(h.tokens(), flushed ? 10 : 6) << step;
    EXPECT_EQ(flushed, step == 3) << step;
  }
  // The flush's error map covers the 4 tokens it quantized for the first time, its drift map the 6 before them.
  const ErrorMap &flush = layer->stats().keys.error, &drift = layer->stats().keys.drift;
  EXPECT_EQ(flush.tokenStart, 6);
  EXPECT_EQ(flush.tokens, 4);
  EXPECT_EQ(drift.tokenStart, 0);
  EXPECT_EQ(drift.tokens, 6);
  // Token 0 had its prefill error; the flush re-quantized its dequantized value and added its drift.
  EXPECT_FLOAT_EQ(h.at(0, 0, 0), before + drift.max(0, 0, 0));
  // What attention reads from now on: the next step returns the flushed store dequantized (the flush step itself
  // returned the states unquantized, as transformers does).
  kq = layer->update(at::randn({1, 1, 1, 8}), at::randn({1, 1, 1, 8})).first;
  h.add(layer->stats().keys);
  ASSERT_EQ(h.tokens(), 10);
  // Against the original states, the recorded value is an upper bound, and exact for tokens quantized once.
  for (std::int64_t t = 0; t < 10; ++t)
    for (std::int64_t c = 0; c < 8; ++c) {
      const float truth = absError(all, kq, t, t + 1, 0, c);
      if (t < 6)
        EXPECT_LE(truth, h.at(t, 0, c) + 1e-5f) << t << " " << c;
      else
        EXPECT_NEAR(truth, h.at(t, 0, c), 1e-5f) << t << " " << c;
    }
}

// A flush's maps stay small however long the history: the error map covers the tokens the flush quantized for the
// first time, the drift map the rest in at most driftRanges ranges; the history they write still bounds the true
// error from above, and is exact for the tokens quantized once.
TEST(ErrorHistory, FlushMapsStayBoundedAsTheHistoryGrows) {
  at::manual_seed(11);
  StatsOptions so;
  so.tokenBin = 1;
  so.driftRanges = 4;
  for (const char* spec :
       {"quanto:nbits=2,residual_length=4,q_group_size=8", "hqq:nbits=2,residual_length=4,q_group_size=8",
        "quanto:nbits=2,residual_length=4,q_group_size=8,attention=reference"}) {
    auto layer = makeLayer(parseSpec(spec), so);
    ErrorHistory h;
    at::Tensor all = at::randn({1, 2, 40, 8});
    layer->update(all, all);
    h.add(layer->stats().keys);
    at::Tensor kq;
    for (int step = 0; step < 4; ++step) {
      const at::Tensor k = at::randn({1, 2, 1, 8}) * 3.0;
      all = at::cat({all, k}, 2);
      kq = layer->update(k, k).first;
      h.add(layer->stats().keys);
    }
    const TensorStats& st = layer->stats().keys;
    ASSERT_TRUE(st.quantized) << spec;
    EXPECT_EQ(st.quantizedTokens, 44) << spec;
    EXPECT_EQ(st.error.tokenStart, 40) << spec;
    EXPECT_EQ(st.error.tokens, 4) << spec;
    EXPECT_EQ(st.error.ranges, 4) << spec;
    EXPECT_EQ(st.drift.tokens, 40) << spec;
    EXPECT_EQ(st.drift.ranges, 4) << spec;
    EXPECT_EQ(st.drift.tokenBin, 10) << spec;
    EXPECT_EQ(st.drift.maxAbs.size(), 2u * 4 * 8) << spec;
    kq = layer->update(at::randn({1, 2, 1, 8}), at::randn({1, 2, 1, 8})).first;
    h.add(layer->stats().keys);
    ASSERT_EQ(h.tokens(), 44) << spec;
    for (std::int64_t hd = 0; hd < 2; ++hd)
      for (std::int64_t t = 0; t < 44; ++t)
        for (std::int64_t c = 0; c < 8; ++c) {
          const float truth = absError(all, kq, t, t + 1, hd, c);
          if (t < 40)
            EXPECT_LE(truth, h.at(t, hd, c) + 1e-5f) << spec << " " << t << " " << c;
          else
            EXPECT_NEAR(truth, h.at(t, hd, c), 1e-5f) << spec << " " << t << " " << c;
        }
  }
}

// A chunked prefill: each chunk's update replaces the layer's statistics, so the recorder takes them chunk by chunk
// (GenerateOptions::onPrefillChunk, BeamOptions::onPrefillChunk) and then at each step; every prompt token then has
// its error, not only the last chunk's, and one that no chunk quantized twice keeps its own (a drift is added only
// once per update). A generation and a beam search alike.
TEST(CacheRecorder, RecordsEveryPrefillChunk) {
  const auto m = model::LlamaModel::load(testutil::randomModel());
  for (const bool beams : {false, true})
    for (const char* spec : {"fp8:overflow=saturate", "quanto:nbits=4,residual_length=4,q_group_size=16",
                             "kivi:residual_length=8,q_group_size=8"}) {
      const std::string what = std::string(spec) + (beams ? " (beams)" : "");
      StatsOptions so;
      so.tokenBin = 1;
      auto kv = m->makeCache(parseSpec(spec), so);
      CacheRecorder rec;
      int chunks = 0;
      const auto onChunk = [&](int layer) {
        chunks += layer == 0;
        rec.recordLayer(*kv, layer);
      };
      if (beams) {
        generate::BeamOptions o;
        o.numBeams = 2;
        o.prefillChunk = 16;
        o.onPrefillChunk = onChunk;
        generate::beamSearch(*m, *kv, testutil::prompt(40), 2, o, {}, [&](const generate::BeamStepEvent&) {
          rec.record(*kv);
          return true;
        });
      } else {
        generate::GenerateOptions o;
        o.maxNew = 2;
        o.prefillChunk = 16;
        o.onPrefillChunk = onChunk;
        generate::generate(*m, *kv, testutil::prompt(40), o, [&](const generate::StepEvent&) {
          rec.record(*kv);
          return true;
        });
      }
      EXPECT_EQ(chunks, 2) << what;  // chunks of 16, 16 and 8: the last one is the first step's
      ASSERT_EQ(rec.layers(), kv->numLayers()) << what;
      for (int l = 0; l < rec.layers(); ++l) {
        const ErrorHistory& h = rec.history(l, CacheRecorder::Keys);
        ASSERT_GE(h.tokens(), 32) << what;
        for (std::int64_t t = 0; t < 32; ++t)  // the newest tokens may still be in a residual window
          ASSERT_FALSE(std::isnan(h.tokenMeans()[static_cast<std::size_t>(t)])) << what << " layer " << l << " " << t;
      }
    }
}

TEST(ErrorMap, HeadRelativeErrorIsOverTheWholeHead) {
  at::manual_seed(9);
  for (const char* spec : {"fp8:overflow=saturate", "quanto:nbits=2,q_group_size=16", "hqq:nbits=3,q_group_size=16"}) {
    StatsOptions so;
    so.tokenBin = 3;
    auto layer = makeLayer(parseSpec(spec), so);
    const at::Tensor k = at::randn({2, 3, 7, 16}), v = at::randn({2, 3, 7, 16});
    layer->update(k, v);
    const ErrorMap err = layer->stats().keys.error;
    ASSERT_EQ(err.headRelL2.size(), 3u) << spec;
    // The prompt's update returns its input; the next one returns the quantized prompt.
    const at::Tensor kq = layer->update(at::randn({2, 3, 1, 16}), at::randn({2, 3, 1, 16})).first;
    for (std::int64_t hd = 0; hd < 3; ++hd) {
      const at::Tensor a = k.select(1, hd).to(at::kDouble);
      const at::Tensor b = kq.narrow(2, 0, 7).select(1, hd).to(at::kDouble);
      const double want = ((b - a).norm() / a.norm()).item<double>();
      EXPECT_GT(want, 0.0) << spec;
      EXPECT_NEAR(err.headRelL2[hd], want, 1e-5 * (1 + want)) << spec << " head " << hd;
    }
  }
}

// One update's statistics: an error map of `tokens` tokens from `start`, one per range, valued f(t, h, c); as a drift
// map when `drift` (the tokens were quantized before).
template <typename F>
TensorStats mapOf(std::int64_t start, std::int64_t tokens, std::int64_t heads, std::int64_t channels, F f,
                  bool drift = false) {
  TensorStats s;
  s.quantized = true;
  ErrorMap& m = drift ? s.drift : s.error;
  m.heads = heads;
  m.channels = channels;
  m.ranges = m.tokens = tokens;
  m.tokenStart = start;
  m.tokenBin = 1;
  m.maxAbs.resize(static_cast<std::size_t>(heads * tokens * channels));
  for (std::int64_t h = 0; h < heads; ++h)
    for (std::int64_t t = 0; t < tokens; ++t)
      for (std::int64_t c = 0; c < channels; ++c)
        m.maxAbs[static_cast<std::size_t>((h * tokens + t) * channels + c)] = f(start + t, h, c);
  return s;
}

// A 32k-token run: the map stays within its budget, every cell is the largest error of its row's tokens (checked
// against every token's own error), and every token keeps its own exact mean.
TEST(ErrorHistory, LongContextIsABoundedSummaryThatKeepsEveryMax) {
  constexpr std::int64_t H = 2, C = 8, T = 32768, chunk = 512;
  ErrorHistory h(4096);  // 256 rows of 2 x 8
  std::vector<float> truth(static_cast<std::size_t>(T * H * C));
  std::uint32_t state = 7;
  auto err = [&](std::int64_t t, std::int64_t hd, std::int64_t c) {
    state = state * 1664525u + 1013904223u;
    float e = static_cast<float>(state >> 8) / 16777216.0f;
    if (t == 20001 && hd == 1 && c == 5) e = 50.0f;  // an outlier token
    return truth[static_cast<std::size_t>((t * H + hd) * C + c)] = e;
  };
  for (std::int64_t t0 = 0; t0 < T; t0 += chunk) {
    h.add(mapOf(t0, chunk, H, C, err));
    EXPECT_LE(static_cast<std::int64_t>(h.values().size()), h.maxCells()) << t0;
  }
  ASSERT_EQ(h.tokens(), T);
  ASSERT_EQ(h.tokensPerRow(), 128);
  ASSERT_EQ(h.rows(), 256);
  ASSERT_EQ(h.values().size(), 4096u);
  for (std::int64_t r = 0; r < h.rows(); ++r)
    for (std::int64_t hd = 0; hd < H; ++hd)
      for (std::int64_t c = 0; c < C; ++c) {
        float want = 0;
        for (std::int64_t t = r * 128; t < (r + 1) * 128; ++t)
          want = std::max(want, truth[static_cast<std::size_t>((t * H + hd) * C + c)]);
        ASSERT_EQ(h.at(r * 128 + 3, hd, c), want) << r << " " << hd << " " << c;
      }
  EXPECT_EQ(h.at(20001, 1, 5), 50.0f);
  EXPECT_EQ(h.at(std::int64_t{20001} / 128 * 128, 1, 5), 50.0f);  // the outlier's whole row shows it
  ASSERT_EQ(h.tokenMeans().size(), static_cast<std::size_t>(T));
  for (std::int64_t t = 0; t < T; t += 97) {
    double sum = 0;
    for (std::int64_t i = 0; i < H * C; ++i) sum += truth[static_cast<std::size_t>(t * H * C + i)];
    EXPECT_NEAR(h.tokenMeans()[static_cast<std::size_t>(t)], sum / (H * C), 1e-6) << t;
  }
  // Coarser on request (what a view of two sides or a saved session takes): pairs merged by max.
  const std::vector<float> coarse = h.valuesAt(256);
  ASSERT_EQ(coarse.size(), 2048u);
  EXPECT_EQ(coarse[static_cast<std::size_t>((20001 / 256 * H + 1) * C + 5)], 50.0f);
  h.truncate(0);
  EXPECT_EQ(h.tokensPerRow(), 1);
}

// At the default budget a 32k-token map of an 8B model's shape (8 KV heads x 128 channels) holds 1 MiB, not 128 MiB.
TEST(ErrorHistory, DefaultBudgetHoldsAnEightBModelsLayerAt32k) {
  ErrorHistory h;
  for (std::int64_t t0 = 0; t0 < 32768; t0 += 512)
    h.add(mapOf(t0, 512, 8, 128, [](std::int64_t t, std::int64_t, std::int64_t c) { return float(t % 7 + c); }));
  EXPECT_EQ(h.tokens(), 32768);
  EXPECT_EQ(h.values().size(), static_cast<std::size_t>(ErrorHistory::kDefaultMaxCells));
  EXPECT_EQ(h.tokensPerRow(), 128);
  EXPECT_EQ(h.at(1000, 7, 127), 6.0f + 127);
}

// A drift into rows of several tokens: each cell still bounds its tokens' errors plus the drift from above, and the
// tokens' means take the drift's mean exactly; the tokens not quantized yet stay NaN.
TEST(ErrorHistory, DriftIntoWideRowsStaysAnUpperBound) {
  ErrorHistory h(std::int64_t{16} * 2);  // 16 rows of 1 x 2
  auto first = [](std::int64_t t, std::int64_t, std::int64_t c) { return float((t * 7 + c * 3) % 11) / 10.0f; };
  auto drift = [](std::int64_t t, std::int64_t, std::int64_t c) { return float((t + c) % 5) / 100.0f; };
  h.add(mapOf(0, 60, 1, 2, first));
  ASSERT_EQ(h.tokensPerRow(), 4);
  h.add(mapOf(0, 60, 1, 2, drift, true));
  h.add(mapOf(61, 3, 1, 2, first));  // token 60 is left out: a residual token, never quantized
  ASSERT_EQ(h.tokens(), 64);
  for (std::int64_t t = 0; t < 64; ++t) {
    if (t == 60) {
      EXPECT_TRUE(std::isnan(h.tokenMeans()[60]));
      continue;
    }
    double mean = 0;
    for (std::int64_t c = 0; c < 2; ++c) {
      const float e = first(t, 0, c) + (t < 60 ? drift(t, 0, c) : 0.0f);
      EXPECT_GE(h.at(t, 0, c), e - 1e-6f) << t << " " << c;
      mean += e / 2;
    }
    EXPECT_NEAR(h.tokenMeans()[static_cast<std::size_t>(t)], mean, 1e-6) << t;
  }
}

TEST(ErrorHistory, NewShapeStartsAgain) {
  ErrorHistory h;
  TensorStats s;
  s.quantized = true;
  s.quantizedTokens = 2;
  s.error.tokens = 2;
  s.error.heads = 1;
  s.error.ranges = 1;
  s.error.channels = 2;
  s.error.tokenBin = 16;
  s.error.relL2 = {1.0f, 1.0f};
  s.error.maxAbs = {0.5f, 0.25f};
  h.add(s);
  EXPECT_EQ(h.tokens(), 2);
  EXPECT_FLOAT_EQ(h.at(1, 0, 1), 0.25f);
  s.error.tokenStart = 5;
  s.quantizedTokens = 1;
  s.error.tokens = 1;
  h.add(s);
  EXPECT_EQ(h.tokens(), 6);
  EXPECT_TRUE(std::isnan(h.at(3, 0, 0)));  // never quantized
  s.error.channels = 1;
  s.error.maxAbs = {0.1f};
  s.error.tokenStart = 0;
  h.add(s);
  EXPECT_EQ(h.channels(), 1);
  EXPECT_EQ(h.tokens(), 1);
}

}  // namespace
}  // namespace kvscope::cache
