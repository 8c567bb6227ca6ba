// The long-context probes: texts reproducible and sized to their length, needles at their depth, an exact answer
// check; and a harness that cannot be fooled: every quantizing config's scored tokens read quantized states, so none
// scores bit-identically to the unquantized cache on a prompt longer than its full-precision window.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cache/config.h"
#include "generate/eval.h"
#include "generate/probe.h"
#include "model/llama.h"
#include "probe/suite.h"
#include "random_model.h"
#include "util/error.h"

namespace kvscope {
namespace {

// A stand-in for a tokenizer: a token every four bytes (BOS included).
std::int64_t fourBytes(const std::string& s) {
  return 1 + static_cast<std::int64_t>(s.size() + 3) / 4;
}

std::vector<probe::Task> allTasks() {
  std::vector<probe::Task> t;
  for (const auto& i : probe::tasks()) t.push_back(i.task);
  return t;
}

TEST(ProbeSuite, EachTaskFitsItsLengthAndIsTheSameTextForTheSameSeed) {
  for (probe::Task t : allTasks())
    for (std::int64_t len : {1024, 4096}) {
      const probe::Probe a = probe::makeProbe(t, len, 50, 0, 7, fourBytes);
      const probe::Probe b = probe::makeProbe(t, len, 50, 0, 7, fourBytes);
      const probe::Probe c = probe::makeProbe(t, len, 50, 0, 8, fourBytes);
      SCOPED_TRACE(a.id());
      EXPECT_EQ(a.prompt, b.prompt);
      EXPECT_EQ(a.answers, b.answers);
      EXPECT_NE(a.prompt, c.prompt) << "another seed, another text";
      const std::int64_t used = fourBytes(a.prompt) + probe::info(t).answerTokens;
      EXPECT_LE(used, len);
      // The largest haystack that fits: within a few lines (or words) of the length.
      EXPECT_GT(used, len - 160) << used;
      EXPECT_FALSE(a.answers.empty());
    }
}

TEST(ProbeSuite, NeedlesSitAtTheirDepthAndEveryAnswerIsInTheText) {
  for (probe::Task t :
       {probe::Task::Passkey, probe::Task::NiahSingle1, probe::Task::NiahMultikey2, probe::Task::NiahMultikey3})
    for (int depth : {0, 25, 50, 75, 100}) {
      const probe::Probe p = probe::makeProbe(t, 4096, depth, 0, 3, fourBytes);
      SCOPED_TRACE(p.id());
      ASSERT_EQ(p.answers.size(), 1u);
      const std::size_t at = p.prompt.find(p.answers[0]);
      ASSERT_NE(at, std::string::npos);
      // The needle's place in the text (of the prompt without its question) is its depth, within a few percent.
      const double where = 100.0 * static_cast<double>(at) / static_cast<double>(p.prompt.size());
      EXPECT_NEAR(where, depth, 6.0) << where;
    }
  for (probe::Task t : {probe::Task::VariableTracking, probe::Task::CommonWords, probe::Task::FrequentWords}) {
    const probe::Probe p = probe::makeProbe(t, 2048, 50, 0, 3, fourBytes);
    EXPECT_EQ(p.depth, -1) << "no depth for " << p.id();
    for (const std::string& a : p.answers) EXPECT_NE(p.prompt.find(a), std::string::npos) << a;
  }
  // The JSON probe's arguments are copied from its ticket.
  const probe::Probe j = probe::makeProbe(probe::Task::JsonToolCall, 2048, 10, 0, 3, fourBytes);
  const std::string order = j.answers[0].substr(0, j.answers[0].size() - 1);
  EXPECT_NE(j.prompt.find("for order " + order + "."), std::string::npos) << j.answers[0];
}

TEST(ProbeSuite, RulerTasksHaveRulersShapes) {
  const probe::Probe vt = probe::makeProbe(probe::Task::VariableTracking, 2048, -1, 0, 1, fourBytes);
  ASSERT_EQ(vt.answers.size(), 5u);  // one chain of four hops: five variables
  for (std::size_t i = 1; i < 5; ++i)
    EXPECT_NE(vt.prompt.find("VAR " + vt.answers[i] + " = VAR " + vt.answers[i - 1] + " "), std::string::npos);
  const probe::Probe cwe = probe::makeProbe(probe::Task::CommonWords, 4096, -1, 0, 1, fourBytes);
  ASSERT_EQ(cwe.answers.size(), 10u);
  // From 4,096 tokens each common word comes 30 times in the list (and its example's answer is elsewhere).
  const std::size_t list = cwe.prompt.rfind("Below is a numbered list");
  int count = 0;
  for (std::size_t at = list; (at = cwe.prompt.find(". " + cwe.answers[3] + " ", at)) != std::string::npos; ++at)
    ++count;
  EXPECT_EQ(count, 30);
  const probe::Probe fwe = probe::makeProbe(probe::Task::FrequentWords, 2048, -1, 0, 1, fourBytes);
  ASSERT_EQ(fwe.answers.size(), 3u);
  for (const auto& w : fwe.answers) EXPECT_EQ(w.size(), 6u);
}

TEST(ProbeSuite, TheAnswerCheckIsExact) {
  for (probe::Task t : allTasks()) {
    const probe::Probe p = probe::makeProbe(t, 2048, 50, 0, 5, fourBytes);
    SCOPED_TRACE(p.id());
    std::string all;
    for (const auto& a : p.answers) all += " " + a;
    EXPECT_EQ(probe::score(p, all), 1.0);
    EXPECT_EQ(probe::score(p, "\n\t" + all + " \x01"), 1.0) << "RULER's clean-up";
    // Each answer mutated in turn (a character changed): that answer is no longer found.
    for (std::size_t i = 0; i < p.answers.size(); ++i) {
      std::string m;
      for (std::size_t j = 0; j < p.answers.size(); ++j) {
        std::string a = p.answers[j];
        if (j == i) a[a.size() / 2] = a[a.size() / 2] == 'x' ? 'y' : 'x';
        m += " " + a;
      }
      EXPECT_NEAR(probe::score(p, m), 1.0 - 1.0 / static_cast<double>(p.answers.size()), 1e-12) << m;
    }
    EXPECT_EQ(probe::score(p, ""), 0.0);
  }
}

TEST(ProbeSuite, BadDepthsAndLengthsAreRefused) {
  EXPECT_THROW(probe::makeProbe(probe::Task::Passkey, 1024, 101, 0, 0, fourBytes), Error);
  EXPECT_THROW(probe::makeProbe(probe::Task::Passkey, 40, 50, 0, 0, fourBytes), Error);
  EXPECT_FALSE(probe::taskNamed("niah_multikey_9"));
  EXPECT_EQ(probe::taskNamed("vt"), probe::Task::VariableTracking);
  // The axes as typed.
  EXPECT_EQ(probe::parseLengths(" 1k, 4096 ,2K"), (std::vector<std::int64_t>{1024, 4096, 2048}));
  EXPECT_EQ(probe::parseDepths("0,50, 100"), (std::vector<int>{0, 50, 100}));
  EXPECT_EQ(probe::parseTasks("vt,passkey"),
            (std::vector<probe::Task>{probe::Task::VariableTracking, probe::Task::Passkey}));
  EXPECT_TRUE(probe::parseTasks("").empty());
  for (const char* bad : {"4q", "k", "-1", "32", "1.5k", "99999999999"})
    EXPECT_THROW(probe::parseLengths(bad), Error) << bad;
  for (const char* bad : {"101", "-5", "50%", "x"}) EXPECT_THROW(probe::parseDepths(bad), Error) << bad;
  try {
    probe::parseTasks("passkey,needle");
    ADD_FAILURE() << "an unknown task was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no probe task `needle` (the tasks: passkey, niah_single_1"),
              std::string::npos)
        << e.what();
  }
}

// A random llama whose heads take every block format (head size 64), with room for a long prompt.
const model::LlamaModel& harnessModel() {
  static const auto m = model::LlamaModel::load(testutil::writeRandomModel(
      {.hidden = 128, .heads = 2, .kvHeads = 1, .ffn = 96, .vocab = 96, .context = 2048}, "random_model_probe.gguf"));
  return *m;
}

// Every kind of quantizing config: transformers' three, KIVI, llama.cpp's, vLLM's, MXFP4, tiers, sinks, per-layer.
const std::vector<std::string> kQuantizing = {
    "fp8",
    "fp8:overflow=saturate,scale=unit",
    "quanto",
    "quanto:nbits=2,residual_length=64",
    "hqq:nbits=4",
    "kivi",
    "llamacpp",
    "llamacpp:type_k=q4_0,type_v=q4_0",
    "vllm:kv=nvfp4",
    "vllm:kv=fp8_per_token_head",
    "mxfp4",
    "quanto:sink=4",
    "layers=0:dynamic;*:K=fp8:overflow=saturate,V=quanto:nbits=2",
};

TEST(ProbeHarness, EveryQuantizingConfigsAnswerReadsQuantizedStates) {
  const model::LlamaModel& m = harnessModel();
  // Longer than every full-precision window here, and than a prefill chunk (the last chunk reads the earlier ones).
  const std::vector<std::int64_t> prompt = testutil::prompt(600);
  generate::AnswerRules rules;
  rules.maxNew = 6;
  const generate::ProbeAnswer ref = generate::answerProbe(m, cache::parseSpec("dynamic"), prompt, rules);
  ASSERT_EQ(ref.tokens.size(), 6u);
  EXPECT_EQ(ref.quantizedReads, 0);
  for (const std::string& spec : kQuantizing) {
    SCOPED_TRACE(spec);
    const generate::ProbeAnswer a = generate::answerProbe(m, cache::parseSpec(spec), prompt, rules, &ref);
    EXPECT_EQ(a.quantizedReads, static_cast<std::int64_t>(a.tokens.size()));
    ASSERT_FALSE(a.kl.empty());
    double most = 0;
    for (double k : a.kl) most = std::max(most, k);
    EXPECT_GT(most, 0.0) << "bit-identical to the unquantized cache: the quantized states were not read";
  }
  // The unquantized cache through the same harness is the reference, token for token and bit for bit.
  const generate::ProbeAnswer same = generate::answerProbe(m, cache::parseSpec("dynamic"), prompt, rules, &ref);
  EXPECT_TRUE(same.sameAnswer());
  for (double k : same.kl) EXPECT_EQ(k, 0.0);
  // KIVI's window longer than the prompt and answer: nothing quantized is read, and the counter says so (transformers'
  // quanto, whose first update quantizes the whole prompt, reads it quantized whatever its residual length).
  const generate::ProbeAnswer wide =
      generate::answerProbe(m, cache::parseSpec("kivi:residual_length=1024"), prompt, rules, &ref);
  EXPECT_EQ(wide.quantizedReads, 0);
  EXPECT_TRUE(wide.sameAnswer());
  const generate::ProbeAnswer quanto =
      generate::answerProbe(m, cache::parseSpec("quanto:residual_length=1024"), prompt, rules, &ref);
  EXPECT_EQ(quanto.quantizedReads, static_cast<std::int64_t>(quanto.tokens.size()));
}

TEST(ProbeHarness, EvalCountsTheScoredTokensThatReadQuantizedStates) {
  const model::LlamaModel& m = harnessModel();
  const std::vector<std::vector<std::int64_t>> windows = {testutil::prompt(300)};
  std::vector<cache::CacheConfig> cfgs;
  cfgs.reserve(kQuantizing.size());
  for (const std::string& s : kQuantizing) cfgs.push_back(cache::parseSpec(s));
  generate::EvalOptions o;
  o.prompt = 200;
  o.step = 10;
  const auto figs = generate::evaluate(m, windows, cfgs, o);
  EXPECT_EQ(figs[0].quantizedReads, 0);
  for (std::size_t i = 1; i < figs.size(); ++i) {
    SCOPED_TRACE(figs[i].spec);
    // Every step after the prompt reads the quantized prompt; the prompt's own forward reads its states as they came,
    // except in the block rows (llama.cpp and vLLM read the prompt from the cache they just wrote).
    const bool rows =
        figs[i].spec.starts_with("llamacpp") || figs[i].spec.starts_with("vllm") || figs[i].spec.starts_with("mxfp4");
    EXPECT_EQ(figs[i].quantizedReads, figs[i].scored - (rows ? 0 : 1));
    EXPECT_GT(figs[i].klMax, 0.0) << "bit-identical to the unquantized cache";
  }
}

TEST(ProbeHarness, BadRulesAreRefused) {
  generate::AnswerRules rules;
  rules.maxNew = 0;
  EXPECT_THROW(generate::answerProbe(harnessModel(), cache::parseSpec("dynamic"), testutil::prompt(8), rules), Error);
  rules.maxNew = 2;
  EXPECT_THROW(generate::answerProbe(harnessModel(), cache::parseSpec("dynamic"), {}, rules), Error);
}

}  // namespace
}  // namespace kvscope
