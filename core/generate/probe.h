// A long-context probe's answer through one cache: the prompt prefilled as generation prefills it, then greedy
// decoding; a config's answer compared with the unquantized cache's (the same tokens or not, the KL at each answer
// position both reached from the same tokens) and how many answer tokens read states the config held quantized.
// What `kvscope-cli probe` and the GUI's Long context page run for each probe (probe/suite.h makes the texts).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cache/config.h"
#include "cache/stats.h"
#include "probe/suite.h"
#include "util/cancel.h"

namespace kvscope::model {
class LlamaModel;
}

namespace kvscope::generate {

/// How an answer is generated: greedy, at most maxNew tokens, ending after a stop id or, once the answer has text,
/// after the token that brings a newline (RULER's answers are one line; what follows is the model rambling on).
struct AnswerRules {
  int maxNew = 32;
  std::vector<std::int64_t> stopIds;
  std::function<std::string(const std::vector<std::int64_t>&)> decode;  ///< the tokens' text
};

/// The reference's next-token log-probabilities at each answer position, kept for the configs' KL.
struct AnswerLogProbs;

struct ProbeAnswer {
  std::vector<std::int64_t> tokens;  ///< generated, the stop token included
  std::string text;                  ///< the tokens' text, stop ids left out
  std::int64_t promptTokens = 0;
  /// Configs: KL(reference || config) in nats at each answer position whose preceding answer tokens are the
  /// reference's (so up to and including the first position whose token differs): the same context, two caches.
  std::vector<double> kl;
  int firstDivergence = -1;  ///< configs: the first answer position whose token differs (-1: the same answer)
  /// Answer tokens whose forward read states the config held quantized (KvCache::quantizedLength before it).
  std::int64_t quantizedReads = 0;
  cache::OverflowTotals overflow;
  double seconds = 0;
  std::shared_ptr<const AnswerLogProbs> logProbs;  ///< the reference's (null for a config)
  bool sameAnswer() const { return firstDivergence < 0; }
};

/// One probe through a fresh cache of `config` (throws ConfigError where it does not fit the model): the prompt in
/// chunks as generate() prefills it (generate::prefillChunkFor), each chunk a forward of its own, then greedy steps by
/// `rules`. `reference`: the unquantized cache's answer to the same prompt (for the KL and the comparison), or null
/// when this is that answer (its log-probabilities are kept). `cancel`: checked between forwards (throws Cancelled).
ProbeAnswer answerProbe(const model::LlamaModel& model, const cache::CacheConfig& config,
                        const std::vector<std::int64_t>& prompt, const AnswerRules& rules,
                        const ProbeAnswer* reference = nullptr, const CancelToken* cancel = nullptr);

/// A probe's answers: the unquantized cache's first, then each config's.
using ProbeAnswers = std::vector<ProbeAnswer>;
/// Called after each probe with its index in `probes` and its answers; returning false stops after it.
using ProbeDone = std::function<bool(std::size_t index, const ProbeAnswers& answers)>;

/// Every probe (probe/suite.h) through the unquantized cache and each config, probe after probe, as `kvscope-cli
/// probe` and the Long context page run them: `encode` gives a probe's text as the model reads it; `rules` its stop
/// ids and decoding (maxNew is each task's answer tokens). Returns the answers of the probes done (all, unless
/// `done` stopped it); throws as answerProbe.
std::vector<ProbeAnswers> answerProbes(const model::LlamaModel& model, const std::vector<probe::Probe>& probes,
                                       const std::vector<cache::CacheConfig>& configs,
                                       const std::function<std::vector<std::int64_t>(const std::string&)>& encode,
                                       AnswerRules rules, const ProbeDone& done = {},
                                       const CancelToken* cancel = nullptr);

}  // namespace kvscope::generate
