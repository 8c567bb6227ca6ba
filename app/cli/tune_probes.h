// `tune --min-agreement`: the probe objective. Instead of a mean-KL budget on a text, each target's pick is the point
// of its front with the fewest KV bytes whose config's long-context probes (probe/suite.h) give the unquantized
// cache's answers on at least a share of the probes (and, with --max-answer-kl, an answer KL within a budget).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cache/tune.h"
#include "generate/probe.h"
#include "probe/suite.h"
#include "runtime/session.h"

namespace kvscope::cli {

struct ProbeObjective {
  double minAgreement = 1.0;  ///< share of the probes whose answer must be the unquantized cache's
  std::optional<double> maxAnswerKl;
  std::string tasks = "passkey,niah_single_1,niah_multikey_2", lengths = "1k,2k", depths = "10,50,90";
  /// The suite's grid; UsageError naming the option whose axis is bad (before any model is read).
  probe::SuiteOptions suite() const;
};

/// The probes of one objective on one model: the suite and the unquantized answers made once, each config's verdict
/// once (by SPEC).
class ProbeJudge {
 public:
  /// Throws UsageError for a bad axis or a length past the model's context.
  ProbeJudge(const runtime::Session& m, ProbeObjective o);
  struct Verdict {
    int same = 0, probes = 0;
    double meanAnswerKl = 0;  ///< over every answer position scored (NaN where one was not finite)
    bool passes = false;
    double agreement() const { return probes ? double(same) / probes : 0.0; }
  };
  const Verdict& judge(const cache::CacheConfig& c);
  std::size_t probes() const { return suite_.size(); }
  const ProbeObjective& objective() const { return o_; }

 private:
  const runtime::Session& m_;
  ProbeObjective o_;
  std::vector<probe::Probe> suite_;
  std::vector<std::vector<std::int64_t>> ids_;
  std::vector<generate::ProbeAnswer> refs_;
  generate::AnswerRules rules_;
  std::map<std::string, Verdict> verdicts_;
};

/// The front's point (bytes ascending) with the fewest bytes whose config passes: the cheapest point when it passes,
/// else found by halving between it and the largest quantizing point (a point that passes sends the search to
/// smaller ones, one that fails to larger: about log2 of the front's size probed; the probes' agreement grows with
/// the bytes the way the predicted KL falls, not strictly). nullopt when the largest quantizing point fails too.
std::optional<cache::Assignment> pickByProbes(const std::vector<cache::Assignment>& front,
                                              const std::function<cache::CacheConfig(const cache::Assignment&)>& config,
                                              ProbeJudge& judge);

}  // namespace kvscope::cli
