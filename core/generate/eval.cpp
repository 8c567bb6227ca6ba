#include "generate/eval.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>

#include "cache/kv_cache.h"
#include "generate/detail/eval_window.h"
#include "generate/detail/quantized_reads.h"
#include "generate/generate.h"
#include "model/llama.h"
#include "util/error.h"
#include "util/process_memory.h"

namespace kvscope::generate {

namespace {

// Log-probabilities [n, vocab] of the tokens after the prompt: the prompt is the cache's first update, then the
// rest of the window goes through in steps of `step` tokens (teacher forcing), so later tokens read the quantized
// states of earlier ones. `quantizedReads`: how many of the n read quantized states (KvCache::quantizedLength).
at::Tensor windowLogProbs(const model::LlamaModel& model, cache::KvCache& kv, const std::vector<std::int64_t>& w,
                          std::size_t prompt, std::size_t step, std::int64_t& quantizedReads) {
  std::vector<at::Tensor> out;
  model::ForwardOptions promptPart;
  promptPart.lastLogitsOnly = true;  // only the prompt's last position is scored
  const auto plan = detail::windowForwards(w.size(), prompt, prefillChunkFor(kv), step);
  const bool chunked = detail::chunkedPrompt(plan);
  for (const detail::WindowForward& f : plan) {
    const at::Tensor ids = model::idsTensor(w, static_cast<std::size_t>(f.from), static_cast<std::size_t>(f.n));
    bool read = false;
    const at::Tensor logits = detail::readsQuantized(
        kv, [&] { return model.forward(ids, kv, f.prompt ? promptPart : model::ForwardOptions{})[0]; }, read);
    if (f.scored && read) quantizedReads += f.prompt ? 1 : f.n;
    if (f.scored) out.push_back(logits);
    if (f.prompt && chunked) util::releaseFreeMemory();
  }
  return at::cat(out, 0).log_softmax(-1);
}

// Appends a 1-D tensor's values (any device) as doubles.
void append(std::vector<double>& to, const at::Tensor& t) {
  const at::Tensor h = t.to(at::kCPU, at::kDouble).contiguous();
  to.insert(to.end(), h.data_ptr<double>(), h.data_ptr<double>() + h.numel());
}

}  // namespace

KldReport kldReport(const EvalFigures& config, const EvalFigures& reference) {
  KldReport r;
  const std::size_t n = std::min({config.tokenKl.size(), config.tokenNll.size(), reference.tokenNll.size()});
  std::vector<double> kls;
  double kl = 0, kl2 = 0, dp2 = 0, dp4 = 0, q = 0, q2 = 0, b = 0, b2 = 0, qb = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double k = config.tokenKl[i], nq = config.tokenNll[i], nb = reference.tokenNll[i];
    if (!std::isfinite(k) || !std::isfinite(nq) || !std::isfinite(nb)) continue;
    kls.push_back(k);
    kl += k, kl2 += k * k;
    const double d = std::exp(-nq) - std::exp(-nb);
    dp2 += d * d, dp4 += d * d * d * d;
    q += nq, q2 += nq * nq, b += nb, b2 += nb * nb, qb += nq * nb;
  }
  r.tokens = static_cast<std::int64_t>(kls.size());
  if (kls.empty()) return r;
  std::sort(kls.begin(), kls.end());
  r.meanKl = meanOf(kl, kl2, r.tokens);
  r.medianKl = medianOf(kls);
  r.kl99 = percentileOf(kls, 0.99);
  r.kl999 = percentileOf(kls, 0.999);
  r.maxKl = kls.back();
  r.sameTop = fractionOf(config.agree, config.scored);
  const Estimate ms = meanOf(dp2, dp4, r.tokens);  // mean of Δp²; its root, the error carried through the root
  r.rmsDeltaP = {std::sqrt(ms.value), ms.value > 0 ? 0.5 / std::sqrt(ms.value) * ms.error : 0.0};
  const Estimate lq = meanOf(q, q2, r.tokens), lb = meanOf(b, b2, r.tokens);
  const double tn = static_cast<double>(r.tokens);
  const double cov = r.tokens < 10 ? 0.0 : (qb / tn - (q / tn) * (b / tn)) / (tn - 1);
  const double ratio = std::exp(lq.value - lb.value);
  r.pplRatio = {ratio, ratio * std::sqrt(std::max(0.0, lq.error * lq.error + lb.error * lb.error - 2 * cov))};
  return r;
}

std::vector<double> klByPosition(const EvalFigures& f) {
  std::vector<double> out(f.klAtPosition.size(), std::nan(""));
  for (std::size_t i = 0; i < out.size(); ++i)
    if (f.tokensAtPosition[i] > 0) out[i] = f.klAtPosition[i] / static_cast<double>(f.tokensAtPosition[i]);
  return out;
}

std::vector<std::vector<std::int64_t>> textWindows(const std::vector<std::int64_t>& ids, int ctx, int maxWindows) {
  if (ctx < 2) throw Error(ErrorCode::BadInput, fmt::format("windows of {} tokens are too short", ctx));
  std::vector<std::vector<std::int64_t>> w;
  const auto n = static_cast<std::size_t>(ctx);
  for (std::size_t s = 0; s + n <= ids.size(); s += n)
    w.emplace_back(ids.begin() + static_cast<std::ptrdiff_t>(s), ids.begin() + static_cast<std::ptrdiff_t>(s + n));
  if (w.empty() && !ids.empty()) w.emplace_back(ids.begin(), ids.end());
  if (maxWindows > 0 && static_cast<int>(w.size()) > maxWindows) w.resize(static_cast<std::size_t>(maxWindows));
  return w;
}

namespace detail {

std::vector<WindowForward> windowForwards(std::size_t size, std::size_t prompt, std::int64_t chunk, std::size_t step) {
  std::vector<WindowForward> f;
  const auto p = static_cast<std::int64_t>(prompt);
  const std::int64_t c = chunk > 0 ? chunk : p;
  for (std::int64_t s = 0; s < p; s += c) f.push_back({s, std::min(c, p - s), true, s + c >= p});
  for (std::size_t s = prompt; s + 1 < size; s += step)
    f.push_back({static_cast<std::int64_t>(s), static_cast<std::int64_t>(std::min(step, size - 1 - s)), false, true});
  return f;
}

std::size_t evalPrompt(const std::vector<std::vector<std::int64_t>>& windows, const EvalOptions& o) {
  if (windows.empty() || windows[0].size() < 2) throw Error(ErrorCode::BadInput, "the text has fewer than 2 tokens");
  if (o.step < 1) throw Error(ErrorCode::BadInput, fmt::format("step must be >= 1, got {}", o.step));
  return std::min<std::size_t>(static_cast<std::size_t>(std::max(o.prompt, 1)), windows[0].size() - 1);
}

at::Tensor windowTargets(const model::LlamaModel& model, const std::vector<std::int64_t>& w, std::size_t prompt) {
  return model.context().place(
      at::tensor(std::vector<std::int64_t>(w.begin() + static_cast<std::ptrdiff_t>(prompt), w.end()), at::kLong));
}

WindowReference::WindowReference(const at::Tensor& lp) : logProbs(lp), probs(lp.exp()), top1(lp.argmax(-1)) {}

void addWindow(EvalFigures& f, const at::Tensor& lp, const WindowReference* ref, const at::Tensor& targets,
               std::size_t prompt) {
  const at::Tensor nll = -lp.gather(1, targets.view({-1, 1})).view({-1});
  f.nll += nll.sum().item<double>();
  f.scored += targets.size(0);
  append(f.tokenNll, nll);
  if (ref == nullptr) return;
  // KL(reference || config) per position, in nats; positions whose logits are not finite are counted apart.
  const at::Tensor kl = (ref->probs * (ref->logProbs - lp)).sum(-1);
  const at::Tensor finite = kl.isfinite();
  f.nonFinitePositions += (~finite).sum().item<std::int64_t>();
  f.klSum += kl.sum().item<double>();  // NaN when any position is: the mean says so
  if (finite.any().item<bool>()) f.klMax = std::max(f.klMax, kl.masked_select(finite).max().item<double>());
  if ((~finite).any().item<bool>()) f.klMax = std::numeric_limits<double>::quiet_NaN();
  f.agree += (lp.argmax(-1) == ref->top1).sum().item<std::int64_t>();
  const std::size_t first = f.tokenKl.size();
  append(f.tokenKl, kl);
  // Scored token i of the window has prompt + i tokens before it.
  const std::size_t n = f.tokenKl.size() - first;
  if (f.klAtPosition.size() < prompt + n) {
    f.klAtPosition.resize(prompt + n, 0.0);
    f.tokensAtPosition.resize(prompt + n, 0);
  }
  for (std::size_t i = 0; i < n; ++i)
    if (std::isfinite(f.tokenKl[first + i])) {
      f.klAtPosition[prompt + i] += f.tokenKl[first + i];
      ++f.tokensAtPosition[prompt + i];
    }
}

}  // namespace detail

std::vector<EvalFigures> evaluate(const model::LlamaModel& model, const std::vector<std::vector<std::int64_t>>& windows,
                                  const std::vector<cache::CacheConfig>& configs, const EvalOptions& o,
                                  const EvalProgress& progress, const EvalFiguresFn& figures) {
  const std::size_t prompt = detail::evalPrompt(windows, o);
  for (const auto& c : configs) (void)model.makeCache(c);  // per-layer rules against this model, before any work
  cache::StatsOptions quiet;
  quiet.enabled = false;
  std::vector<EvalFigures> figs(configs.size() + 1);
  figs[0].spec = "dynamic (reference)";
  for (std::size_t i = 0; i < configs.size(); ++i) figs[i + 1].spec = cache::toSpec(configs[i]);
  for (std::size_t wi = 0; wi < windows.size(); ++wi) {
    const auto& w = windows[wi];
    if (w.size() <= prompt) continue;  // a short last window: nothing to score after the prompt
    const at::Tensor targets = detail::windowTargets(model, w, prompt);
    std::optional<detail::WindowReference> ref;
    for (std::size_t ci = 0; ci <= configs.size(); ++ci) {
      if (progress && !progress(wi, windows.size(), ci, configs.size() + 1)) throw EvalCancelled();
      const auto c0 = std::chrono::steady_clock::now();
      auto kv = model.makeCache(ci == 0 ? cache::parseSpec("dynamic") : configs[ci - 1], quiet);
      EvalFigures& f = figs[ci];
      const at::Tensor lp = windowLogProbs(model, *kv, w, prompt, static_cast<std::size_t>(o.step), f.quantizedReads);
      f.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
      detail::addWindow(f, lp, ci == 0 ? nullptr : &*ref, targets, prompt);
      if (wi == 0) f.memory = kv->totalMemory();
      const cache::OverflowTotals o = kv->overflowTotals();
      f.overflow += o.overflow;
      f.nonFinite += o.nonFinite;
      if (ci == 0) ref.emplace(lp);
      if (figures) figures(wi, ci, f);
    }
  }
  return figs;
}

}  // namespace kvscope::generate
