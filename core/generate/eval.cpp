#include "generate/eval.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <stdexcept>

#include "cache/kv_cache.h"
#include "generate/generate.h"
#include "model/llama.h"

namespace kvscope::generate {

namespace {

// Log-probabilities [n, vocab] of the tokens after the prompt: the prompt is the cache's first update, then the
// rest of the window goes through in steps of `step` tokens (teacher forcing), so later tokens read the quantized
// states of earlier ones.
at::Tensor windowLogProbs(const model::LlamaModel& model, cache::KvCache& kv, const std::vector<std::int64_t>& w,
                          std::size_t prompt, std::size_t step) {
  std::vector<at::Tensor> out;
  model::ForwardOptions first;
  first.lastLogitsOnly = true;  // only the prompt's last position is scored
  first.chunk = prefillChunkFor(kv);
  out.push_back(model.forward(model::idsTensor(w, 0, prompt), kv, first)[0]);
  for (std::size_t s = prompt; s + 1 < w.size(); s += step) {
    const std::size_t n = std::min(step, w.size() - 1 - s);
    out.push_back(model.forward(model::idsTensor(w, s, n), kv)[0]);
  }
  return at::cat(out, 0).log_softmax(-1);
}

}  // namespace

std::vector<std::vector<std::int64_t>> textWindows(const std::vector<std::int64_t>& ids, int ctx, int maxWindows) {
  if (ctx < 2) throw std::invalid_argument(fmt::format("windows of {} tokens are too short", ctx));
  std::vector<std::vector<std::int64_t>> w;
  const auto n = static_cast<std::size_t>(ctx);
  for (std::size_t s = 0; s + n <= ids.size(); s += n)
    w.emplace_back(ids.begin() + static_cast<std::ptrdiff_t>(s), ids.begin() + static_cast<std::ptrdiff_t>(s + n));
  if (w.empty() && !ids.empty()) w.emplace_back(ids.begin(), ids.end());
  if (maxWindows > 0 && static_cast<int>(w.size()) > maxWindows) w.resize(static_cast<std::size_t>(maxWindows));
  return w;
}

std::vector<EvalFigures> evaluate(const model::LlamaModel& model, const std::vector<std::vector<std::int64_t>>& windows,
                                  const std::vector<cache::CacheConfig>& configs, const EvalOptions& o,
                                  const EvalProgress& progress) {
  if (windows.empty() || windows[0].size() < 2) throw std::invalid_argument("the text has fewer than 2 tokens");
  if (o.step < 1) throw std::invalid_argument(fmt::format("step must be >= 1, got {}", o.step));
  const std::size_t prompt = std::min<std::size_t>(static_cast<std::size_t>(std::max(o.prompt, 1)),
                                                   windows[0].size() - 1);
  for (const auto& c : configs) (void)model.makeCache(c);  // per-layer rules against this model, before any work
  cache::StatsOptions quiet;
  quiet.enabled = false;
  std::vector<EvalFigures> figs(configs.size() + 1);
  figs[0].spec = "dynamic (reference)";
  for (std::size_t i = 0; i < configs.size(); ++i) figs[i + 1].spec = cache::toSpec(configs[i]);
  for (std::size_t wi = 0; wi < windows.size(); ++wi) {
    const auto& w = windows[wi];
    if (w.size() <= prompt) continue;  // a short last window: nothing to score after the prompt
    const at::Tensor targets =
        model.context().place(at::tensor(std::vector<std::int64_t>(w.begin() + static_cast<std::ptrdiff_t>(prompt), w.end()), at::kLong));
    at::Tensor ref;
    for (std::size_t ci = 0; ci <= configs.size(); ++ci) {
      if (progress && !progress(wi, windows.size(), ci, configs.size() + 1)) throw EvalCancelled();
      const auto c0 = std::chrono::steady_clock::now();
      auto kv = model.makeCache(ci == 0 ? cache::parseSpec("dynamic") : configs[ci - 1], quiet);
      const at::Tensor lp = windowLogProbs(model, *kv, w, prompt, static_cast<std::size_t>(o.step));
      EvalFigures& f = figs[ci];
      f.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
      f.nll -= lp.gather(1, targets.view({-1, 1})).sum().item<double>();
      f.scored += targets.size(0);
      if (wi == 0) f.memory = kv->totalMemory();
      const cache::OverflowTotals o = kv->overflowTotals();
      f.overflow += o.overflow;
      f.nonFinite += o.nonFinite;
      if (ci == 0) {
        ref = lp;
        continue;
      }
      // KL(reference || config) per position, in nats; positions whose logits are not finite are counted apart.
      const at::Tensor kl = (ref.exp() * (ref - lp)).sum(-1);
      const at::Tensor finite = kl.isfinite();
      f.nonFinitePositions += (~finite).sum().item<std::int64_t>();
      f.klSum += kl.sum().item<double>();  // NaN when any position is: the mean says so
      if (finite.any().item<bool>()) f.klMax = std::max(f.klMax, kl.masked_select(finite).max().item<double>());
      if ((~finite).any().item<bool>()) f.klMax = std::numeric_limits<double>::quiet_NaN();
      f.agree += (lp.argmax(-1) == ref.argmax(-1)).sum().item<std::int64_t>();
    }
  }
  return figs;
}

}  // namespace kvscope::generate
