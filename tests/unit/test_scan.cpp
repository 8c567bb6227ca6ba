// The tuner's scan runs resumed at their layer (generate::evaluateLayerRuns): the figures of every run equal, bit for
// bit, those of the run from the first layer (ScanMethod::Full, evaluate()), for layers whose prompt stays the
// reference's (quanto, fp8: the first update attends over its inputs) and for those whose prompt already differs
// (llama.cpp's types, read from the cache), with the prompt in one forward and in chunks.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "cache/config.h"
#include "cache/tune.h"
#include "generate/eval.h"
#include "gguf_writer.h"
#include "kernels/ggml_type.h"
#include "model/llama.h"
#include "util/error.h"

namespace kvscope {
namespace {

// A random 3-layer llama in F32 with heads of 32 channels (llama.cpp's block types need whole blocks of 32): hidden
// 64, 2 query heads, 1 KV head, FFN 96, vocab 96.
std::string scanModel() {
  static const std::string path = [] {
    at::manual_seed(23);
    constexpr int kLayers = 3;
    std::vector<std::pair<std::string, std::vector<std::uint64_t>>> plan = {{"token_embd.weight", {64, 96}},
                                                                            {"output_norm.weight", {64}}};
    for (int l = 0; l < kLayers; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".";
      for (auto& t :
           std::vector<std::pair<std::string, std::vector<std::uint64_t>>>{{b + "attn_norm.weight", {64}},
                                                                           {b + "attn_q.weight", {64, 64}},
                                                                           {b + "attn_k.weight", {64, 32}},
                                                                           {b + "attn_v.weight", {64, 32}},
                                                                           {b + "attn_output.weight", {64, 64}},
                                                                           {b + "ffn_norm.weight", {64}},
                                                                           {b + "ffn_gate.weight", {64, 96}},
                                                                           {b + "ffn_up.weight", {64, 96}},
                                                                           {b + "ffn_down.weight", {96, 64}}})
        plan.push_back(t);
    }
    const std::vector<std::pair<std::string, std::uint32_t>> ints = {
        {"block_count", kLayers},       {"embedding_length", 64},    {"attention.head_count", 2},
        {"attention.head_count_kv", 1}, {"feed_forward_length", 96}, {"context_length", 512}};
    testutil::GgufWriter g;
    g.header(plan.size(), 1 + ints.size());
    g.kvStr("general.architecture", "llama");
    for (const auto& [k, v] : ints) g.kvU32("llama." + k, v);
    g.f32Infos(plan);
    g.f32Data(plan, [](const std::string& n, std::int64_t count) {
      at::Tensor v = n.find("norm") != std::string::npos ? 1 + 0.1 * at::randn({count}) : 0.15 * at::randn({count});
      v = v.contiguous();
      return std::vector<float>(v.data_ptr<float>(), v.data_ptr<float>() + count);
    });
    return g.write("scan.gguf");
  }();
  return path;
}

std::vector<std::vector<std::int64_t>> randomWindows(int n, int ctx, std::int64_t vocab, std::uint64_t seed) {
  at::manual_seed(seed);
  std::vector<std::vector<std::int64_t>> w;
  for (int i = 0; i < n; ++i) {
    const at::Tensor ids = at::randint(vocab, {ctx}, at::kLong);
    w.emplace_back(ids.data_ptr<std::int64_t>(), ids.data_ptr<std::int64_t>() + ctx);
  }
  return w;
}

// The scan's runs of `candidates` on a model of `layers` layers (each candidate on each layer side alone).
std::vector<generate::LayerRun> scanRuns(const std::vector<cache::CacheConfig>& candidates, int layers) {
  const auto plan = cache::planScan(candidates, layers);
  std::vector<generate::LayerRun> runs;
  for (const auto& it : plan.items) runs.push_back({it.layer, plan.config(it)});
  return runs;
}

// Bit for bit (NaNs too).
bool same(double a, double b) {
  return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
}
bool same(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](double x, double y) { return same(x, y); });
}

void expectSameFigures(const generate::EvalFigures& a, const generate::EvalFigures& b) {
  SCOPED_TRACE(a.spec);
  EXPECT_EQ(a.spec, b.spec);
  EXPECT_EQ(a.scored, b.scored);
  EXPECT_TRUE(same(a.nll, b.nll)) << a.nll << " " << b.nll;
  EXPECT_TRUE(same(a.klSum, b.klSum)) << a.klSum << " " << b.klSum;
  EXPECT_TRUE(same(a.klMax, b.klMax)) << a.klMax << " " << b.klMax;
  EXPECT_EQ(a.agree, b.agree);
  EXPECT_TRUE(same(a.tokenNll, b.tokenNll));
  EXPECT_TRUE(same(a.tokenKl, b.tokenKl));
  EXPECT_TRUE(same(a.klAtPosition, b.klAtPosition));
  EXPECT_EQ(a.memory.stored(), b.memory.stored());
  EXPECT_EQ(a.memory.unquantized, b.memory.unquantized);
  EXPECT_EQ(a.overflow, b.overflow);
  EXPECT_EQ(a.nonFinite, b.nonFinite);
}

TEST(Scan, ARunResumedAtItsLayerHasTheFiguresOfTheRunFromTheFirstLayer) {
  const auto m = model::LlamaModel::load(scanModel());
  const auto runs = scanRuns({cache::parseSpec("quanto:nbits=2"), cache::parseSpec("fp8:overflow=saturate"),
                              cache::parseSpec("llamacpp:type_k=q4_0,type_v=q4_0")},
                             m->config().layers);
  const auto windows = randomWindows(2, 48, m->config().vocab, 11);
  for (const int step : {1, 5}) {
    generate::EvalOptions o;
    o.prompt = 20;
    o.step = step;
    SCOPED_TRACE(step);
    const auto full = generate::evaluateLayerRuns(*m, windows, runs, o, {}, {}, generate::ScanMethod::Full);
    std::vector<std::size_t> seen;
    const auto resumed = generate::evaluateLayerRuns(
        *m, windows, runs, o, {},
        [&](std::size_t, std::size_t ci, const generate::EvalFigures&) { seen.push_back(ci); });
    ASSERT_EQ(full.size(), runs.size() + 1);
    ASSERT_EQ(resumed.size(), full.size());
    for (std::size_t i = 0; i < full.size(); ++i) expectSameFigures(resumed[i], full[i]);
    // Every run is quantized somewhere: its KL is not the reference's zero.
    for (std::size_t i = 1; i < full.size(); ++i) EXPECT_GT(resumed[i].klSum, 0.0) << resumed[i].spec;
    // The figures callback sees each (window, run) in order, the reference first.
    ASSERT_EQ(seen.size(), windows.size() * full.size());
    for (std::size_t k = 0; k < seen.size(); ++k) EXPECT_EQ(seen[k], k % full.size());
  }
}

TEST(Scan, APromptLongerThanAPrefillChunkResumesChunkByChunk) {
  // 530 prompt tokens go through in chunks of 512 (generate::kDefaultPrefillChunk, every layer being fused): the
  // reference records them chunk by chunk, and a run resumes each (a quanto layer's second chunk already reads the
  // codes the first stored, so the layers above take the first chunk's states then).
  const auto m = model::LlamaModel::load(scanModel());
  const auto runs = scanRuns({cache::parseSpec("quanto:nbits=2")}, m->config().layers);
  const auto windows = randomWindows(1, 560, m->config().vocab, 3);
  generate::EvalOptions o;
  o.prompt = 530;
  o.step = 8;
  const auto full = generate::evaluateLayerRuns(*m, windows, runs, o, {}, {}, generate::ScanMethod::Full);
  const auto resumed = generate::evaluateLayerRuns(*m, windows, runs, o);
  for (std::size_t i = 0; i < full.size(); ++i) expectSameFigures(resumed[i], full[i]);
}

TEST(Scan, ARunOfOneShardHasTheFiguresItHasInTheWholeScan) {
  // Runs are computed one thread each whatever runs beside them: a shard's subset gives the same figures.
  const auto m = model::LlamaModel::load(scanModel());
  const auto runs = scanRuns({cache::parseSpec("llamacpp:type_k=q8_0,type_v=q4_0")}, m->config().layers);
  const auto windows = randomWindows(1, 40, m->config().vocab, 5);
  generate::EvalOptions o;
  o.prompt = 16;
  o.step = 3;
  const auto whole = generate::evaluateLayerRuns(*m, windows, runs, o);
  const auto odd = generate::evaluateLayerRuns(*m, windows, {runs[1], runs[3]}, o);
  expectSameFigures(odd[1], whole[2]);
  expectSameFigures(odd[2], whole[4]);
}

// The scan measures in float32 activations: a model on 8-bit activations is switched for the scan's scope, scans as
// the same model on float32 does, bit for bit, and computes on 8-bit activations again after it. Why: on 8-bit
// activations one layer side stored in q8_0 costs a KL many times its float32 one, the re-rounding of the layers
// above it.
TEST(Scan, AModelOnEightBitActivationsIsScannedInFloat32) {
  auto m = model::LlamaModel::load(scanModel(), device::ExecutionContext(), {},
                                   static_cast<std::uint32_t>(kernels::GgmlType::Q8_0));
  ASSERT_TRUE(m->blockWeights());
  const auto runs = scanRuns({cache::parseSpec("llamacpp:type_k=q8_0,type_v=q8_0")}, m->config().layers);
  const auto windows = randomWindows(2, 48, m->config().vocab, 17);
  generate::EvalOptions o;
  o.prompt = 20;
  o.step = 4;
  const auto f32 = generate::evaluateLayerRuns(*m, windows, runs, o);
  m->setActivations(model::Activations::Q8);
  const auto q8 = generate::evaluateLayerRuns(*m, windows, runs, o);
  {
    const generate::ScanArithmetic arithmetic(*m);
    EXPECT_TRUE(arithmetic.switched());
    EXPECT_EQ(m->activations(), model::Activations::F32);
    // And the weights with float32 copies (the prompt's 20 rows multiply them), with the same figures.
    EXPECT_GT(arithmetic.floatCopyBytes(), 0U);
    EXPECT_EQ(arithmetic.floatCopyBytes(), m->floatCopyBytes());
    const auto scanned = generate::evaluateLayerRuns(*m, windows, runs, o);
    for (std::size_t i = 0; i < f32.size(); ++i) expectSameFigures(scanned[i], f32[i]);
  }
  EXPECT_EQ(m->activations(), model::Activations::Q8);
  const auto again = generate::evaluateLayerRuns(*m, windows, runs, o);
  for (std::size_t i = 0; i < q8.size(); ++i) expectSameFigures(again[i], q8[i]);
  // Here 4 to 44 times (q8_0 on the embedded model: about 1e-6 against 1e-3).
  for (std::size_t i = 1; i < f32.size(); ++i) EXPECT_GT(q8[i].meanKl(), 2 * f32[i].meanKl()) << f32[i].spec;
  m->setActivations(model::Activations::F32);
  {
    const generate::ScanArithmetic arithmetic(*m);  // already float32: nothing to switch, nothing to give back
    EXPECT_FALSE(arithmetic.switched());
  }
  EXPECT_EQ(m->activations(), model::Activations::F32);
}

TEST(Scan, StreamsSideBySideGetWhatEachGetsAlone) {
  // A Q8_0 model (block weights: the GEMM path over dequantized tiles), three caches of different kinds, streams of
  // 24 rows (one batch for the weight products) and of 4 (the block kernels, stream by stream).
  const auto m = model::LlamaModel::load(scanModel(), device::ExecutionContext(), {},
                                         static_cast<std::uint32_t>(kernels::GgmlType::Q8_0));
  const std::vector<std::string> specs = {"dynamic", "llamacpp:type_k=q4_0,type_v=q8_0", "fp8"};
  for (std::int64_t T : {24, 4}) {
    std::vector<at::Tensor> hs;
    std::vector<std::unique_ptr<cache::KvCache>> alone, together;
    std::vector<cache::KvCache*> caches;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      hs.push_back(at::randn({1, T, m->config().hidden}));
      alone.push_back(m->makeCache(cache::parseSpec(specs[i])));
      together.push_back(m->makeCache(cache::parseSpec(specs[i])));
      caches.push_back(together.back().get());
    }
    std::vector<at::Tensor> side = hs;
    for (int l = 0; l < m->config().layers; ++l) side = m->runLayer(side, caches, l, 0);
    const auto lastOnly = m->logits(side, true), every = m->logits(side, false);
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const at::Tensor h = m->runLayers(hs[i], *alone[i], 0, m->config().layers, 0);
      EXPECT_TRUE(at::equal(side[i], h)) << specs[i] << " T=" << T;
      EXPECT_TRUE(at::equal(every[i], m->logits(h, false))) << specs[i] << " T=" << T;
      EXPECT_TRUE(at::equal(lastOnly[i], m->logits(h, true))) << specs[i] << " T=" << T;
      EXPECT_EQ(caches[i]->seqLength(), T) << specs[i];
    }
  }
  EXPECT_THROW(m->runLayer({at::randn({1, 4, m->config().hidden})}, {}, 0, 0), Error);
}

TEST(Scan, ALayerOutsideTheModelIsAConfigError) {
  const auto m = model::LlamaModel::load(scanModel());
  const std::vector<std::vector<std::int64_t>> w = {{1, 2, 3, 4}};
  EXPECT_THROW(generate::evaluateLayerRuns(*m, w, {{m->config().layers, cache::parseSpec("fp8")}}), cache::ConfigError);
  EXPECT_THROW(generate::evaluateLayerRuns(*m, w, {{0, cache::parseSpec("fp8")}}, {}, [](auto...) { return false; }),
               generate::EvalCancelled);
}

}  // namespace
}  // namespace kvscope
