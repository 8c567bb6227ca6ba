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
#include "generate/eval.h"
#include "cli/commands.h"
#include "cli/runtime.h"
#include "cli/text_windows.h"

namespace kvscope::cli {

namespace {

using generate::EvalFigures;

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
    j["mean_kl"] = num(f.meanKl());
    j["max_kl"] = num(f.klMax);
    j["top1_agreement"] = f.top1();
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
    const Loaded m = loadModel(o->model, o->how);
    const auto windows = windowsOf(m, *o);
    const std::size_t prompt = std::min<std::size_t>(static_cast<std::size_t>(o->prompt), windows[0].size() - 1);
    const auto t0 = std::chrono::steady_clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    std::vector<std::string> names{"dynamic (reference)"};
    for (const auto& c : cfgs) names.push_back(cache::toSpec(c));
    generate::EvalOptions eo;
    eo.prompt = static_cast<int>(prompt);
    eo.step = o->step;
    const auto figs = generate::evaluate(*m.model, windows, cfgs, eo,
                                         [&](std::size_t wi, std::size_t nw, std::size_t ci, std::size_t nc) {
                                           std::cerr << fmt::format("eval: window {}/{}, config {}/{} {} ({:.0f} s)\n",
                                                                    wi + 1, nw, ci + 1, nc, names[ci], elapsed());
                                           return true;
                                         });
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
      std::cout << fmt::format("{:<58} {:>7.2f}x {:>9} {:>10} {:>10} {:>10} {:>7} {:>7}\n", f.spec, f.ratio(),
                               g(f.ppl(), "{:.3f}"), i == 0 ? "-" : g(f.ppl() - figs[0].ppl(), "{:+.3f}"),
                               i == 0 ? "-" : g(f.meanKl(), "{:.4g}"), i == 0 ? "-" : g(f.klMax, "{:.4g}"),
                               i == 0 ? "-" : fmt::format("{:.1f}%", 100.0 * f.top1()),
                               i == 0 ? "-" : std::to_string(f.nonFinitePositions));
    }
    return 0;
  };
}

}  // namespace kvscope::cli
