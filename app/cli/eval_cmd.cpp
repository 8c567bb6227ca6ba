// `eval`: perplexity of a text and KL / top-1 agreement against the unquantized run, per cache config, in windows.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "cache/kv_cache.h"
#include "cli/commands.h"
#include "cli/runtime.h"
#include "cli/text_windows.h"
#include "generate/eval.h"

namespace kvscope::cli {

namespace {

using generate::EvalFigures;

const auto num = jsonNumber;
nlohmann::json estimate(const Estimate& e) {
  return {{"value", num(e.value)}, {"stderr", num(e.error)}};
}

nlohmann::json evalJson(const EvalFigures& f, const EvalFigures& ref, bool reference) {
  nlohmann::json j = {{"config", f.spec},
                      {"reference", reference},
                      {"perplexity", num(f.ppl())},
                      {"scored_tokens", f.scored},
                      {"kv_bytes",
                       {{"stored", f.memory.stored()},
                        {"payload", f.memory.payload},
                        {"metadata", f.memory.metadata},
                        {"residual", f.memory.residual},
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
    j["quantized_reads"] = f.quantizedReads;
    // llama-perplexity --kl-divergence's figures, and the mean KL at each context length (null: none scored).
    const generate::KldReport k = generate::kldReport(f, ref);
    j["kld"] = {{"tokens", k.tokens},
                {"mean", estimate(k.meanKl)},
                {"median", num(k.medianKl)},
                {"p99", num(k.kl99)},
                {"p99_9", num(k.kl999)},
                {"max", num(k.maxKl)},
                {"same_top_p", estimate(k.sameTop)},
                {"rms_delta_p", estimate(k.rmsDeltaP)},
                {"ppl_ratio", estimate(k.pplRatio)}};
    nlohmann::json pos = nlohmann::json::array();
    for (double x : generate::klByPosition(f)) pos.push_back(num(x));
    j["kl_by_position"] = std::move(pos);
  }
  return j;
}

// The figures a row shows, back from its JSON (null: NaN).
double numOf(const nlohmann::json& j, const char* key) {
  return jsonNumberOf(j, key);
}
double numOf(const nlohmann::json& j, const char* key, const char* sub) {
  const auto it = j.find(key);
  return it == j.end() || !it->is_object() ? std::numeric_limits<double>::quiet_NaN() : numOf(*it, sub);
}
Estimate estimateOf(const nlohmann::json& kld, const char* key) {
  return {numOf(kld, key, "value"), numOf(kld, key, "stderr")};
}

// One CSV row per config: the table's figures and llama-perplexity's, the reference's KL columns empty.
const char* kCsvHeader =
    "config,reference,kv_ratio,perplexity,scored_tokens,mean_kl,mean_kl_stderr,median_kl,kl_99,kl_99_9,max_kl,"
    "same_top_p,same_top_p_stderr,rms_delta_p,rms_delta_p_stderr,ppl_ratio,ppl_ratio_stderr,non_finite_positions";

std::string csvRow(const nlohmann::json& r) {
  auto g = [](double x) { return std::isfinite(x) ? fmt::format("{:.9g}", x) : std::string(); };
  std::string spec = r.at("config").get<std::string>();  // quoted: specs hold commas
  for (std::size_t i = 0; (i = spec.find('"', i)) != std::string::npos; i += 2) spec.insert(i, "\"");
  const bool reference = r.at("reference").get<bool>();
  std::string row = fmt::format("\"{}\",{},{},{},{}", spec, reference ? 1 : 0, g(numOf(r, "compression_ratio")),
                                g(numOf(r, "perplexity")), r.at("scored_tokens").get<std::int64_t>());
  if (reference) return row + std::string(13, ',');
  const nlohmann::json& k = r.at("kld");
  for (double x : {numOf(k, "mean", "value"), numOf(k, "mean", "stderr"), numOf(k, "median"), numOf(k, "p99"),
                   numOf(k, "p99_9"), numOf(k, "max"), numOf(k, "same_top_p", "value"),
                   numOf(k, "same_top_p", "stderr"), numOf(k, "rms_delta_p", "value"),
                   numOf(k, "rms_delta_p", "stderr"), numOf(k, "ppl_ratio", "value"), numOf(k, "ppl_ratio", "stderr")})
    row += "," + g(x);
  return row + "," + std::to_string(r.at("non_finite_positions").get<std::int64_t>());
}

// What the table's first line says of the run.
nlohmann::json runJson(const runtime::Session& m, const TextOpts& o, const std::vector<cache::CacheConfig>& cfgs,
                       std::size_t windows, std::size_t windowTokens, int prompt, int step) {
  nlohmann::json specs = nlohmann::json::array();
  for (const auto& c : cfgs) specs.push_back(cache::toSpec(c));
  return {
      {"model", m.path()}, {"text", o.text}, {"ctx", o.ctx},     {"windows", windows}, {"window_tokens", windowTokens},
      {"prompt", prompt},  {"step", step},   {"configs", specs}, {"run_as", m.runAs()}};
}

}  // namespace

// The rows (the reference first) as a table, JSON lines or CSV: what `eval` prints, and `merge` of its shards.
int printEval(const nlohmann::json& run, const std::vector<nlohmann::json>& rows, bool json, bool csv) {
  if (json) {
    for (const auto& r : rows) std::cout << r.dump() << "\n";
    return 0;
  }
  if (csv) {
    std::cout << kCsvHeader << "\n";
    for (const auto& r : rows) std::cout << csvRow(r) << "\n";
    return 0;
  }
  const nlohmann::json& ref = rows.at(0);
  std::cout << fmt::format(
      "{}: {} window(s) of {} tokens from {}; each window: {} prompt tokens, then steps of {}; "
      "{} scored tokens per config; KL(reference || config) and top-1 against the unquantized "
      "cache\n",
      run.at("model").get<std::string>(), run.at("windows").get<std::size_t>(),
      run.at("window_tokens").get<std::size_t>(), run.at("text").get<std::string>(), run.at("prompt").get<int>(),
      run.at("step").get<int>(), ref.at("scored_tokens").get<std::int64_t>());
  // Bits per value as stored, scales and unquantized layers included: the model dtype's bits over the KV ratio.
  const std::string dtype = run.contains("run_as") ? run["run_as"].value("dtype", std::string()) : std::string();
  const double dtypeBits = runtime::dtypeBits(dtype);
  std::cout << fmt::format("{:<58} {:>8} {:>9} {:>9} {:>10} {:>10} {:>10} {:>7} {:>7} {:>8}\n", "config", "KV ratio",
                           "bits/val", "ppl", "delta ppl", "mean KL", "max KL", "top-1", "NaN pos", "q reads");
  auto g = [](double x, const char* f) { return std::isnan(x) ? std::string("nan") : fmt::format(fmt::runtime(f), x); };
  const double refPpl = numOf(ref, "perplexity");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const nlohmann::json& r = rows[i];
    const double ratio = numOf(r, "compression_ratio");
    // Of the scored tokens, the share whose forward read states held quantized (older shards lack the figure).
    const std::string reads =
        i == 0 || !r.contains("quantized_reads")
            ? std::string("-")
            : fmt::format("{:.1f}%", 100.0 * r["quantized_reads"].get<double>() /
                                         std::max<double>(1.0, r.at("scored_tokens").get<double>()));
    std::cout << fmt::format(
        "{:<58} {:>7.2f}x {:>9} {:>9} {:>10} {:>10} {:>10} {:>7} {:>7} {:>8}\n", r.at("config").get<std::string>(),
        ratio, dtypeBits > 0 && ratio > 0 ? fmt::format("{:.2f}", dtypeBits / ratio) : std::string("-"),
        g(numOf(r, "perplexity"), "{:.3f}"), i == 0 ? "-" : g(numOf(r, "perplexity") - refPpl, "{:+.3f}"),
        i == 0 ? "-" : g(numOf(r, "mean_kl"), "{:.4g}"), i == 0 ? "-" : g(numOf(r, "max_kl"), "{:.4g}"),
        i == 0 ? "-" : fmt::format("{:.1f}%", 100.0 * numOf(r, "top1_agreement")),
        i == 0 ? "-" : std::to_string(r.at("non_finite_positions").get<std::int64_t>()), reads);
  }
  std::cout << "q reads: the scored tokens whose forward read states the config held quantized (a full-precision "
               "residual window or a prompt shorter than it reads none)\n";
  // llama-perplexity --kl-divergence's terms, on the same tokens.
  std::cout << fmt::format("\nKL divergence as llama-perplexity reports it (± standard error):\n");
  std::cout << fmt::format("{:<58} {:>19} {:>9} {:>9} {:>9} {:>9} {:>16} {:>16} {:>17}\n", "config", "mean KLD",
                           "median", "99%", "99.9%", "max", "same top p", "RMS Δp", "PPL(Q)/PPL(ref)");
  auto pm = [&](const Estimate& e, double scale, const char* f) {
    return std::isfinite(e.value) ? fmt::format(fmt::runtime(f), scale * e.value, scale * e.error) : std::string("nan");
  };
  for (std::size_t i = 1; i < rows.size(); ++i) {
    const nlohmann::json& k = rows[i].at("kld");
    std::cout << fmt::format("{:<58} {:>19} {:>9} {:>9} {:>9} {:>9} {:>16} {:>16} {:>17}\n",
                             rows[i].at("config").get<std::string>(), pm(estimateOf(k, "mean"), 1, "{:.6f} ± {:.6f}"),
                             g(numOf(k, "median"), "{:.5f}"), g(numOf(k, "p99"), "{:.5f}"),
                             g(numOf(k, "p99_9"), "{:.5f}"), g(numOf(k, "max"), "{:.5f}"),
                             pm(estimateOf(k, "same_top_p"), 100, "{:.2f} ± {:.2f}%"),
                             pm(estimateOf(k, "rms_delta_p"), 100, "{:.3f} ± {:.3f}%"),
                             pm(estimateOf(k, "ppl_ratio"), 1, "{:.5f} ± {:.5f}"));
  }
  return 0;
}

Runner addEval(CLI::App& app) {
  struct Opts : TextOpts {
    std::vector<std::string> specs;
    int prompt = 64, step = 16;
    bool json = false, csv = false;
    std::string shard, out;
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
  addShardOption(cmd, o->shard, "--out");
  cmd->add_option("--out", o->out, "with --shard: the shard file");
  return [o, cmd]() {
    if (!*cmd) return -1;
    std::vector<cache::CacheConfig> cfgs;
    for (const auto& s : o->specs) cfgs.push_back(cache::parseSpec(s));  // bad SPECs fail before the model loads
    if (o->prompt >= o->ctx)
      throw UsageError(fmt::format("--prompt {} leaves nothing to score in windows of --ctx {}", o->prompt, o->ctx));
    // Sharded: item 0 is the reference (shard 1 records it; every shard runs it for its KL), item c+1 config c.
    const std::optional<Shard> shard = shardOf(o->shard, o->out, "--out");
    if (shard) shard->check(cfgs.size(), "configs");
    if (shard) writeOutput(o->out, "");  // an unwritable --out fails before the model loads
    if (o->threads > 0) at::set_num_threads(o->threads);
    const runtime::Session m = openSession(o->model, o->how);
    const auto windows = windowsOf(m, *o);
    const std::size_t prompt = std::min<std::size_t>(static_cast<std::size_t>(o->prompt), windows[0].size() - 1);
    const nlohmann::json run =
        runJson(m, *o, cfgs, windows.size(), windows[0].size(), static_cast<int>(prompt), o->step);
    std::vector<cache::CacheConfig> mine;
    for (std::size_t c = 0; c < cfgs.size(); ++c)
      if (!shard || shard->owns(c + 1)) mine.push_back(cfgs[c]);
    const auto t0 = std::chrono::steady_clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    std::vector<std::string> names{"dynamic (reference)"};
    for (const auto& c : mine) names.push_back(cache::toSpec(c));
    generate::EvalOptions eo;
    eo.prompt = static_cast<int>(prompt);
    eo.step = o->step;
    const auto figs = generate::evaluate(m.model(), windows, mine, eo,
                                         [&](std::size_t wi, std::size_t nw, std::size_t ci, std::size_t nc) {
                                           std::cerr << fmt::format("eval: window {}/{}, config {}/{} {} ({:.0f} s)\n",
                                                                    wi + 1, nw, ci + 1, nc, names[ci], elapsed());
                                           return true;
                                         });
    std::cerr << fmt::format("eval: done in {:.0f} s\n", elapsed());
    std::vector<nlohmann::json> rows;
    for (std::size_t i = 0; i < figs.size(); ++i) rows.push_back(evalJson(figs[i], figs[0], i == 0));
    if (!shard) return printEval(run, rows, o->json, o->csv);
    ShardOut out(o->out, "eval", *shard, cfgs.size() + 1, run);
    std::size_t row = 1;
    if (shard->owns(0)) out.add(0, rows[0]);
    for (std::size_t c = 0; c < cfgs.size(); ++c)
      if (shard->owns(c + 1)) out.add(c + 1, rows[row++]);
    std::cerr << fmt::format(
        "eval: shard {} ({} of {} configs) written to {}; join the shards with kvscope-cli merge\n", shard->name(),
        mine.size(), cfgs.size(), o->out);
    return 0;
  };
}

}  // namespace kvscope::cli
