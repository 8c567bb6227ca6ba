#include "generate/probe.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "cache/kv_cache.h"
#include "device/host_copy.h"
#include "generate/detail/eval_window.h"
#include "generate/detail/quantized_reads.h"
#include "generate/generate.h"
#include "model/llama.h"
#include "util/error.h"
#include "util/process_memory.h"

namespace kvscope::generate {

struct AnswerLogProbs {
  std::vector<at::Tensor> steps;  ///< float32 [vocab] per answer position
};

namespace {

void checkCancel(const CancelToken* cancel) {
  if (cancel && cancel->requested()) throw Cancelled("probe cancelled");
}

// Whether the answer so far has text and then a line break: RULER's answers are one line.
bool endsLine(const std::string& text) {
  const std::size_t content = text.find_first_not_of(" \t\r\n");
  return content != std::string::npos && text.find('\n', content) != std::string::npos;
}

}  // namespace

ProbeAnswer answerProbe(const model::LlamaModel& model, const cache::CacheConfig& config,
                        const std::vector<std::int64_t>& prompt, const AnswerRules& rules, const ProbeAnswer* reference,
                        const CancelToken* cancel) {
  if (prompt.empty()) throw Error(ErrorCode::BadInput, "probe: the prompt is empty");
  if (rules.maxNew < 1) throw Error(ErrorCode::BadInput, "probe: an answer needs at least one token");
  if (reference && !reference->logProbs) throw Error(ErrorCode::Internal, "probe: the reference kept no log-probs");
  const auto t0 = std::chrono::steady_clock::now();
  cache::StatsOptions quiet;
  quiet.enabled = false;
  auto kv = model.makeCache(config, quiet);
  ProbeAnswer a;
  a.promptTokens = static_cast<std::int64_t>(prompt.size());
  auto keep = reference ? nullptr : std::make_shared<AnswerLogProbs>();

  // The prompt: chunk by chunk as generation prefills it; the last chunk's last logits give the first answer token.
  model::ForwardOptions fo;
  fo.lastLogitsOnly = true;
  fo.cancel = cancel;
  const auto plan = detail::windowForwards(prompt.size(), prompt.size(), prefillChunkFor(*kv), 1);
  const bool chunked = detail::chunkedPrompt(plan);
  at::Tensor logits;
  bool quantizedRead = false;
  for (const detail::WindowForward& f : plan) {
    checkCancel(cancel);
    logits = detail::readsQuantized(
        *kv,
        [&] {
          return model.forward(
              model::idsTensor(prompt, static_cast<std::size_t>(f.from), static_cast<std::size_t>(f.n)), *kv,
              fo)[0][-1];
        },
        quantizedRead);
    if (chunked) util::releaseFreeMemory();
  }
  for (int i = 0; i < rules.maxNew; ++i) {
    if (quantizedRead) ++a.quantizedReads;
    const at::Tensor lp = logits.to(at::kFloat).log_softmax(0);
    const std::int64_t token = lp.argmax().item<std::int64_t>();
    if (keep) keep->steps.push_back(lp);
    if (reference && a.firstDivergence < 0 && static_cast<std::size_t>(i) < reference->tokens.size()) {
      const at::Tensor& r = reference->logProbs->steps[static_cast<std::size_t>(i)];
      a.kl.push_back((r.exp() * (r - lp)).sum().item<double>());
    }
    if (reference && a.firstDivergence < 0 &&
        (static_cast<std::size_t>(i) >= reference->tokens.size() ||
         reference->tokens[static_cast<std::size_t>(i)] != token))
      a.firstDivergence = i;
    a.tokens.push_back(token);
    if (std::find(rules.stopIds.begin(), rules.stopIds.end(), token) != rules.stopIds.end()) break;
    if (rules.decode && endsLine(rules.decode(a.tokens))) break;
    if (i + 1 == rules.maxNew) break;
    checkCancel(cancel);
    logits = detail::readsQuantized(
        *kv, [&] { return model.forward(model::idsTensor(a.tokens, a.tokens.size() - 1, 1), *kv, fo)[0][-1]; },
        quantizedRead);
  }
  // A config whose answer stopped before the reference's differs where the reference went on.
  if (reference && a.firstDivergence < 0 && a.tokens.size() != reference->tokens.size())
    a.firstDivergence = static_cast<int>(a.tokens.size());
  std::vector<std::int64_t> words;
  for (std::int64_t t : a.tokens)
    if (std::find(rules.stopIds.begin(), rules.stopIds.end(), t) == rules.stopIds.end()) words.push_back(t);
  if (rules.decode) a.text = rules.decode(words);
  a.overflow = kv->overflowTotals();
  a.logProbs = keep;
  a.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return a;
}

std::vector<ProbeAnswers> answerProbes(const model::LlamaModel& model, const std::vector<probe::Probe>& probes,
                                       const std::vector<cache::CacheConfig>& configs,
                                       const std::function<std::vector<std::int64_t>(const std::string&)>& encode,
                                       AnswerRules rules, const ProbeDone& done, const CancelToken* cancel) {
  for (const auto& c : configs) (void)model.makeCache(c);  // per-layer rules against this model, before any work
  const cache::CacheConfig unquantized = cache::parseSpec("dynamic");
  std::vector<ProbeAnswers> out;
  for (std::size_t k = 0; k < probes.size(); ++k) {
    const std::vector<std::int64_t> ids = encode(probes[k].prompt);
    rules.maxNew = probe::info(probes[k].task).answerTokens;
    ProbeAnswers a;
    a.push_back(answerProbe(model, unquantized, ids, rules, nullptr, cancel));
    for (const auto& c : configs) a.push_back(answerProbe(model, c, ids, rules, &a.front(), cancel));
    a.front().logProbs.reset();  // the configs have read them: 200 KB a position
    out.push_back(std::move(a));
    if (done && !done(k, out.back())) break;
  }
  return out;
}

}  // namespace kvscope::generate
