// A model through kvscope's loader and forward against transformers (make_model_fixtures.py for the embedded
// SmolLM2 GGUF, make_tiny_models.py for tiny random Llama/Qwen3 directories): prefill logits within 1e-3 (fp32),
// and 64 greedy tokens with the dynamic cache and with the fp8 / quanto int4 / hqq int4 caches identical to
// transformers' generate(); a divergence is accepted only where the reference's top-2 margin is a tie (< 1e-4).
// The model and the reference come from $KVSCOPE_PARITY_MODEL and $KVSCOPE_PARITY_REF.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include "generate/generate.h"
#include "model/llama.h"
#include "model/safetensors.h"

using namespace kvscope;

namespace {

const char* modelPath() {
  const char* p = std::getenv("KVSCOPE_PARITY_MODEL");
  return p && std::filesystem::exists(p) ? p : nullptr;
}
const char* refPath() { return std::getenv("KVSCOPE_PARITY_REF"); }

at::Tensor load(const model::SafetensorsFile& f, const std::string& name) {
  const auto& e = f.at(name);
  const at::ScalarType t = e.dtype == "I64" ? at::kLong : at::kFloat;
  return at::from_blob(const_cast<std::uint8_t*>(e.data), e.shape, at::TensorOptions().dtype(t)).clone();
}

struct Fixture {
  std::unique_ptr<model::SafetensorsFile> ref;
  std::unique_ptr<model::LlamaModel> model;
};

Fixture& fixture() {
  static Fixture f = [] {
    Fixture x;
    x.ref = std::make_unique<model::SafetensorsFile>(refPath());
    x.model = model::LlamaModel::load(modelPath(), at::kFloat);
    return x;
  }();
  return f;
}

}  // namespace

TEST(ModelParity, PrefillLogits) {
  if (!modelPath()) GTEST_SKIP() << "KVSCOPE_PARITY_MODEL is not set to an existing model";
  at::set_num_threads(2);
  auto& f = fixture();
  const at::Tensor ids = load(*f.ref, "prompt_ids");
  auto cache = f.model->makeCache(cache::parseSpec("dynamic"));
  const at::Tensor logits = f.model->forward(ids, *cache)[0];
  const at::Tensor ref = load(*f.ref, "prefill_logits");
  ASSERT_EQ(logits.sizes(), ref.sizes());
  const double diff = (logits - ref).abs().max().item<double>();
  std::printf("[model-parity] prefill %ld tokens: max |logit diff| %.3g\n", static_cast<long>(ids.size(1)), diff);
  EXPECT_LE(diff, 1e-3);
}

TEST(ModelParity, BeamSearchMatchesTransformers) {
  if (!modelPath()) GTEST_SKIP() << "KVSCOPE_PARITY_MODEL is not set to an existing model";
  auto& f = fixture();
  if (!f.ref->contains("beam.sequences")) GTEST_SKIP() << "no beam-search reference in this fixture";
  at::set_num_threads(2);
  const at::Tensor ids = load(*f.ref, "prompt_ids");
  const at::Tensor want = load(*f.ref, "beam.sequences");
  const at::Tensor wantScores = load(*f.ref, "beam.scores");
  std::vector<std::int64_t> prompt(ids.data_ptr<std::int64_t>(), ids.data_ptr<std::int64_t>() + ids.numel());
  auto cache = f.model->makeCache(cache::parseSpec("dynamic"));
  generate::BeamOptions o;
  o.numBeams = 4;
  int reorders = 0;
  const auto r = generate::beamSearch(*f.model, *cache, prompt, static_cast<int>(want.size(1)), o, {},
                                      [&](const generate::BeamStepEvent&) { return ++reorders > 0; });
  ASSERT_EQ(static_cast<std::int64_t>(r.sequences.size()), want.size(0));
  for (std::int64_t b = 0; b < want.size(0); ++b) {
    const at::Tensor got = at::tensor(r.sequences[b], at::kLong);
    EXPECT_TRUE(at::equal(got, want[b])) << "beam " << b;
    EXPECT_NEAR(r.scores[b], wantScores[b].item<float>(), 1e-3) << "beam " << b;
  }
  std::printf("[model-parity] beam search: 4 beams x %ld tokens identical, scores within 1e-3 (%d cache reorders)\n",
              static_cast<long>(want.size(1)), reorders);
}

TEST(Generate, SamplingIsReproducibleAndShadowMeasuresTheCache) {
  if (!modelPath()) GTEST_SKIP() << "KVSCOPE_PARITY_MODEL is not set to an existing model";
  auto& f = fixture();
  at::set_num_threads(2);
  const at::Tensor ids = load(*f.ref, "prompt_ids");
  std::vector<std::int64_t> prompt(ids.data_ptr<std::int64_t>(), ids.data_ptr<std::int64_t>() + ids.numel());
  generate::GenerateOptions o;
  o.maxNew = 16;
  o.sampling.greedy = false;
  o.sampling.temperature = 0.9;
  o.sampling.topK = 50;
  o.sampling.topP = 0.95;
  o.sampling.seed = 42;
  auto run = [&](const char* spec, std::uint64_t seed, bool shadow) {
    o.sampling.seed = seed;
    o.shadow = shadow;
    auto c = f.model->makeCache(cache::parseSpec(spec));
    return generate::generate(*f.model, *c, prompt, o);
  };
  const auto a = run("dynamic", 42, false), b = run("dynamic", 42, false), c = run("dynamic", 7, false);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_NE(a.tokens, c.tokens);
  // A dynamic cache against its dynamic shadow: the same distributions.
  const auto d = run("dynamic", 42, true);
  EXPECT_LT(d.maxKl, 1e-6);
  EXPECT_EQ(d.top1Agreement, 1.0);
  EXPECT_EQ(d.firstDivergence, -1);
  // A 2-bit cache does move the distributions.
  const auto q = run("quanto:nbits=2,q_group_size=32,residual_length=8", 42, true);
  EXPECT_GT(q.meanKl, 1e-4);
  std::printf("[model-parity] shadow: quanto int2 mean KL %.4g, max %.4g, top-1 agreement %.2f, first divergence %d\n",
              q.meanKl, q.maxKl, q.top1Agreement, q.firstDivergence);
  // Stop tokens end the run and stay in the output.
  o.sampling.greedy = true;
  o.shadow = false;
  o.stopIds = {a.tokens.empty() ? 0 : load(*f.ref, "greedy.dynamic")[3].item<std::int64_t>()};
  auto cc = f.model->makeCache(cache::parseSpec("dynamic"));
  const auto s = generate::generate(*f.model, *cc, prompt, o);
  EXPECT_EQ(s.stopReason, "stop_token");
  EXPECT_EQ(s.tokens.back(), o.stopIds[0]);
  // Bad options are errors, not crashes.
  generate::GenerateOptions bad;
  bad.sampling.greedy = false;
  bad.sampling.temperature = 0;
  auto c2 = f.model->makeCache(cache::parseSpec("dynamic"));
  EXPECT_THROW(generate::generate(*f.model, *c2, prompt, bad), std::invalid_argument);
  EXPECT_THROW(generate::generate(*f.model, *c2, {}, o), std::invalid_argument);
}

TEST(ModelLoad, ProgressCancelAndTaps) {
  if (!modelPath()) GTEST_SKIP() << "KVSCOPE_PARITY_MODEL is not set to an existing model";
  std::int64_t calls = 0, lastTotal = 0;
  auto m = model::LlamaModel::load(modelPath(), at::kFloat, [&](std::int64_t done, std::int64_t total) {
    ++calls;
    lastTotal = total;
    return done <= total;
  });
  EXPECT_GT(calls, 10);
  EXPECT_GE(lastTotal, calls);
  EXPECT_THROW(model::LlamaModel::load(modelPath(), at::kFloat, [](std::int64_t done, std::int64_t) { return done < 5; }),
               model::LoadCancelled);
  // Taps see every layer's attention inputs and outputs, with the shapes the cache receives.
  std::map<std::string, int> seen;
  at::Tensor k0;
  auto cache = m->makeCache(cache::parseSpec("dynamic"));
  m->forward(at::arange(3, 11, at::kLong).view({1, -1}), *cache, [&](int layer, const char* name, const at::Tensor& t) {
    ++seen[name];
    if (layer == 0 && std::string(name) == "k") k0 = t.clone();
  });
  const auto& c = m->config();
  for (const char* n : {"attn_in", "q", "k", "v", "attn_out", "mlp_out"}) EXPECT_EQ(seen[n], c.layers) << n;
  ASSERT_TRUE(k0.defined());
  EXPECT_EQ(k0.sizes(), (std::vector<std::int64_t>{1, c.kvHeads, 8, c.headDim}));
  EXPECT_EQ(cache->seqLength(), 8);
}

class GreedyParity : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(GreedyParity, SameTokensAsTransformers) {
  if (!modelPath()) GTEST_SKIP() << "KVSCOPE_PARITY_MODEL is not set to an existing model";
  at::set_num_threads(2);
  auto& f = fixture();
  const auto [name, spec] = GetParam();
  const at::Tensor ids = load(*f.ref, "prompt_ids");
  const at::Tensor ref = load(*f.ref, std::string("greedy.") + name);
  const at::Tensor margin = load(*f.ref, std::string("margin.") + name);
  std::vector<std::int64_t> prompt(ids.data_ptr<std::int64_t>(), ids.data_ptr<std::int64_t>() + ids.numel());
  auto cache = f.model->makeCache(cache::parseSpec(spec));
  generate::GenerateOptions o;
  o.maxNew = static_cast<int>(ref.numel());
  const auto r = generate::generate(*f.model, *cache, prompt, o);
  ASSERT_EQ(static_cast<std::int64_t>(r.tokens.size()), ref.numel());
  int firstDiff = -1;
  for (std::int64_t i = 0; i < ref.numel(); ++i)
    if (r.tokens[i] != ref[i].item<std::int64_t>()) {
      firstDiff = static_cast<int>(i);
      break;
    }
  if (firstDiff < 0) {
    std::printf("[model-parity] %-12s %-16s 64/64 greedy tokens identical\n", name, spec);
  } else {
    const float m = margin[firstDiff].item<float>();
    std::printf("[model-parity] %-12s first divergence at step %d, reference top-2 margin %.3g\n", name, firstDiff, m);
    EXPECT_LT(m, 1e-4) << name << ": diverged at step " << firstDiff << " where the reference was not a tie";
  }
}

INSTANTIATE_TEST_SUITE_P(Caches, GreedyParity,
                         ::testing::Values(std::pair{"dynamic", "dynamic"}, std::pair{"fp8", "fp8"},
                                           std::pair{"quanto_int4", "quanto:nbits=4"},
                                           std::pair{"hqq_int4", "hqq:nbits=4"}),
                         [](const auto& p) { return std::string(p.param.first); });

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
