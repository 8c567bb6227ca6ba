// `tune`: the sensitivity tuner. A scan quantizes one layer side at a time with each candidate and measures the KL
// against the unquantized run on a text; the solve picks, per target, the cheapest assignment under a KL budget (or
// the lowest KL under a bytes budget) from the scan, and one full run of each pick checks the prediction.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cache/tune.h"
#include "cli/commands.h"
#include "cli/runtime.h"
#include "cli/text_windows.h"
#include "cli/tune_probes.h"
#include "generate/eval.h"

namespace kvscope::cli {

namespace {

using cache::Assignment;
using cache::Scan;
using cache::TuneTarget;
using nlohmann::json;

json num(double x) {
  return std::isfinite(x) ? json(x) : json(nullptr);
}

// How many layer sides an assignment quantizes, per candidate, as "12 K + 30 V of quanto:nbits=4".
std::string assignmentSummary(const Scan& scan, const Assignment& a) {
  std::vector<std::string> parts;
  for (std::size_t c = 0; c < scan.plan.candidates.size(); ++c) {
    int k = 0, v = 0;
    for (int x : a.keys) k += x == static_cast<int>(c);
    for (int x : a.values) v += x == static_cast<int>(c);
    if (k + v) parts.push_back(fmt::format("{} K + {} V {}", k, v, cache::toSpec(scan.plan.candidates[c])));
  }
  return parts.empty() ? "unquantized" : fmt::format("{}", fmt::join(parts, ", "));
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(fmt::format("cannot read scan file `{}`", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

Runner addTune(CLI::App& app) {
  struct Opts : TextOpts {
    std::vector<std::string> specs, targets;
    int prompt = 64, step = 16;
    std::optional<double> maxKl;
    std::optional<std::int64_t> maxBytes, context;
    std::string scanOut, scanIn, save, shard;
    bool noVerify = false, json = false;
    std::string method = "resume";
    std::optional<double> minAgreement, maxAnswerKl;
    ProbeObjective probes;
    std::string objective = "text";
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "tune",
      "Per-layer sensitivity: scan each layer's K and V with candidate configs, then the cheapest per-layer "
      "assignment under a KL or bytes budget for each target, checked by a full run");
  addTextOpts(cmd, *o, /*textRequired=*/false);  // --scan-in takes the text from the scan file
  cmd->add_option("--cache", o->specs, "a candidate SPEC (repeat for several): tried on each layer's K and V alone");
  cmd->add_option("--prompt", o->prompt, "tokens of each window given as the prompt")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--step", o->step, "tokens per forward after the prompt")->check(CLI::Range(1, 1 << 20));
  auto* kl = cmd->add_option("--max-kl", o->maxKl, "budget: the fewest KV bytes whose mean KL stays within this")
                 ->check(CLI::NonNegativeNumber);
  auto* bytes =
      cmd->add_option("--max-bytes", o->maxBytes, "budget: the lowest mean KL whose stored KV bytes stay within this")
          ->check(CLI::PositiveNumber)
          ->excludes(kl);
  // The probe objective (cli/tune_probes.h): long-context agreement instead of the text's mean KL.
  cmd->add_option("--min-agreement", o->minAgreement,
                  "budget (the probe objective): the fewest KV bytes whose long-context probes "
                  "(kvscope-cli probe) give the unquantized cache's answer on at least this share "
                  "(0-1) of them; each front is halved, about log2 of its points probed")
      ->check(CLI::Range(0.0, 1.0))
      ->excludes(kl)
      ->excludes(bytes);
  cmd->add_option("--objective", o->objective,
                  "text (the default): budgets on the text's mean KL or the bytes; probes: the long-context probes' "
                  "agreement (--min-agreement, 1 unless given)")
      ->check(CLI::IsMember({"text", "probes"}))
      ->excludes(kl)
      ->excludes(bytes);
  cmd->add_option("--max-answer-kl", o->maxAnswerKl,
                  "with --min-agreement: also the probes' mean KL over the answer tokens within this")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--probe-tasks", o->probes.tasks, "the probes objective: its tasks");
  cmd->add_option("--probe-lengths", o->probes.lengths, "the probes objective: its lengths");
  cmd->add_option("--probe-depths", o->probes.depths, "the probes objective: its needles' depths (%)");
  cmd->add_option("--target", o->targets,
                  "kvscope (per layer and side), llamacpp (one K and one V type), vllm (one dtype, skipped layers), "
                  "transformers (one config), modelopt (one FP8 or NVFP4 config: Model-Optimizer's checkpoint "
                  "metadata); repeat for several (default: all)");
  auto* out = cmd->add_option("--scan-out", o->scanOut, "write the scan (JSON) here, to solve again with --scan-in");
  cmd->add_option("--scan-in", o->scanIn, "solve from a scan file instead of scanning (its model, text and windows)")
      ->excludes(out);
  addShardOption(cmd, o->shard, "--scan-out");
  cmd->add_flag("--no-verify", o->noVerify, "skip the full run of each pick");
  cmd->add_option("--scan-method", o->method,
                  "resume (the default): each scan run starts at its layer from the unquantized run; full: each from "
                  "the first layer, as eval runs a config (slower, the same figures: to check resume)")
      ->check(CLI::IsMember({"resume", "full"}));
  cmd->add_option("--save", o->save, "write the kvscope target's pick as a kvscope config file");
  cmd->add_flag("--json", o->json, "one JSON object: the scan's per-layer KLs, each target's front and pick");
  cmd->add_option("--context", o->context,
                  "price the KV bytes at this many tokens of one sequence: each layer holds them all, a "
                  "sliding-window layer at most its window (default: as the scan's windows held them, --ctx tokens)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  return [o, cmd]() {
    if (!*cmd) return -1;
    std::vector<TuneTarget> targets;
    for (const auto& t : o->targets) targets.push_back(cache::parseTarget(t));
    if (targets.empty()) targets = cache::allTargets();
    if (!o->save.empty() && std::find(targets.begin(), targets.end(), TuneTarget::Kvscope) == targets.end())
      throw UsageError("--save writes the kvscope target's pick: add --target kvscope");
    if (o->objective == "probes" && !o->minAgreement) o->minAgreement = 1.0;
    if (o->objective == "text" && cmd->count("--objective") && o->minAgreement)
      throw UsageError("--min-agreement is the probes objective's budget: drop --objective text");
    for (const char* opt : {"--max-answer-kl", "--probe-tasks", "--probe-lengths", "--probe-depths"})
      if (cmd->count(opt) && !o->minAgreement)
        throw UsageError(fmt::format("{} belongs to the probes objective: add --objective probes", opt));
    const bool budgeted = o->maxKl || o->maxBytes || o->minAgreement;
    if (!o->save.empty() && !budgeted)
      throw UsageError("--save needs a budget (--max-kl, --max-bytes or --min-agreement) to pick a config");

    const std::optional<Shard> shard = shardOf(o->shard, o->scanOut, "--scan-out");
    if (shard)
      for (const char* opt :
           {"--scan-in", "--max-kl", "--max-bytes", "--min-agreement", "--save", "--json", "--target"})
        if (cmd->count(opt))
          throw UsageError(
              fmt::format("tune --shard runs part of a scan only: drop {} (solve the merged scan with "
                          "tune --scan-in)",
                          opt));
    // What the scan runs on: the command line, or the scan file's settings.
    Scan scan;
    json settings;
    if (!o->scanIn.empty()) {
      for (const char* opt : {"--text", "--model", "--ctx", "--windows", "--prompt", "--step", "--cache"})
        if (cmd->count(opt))
          throw UsageError(
              fmt::format("tune --scan-in takes the model, text, windows and candidates from the scan "
                          "file: drop {}",
                          opt));
      std::string s;
      scan = cache::scanFromJson(readFile(o->scanIn), o->scanIn, &s);
      settings = json::parse(s);
      o->model = settings.value("model", "");
      o->text = settings.value("text", "");
      o->ctx = settings.value("ctx", 512);
      o->windows = settings.value("windows", 0);
      o->prompt = settings.value("prompt", 64);
      o->step = settings.value("step", 16);
    } else {
      if (o->text.empty()) throw UsageError("tune needs --text (or --scan-in with a scan file)");
      if (o->specs.empty()) throw UsageError("tune needs at least one candidate --cache SPEC");
    }
    std::vector<cache::CacheConfig> cands;
    for (const auto& s : o->specs) cands.push_back(cache::parseSpec(s));  // bad SPECs fail before the model loads
    if (!cands.empty()) cache::planScan(cands, 1);                        // and so do bad candidates
    if (o->prompt >= o->ctx)
      throw UsageError(fmt::format("--prompt {} leaves nothing to score in windows of --ctx {}", o->prompt, o->ctx));
    const bool verify = !o->noVerify && budgeted;
    if (o->minAgreement) (void)o->probes.suite();  // bad probe axes fail before the model loads
    if (o->threads > 0) at::set_num_threads(o->threads);

    std::optional<runtime::Session> m;
    std::optional<generate::ScanArithmetic> arithmetic;  // the scan and its checks in float32 (after m: ends first)
    std::vector<std::vector<std::int64_t>> windows;
    generate::EvalOptions eo;
    auto load = [&] {
      m.emplace(openSession(o->model, o->how));
      arithmetic.emplace(m->model());
      if (arithmetic->switched())
        std::cerr << "tune: the scan and the picks' full runs compute in float32 activations (transformers' "
                     "arithmetic), not this model's 8-bit ones: on 8-bit activations any change to one layer's "
                     "cache re-rounds every layer above it, a KL of its own that would hide the layer's cost "
                     "(`kvscope-cli eval` measures a pick on them)\n";
      if (arithmetic->floatCopyBytes() > 0)
        std::cerr << fmt::format(
            "tune: the scan holds a float32 copy of the weights, {:.0f} MiB while it runs (the "
            "same values, without dequantizing them for every product)\n",
            static_cast<double>(arithmetic->floatCopyBytes()) / (1 << 20));
      windows = windowsOf(*m, *o);
      eo.prompt = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(o->prompt), windows[0].size() - 1));
      eo.step = o->step;
    };
    const auto t0 = std::chrono::steady_clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    if (o->scanIn.empty()) {
      if (shard) writeOutput(o->scanOut, "");  // an unwritable file fails before the model loads
      load();
      scan.plan = cache::planScan(cands, m->model().config().layers);
      // Sharded: item 0 is the unquantized run (every shard runs it: the KLs are against it), item k+1 point k.
      if (shard) shard->check(scan.plan.items.size(), "scan runs");
      std::vector<generate::LayerRun> runs;
      std::vector<std::size_t> mine;
      for (std::size_t k = 0; k < scan.plan.items.size(); ++k)
        if (!shard || shard->owns(k + 1)) {
          runs.push_back({scan.plan.items[k].layer, scan.plan.config(scan.plan.items[k])});
          mine.push_back(k);
        }
      const auto figs = generate::evaluateLayerRuns(
          m->model(), windows, runs, eo,
          [&](std::size_t wi, std::size_t nw, std::size_t ci, std::size_t nc) {
            if (ci == 0 || ci % 10 == 0 || ci + 1 == nc)
              std::cerr << fmt::format("tune: scan window {}/{}, run {}/{} ({:.0f} s)\n", wi + 1, nw, ci + 1, nc,
                                       elapsed());
            return true;
          },
          {}, o->method == "full" ? generate::ScanMethod::Full : generate::ScanMethod::Resume);
      scan.referenceBytes = figs[0].memory.stored();
      for (std::size_t i = 0; i < mine.size(); ++i)
        scan.points.push_back({scan.plan.items[mine[i]], figs[i + 1].meanKl(), figs[i + 1].memory.stored()});
      settings = {{"model", m->path()},
                  {"text", o->text},
                  {"ctx", o->ctx},
                  {"windows", o->windows},
                  {"prompt", o->prompt},
                  {"step", o->step},
                  {"dtype", m->runAs().at("dtype")},
                  {"activations", m->runAs().at("activations")}};
      std::cerr << fmt::format("tune: scan of {} runs done in {:.0f} s\n", runs.size(), elapsed());
      if (shard) {
        // The run every shard shares: the settings and the candidates as the scan file writes them.
        const json whole = json::parse(cache::scanToJson(scan, settings.dump()));
        const json run = {{"settings", settings},
                          {"candidates", whole.at("candidates")},
                          {"num_layers", scan.plan.numLayers},
                          {"run_as", m->runAs()}};
        ShardOut out(o->scanOut, "tune", *shard, scan.plan.items.size() + 1, run);
        if (shard->owns(0)) out.add(0, {{"stored_bytes", scan.referenceBytes}, {"scored_tokens", figs[0].scored}});
        for (std::size_t i = 0; i < mine.size(); ++i)
          out.add(mine[i] + 1, {{"mean_kl", num(scan.points[i].meanKl)}, {"stored_bytes", scan.points[i].storedBytes}});
        std::cerr << fmt::format(
            "tune: shard {} ({} of {} scan runs) written to {}; join the shards with "
            "kvscope-cli merge, then solve with tune --scan-in\n",
            shard->name(), mine.size(), scan.plan.items.size(), o->scanOut);
        return 0;
      }
      settings["scored_tokens"] = figs[0].scored;
      if (!o->scanOut.empty()) writeOutput(o->scanOut, cache::scanToJson(scan, settings.dump()) + "\n");
    }

    // Fronts and picks.
    std::optional<cache::SweepBudget> budget;
    if (o->maxKl) budget = cache::SweepBudget{cache::SweepBudget::Kind::MaxMeanKl, *o->maxKl};
    if (o->maxBytes)
      budget = cache::SweepBudget{cache::SweepBudget::Kind::MaxStoredBytes, static_cast<double>(*o->maxBytes)};
    struct Result {
      TuneTarget target;
      std::vector<Assignment> front;
      std::optional<Assignment> pick;
      cache::CacheConfig config;
      std::optional<generate::EvalFigures> measured;
    };
    std::vector<Result> results;
    // The model's sliding windows: for the engines' rules on those layers in the exports (unknown when the scan
    // file's model is no longer there), and for the pricing at --context, which needs them.
    cache::LayerWindows modelWindows;
    std::vector<double> modelValues;
    try {
      modelWindows = layerWindows(settings.value("model", std::string()));
      modelValues = layerValues(settings.value("model", std::string()));
    } catch (const std::exception& e) {
      if (o->context)
        throw UsageError(
            fmt::format("--context prices each layer by its window: the model's layers could not be "
                        "read ({})",
                        e.what()));
    }
    if (o->context)
      scan = cache::pricedAt(scan,
                             {settings.value("ctx", std::int64_t{0}), settings.value("prompt", std::int64_t{0}),
                              settings.value("step", std::int64_t{1})},
                             *o->context, modelWindows, modelValues);
    std::optional<ProbeJudge> judge;
    if (o->minAgreement) {
      if (!m) load();
      o->probes.minAgreement = *o->minAgreement;
      o->probes.maxAnswerKl = o->maxAnswerKl;
      judge.emplace(*m, o->probes);
    }
    for (TuneTarget t : targets) {
      Result r{t, cache::paretoFront(scan, t), std::nullopt, {}, std::nullopt};
      if (budget) r.pick = cache::solve(r.front, *budget);
      if (judge)
        r.pick = pickByProbes(
            r.front, [&](const Assignment& a) { return cache::assignmentConfig(scan, a); }, *judge);
      if (r.pick) r.config = cache::assignmentConfig(scan, *r.pick);
      results.push_back(std::move(r));
    }
    // One full run of each pick (one reference run for all of them).
    std::optional<generate::EvalFigures> reference;
    if (verify) {
      std::vector<cache::CacheConfig> picks;
      std::vector<std::size_t> who;
      for (std::size_t i = 0; i < results.size(); ++i)
        if (results[i].pick && !(results[i].config == cache::CacheConfig{})) {
          picks.push_back(results[i].config);
          who.push_back(i);
        }
      if (!picks.empty()) {
        if (!m) load();
        const auto figs = generate::evaluate(
            m->model(), windows, picks, eo, [&](std::size_t wi, std::size_t nw, std::size_t ci, std::size_t nc) {
              std::cerr << fmt::format("tune: check window {}/{}, run {}/{}\n", wi + 1, nw, ci + 1, nc);
              return true;
            });
        reference = figs[0];
        for (std::size_t i = 0; i < who.size(); ++i) results[who[i]].measured = figs[i + 1];
      }
    }
    if (!o->save.empty())
      for (const Result& r : results)
        if (r.target == TuneTarget::Kvscope) {
          if (!r.pick) throw UsageError("no kvscope assignment meets the budget: nothing to --save");
          writeOutput(o->save, cache::toKvscopeJson(r.config) + "\n");
        }

    const double ref = static_cast<double>(scan.referenceBytes);
    // Effective bits per value of an assignment: the reference cache's (the model dtype's) times its share of the
    // reference's bytes; unknown ("-", null) for a scan file that does not say its dtype.
    const std::string dtype = settings.value("dtype", std::string());
    const double refBits = runtime::dtypeBits(dtype);
    const auto bitsOf = [&](std::int64_t bytes) { return refBits * static_cast<double>(bytes) / ref; };
    const auto bitsText = [&](std::int64_t bytes) {
      return refBits > 0 && ref > 0 ? fmt::format("{:.2f}", bitsOf(bytes)) : std::string("-");
    };
    if (o->json) {
      json doc = {{"settings", settings}, {"reference_bytes", scan.referenceBytes}};
      if (o->context) doc["priced_at_context"] = *o->context;
      json cj = json::array();
      for (const auto& c : scan.plan.candidates) cj.push_back(cache::toSpec(c));
      doc["candidates"] = cj;
      json layers = json::array();
      for (int l = 0; l < scan.plan.numLayers; ++l) {
        json k = json::array(), v = json::array();
        for (std::size_t c = 0; c < scan.plan.candidates.size(); ++c) {
          k.push_back(num(scan.at(l, cache::KvSide::Keys, c).meanKl));
          v.push_back(num(scan.at(l, cache::KvSide::Values, c).meanKl));
        }
        layers.push_back({{"layer", l}, {"keys_kl", k}, {"values_kl", v}});
      }
      doc["scan"] = layers;
      json tj = json::array();
      for (const Result& r : results) {
        json front = json::array();
        for (const Assignment& a : r.front)
          front.push_back({{"stored_bytes", a.storedBytes},
                           {"bits_per_value", refBits > 0 && ref > 0 ? json(bitsOf(a.storedBytes)) : json(nullptr)},
                           {"predicted_kl", num(a.predictedKl)},
                           {"keys", a.keys},
                           {"values", a.values}});
        json t = {{"target", std::string(cache::targetName(r.target))}, {"front", front}};
        if (r.pick) {
          const cache::TargetExport e = cache::exportFor(r.target, r.config, modelWindows);
          t["pick"] = {{"config", cache::toSpec(r.config)},
                       {"stored_bytes", r.pick->storedBytes},
                       {"predicted_kl", num(r.pick->predictedKl)},
                       {"export", e.text},
                       {"notes", e.notes}};
          if (r.measured)
            t["pick"]["measured"] = {{"mean_kl", num(r.measured->meanKl())},
                                     {"stored_bytes", r.measured->memory.stored()},
                                     {"top1_agreement", r.measured->top1()}};
        } else {
          t["pick"] = nullptr;
        }
        tj.push_back(std::move(t));
      }
      doc["targets"] = tj;
      std::cout << doc.dump() << "\n";
      return 0;
    }

    std::cout << fmt::format(
        "{}: {} scored tokens per run ({} from {}, ctx {}, prompt {}, step {}); unquantized KV "
        "{} bytes\n",
        settings.value("model", std::string("?")), settings.value("scored_tokens", 0),
        settings.value("windows", 0) ? fmt::format("{} window(s)", settings.value("windows", 0))
                                     : std::string("every window"),
        settings.value("text", std::string("?")), settings.value("ctx", 0), settings.value("prompt", 0),
        settings.value("step", 0), scan.referenceBytes);
    if (settings.contains("activations"))
      std::cout << fmt::format("activations: {} (the scan's arithmetic)\n", settings.value("activations", ""));
    if (o->context) {
      int sliding = 0;
      for (const std::int64_t w : modelWindows) sliding += w > 0;
      std::cout << fmt::format(
          "KV bytes priced at {} tokens of context{} (the full runs' bytes: as measured, at ctx {})\n", *o->context,
          sliding > 0 ? fmt::format(", each of the {} sliding-window layers at most its window", sliding)
                      : std::string(),
          settings.value("ctx", 0));
    }
    std::cout << "\nMean KL with one layer side quantized (the rest unquantized):\n";
    std::string head = fmt::format("{:>5}", "layer");
    for (std::size_t c = 0; c < scan.plan.candidates.size(); ++c)
      head += fmt::format(" {:>11} {:>11}", fmt::format("K c{}", c), fmt::format("V c{}", c));
    std::cout << head << "\n";
    for (int l = 0; l < scan.plan.numLayers; ++l) {
      std::string row = fmt::format("{:>5}", l);
      for (std::size_t c = 0; c < scan.plan.candidates.size(); ++c)
        row += fmt::format(" {:>11.4g} {:>11.4g}", scan.at(l, cache::KvSide::Keys, c).meanKl,
                           scan.at(l, cache::KvSide::Values, c).meanKl);
      std::cout << row << "\n";
    }
    for (std::size_t c = 0; c < scan.plan.candidates.size(); ++c)
      std::cout << fmt::format("  c{} = {}\n", c, cache::toSpec(scan.plan.candidates[c]));

    for (const Result& r : results) {
      std::cout << fmt::format("\nTarget {}: {} point(s) on the front of KV bytes against predicted mean KL\n",
                               cache::targetName(r.target), r.front.size());
      // A long front is shown at up to 12 points, evenly spaced, the ends kept.
      const std::size_t n = r.front.size(), shown = std::min<std::size_t>(n, 12);
      std::cout << fmt::format("  {:>12} {:>8} {:>8} {:>12}  {}\n", "KV bytes", "ratio", "bits/val", "pred. KL",
                               "assignment");
      for (std::size_t i = 0; i < shown; ++i) {
        const Assignment& a = r.front[shown == 1 ? 0 : i * (n - 1) / (shown - 1)];
        std::cout << fmt::format("  {:>12} {:>7.2f}x {:>8} {:>12.4g}  {}\n", a.storedBytes,
                                 ref / static_cast<double>(a.storedBytes), bitsText(a.storedBytes), a.predictedKl,
                                 assignmentSummary(scan, a));
      }
      if (!budgeted) continue;
      if (!r.pick) {
        std::cout << "  no assignment meets the budget\n";
        continue;
      }
      const cache::TargetExport e = cache::exportFor(r.target, r.config, modelWindows);
      std::cout << fmt::format("  pick: {} bytes ({:.2f}x, {} bits/value), predicted mean KL {:.4g}: {}\n",
                               r.pick->storedBytes, ref / static_cast<double>(r.pick->storedBytes),
                               bitsText(r.pick->storedBytes), r.pick->predictedKl, assignmentSummary(scan, *r.pick));
      if (judge) {
        const ProbeJudge::Verdict& v = judge->judge(r.config);
        std::cout << fmt::format("  probes: {} of {} answers the unquantized cache's ({:.0f}%), answer KL {:.4g}\n",
                                 v.same, v.probes, 100.0 * v.agreement(), v.meanAnswerKl);
      }
      if (r.measured) {
        std::cout << fmt::format("  full run: {} bytes ({:.2f}x), mean KL {:.4g}, top-1 {:.1f}%\n",
                                 r.measured->memory.stored(), r.measured->ratio(), r.measured->meanKl(),
                                 100.0 * r.measured->top1());
        // The layers' KLs do not add up exactly: say so when the full run lands past the budget.
        if (o->maxKl && r.measured->meanKl() > *o->maxKl)
          std::cout << fmt::format(
              "  note: the full run's mean KL is {:.1f}% past --max-kl {:g} (the layers' KLs "
              "do not add up exactly); a lower --max-kl leaves a margin\n",
              100.0 * (r.measured->meanKl() / *o->maxKl - 1.0), *o->maxKl);
      }
      std::cout << fmt::format("  config: {}\n  {}: {}\n", cache::toSpec(r.config), cache::targetName(r.target),
                               r.target == TuneTarget::Kvscope ? "--cache '" + e.text + "'" : e.text);
      for (const auto& note : e.notes) std::cout << "    note: " << note << "\n";
    }
    if (!budgeted) {
      std::cout << "\nGive --max-kl, --max-bytes or --min-agreement to pick an assignment from each front.\n";
      return 0;
    }
    // The picks side by side, against the best uniform config (one candidate, or none, for every layer and side).
    const auto transformersFront = cache::paretoFront(scan, TuneTarget::Transformers);
    const auto uniform =
        budget ? cache::solve(transformersFront, *budget)
               : pickByProbes(
                     transformersFront, [&](const Assignment& a) { return cache::assignmentConfig(scan, a); }, *judge);
    const std::string under =
        o->maxKl      ? fmt::format("mean KL <= {:g}", *o->maxKl)
        : o->maxBytes ? fmt::format("{} KV bytes", *o->maxBytes)
                      : fmt::format("probe agreement >= {:g}%{}", 100.0 * *o->minAgreement,
                                    o->maxAnswerKl ? fmt::format(", answer KL <= {:g}", *o->maxAnswerKl) : "");
    std::cout << fmt::format("\nPicks under {} (predicted: the scan's KLs summed; measured: the full run):\n", under);
    std::cout << fmt::format("  {:<13} {:>12} {:>8} {:>8} {:>12} {:>12} {:>18}\n", "target", "KV bytes", "ratio",
                             "bits/val", "pred. KL", "measured KL", "vs best uniform");
    for (const Result& r : results) {
      if (!r.pick) {
        std::cout << fmt::format("  {:<13} none meets the budget\n", cache::targetName(r.target));
        continue;
      }
      const std::string vs =
          uniform ? fmt::format("{:+.1f}% bytes", 100.0 * (static_cast<double>(r.pick->storedBytes) /
                                                               static_cast<double>(uniform->storedBytes) -
                                                           1.0))
                  : std::string("-");
      std::cout << fmt::format("  {:<13} {:>12} {:>7.2f}x {:>8} {:>12.4g} {:>12} {:>18}\n", cache::targetName(r.target),
                               r.pick->storedBytes, ref / static_cast<double>(r.pick->storedBytes),
                               bitsText(r.pick->storedBytes), r.pick->predictedKl,
                               r.measured ? fmt::format("{:.4g}", r.measured->meanKl())
                                          : std::string(r.config == cache::CacheConfig{} ? "0" : "-"),
                               vs);
    }
    return 0;
  };
}

std::string mergedScan(const ShardSet& set) {
  const json& run = set.run;
  Scan scan;
  json settings;
  try {
    std::vector<cache::CacheConfig> cands;
    for (const json& c : run.at("candidates"))
      cands.push_back(c.is_string() ? cache::parseSpec(c.get<std::string>())
                                    : cache::configFromJson(c.dump(), fmt::format("candidate {}", cands.size())));
    scan.plan = cache::planScan(cands, run.at("num_layers").get<int>());
    if (set.records.size() != scan.plan.items.size() + 1)
      throw UsageError(fmt::format("the tune shards hold {} items for a scan of {} runs", set.records.size(),
                                   scan.plan.items.size() + 1));
    settings = run.at("settings");
    settings["scored_tokens"] = set.records[0].at("scored_tokens");
    scan.referenceBytes = set.records[0].at("stored_bytes").get<std::int64_t>();
    for (std::size_t k = 0; k < scan.plan.items.size(); ++k) {
      const json& r = set.records[k + 1];
      scan.points.push_back({scan.plan.items[k],
                             r.at("mean_kl").is_null() ? std::nan("") : r.at("mean_kl").get<double>(),
                             r.at("stored_bytes").get<std::int64_t>()});
    }
  } catch (const json::exception& e) {
    throw UsageError(fmt::format("the tune shards' records are not a scan's ({})", e.what()));
  }
  return cache::scanToJson(scan, settings.dump()) + "\n";
}

}  // namespace kvscope::cli
