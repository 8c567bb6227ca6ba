// Teacher forcing (generate::scoreContinuation): the perplexity the workbench's table scores every run on, the same
// tokens for every config.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cache/config.h"
#include "generate/generate.h"
#include "model/llama.h"
#include "random_model.h"
#include "util/metrics.h"

namespace kvscope {
namespace {

using testutil::prompt;
using testutil::randomModel;

// A greedy generation's own tokens, fed back: each is scored under the same logits that chose it, so the score is the
// generation's log-probs summed, whatever the cache (the prompt chunked as generate() chunks it).
TEST(TeacherForcing, ScoresAGenerationsTokensAsItsOwnLogProbs) {
  const auto m = model::LlamaModel::load(randomModel());
  for (const char* spec : {"dynamic", "quanto:nbits=2,residual_length=4", "fp8:overflow=saturate"}) {
    const auto cfg = cache::parseSpec(spec);
    generate::GenerateOptions o;
    o.maxNew = 12;
    auto kv = m->makeCache(cfg);
    const auto g = generate::generate(*m, *kv, prompt(20), o);
    ASSERT_EQ(g.tokens.size(), 12u) << spec;
    double own = 0;
    for (float lp : g.logprobs) own -= lp;
    auto fresh = m->makeCache(cfg);
    const auto s = generate::scoreContinuation(*m, *fresh, prompt(20), g.tokens);
    EXPECT_EQ(s.scored, 12) << spec;
    EXPECT_NEAR(s.nll, own, 1e-3 * std::max(1.0, own)) << spec;
    EXPECT_NEAR(s.ppl(), perplexity(own, 12), 1e-3 * s.ppl()) << spec;
  }
}

// The same continuation through two configs: a coarser cache predicts it worse (the reference scores best on its own
// greedy answer's tokens only in expectation; a 2-bit cache with no residual window is far from it here).
TEST(TeacherForcing, AQuantizedCacheIsScoredOnTheReferencesTokens) {
  const auto m = model::LlamaModel::load(randomModel());
  generate::GenerateOptions o;
  o.maxNew = 16;
  auto ref = m->makeCache(cache::parseSpec("dynamic"));
  const auto g = generate::generate(*m, *ref, prompt(24), o);
  auto a = m->makeCache(cache::parseSpec("dynamic"));
  auto b = m->makeCache(cache::parseSpec("quanto:nbits=2,residual_length=0,q_group_size=32"));
  const auto sa = generate::scoreContinuation(*m, *a, prompt(24), g.tokens);
  const auto sb = generate::scoreContinuation(*m, *b, prompt(24), g.tokens);
  EXPECT_EQ(sa.scored, sb.scored);
  EXPECT_TRUE(std::isfinite(sb.ppl()));
  EXPECT_NE(sa.nll, sb.nll);  // the quantized states are what the scored tokens attend to
  // Nothing to score, an empty prompt, a used cache: said.
  auto c = m->makeCache(cache::parseSpec("dynamic"));
  EXPECT_EQ(generate::scoreContinuation(*m, *c, prompt(4), {}).scored, 0);
  EXPECT_TRUE(std::isnan(generate::scoreContinuation(*m, *c, prompt(4), {}).ppl()));
  EXPECT_THROW(generate::scoreContinuation(*m, *c, {}, g.tokens), Error);
  m->forward(at::tensor(std::vector<std::int64_t>{1, 2}).view({1, 2}), *c);
  EXPECT_THROW(generate::scoreContinuation(*m, *c, prompt(4), g.tokens), Error);
}

}  // namespace
}  // namespace kvscope
