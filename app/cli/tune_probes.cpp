#include "cli/tune_probes.h"

#include <fmt/format.h>

#include <cmath>
#include <iostream>

#include "cli/commands.h"
#include "model/llama.h"
#include "tokenizer/tokenizer.h"

namespace kvscope::cli {

probe::SuiteOptions ProbeObjective::suite() const {
  probe::SuiteOptions so;
  auto axis = [](const char* opt, auto parse) {
    try {
      return parse();
    } catch (const Error& e) {
      throw UsageError(fmt::format("{}: {}", opt, e.what()));
    }
  };
  so.tasks = axis("--probe-tasks", [&] { return probe::parseTasks(tasks); });
  so.lengths = axis("--probe-lengths", [&] { return probe::parseLengths(lengths); });
  so.depths = axis("--probe-depths", [&] { return probe::parseDepths(depths); });
  if (so.lengths.empty() || so.depths.empty()) throw UsageError("--probe-lengths and --probe-depths need a value");
  return so;
}

ProbeJudge::ProbeJudge(const runtime::Session& m, ProbeObjective o) : m_(m), o_(std::move(o)) {
  const probe::SuiteOptions so = o_.suite();
  const std::int64_t ctx = m.model().config().contextLength;
  for (std::int64_t l : so.lengths)
    if (ctx > 0 && l > ctx)
      throw UsageError(fmt::format("--probe-lengths: {} tokens is past the model's trained context of {}", l, ctx));
  auto encode = [&](const std::string& t) { return m.encodePrompt(t, false); };
  suite_ = probe::makeSuite(so, [&](const std::string& t) { return static_cast<std::int64_t>(encode(t).size()); });
  rules_.stopIds = m.stopIds();
  rules_.decode = [&m](const std::vector<std::int64_t>& ids) {
    return m.tokenizer().decode(std::vector<std::int32_t>(ids.begin(), ids.end()), true);
  };
  const cache::CacheConfig unquantized = cache::parseSpec("dynamic");
  for (const probe::Probe& p : suite_) {
    ids_.push_back(encode(p.prompt));
    rules_.maxNew = probe::info(p.task).answerTokens;
    refs_.push_back(generate::answerProbe(m.model(), unquantized, ids_.back(), rules_));
  }
  std::cerr << fmt::format("tune: {} probes answered through the unquantized cache\n", suite_.size());
}

const ProbeJudge::Verdict& ProbeJudge::judge(const cache::CacheConfig& c) {
  const std::string spec = cache::toSpec(c);
  if (const auto it = verdicts_.find(spec); it != verdicts_.end()) return it->second;
  Verdict v;
  double kl = 0;
  std::size_t positions = 0;
  for (std::size_t k = 0; k < suite_.size(); ++k) {
    rules_.maxNew = probe::info(suite_[k].task).answerTokens;
    const generate::ProbeAnswer a = generate::answerProbe(m_.model(), c, ids_[k], rules_, &refs_[k]);
    v.same += a.sameAnswer();
    ++v.probes;
    for (double x : a.kl) kl += x, ++positions;
  }
  v.meanAnswerKl = positions ? kl / static_cast<double>(positions) : 0.0;
  v.passes = v.agreement() >= o_.minAgreement && (!o_.maxAnswerKl || v.meanAnswerKl <= *o_.maxAnswerKl);
  std::cerr << fmt::format("tune: probes of {}: {} of {} answers the unquantized cache's, answer KL {:.4g}: {}\n",
                           spec.empty() ? "dynamic" : spec, v.same, v.probes, v.meanAnswerKl,
                           v.passes ? "within the budget" : "past it");
  return verdicts_.emplace(spec, v).first->second;
}

std::optional<cache::Assignment> pickByProbes(const std::vector<cache::Assignment>& front,
                                              const std::function<cache::CacheConfig(const cache::Assignment&)>& config,
                                              ProbeJudge& judge) {
  // The last point is the unquantized assignment: it always agrees, and is no pick of a quantizing config.
  std::size_t n = front.size();
  if (n > 0 && config(front.back()) == cache::CacheConfig{}) --n;
  if (n == 0 || !judge.judge(config(front[n - 1])).passes) return std::nullopt;
  if (judge.judge(config(front[0])).passes) return front[0];  // the cheapest passes: nothing to search
  std::size_t lo = 1, hi = n - 1;                             // hi passes; the answer is in [lo, hi]
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo) / 2;
    if (judge.judge(config(front[mid])).passes)
      hi = mid;
    else
      lo = mid + 1;
  }
  return front[hi];
}

}  // namespace kvscope::cli
