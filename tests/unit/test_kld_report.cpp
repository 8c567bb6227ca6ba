// llama-perplexity's KL figures (generate::KldReport, util/metrics.h) on values worked out by hand: its percentile
// interpolation, its even-count median, its standard errors (none for ten samples or fewer), Δp from the NLLs, the
// PPL ratio, non-finite positions left out; and the KL against context length.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "generate/eval.h"
#include "util/metrics.h"

using namespace kvscope;

TEST(KldReport, PercentilesMedianAndErrorsAsLlamaPerplexity) {
  const std::vector<double> v{0.0, 1.0, 2.0, 3.0, 4.0};
  EXPECT_DOUBLE_EQ(percentileOf(v, 0.99), 0.96 * 4.0 + 0.04 * 3.0);  // 0.99 * 4 = 3.96 between v[3] and v[4]
  EXPECT_DOUBLE_EQ(percentileOf(v, 0.5), 2.0);
  EXPECT_DOUBLE_EQ(percentileOf(v, 1.5), 4.0);
  EXPECT_TRUE(std::isnan(percentileOf({}, 0.5)));
  EXPECT_DOUBLE_EQ(medianOf({1.0, 2.0, 4.0, 8.0}), 3.0);
  EXPECT_DOUBLE_EQ(medianOf({1.0, 2.0, 4.0}), 2.0);
  // Ten samples: a mean without an error; twelve: sqrt(var / (n - 1)) with the population variance.
  EXPECT_EQ(meanOf(10.0, 20.0, 10).error, 0.0);
  const Estimate m = meanOf(12.0, 24.0, 12);  // mean 1, E[x^2] 2: variance 1
  EXPECT_DOUBLE_EQ(m.value, 1.0);
  EXPECT_DOUBLE_EQ(m.error, std::sqrt(1.0 / 11.0));
  const Estimate f = fractionOf(3, 4);
  EXPECT_DOUBLE_EQ(f.value, 0.75);
  EXPECT_DOUBLE_EQ(f.error, std::sqrt(0.75 * 0.25 / 3.0));
}

TEST(KldReport, FromPerTokenValues) {
  generate::EvalFigures ref, q;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Four positions, the third not finite in the config: it is left out of every figure but the top-1 count.
  ref.tokenNll = {1.0, 2.0, 0.5, 1.0};
  q.tokenNll = {1.5, 2.0, nan, 0.5};
  q.tokenKl = {0.2, 0.0, nan, 0.4};
  q.agree = 3;
  q.scored = 4;
  const generate::KldReport k = generate::kldReport(q, ref);
  EXPECT_EQ(k.tokens, 3);
  EXPECT_NEAR(k.meanKl.value, 0.2, 1e-15);
  EXPECT_EQ(k.meanKl.error, 0.0);  // three samples: llama-perplexity gives no error
  EXPECT_DOUBLE_EQ(k.medianKl, 0.2);
  EXPECT_DOUBLE_EQ(k.maxKl, 0.4);
  EXPECT_DOUBLE_EQ(k.kl99, 0.98 * 0.4 + 0.02 * 0.2);
  EXPECT_DOUBLE_EQ(k.sameTop.value, 0.75);
  const double d1 = std::exp(-1.5) - std::exp(-1.0), d3 = std::exp(-0.5) - std::exp(-1.0);
  EXPECT_NEAR(k.rmsDeltaP.value, std::sqrt((d1 * d1 + d3 * d3) / 3.0), 1e-15);
  // PPL ratio: exp(mean NLL(config) - mean NLL(reference)) over the counted positions.
  EXPECT_NEAR(k.pplRatio.value, std::exp((1.5 + 2.0 + 0.5) / 3.0 - (1.0 + 2.0 + 1.0) / 3.0), 1e-15);
  // Nothing finite: no figures.
  generate::EvalFigures none;
  none.tokenKl = {nan};
  none.tokenNll = {nan};
  EXPECT_EQ(generate::kldReport(none, ref).tokens, 0);
  EXPECT_TRUE(std::isnan(generate::kldReport(none, ref).meanKl.value));
}

TEST(KldReport, KlAgainstContextLength) {
  generate::EvalFigures f;
  f.klAtPosition = {0.0, 0.0, 0.3, 1.0};
  f.tokensAtPosition = {0, 0, 1, 4};
  const std::vector<double> p = generate::klByPosition(f);
  ASSERT_EQ(p.size(), 4u);
  EXPECT_TRUE(std::isnan(p[0]) && std::isnan(p[1]));
  EXPECT_DOUBLE_EQ(p[2], 0.3);
  EXPECT_DOUBLE_EQ(p[3], 0.25);
}
