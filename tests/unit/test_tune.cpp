// The sensitivity tuner's plan and solve (cache/tune.h) on scans with known figures: the fronts against every
// assignment enumerated, each target's shape, the budgets, the picked config's layers, the scan file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "cache/tune.h"

using namespace kvscope::cache;

namespace {

// A scan of `layers` layers and two candidates, quanto 4-bit and 2-bit: 4-bit saves 700 bytes a side, 2-bit 850;
// the KLs are random, with 2-bit worse than 4-bit on each side.
Scan syntheticScan(int layers, unsigned seed,
                   const std::vector<CacheConfig>& candidates = {parseSpec("quanto:nbits=4"),
                                                                 parseSpec("quanto:nbits=2")}) {
  Scan s;
  s.plan = planScan(candidates, layers);
  s.referenceBytes = std::int64_t{2000} * layers;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.001, 0.1);
  std::vector<double> four(static_cast<std::size_t>(2 * layers));
  for (double& x : four) x = u(rng);
  for (const ScanItem& it : s.plan.items) {
    const double k4 = four[2 * static_cast<std::size_t>(it.layer) + (it.side == KvSide::Keys ? 0 : 1)];
    const double kl = it.candidate == 0 ? k4 : k4 * (2 + 10 * u(rng));
    s.points.push_back({it, kl, s.referenceBytes - (it.candidate == 0 ? 700 : 850)});
  }
  return s;
}

// Every assignment of `target`'s shape, enumerated.
std::vector<Assignment> everyAssignment(const Scan& s, TuneTarget target) {
  const int n = s.plan.numLayers, c = static_cast<int>(s.plan.candidates.size());
  std::vector<Assignment> out;
  auto add = [&](std::vector<int> k, std::vector<int> v) {
    Assignment a{k, v, 0, s.referenceBytes};
    for (int l = 0; l < n; ++l)
      for (auto [side, x] : {std::pair{KvSide::Keys, k[static_cast<std::size_t>(l)]},
                             std::pair{KvSide::Values, v[static_cast<std::size_t>(l)]}})
        if (x >= 0) {
          const auto& p = s.at(l, side, static_cast<std::size_t>(x));
          a.predictedKl += p.meanKl;
          a.storedBytes -= p.saved(s.referenceBytes);
        }
    out.push_back(a);
  };
  const int sides = target == TuneTarget::Kvscope ? 2 * n : n;
  long combos = 1;
  for (int i = 0; i < sides; ++i) combos *= c + 1;
  if (target == TuneTarget::Kvscope || target == TuneTarget::Vllm) {
    for (long code = 0; code < combos; ++code) {
      std::vector<int> k(static_cast<std::size_t>(n)), v(static_cast<std::size_t>(n));
      long x = code;
      for (int i = 0; i < sides; ++i, x /= c + 1) {
        const int pick = static_cast<int>(x % (c + 1)) - 1;
        if (target == TuneTarget::Vllm) {
          k[static_cast<std::size_t>(i)] = v[static_cast<std::size_t>(i)] = pick;
        } else {
          (i % 2 == 0 ? k : v)[static_cast<std::size_t>(i / 2)] = pick;
        }
      }
      if (target == TuneTarget::Vllm) {  // one candidate (or none) per layer, all layers the same candidate
        int used = -1;
        bool ok = true;
        for (int p : k) {
          if (p < 0) continue;
          ok = ok && (used < 0 || used == p);
          used = p;
        }
        if (!ok) continue;
      }
      add(k, v);
    }
  } else {
    for (int kc = -1; kc < c; ++kc)
      for (int vc = -1; vc < c; ++vc) {
        if ((target == TuneTarget::Transformers || target == TuneTarget::ModelOpt) && kc != vc) continue;
        if (target == TuneTarget::ModelOpt && kc >= 0) {  // only the candidates with a kv_cache_quant_algo
          try {
            toModelOptConfig(s.plan.candidates[static_cast<std::size_t>(kc)]);
          } catch (const ConfigError&) {
            continue;
          }
        }
        add(std::vector<int>(static_cast<std::size_t>(n), kc), std::vector<int>(static_cast<std::size_t>(n), vc));
      }
  }
  return out;
}

bool dominated(const Assignment& a, const std::vector<Assignment>& all) {
  for (const Assignment& b : all)
    if (b.storedBytes <= a.storedBytes && b.predictedKl <= a.predictedKl &&
        (b.storedBytes < a.storedBytes || b.predictedKl < a.predictedKl))
      return true;
  return false;
}

}  // namespace

TEST(Tune, ThePlanQuantizesOneLayerSideAtATime) {
  const ScanPlan p = planScan({parseSpec("quanto:nbits=4"), parseSpec("llamacpp:type_k=q4_0,type_v=q4_0")}, 3);
  ASSERT_EQ(p.items.size(), 2u * 3u * 2u);
  for (const ScanItem& it : p.items) {
    const CacheConfig cfg = p.config(it);
    for (int l = 0; l < 3; ++l) {
      const auto [k, v] = layerConfigs(cfg, l, 3);
      const bool here = l == it.layer;
      EXPECT_EQ(k, here && it.side == KvSide::Keys ? p.candidates[it.candidate] : CacheConfig{});
      EXPECT_EQ(v, here && it.side == KvSide::Values ? p.candidates[it.candidate] : CacheConfig{});
    }
    EXPECT_EQ(parseSpec(toSpec(cfg)), cfg) << toSpec(cfg);  // a scan run's SPEC reads back as the same config
  }
}

TEST(Tune, BadCandidatesAreClearErrors) {
  auto message = [](const std::vector<std::string>& specs, int layers) {
    std::vector<CacheConfig> c;
    c.reserve(specs.size());
    for (const auto& s : specs) c.push_back(parseSpec(s));
    try {
      planScan(c, layers);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({}, 3).find("at least one candidate"), std::string::npos);
  EXPECT_NE(message({"dynamic"}, 3).find("unquantized cache the tuner compares against"), std::string::npos);
  EXPECT_NE(message({"layers=0:fp8;*:dynamic"}, 3).find("is a per-layer config"), std::string::npos);
  EXPECT_NE(message({"fp8", "fp8"}, 3).find("given twice"), std::string::npos);
  EXPECT_NE(message({"fp8"}, 0).find("at least one layer"), std::string::npos);
  EXPECT_THROW(parseTarget("tensorrt"), ConfigError);
}

// Each target's front is exactly the non-dominated set of every assignment of its shape (3 layers, 2 candidates:
// 729 kvscope assignments).
TEST(Tune, FrontsAreTheNonDominatedAssignmentsOfEachTargetsShape) {
  for (unsigned seed : {1u, 2u, 3u, 4u}) {
    // Seed 4: candidates Model-Optimizer can write (NVFP4, FP8) beside one it cannot (quanto).
    const Scan s = seed < 4
                       ? syntheticScan(3, seed)
                       : syntheticScan(3, seed, {parseSpec("vllm"), parseSpec("quanto:nbits=2"), parseSpec("fp8")});
    for (TuneTarget t : allTargets()) {
      const auto all = everyAssignment(s, t);
      const auto front = paretoFront(s, t);
      std::size_t expected = 0;
      for (const Assignment& a : all) expected += !dominated(a, all);
      EXPECT_EQ(front.size(), expected) << targetName(t) << " seed " << seed;
      for (std::size_t i = 0; i < front.size(); ++i) {
        const Assignment& a = front[i];
        // Its figures are its choices' figures, and it has the target's shape.
        const auto same = std::find_if(all.begin(), all.end(),
                                       [&](const Assignment& b) { return b.keys == a.keys && b.values == a.values; });
        ASSERT_NE(same, all.end()) << targetName(t) << ": an assignment of another shape";
        // Non-dominated, judged on the enumeration's own sums (the solve adds the same KLs in another order).
        EXPECT_FALSE(dominated(*same, all)) << targetName(t);
        EXPECT_EQ(same->storedBytes, a.storedBytes);
        EXPECT_NEAR(same->predictedKl, a.predictedKl, 1e-12);
        if (i > 0) {
          EXPECT_GT(a.storedBytes, front[i - 1].storedBytes);
          EXPECT_LT(a.predictedKl, front[i - 1].predictedKl);
        }
      }
      EXPECT_EQ(front.back().storedBytes, s.referenceBytes) << "the unquantized assignment ends the front";
      EXPECT_EQ(front.back().predictedKl, 0.0);
    }
  }
}

TEST(Tune, BudgetsPickFromTheFront) {
  const Scan s = syntheticScan(3, 7);
  const auto front = paretoFront(s, TuneTarget::Kvscope);
  const auto all = everyAssignment(s, TuneTarget::Kvscope);
  for (double limit : {0.0, 0.01, 0.05, 0.2, 10.0}) {
    const auto pick = solve(front, {SweepBudget::Kind::MaxMeanKl, limit});
    ASSERT_TRUE(pick) << limit;  // the unquantized assignment always meets a KL budget
    std::int64_t best = std::numeric_limits<std::int64_t>::max();
    for (const Assignment& a : all)
      if (a.predictedKl <= limit) best = std::min(best, a.storedBytes);
    EXPECT_EQ(pick->storedBytes, best) << limit;
    EXPECT_LE(pick->predictedKl, limit);
  }
  for (std::int64_t bytes : {s.referenceBytes - std::int64_t{850} * 6, s.referenceBytes - 2000, s.referenceBytes}) {
    const auto pick = solve(front, {SweepBudget::Kind::MaxStoredBytes, static_cast<double>(bytes)});
    ASSERT_TRUE(pick);
    double best = std::numeric_limits<double>::infinity();
    for (const Assignment& a : all)
      if (a.storedBytes <= bytes) best = std::min(best, a.predictedKl);
    EXPECT_NEAR(pick->predictedKl, best, 1e-12);
  }
  EXPECT_FALSE(solve(front, {SweepBudget::Kind::MaxStoredBytes, 10.0}));  // below every assignment
}

TEST(Tune, APickIsAConfigWithItsLayersSides) {
  const Scan s = syntheticScan(4, 11);
  const CacheConfig q4 = parseSpec("quanto:nbits=4"), q2 = parseSpec("quanto:nbits=2");
  // Uniform: the candidate itself (what transformers and vLLM without skipped layers take).
  EXPECT_EQ(assignmentConfig(s, {{1, 1, 1, 1}, {1, 1, 1, 1}, 0, 0}), q2);
  EXPECT_EQ(assignmentConfig(s, {{-1, -1, -1, -1}, {-1, -1, -1, -1}, 0, 0}), CacheConfig{});
  const Assignment mixed{{0, 0, -1, 1}, {0, 0, 0, 1}, 0, 0};
  const CacheConfig cfg = assignmentConfig(s, mixed);
  ASSERT_TRUE(cfg.mixed());
  for (int l = 0; l < 4; ++l) {
    const auto [k, v] = layerConfigs(cfg, l, 4);
    auto of = [&](int c) { return c < 0 ? CacheConfig{} : c == 0 ? q4 : q2; };
    EXPECT_EQ(k, of(mixed.keys[static_cast<std::size_t>(l)])) << l;
    EXPECT_EQ(v, of(mixed.values[static_cast<std::size_t>(l)])) << l;
  }
  EXPECT_EQ(parseSpec(toSpec(cfg)), cfg) << toSpec(cfg);
  // The most common pair is the `*` rule; equal neighbours share one range.
  EXPECT_EQ(toSpec(cfg), "layers=2:K=dynamic,V=quanto:nbits=4;3:quanto:nbits=2;*:quanto:nbits=4");
  // Mostly unquantized: the quantizing pair is still the `*` rule, the rest named (vLLM's skipped layers).
  EXPECT_EQ(toSpec(assignmentConfig(s, {{-1, 1, -1, -1}, {-1, 1, -1, -1}, 0, 0})),
            "layers=0:dynamic;2-3:dynamic;*:quanto:nbits=2");
  EXPECT_THROW(assignmentConfig(s, {{0}, {0}, 0, 0}), ConfigError);
}

TEST(Tune, ScanFilesRoundTripAndBadOnesAreClearErrors) {
  const Scan s = syntheticScan(3, 5);
  const std::string text = scanToJson(s, R"({"text":"t.txt","ctx":128})");
  std::string settings;
  const Scan back = scanFromJson(text, "scan.json", &settings);
  EXPECT_EQ(back.plan.candidates, s.plan.candidates);
  EXPECT_EQ(back.referenceBytes, s.referenceBytes);
  ASSERT_EQ(back.points.size(), s.points.size());
  for (std::size_t i = 0; i < s.points.size(); ++i) {
    EXPECT_EQ(back.points[i].meanKl, s.points[i].meanKl);
    EXPECT_EQ(back.points[i].storedBytes, s.points[i].storedBytes);
  }
  EXPECT_EQ(paretoFront(back, TuneTarget::Kvscope), paretoFront(s, TuneTarget::Kvscope));
  EXPECT_NE(settings.find("t.txt"), std::string::npos);
  auto message = [](const std::string& t) {
    try {
      scanFromJson(t, "scan.json");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("{").find("scan.json: not JSON"), std::string::npos);
  EXPECT_NE(message(R"({"format":"kvscope-cache-config"})").find("not a kvscope tune scan"), std::string::npos);
  const nlohmann::json doc = nlohmann::json::parse(text);
  nlohmann::json dropped = doc;  // one point fewer
  dropped["points"].erase(dropped["points"].size() - 1);
  EXPECT_NE(message(dropped.dump()).find("one point per layer side and candidate"), std::string::npos);
  nlohmann::json outside = doc;
  outside["points"][0]["layer"] = 9;
  EXPECT_NE(message(outside.dump()).find("outside the scan"), std::string::npos);
  nlohmann::json twice = doc;  // the first point twice: the scan lacks the second
  twice["points"][1] = twice["points"][0];
  EXPECT_NE(message(twice.dump()).find("has no point for layer 0 V"), std::string::npos) << message(twice.dump());
  nlohmann::json side = doc;
  side["points"][0]["side"] = "Q";
  EXPECT_NE(message(side.dump()).find("point side `Q`"), std::string::npos);
}

// A non-finite KL (a run with NaN positions) is never picked.
TEST(Tune, NonFiniteScanPointsAreNeverPicked) {
  Scan s = syntheticScan(2, 3);
  for (Scan::Point& p : s.points)
    if (p.item.candidate == 1) p.meanKl = std::nan("");
  for (TuneTarget t : allTargets())
    for (const Assignment& a : paretoFront(s, t)) {
      EXPECT_TRUE(std::isfinite(a.predictedKl)) << targetName(t);
      for (int c : a.keys) EXPECT_NE(c, 1) << targetName(t);
      for (int c : a.values) EXPECT_NE(c, 1) << targetName(t);
    }
}

// Each target's export of a pick, in its own terms, with what it cannot express.
TEST(Tune, PicksExportInEachTargetsTerms) {
  const CacheConfig perSide = parseSpec("layers=*:K=llamacpp:type_k=q8_0,V=llamacpp:type_v=q4_0");
  EXPECT_EQ(exportFor(TuneTarget::LlamaCpp, perSide).text, "-ctk q8_0 -ctv q4_0 -fa on");
  const auto hf = exportFor(TuneTarget::Transformers, parseSpec("quanto:nbits=4"));
  EXPECT_NE(hf.text.find("\"backend\": \"quanto\""), std::string::npos) << hf.text;
  ASSERT_FALSE(hf.notes.empty());
  EXPECT_NE(hf.notes.front().find("one config for every layer"), std::string::npos);
  EXPECT_NE(exportFor(TuneTarget::Transformers, CacheConfig{}).text.find("default cache"), std::string::npos);
  const auto vllm = exportFor(TuneTarget::Vllm, parseSpec("layers=0:dynamic;2-3:dynamic;*:fp8"));
  EXPECT_NE(vllm.text.find("--kv-cache-dtype-skip-layers 0 2 3"), std::string::npos) << vllm.text;
  EXPECT_EQ(exportFor(TuneTarget::Kvscope, perSide).text, toSpec(perSide));
  const auto modelopt = exportFor(TuneTarget::ModelOpt, parseSpec("vllm"));
  EXPECT_NE(modelopt.text.find("\"kv_cache_quant_algo\": \"NVFP4\""), std::string::npos) << modelopt.text;
  EXPECT_EQ(exportFor(TuneTarget::ModelOpt, parseSpec("quanto:nbits=4")).text, "(not exported)");
  // A config the target cannot take at all: said, not thrown.
  const auto none = exportFor(TuneTarget::Transformers, parseSpec("layers=0:fp8;*:dynamic"));
  EXPECT_EQ(none.text, "(not exported)");
  EXPECT_EQ(none.notes.size(), 2u);
}

TEST(Tune, APartialScanIsSolvedFromTheCandidatesItHasWhole) {
  const Scan whole = syntheticScan(3, 7);
  // The scan runs candidate by candidate: stopped in the middle of the second, the first is whole.
  Scan part = whole;
  part.points.resize(whole.points.size() - 2);
  EXPECT_EQ(part.find(2, KvSide::Values, 1), nullptr);
  ASSERT_NE(part.find(0, KvSide::Keys, 1), nullptr);
  const Scan solved = completedCandidates(part);
  ASSERT_EQ(solved.plan.candidates.size(), 1u);
  EXPECT_EQ(solved.plan.candidates[0], whole.plan.candidates[0]);
  EXPECT_EQ(solved.points.size(), 6u);
  for (TuneTarget t : allTargets()) {
    const auto front = paretoFront(solved, t);
    ASSERT_FALSE(front.empty());
    for (const Assignment& a : front)  // only the whole candidate (0) or unquantized
      for (const auto* side : {&a.keys, &a.values})
        for (int c : *side) EXPECT_LE(c, 0);
  }
  // A scan that is whole is its own solve; one with no whole candidate has nothing to solve.
  EXPECT_EQ(completedCandidates(whole).points.size(), whole.points.size());
  part.points.resize(5);
  EXPECT_TRUE(completedCandidates(part).plan.candidates.empty());
}

// Priced at a context: a sliding-window layer holds at most its window, a global one every token. On a Gemma-like
// pattern (layers 0-4 over 512 tokens, 5 global) scanned at 512 tokens, 32k tokens of context leave the sliding
// layers' bytes as they were and multiply the global layer's by 64, so its savings dominate the front.
TEST(Tune, PricedAtAContextSlidingLayersHoldTheirWindow) {
  const Scan s = syntheticScan(6, 11);
  const LayerWindows windows{512, 512, 512, 512, 512, 0};
  const Scan p = pricedAt(s, {512, 64, 16}, 32768, windows);
  // Reference: 2000 bytes a layer at 512 tokens; five stay, the sixth is 64 times as much.
  EXPECT_EQ(p.referenceBytes, 5 * 2000 + 64 * 2000);
  for (const Scan::Point& q : p.points) {
    const double factor = q.item.layer == 5 ? 64.0 : 1.0;
    EXPECT_EQ(q.saved(p.referenceBytes), std::llround(factor * (q.item.candidate == 0 ? 700 : 850))) << q.item.layer;
    EXPECT_EQ(q.meanKl, s.at(q.item.layer, q.item.side, q.item.candidate).meanKl);
  }
  // A dense model (no windows) only scales: every layer by the same factor, so the front keeps its assignments.
  const Scan dense = pricedAt(s, {512, 64, 16}, 2048, {});
  EXPECT_EQ(dense.referenceBytes, 4 * s.referenceBytes);
  const auto f0 = paretoFront(s, TuneTarget::Kvscope), f1 = paretoFront(dense, TuneTarget::Kvscope);
  ASSERT_EQ(f0.size(), f1.size());
  for (std::size_t i = 0; i < f0.size(); ++i) EXPECT_EQ(f0[i].keys, f1[i].keys);
  // Windows longer than the scan's windows: the sliding layers held every token there, and hold their window here.
  const Scan longWindow = pricedAt(s, {256, 64, 16}, 4096, LayerWindows{1024, 1024, 1024, 1024, 1024, 0});
  EXPECT_EQ(longWindow.referenceBytes, 5 * 2000 * 4 + 2000 * 16);
  // Windows shorter than the scan's: fed 64 tokens, then 16 at a time, a layer sliding over 128 drops down to 127
  // once it holds more than 191 (KvCache's slack of 64): 192 after 192 tokens, then 127 + 4 steps = 191 after 256;
  // the global layer 256; at 4096 tokens they hold 128 and 4096.
  const ScanFeed feed{256, 64, 16};
  EXPECT_EQ(feed.held(128), 191);
  EXPECT_EQ(feed.held(0), 256);
  EXPECT_EQ(feed.held(1024), 256);
  const Scan shortWindow = pricedAt(s, feed, 4096, LayerWindows{128, 128, 128, 128, 128, 0});
  EXPECT_EQ(shortWindow.referenceBytes, std::llround(12000.0 * (5 * 128 + 4096) / (5 * 191 + 256)));
  // Priced at the scan's own length: nothing changes.
  EXPECT_EQ(pricedAt(s, {512, 64, 16}, 512, windows).referenceBytes, s.referenceBytes);
  EXPECT_THROW(pricedAt(s, {512, 64, 16}, 1024, LayerWindows{512}), ConfigError);
  EXPECT_THROW(pricedAt(s, {0, 64, 16}, 1024, windows), ConfigError);
  // Layers of their own shapes (Gemma 4: sliding layers of 2 KV heads x 64 x 2 sides, a full one of 1 x 128 x 2 with
  // twice their share, shared layers that store nothing): each weighs the reference by its values a token, and a
  // shared layer's tokens add no bytes at any context.
  const std::vector<double> values{256, 256, 256, 256, 256, 0};
  const Scan shaped = pricedAt(s, {512, 64, 16}, 32768, windows, values);
  EXPECT_EQ(shaped.referenceBytes, s.referenceBytes);  // only sliding layers store: nothing grows past 512 tokens
  const Scan full = pricedAt(s, {512, 64, 16}, 32768, LayerWindows{512, 512, 512, 512, 0, 0},
                             std::vector<double>{256, 256, 256, 256, 512, 0});
  EXPECT_EQ(full.referenceBytes, std::llround(12000.0 * (4 * 256 * 512 + 512 * 32768.0) / (4 * 256 * 512 + 512 * 512)));
  EXPECT_THROW(pricedAt(s, {512, 64, 16}, 1024, windows, {1.0}), ConfigError);
  EXPECT_THROW(pricedAt(s, {512, 64, 16}, 1024, windows, std::vector<double>(6, 0.0)), ConfigError);
}
