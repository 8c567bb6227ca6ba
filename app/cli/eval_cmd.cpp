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

nlohmann::json num(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }
nlohmann::json estimate(const Estimate& e) { return {{"value", num(e.value)}, {"stderr", num(e.error)}}; }

nlohmann::json evalJson(const EvalFigures& f, const EvalFigures& ref, bool reference) {
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
    // llama-perplexity --kl-divergence's figures, and the mean KL at each context length (null: none scored).
    const generate::KldReport k = generate::kldReport(f, ref);
    j["kld"] = {{"tokens", k.tokens},     {"mean", estimate(k.meanKl)}, {"median", num(k.medianKl)},
                {"p99", num(k.kl99)},     {"p99_9", num(k.kl999)},      {"max", num(k.maxKl)},
                {"same_top_p", estimate(k.sameTop)}, {"rms_delta_p", estimate(k.rmsDeltaP)},
                {"ppl_ratio", estimate(k.pplRatio)}};
    nlohmann::json pos = nlohmann::json::array();
    for (double x : generate::klByPosition(f)) pos.push_back(num(x));
    j["kl_by_position"] = std::move(pos);
  }
  return j;
}

// One CSV row per config: the table's figures and llama-perplexity's, the reference's KL columns empty.
const char* kCsvHeader =
    "config,reference,kv_ratio,perplexity,scored_tokens,mean_kl,mean_kl_stderr,median_kl,kl_99,kl_99_9,max_kl,"
    "same_top_p,same_top_p_stderr,rms_delta_p,rms_delta_p_stderr,ppl_ratio,ppl_ratio_stderr,non_finite_positions";

std::string csvRow(const EvalFigures& f, const EvalFigures& ref, bool reference) {
  auto g = [](double x) { return std::isfinite(x) ? fmt::format("{:.9g}", x) : std::string(); };
  std::string spec = f.spec;  // quoted: specs hold commas
  for (std::size_t i = 0; (i = spec.find('"', i)) != std::string::npos; i += 2) spec.insert(i, "\"");
  std::string row = fmt::format("\"{}\",{},{},{},{}", spec, reference ? 1 : 0, g(f.ratio()), g(f.ppl()), f.scored);
  if (reference) return row + std::string(13, ',');
  const generate::KldReport k = generate::kldReport(f, ref);
  for (double x : {k.meanKl.value, k.meanKl.error, k.medianKl, k.kl99, k.kl999, k.maxKl, k.sameTop.value,
                   k.sameTop.error, k.rmsDeltaP.value, k.rmsDeltaP.error, k.pplRatio.value, k.pplRatio.error})
    row += "," + g(x);
  return row + "," + std::to_string(f.nonFinitePositions);
}

}  // namespace

Runner addEval(CLI::App& app) {
  struct Opts : TextOpts {
    std::vector<std::string> specs;
    int prompt = 64, step = 16;
    bool json = false, csv = false;
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
  auto* json = cmd->add_flag("--json", o->json,
                              "one JSON object per config (the reference first), with llama-perplexity's KL figures "
                              "and the mean KL at each context length");
  cmd->add_flag("--csv", o->csv, "one CSV row per config (a header first), with llama-perplexity's KL figures")
      ->excludes(json);
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
      for (std::size_t i = 0; i < figs.size(); ++i) std::cout << evalJson(figs[i], figs[0], i == 0).dump() << "\n";
      return 0;
    }
    if (o->csv) {
      std::cout << kCsvHeader << "\n";
      for (std::size_t i = 0; i < figs.size(); ++i) std::cout << csvRow(figs[i], figs[0], i == 0) << "\n";
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
    // llama-perplexity --kl-divergence's terms, on the same tokens.
    std::cout << fmt::format("\nKL divergence as llama-perplexity reports it (± standard error):\n");
    std::cout << fmt::format("{:<58} {:>19} {:>9} {:>9} {:>9} {:>9} {:>16} {:>16} {:>17}\n", "config", "mean KLD",
                             "median", "99%", "99.9%", "max", "same top p", "RMS Δp", "PPL(Q)/PPL(ref)");
    auto pm = [&](const Estimate& e, double scale, const char* f) {
      return std::isfinite(e.value) ? fmt::format(fmt::runtime(f), scale * e.value, scale * e.error) : std::string("nan");
    };
    for (std::size_t i = 1; i < figs.size(); ++i) {
      const generate::KldReport k = generate::kldReport(figs[i], figs[0]);
      std::cout << fmt::format("{:<58} {:>19} {:>9} {:>9} {:>9} {:>9} {:>16} {:>16} {:>17}\n", figs[i].spec,
                               pm(k.meanKl, 1, "{:.6f} ± {:.6f}"), g(k.medianKl, "{:.5f}"), g(k.kl99, "{:.5f}"),
                               g(k.kl999, "{:.5f}"), g(k.maxKl, "{:.5f}"), pm(k.sameTop, 100, "{:.2f} ± {:.2f}%"),
                               pm(k.rmsDeltaP, 100, "{:.3f} ± {:.3f}%"), pm(k.pplRatio, 1, "{:.5f} ± {:.5f}"));
    }
    return 0;
  };
}

}  // namespace kvscope::cli
