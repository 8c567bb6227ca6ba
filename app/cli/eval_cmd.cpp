// `eval`: perplexity of a text and KL / top-1 agreement against the unquantized run, per cache config, in windows.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>

#include "cache/kv_cache.h"
#include "cli/commands.h"
#include "cli/runtime.h"
#include "cli/text_windows.h"

namespace kvscope::cli {

namespace {

// Log-probabilities [n, vocab] of the tokens after the prompt: the prompt is the cache's first update, then the
// rest of the window goes through in steps of `step` tokens (teacher forcing), so later tokens read the quantized
// states of earlier ones.
at::Tensor windowLogProbs(const model::LlamaModel& model, cache::KvCache& kv, const std::vector<std::int64_t>& w,
                          std::size_t prompt, std::size_t step) {
  std::vector<at::Tensor> out;
  at::Tensor logits = model.forward(idsTensor(w, 0, prompt), kv)[0];
  out.push_back(logits.narrow(0, prompt - 1, 1));
  for (std::size_t s = prompt; s + 1 < w.size(); s += step) {
    const std::size_t n = std::min(step, w.size() - 1 - s);
    out.push_back(model.forward(idsTensor(w, s, n), kv)[0]);
  }
  return at::cat(out, 0).log_softmax(-1);
}

struct EvalFigures {
  std::string spec;
  double nll = 0, klSum = 0, klMax = 0;
  std::int64_t scored = 0, agree = 0, nonFinitePositions = 0, overflow = 0, nonFinite = 0;
  cache::TensorMemory memory;  // at the end of the first window
  double seconds = 0;
  double ppl() const { return std::exp(nll / static_cast<double>(std::max<std::int64_t>(scored, 1))); }
  double ratio() const { return memory.stored() ? double(memory.unquantized) / double(memory.stored()) : 0.0; }
};

nlohmann::json evalJson(const EvalFigures& f, bool reference) {
  auto num = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); };
  nlohmann::json j = {{"config", f.spec},
                      {"reference", reference},
                      {"perplexity", num(f.ppl())},
                      {"scored_tokens", f.scored},
                      {"kv_bytes", {{"stored", f.memory.stored()}, {"payload", f.memory.payload},
                                    {"metadata", f.memory.metadata}, {"residual", f.memory.residual},
                                    {"unquantized", f.memory.unquantized}}},
                      {"compression_ratio", f.ratio()},
                      {"seconds", f.seconds}};
  if (!reference) {
    j["mean_kl"] = num(f.klSum / static_cast<double>(std::max<std::int64_t>(f.scored, 1)));
    j["max_kl"] = num(f.klMax);
    j["top1_agreement"] = static_cast<double>(f.agree) / static_cast<double>(std::max<std::int64_t>(f.scored, 1));
    j["non_finite_positions"] = f.nonFinitePositions;
    j["overflow"] = f.overflow;
    j["non_finite"] = f.nonFinite;
  }
  return j;
}

}  // namespace

Runner addEval(CLI::App& app) {
  struct Opts : TextOpts {
    std::vector<std::string> specs;
    int prompt = 64, step = 16;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "eval", "Perplexity of a text, and KL / top-1 agreement against the unquantized run, per cache config");
  addTextOpts(cmd, *o);
  cmd->add_option("--cache", o->specs, "cache SPEC (repeat for several)")->required();
  cmd->add_option("--prompt", o->prompt, "tokens of each window given as the prompt (the caches' first update)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--step", o->step, "tokens per forward after the prompt (1: token by token)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--json", o->json, "one JSON object per config (the reference first)");
  return [o, cmd]() {
    if (!*cmd) return -1;
    std::vector<cache::CacheConfig> cfgs;
    for (const auto& s : o->specs) cfgs.push_back(cache::parseSpec(s));  // bad SPECs fail before the model loads
    if (o->prompt >= o->ctx)
      throw UsageError(fmt::format("--prompt {} leaves nothing to score in windows of --ctx {}", o->prompt, o->ctx));
    if (o->threads > 0) at::set_num_threads(o->threads);
    const Loaded m = loadModel(o->model, o->dtype);
    const auto windows = windowsOf(m, *o);
    const std::size_t prompt = std::min<std::size_t>(static_cast<std::size_t>(o->prompt), windows[0].size() - 1);
    for (const auto& c : cfgs) (void)m.model->makeCache(c);  // per-layer rules against this model, before any work
    cache::StatsOptions quiet;
    quiet.enabled = false;
    std::vector<EvalFigures> figs(cfgs.size() + 1);
    figs[0].spec = "dynamic (reference)";
    for (std::size_t i = 0; i < cfgs.size(); ++i) figs[i + 1].spec = cache::toSpec(cfgs[i]);
    const auto t0 = std::chrono::steady_clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    for (std::size_t wi = 0; wi < windows.size(); ++wi) {
      const auto& w = windows[wi];
      const at::Tensor targets = at::tensor(std::vector<std::int64_t>(w.begin() + static_cast<std::ptrdiff_t>(prompt),
                                                                      w.end()),
                                            at::kLong);
      at::Tensor ref;
      for (std::size_t ci = 0; ci <= cfgs.size(); ++ci) {
        std::cerr << fmt::format("eval: window {}/{}, config {}/{} {} ({:.0f} s)\n", wi + 1, windows.size(), ci + 1,
                                 cfgs.size() + 1, figs[ci].spec, elapsed());
        const auto c0 = std::chrono::steady_clock::now();
        auto kv = m.model->makeCache(ci == 0 ? cache::parseSpec("dynamic") : cfgs[ci - 1], quiet);
        const at::Tensor lp = windowLogProbs(*m.model, *kv, w, prompt, static_cast<std::size_t>(o->step));
        EvalFigures& f = figs[ci];
        f.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
        f.nll -= lp.gather(1, targets.view({-1, 1})).sum().item<double>();
        f.scored += targets.size(0);
        if (wi == 0) f.memory = kv->totalMemory();
        for (int l = 0; l < kv->numLayers(); ++l) {
          const auto& st = kv->layer(l).stats();
          f.overflow += st.keys.overflowTotal + st.values.overflowTotal;
          f.nonFinite += st.keys.nonFiniteTotal + st.values.nonFiniteTotal;
        }
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
    std::cerr << fmt::format("eval: done in {:.0f} s\n", elapsed());
    if (o->json) {
      for (std::size_t i = 0; i < figs.size(); ++i) std::cout << evalJson(figs[i], i == 0).dump() << "\n";
      return 0;
    }
    std::cout << fmt::format("{}: {} window(s) of {} tokens from {}; each window: {} prompt tokens, then steps of {}; "
                             "{} scored tokens per config; KL(reference || config) and top-1 against the unquantized "
                             "cache\n",
                             m.path, windows.size(), windows[0].size(), o->text, prompt, o->step, figs[0].scored);
    std::cout << fmt::format("{:<58} {:>8} {:>9} {:>10} {:>10} {:>10} {:>7} {:>7}\n", "config", "KV ratio", "ppl",
                             "delta ppl", "mean KL", "max KL", "top-1", "NaN pos");
    auto g = [](double x, const char* f) { return std::isnan(x) ? std::string("nan") : fmt::format(fmt::runtime(f), x); };
    for (std::size_t i = 0; i < figs.size(); ++i) {
      const EvalFigures& f = figs[i];
      const double meanKl = f.klSum / static_cast<double>(std::max<std::int64_t>(f.scored, 1));
      std::cout << fmt::format("{:<58} {:>7.2f}x {:>9} {:>10} {:>10} {:>10} {:>7} {:>7}\n", f.spec, f.ratio(),
                               g(f.ppl(), "{:.3f}"), i == 0 ? "-" : g(f.ppl() - figs[0].ppl(), "{:+.3f}"),
                               i == 0 ? "-" : g(meanKl, "{:.4g}"), i == 0 ? "-" : g(f.klMax, "{:.4g}"),
                               i == 0 ? "-" : fmt::format("{:.1f}%", 100.0 * f.agree / double(std::max<std::int64_t>(f.scored, 1))),
                               i == 0 ? "-" : std::to_string(f.nonFinitePositions));
    }
    return 0;
  };
}

}  // namespace kvscope::cli
