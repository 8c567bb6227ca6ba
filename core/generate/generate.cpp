#include "generate/generate.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <chrono>
#include <stdexcept>

namespace kvscope::generate {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Picks the next token from float32 logits [vocab]; returns (token, its log-prob under the unmodified model).
std::int64_t pick(const at::Tensor& logits, const SamplingOptions& s, at::Generator& gen) {
  if (s.greedy) return logits.argmax().item<std::int64_t>();
  at::Tensor l = logits / s.temperature;
  if (s.topK > 0 && s.topK < l.size(0)) {
    const at::Tensor kth = std::get<0>(l.topk(s.topK)).select(0, s.topK - 1);
    l = l.masked_fill(l < kth, -INFINITY);
  }
  if (s.topP < 1.0) {
    auto [sorted, order] = l.sort(/*dim=*/0, /*descending=*/true);
    const at::Tensor cum = sorted.softmax(0).cumsum(0);
    // Keep the smallest prefix whose mass reaches top_p (the first token always stays).
    at::Tensor drop = (cum - sorted.softmax(0)) >= s.topP;
    l = l.index_put({order.masked_select(drop)}, at::scalar_tensor(-INFINITY));
  }
  return at::multinomial(l.softmax(0), 1, false, gen).item<std::int64_t>();
}

}  // namespace

GenerateResult generate(const model::LlamaModel& model, cache::KvCache& cache, const std::vector<std::int64_t>& prompt,
                        const GenerateOptions& o, const StepFn& onStep, const std::atomic<bool>* cancel) {
  if (prompt.empty()) throw std::invalid_argument("generate: the prompt is empty");
  if (o.maxNew < 0) throw std::invalid_argument("generate: max new tokens must be >= 0");
  if (!o.sampling.greedy && !(o.sampling.temperature > 0))
    throw std::invalid_argument(fmt::format("generate: temperature must be > 0, got {}", o.sampling.temperature));
  if (!(o.sampling.topP > 0 && o.sampling.topP <= 1))
    throw std::invalid_argument(fmt::format("generate: top_p must be in (0, 1], got {}", o.sampling.topP));
  if (o.sampling.topK < 0) throw std::invalid_argument("generate: top_k must be >= 0");
  if (cache.seqLength() != 0) throw std::invalid_argument("generate: the cache must start empty");
  const auto ctx = model.config().contextLength;
  if (ctx > 0 && static_cast<std::int64_t>(prompt.size()) + o.maxNew > ctx)
    throw std::invalid_argument(fmt::format("generate: prompt ({} tokens) + {} new tokens exceed the model's context of "
                                            "{}", prompt.size(), o.maxNew, ctx));

  GenerateResult r;
  r.promptTokens = static_cast<int>(prompt.size());
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(o.sampling.seed);
  at::Tensor ids = at::tensor(prompt, at::kLong).view({1, -1});
  auto t0 = Clock::now();
  at::Tensor logits = model.forward(ids, cache).select(0, 0).select(0, -1);
  r.prefillSeconds = since(t0);
  r.stopReason = "max_new";
  for (int step = 0; step < o.maxNew; ++step) {
    if (cancel && cancel->load()) {
      r.stopReason = "cancelled";
      break;
    }
    const auto ts = Clock::now();
    if (step > 0) logits = model.forward(ids, cache).select(0, 0).select(0, -1);
    const at::Tensor logp = logits.log_softmax(0);
    const std::int64_t token = pick(logits, o.sampling, gen);
    StepEvent ev;
    ev.step = step;
    ev.token = token;
    ev.logprob = logp[token].item<float>();
    if (o.topCandidates > 0) {
      auto [v, i] = logp.topk(std::min<std::int64_t>(o.topCandidates, logp.size(0)));
      for (std::int64_t j = 0; j < v.size(0); ++j) ev.top.emplace_back(i[j].item<std::int64_t>(), v[j].item<float>());
    }
    ev.memory = cache.totalMemory();
    ev.seconds = since(ts) + (step == 0 ? r.prefillSeconds : 0.0);
    if (step > 0) r.decodeSeconds += since(ts);
    r.tokens.push_back(token);
    r.logprobs.push_back(ev.logprob);
    ids = at::full({1, 1}, token, at::kLong);
    const bool more = onStep ? onStep(ev) : true;
    if (std::find(o.stopIds.begin(), o.stopIds.end(), token) != o.stopIds.end()) {
      r.stopReason = "stop_token";
      break;
    }
    if (!more) {
      r.stopReason = "callback";
      break;
    }
  }
  return r;
}

}  // namespace kvscope::generate
