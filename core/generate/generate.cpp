#include "generate/generate.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "device/host_copy.h"
#include "util/error.h"
#include "util/metrics.h"

namespace kvscope::generate {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Picks the next token from float32 logits [vocab], where they are: a [1] int64 tensor on their device (no host copy).
at::Tensor pick(const at::Tensor& logits, const SamplingOptions& s, at::Generator& gen) {
  if (s.greedy) return logits.argmax().view({1});
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
    l = l.index_put({order.masked_select(drop)}, at::scalar_tensor(-INFINITY, l.options()));
  }
  return at::multinomial(l.softmax(0), 1, false, gen);
}

// Last-position logits; `cancel` ends the pass between layers and chunks (a prefill's: a decode step is short).
model::ForwardOptions forwardOptions(std::int64_t chunk, const CancelToken* cancel = nullptr) {
  model::ForwardOptions f;
  f.lastLogitsOnly = true;
  f.chunk = chunk;
  f.cancel = cancel;
  return f;
}

// GenerateOptions::onPrefillChunk through a tap on `fo`: `layer` has stored a prompt chunk once its attend() returns
// ("attn_out"), and each chunk but the last is reported (`stored`: the prompt positions each layer has stored so far;
// it and onChunk outlive the forward).
void tapPrefillChunks(model::ForwardOptions& fo, std::int64_t promptLength, int layers,
                      const std::function<void(int)>& onChunk, std::vector<std::int64_t>& stored) {
  if (!onChunk || fo.chunk <= 0 || promptLength <= fo.chunk) return;
  stored.assign(static_cast<std::size_t>(layers), 0);
  fo.tap = [&stored, &onChunk, promptLength](int layer, const char* name, const at::Tensor& t) {
    if (std::strcmp(name, "attn_out") != 0) return;
    std::int64_t& n = stored[static_cast<std::size_t>(layer)];
    n += t.size(1);
    if (n < promptLength) onChunk(layer);
  };
}

}  // namespace

std::int64_t prefillChunkFor(const cache::KvCache& cache, std::int64_t requested) {
  if (requested >= 0) return requested;
  return cache::allFused(cache.config()) ? kDefaultPrefillChunk : 0;
}

double ContinuationScore::ppl() const {
  return scored > 0 ? kvscope::perplexity(nll, scored) : std::nan("");
}

ContinuationScore scoreContinuation(const model::LlamaModel& model, cache::KvCache& cache,
                                    const std::vector<std::int64_t>& prompt,
                                    const std::vector<std::int64_t>& continuation, std::int64_t prefillChunk,
                                    const CancelToken* cancel) {
  if (prompt.empty()) throw Error(ErrorCode::BadInput, "scoring a continuation: the prompt is empty");
  if (cache.seqLength() != 0) throw Error(ErrorCode::Internal, "scoring a continuation: the cache must start empty");
  ContinuationScore r;
  if (continuation.empty()) return r;
  // The log-probs stay where the logits are, gathered per step and summed once at the end: one host copy.
  std::vector<at::Tensor> picked;
  picked.reserve(continuation.size());
  try {
    at::Tensor logits = model
                            .forward(at::tensor(prompt, at::kLong).view({1, -1}), cache,
                                     forwardOptions(prefillChunkFor(cache, prefillChunk), cancel))
                            .select(0, 0)
                            .select(0, -1);
    for (std::size_t i = 0; i < continuation.size(); ++i) {
      if (cancel && cancel->requested()) {
        r.cancelled = true;
        return r;
      }
      if (i > 0)
        logits = model
                     .forward(at::tensor(std::vector<std::int64_t>{continuation[i - 1]}, at::kLong).view({1, 1}), cache,
                              forwardOptions(0))
                     .select(0, 0)
                     .select(0, -1);
      picked.push_back(logits.to(at::kFloat).log_softmax(0).narrow(0, continuation[i], 1).to(at::kDouble));
    }
  } catch (const kvscope::Cancelled&) {
    r.cancelled = true;
    return r;
  }
  r.nll = -device::toHost(at::cat(picked).sum().view({1})).const_data_ptr<double>()[0];
  r.scored = static_cast<std::int64_t>(continuation.size());
  return r;
}

GenerateResult generate(const model::LlamaModel& model, cache::KvCache& cache, const std::vector<std::int64_t>& prompt,
                        const GenerateOptions& o, const StepFn& onStep, const CancelToken* cancel) {
  if (prompt.empty()) throw Error(ErrorCode::BadInput, "generate: the prompt is empty");
  if (o.maxNew < 0) throw Error(ErrorCode::BadInput, "generate: max new tokens must be >= 0");
  if (!o.sampling.greedy && !(o.sampling.temperature > 0))
    throw Error(ErrorCode::BadInput, fmt::format("generate: temperature must be > 0, got {}", o.sampling.temperature));
  if (!(o.sampling.topP > 0 && o.sampling.topP <= 1))
    throw Error(ErrorCode::BadInput, fmt::format("generate: top_p must be in (0, 1], got {}", o.sampling.topP));
  if (o.sampling.topK < 0) throw Error(ErrorCode::BadInput, "generate: top_k must be >= 0");
  if (cache.seqLength() != 0) throw Error(ErrorCode::Internal, "generate: the cache must start empty");
  const auto ctx = model.config().contextLength;
  if (!o.beyondContext && ctx > 0 && static_cast<std::int64_t>(prompt.size()) + o.maxNew > ctx)
    throw Error(ErrorCode::BadInput,
                fmt::format("generate: prompt ({} tokens) + {} new tokens exceed the model's context of {}",
                            prompt.size(), o.maxNew, ctx));

  GenerateResult r;
  r.promptTokens = static_cast<int>(prompt.size());
  at::Generator gen = model.context().generator(o.sampling.seed);
  at::Tensor ids = at::tensor(prompt, at::kLong).view({1, -1});
  auto t0 = Clock::now();
  at::Tensor logits, refLogits;
  std::unique_ptr<cache::KvCache> shadow;
  try {
    const std::int64_t chunk = prefillChunkFor(cache, o.prefillChunk);
    model::ForwardOptions fo = forwardOptions(chunk, cancel);
    std::vector<std::int64_t> stored;
    tapPrefillChunks(fo, ids.size(1), cache.numLayers(), o.onPrefillChunk, stored);
    logits = model.forward(ids, cache, fo).select(0, 0).select(0, -1);
    model.context().synchronize();  // a device's work is queued: the time is the work's
    r.prefillSeconds = since(t0);
    if (o.shadow) {
      cache::StatsOptions quiet;
      quiet.enabled = false;
      shadow = model.makeCache(cache::parseSpec("dynamic"), quiet);
      refLogits = model.forward(ids, *shadow, forwardOptions(chunk, cancel)).select(0, 0).select(0, -1);
    }
  } catch (const kvscope::Cancelled&) {
    r.stopReason = StopReason::Cancelled;  // during the prefill: no token, and the cache is not to be used further
    r.prefillSeconds = since(t0);
    return r;
  }
  double klSum = 0.0;
  int agree = 0;
  r.stopReason = StopReason::MaxNew;
  for (int step = 0; step < o.maxNew; ++step) {
    if (cancel && cancel->requested()) {
      r.stopReason = StopReason::Cancelled;
      break;
    }
    const auto ts = Clock::now();
    if (step > 0) logits = model.forward(ids, cache, forwardOptions(0)).select(0, 0).select(0, -1);
    model.context().synchronize();
    const double stepSeconds = since(ts);
    if (shadow && step > 0) refLogits = model.forward(ids, *shadow, forwardOptions(0)).select(0, 0).select(0, -1);
    const at::Tensor logp = logits.log_softmax(0);
    const at::Tensor tokenT = pick(logits, o.sampling, gen);
    // Everything this step reports, computed where the logits are and copied to the host once (as float64, which
    // holds every float32 and token id exactly): token, its log-prob, the top candidates, and with a shadow the KL,
    // the reference's argmax and log-prob of the token, this run's argmax and the reference's top candidates.
    const std::int64_t k = std::min<std::int64_t>(std::max(o.topCandidates, 0), logp.size(0));
    std::vector<at::Tensor> parts{tokenT, logp.index_select(0, tokenT)};
    auto addTop = [&](const at::Tensor& lp) {
      if (k == 0) return;
      auto [v, i] = lp.topk(k);
      parts.push_back(v);
      parts.push_back(i);
    };
    addTop(logp);
    if (shadow) {
      const at::Tensor refLogp = refLogits.log_softmax(0);
      parts.push_back((refLogp.exp() * (refLogp - logp)).sum().view({1}));
      parts.push_back(refLogits.argmax().view({1}));
      parts.push_back(refLogp.index_select(0, tokenT));
      parts.push_back(logits.argmax().view({1}));
      addTop(refLogp);
    }
    std::int64_t own = 0;
    for (at::Tensor& p : parts) {
      p = p.to(at::kDouble);
      own += p.numel();
    }
    cache.collectStats(parts);  // the cache's statistics of this step ride along: the step's one host copy
    const at::Tensor host = device::toHost(at::cat(parts));
    const double* h = host.const_data_ptr<double>();
    cache.deliverStats(h + own);
    const std::int64_t token = static_cast<std::int64_t>(h[0]);
    StepEvent ev;
    ev.step = step;
    ev.token = token;
    ev.logprob = static_cast<float>(h[1]);
    h += 2;
    auto readTop = [&](std::vector<std::pair<std::int64_t, float>>& top) {
      for (std::int64_t j = 0; j < k; ++j)
        top.emplace_back(static_cast<std::int64_t>(h[k + j]), static_cast<float>(h[j]));
      h += 2 * k;
    };
    readTop(ev.top);
    if (shadow) {
      // NaN logits (the fp8 seed's overflow) make the KL infinite: the run has lost the reference entirely.
      const double kl = h[0];
      ev.kl = static_cast<float>(std::isfinite(kl) ? std::max(kl, 0.0) : INFINITY);
      ev.refToken = static_cast<std::int64_t>(h[1]);
      ev.refLogprob = static_cast<float>(h[2]);
      ev.top1Agrees = ev.refToken == static_cast<std::int64_t>(h[3]);
      h += 4;
      readTop(ev.refTop);
      klSum += ev.kl;
      r.maxKl = std::max(r.maxKl, static_cast<double>(ev.kl));
      agree += ev.top1Agrees ? 1 : 0;
      if (!ev.top1Agrees && r.firstDivergence < 0) r.firstDivergence = step;
    }
    ev.memory = cache.totalMemory();
    if (o.snapshots) ev.snapshot = std::make_shared<const cache::CacheSnapshot>(cache.snapshot());
    ev.seconds = stepSeconds + (step == 0 ? r.prefillSeconds : 0.0);
    if (step > 0) r.decodeSeconds += stepSeconds;
    r.tokens.push_back(token);
    r.logprobs.push_back(ev.logprob);
    ids = at::full({1, 1}, token, at::kLong);
    const bool more = onStep ? onStep(ev) : true;
    if (std::find(o.stopIds.begin(), o.stopIds.end(), token) != o.stopIds.end()) {
      r.stopReason = StopReason::StopToken;
      break;
    }
    if (!more) {
      r.stopReason = StopReason::Callback;
      break;
    }
  }
  if (shadow && !r.tokens.empty()) {
    r.meanKl = klSum / static_cast<double>(r.tokens.size());
    r.top1Agreement = static_cast<double>(agree) / static_cast<double>(r.tokens.size());
  }
  return r;
}

BeamResult beamSearch(const model::LlamaModel& model, cache::KvCache& cache, const std::vector<std::int64_t>& prompt,
                      int maxNew, const BeamOptions& o, const std::vector<std::int64_t>& stopIds,
                      const BeamStepFn& onStep, const CancelToken* cancel) {
  const int B = o.numBeams;
  if (B < 1) throw Error(ErrorCode::BadInput, "beam search: num_beams must be >= 1");
  if (prompt.empty()) throw Error(ErrorCode::BadInput, "beam search: the prompt is empty");
  if (maxNew < 1) throw Error(ErrorCode::BadInput, "beam search: max new tokens must be >= 1");
  if (o.earlyStopping != "true" && o.earlyStopping != "false" && o.earlyStopping != "never")
    throw Error(ErrorCode::BadInput,
                fmt::format("beam search: early_stopping must be true, false or never, got `{}`", o.earlyStopping));
  if (cache.seqLength() != 0) throw Error(ErrorCode::Internal, "beam search: the cache must start empty");
  const int numReturn = o.numReturn > 0 ? std::min(o.numReturn, B) : B;
  const int K = std::max<int>(2, 1 + static_cast<int>(stopIds.size())) * B;
  constexpr float kNeg = -1.0e9f;
  const auto t0 = Clock::now();

  struct Hyp {
    std::vector<std::int64_t> tokens;
    float score;
  };
  std::vector<Hyp> running(static_cast<std::size_t>(B), Hyp{{}, kNeg});
  running[0].score = 0.0f;
  std::vector<Hyp> finished;  // at most B, best first
  bool unsatisfied = true;
  BeamResult r;
  r.stopReason = StopReason::MaxNew;

  at::Tensor ids = at::tensor(prompt, at::kLong).view({1, -1}).expand({B, -1}).contiguous();
  for (int t = 0; t < maxNew; ++t) {
    if (cancel && cancel->requested()) {
      r.stopReason = StopReason::Cancelled;
      break;
    }
    at::Tensor logits;
    try {
      // The first step is the prefill: long prompts make it long, so it checks the flag between layers.
      model::ForwardOptions fo =
          forwardOptions(t == 0 ? prefillChunkFor(cache, o.prefillChunk) : 0, t == 0 ? cancel : nullptr);
      std::vector<std::int64_t> stored;
      if (t == 0) tapPrefillChunks(fo, ids.size(1), cache.numLayers(), o.onPrefillChunk, stored);
      logits = model.forward(ids, cache, fo).select(1, -1);  // [B, V] f32
    } catch (const kvscope::Cancelled&) {
      r.stopReason = StopReason::Cancelled;
      break;
    }
    if (t == 0) r.prefillSeconds = since(t0);
    const std::int64_t V = logits.size(1);
    std::vector<float> runScores(static_cast<std::size_t>(B));
    for (int b = 0; b < B; ++b) runScores[b] = running[b].score;
    const at::Tensor acc =
        (logits.log_softmax(-1) + model.context().place(at::tensor(runScores)).view({B, 1})).reshape({-1});
    auto [topVd, topId] = acc.topk(std::min<std::int64_t>(K, acc.size(0)));
    // The candidates on the host in one copy (float64 holds every float32 score and every id exactly), with the
    // cache's statistics of this step.
    std::vector<at::Tensor> parts{topVd.to(at::kDouble), topId.to(at::kDouble)};
    cache.collectStats(parts);
    const at::Tensor host = device::toHost(at::cat(parts));
    const int k = static_cast<int>(topVd.size(0));
    cache.deliverStats(host.const_data_ptr<double>() + 2 * static_cast<std::ptrdiff_t>(k));
    std::vector<float> tvs(static_cast<std::size_t>(k));
    std::vector<std::int64_t> tis(static_cast<std::size_t>(k));
    for (int j = 0; j < k; ++j) {
      tvs[static_cast<std::size_t>(j)] = static_cast<float>(host.const_data_ptr<double>()[j]);
      tis[static_cast<std::size_t>(j)] = static_cast<std::int64_t>(host.const_data_ptr<double>()[k + j]);
    }
    const float* tv = tvs.data();
    const std::int64_t* ti = tis.data();
    const bool lastStep = t + 1 == maxNew;
    std::vector<bool> hits(static_cast<std::size_t>(k));
    bool allHit = true;
    for (int j = 0; j < k; ++j) {
      const std::int64_t token = ti[j] % V;
      hits[j] = lastStep || std::find(stopIds.begin(), stopIds.end(), token) != stopIds.end();
      allHit = allHit && hits[j];
    }
    // Finished hypotheses: the top-B candidates that hit a stop, normalized by their generated length.
    const bool full = static_cast<int>(finished.size()) == B;
    if (unsatisfied && !(full && o.earlyStopping == "true")) {
      std::vector<Hyp> merged = finished;
      for (int j = 0; j < std::min(k, B); ++j) {
        if (!hits[j]) continue;
        Hyp h{running[static_cast<std::size_t>(ti[j] / V)].tokens,
              tv[j] / static_cast<float>(std::pow(t + 1, o.lengthPenalty))};
        h.tokens.push_back(ti[j] % V);
        merged.push_back(std::move(h));
      }
      std::stable_sort(merged.begin(), merged.end(), [](const Hyp& a, const Hyp& c) { return a.score > c.score; });
      if (static_cast<int>(merged.size()) > B) merged.resize(static_cast<std::size_t>(B));
      finished = std::move(merged);
    }
    // Next running beams: the best B candidates that did not hit a stop.
    std::vector<int> order(static_cast<std::size_t>(k));
    for (int j = 0; j < k; ++j) order[j] = j;
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int c) { return tv[a] + (hits[a] ? kNeg : 0.0f) > tv[c] + (hits[c] ? kNeg : 0.0f); });
    std::vector<Hyp> next;
    std::vector<std::int64_t> parents, tokens;
    for (int j = 0; j < B && j < k; ++j) {
      const int c = order[j];
      const std::int64_t parent = ti[c] / V;
      Hyp h{running[static_cast<std::size_t>(parent)].tokens, tv[c] + (hits[c] ? kNeg : 0.0f)};
      h.tokens.push_back(ti[c] % V);
      next.push_back(std::move(h));
      parents.push_back(parent);
      tokens.push_back(ti[c] % V);
    }
    running = std::move(next);
    cache.reorder(at::tensor(parents, at::kLong));
    ids = at::tensor(tokens, at::kLong).view({-1, 1});
    // transformers' early-stop heuristic.
    const double bestLen = (o.earlyStopping == "never" && o.lengthPenalty > 0.0) ? maxNew : t + 1;
    const double bestPossible = running[0].score / std::pow(bestLen, o.lengthPenalty);
    const bool nowFull = static_cast<int>(finished.size()) == B;
    const double worstFinished = nowFull ? finished.back().score : -1.0e9;
    unsatisfied = unsatisfied && (!nowFull || bestPossible > worstFinished);
    if (onStep) {
      BeamStepEvent ev;
      ev.step = t;
      ev.parents = parents;
      ev.tokens = tokens;
      for (const auto& h : running) ev.scores.push_back(h.score);
      ev.finished = static_cast<int>(finished.size());
      ev.memory = cache.totalMemory();
      ev.snapshot = std::make_shared<const cache::CacheSnapshot>(cache.snapshot());
      if (!onStep(ev)) {
        r.stopReason = StopReason::Callback;
        break;
      }
    }
    const bool more = unsatisfied && !(nowFull && o.earlyStopping == "true") && !allHit;
    if (!more) {
      r.stopReason = lastStep ? StopReason::MaxNew : StopReason::StopToken;
      break;
    }
  }
  // Cancelled or stopped early without finished hypotheses: return the running beams as they stand.
  if (finished.empty())
    for (auto& h : running)
      finished.push_back(Hyp{h.tokens, h.score / static_cast<float>(std::pow(std::max<std::size_t>(h.tokens.size(), 1),
                                                                             o.lengthPenalty))});
  for (int i = 0; i < numReturn && i < static_cast<int>(finished.size()); ++i) {
    r.sequences.push_back(finished[i].tokens);
    r.scores.push_back(finished[i].score);
  }
  r.seconds = since(t0);
  return r;
}

}  // namespace kvscope::generate
