// `probe`: long-context probes (passkey, RULER's needles among confusable keys, variable tracking, common and frequent
// words, a JSON tool call) at lengths up to the model's context and needle depths, each answered greedily through the
// unquantized cache and each config: agreement with the unquantized answer, accuracy where that answer is right, the
// KL over the answer tokens, and how many answer tokens read quantized states.
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <set>

#include "cli/commands.h"
#include "cli/runtime.h"
#include "generate/probe.h"
#include "probe/suite.h"
#include "util/metrics.h"

namespace kvscope::cli {

namespace {

const auto num = jsonNumber;
const auto numOf = jsonNumberOf;

// The default lengths: 1k, 2k, 4k, ... up to the model's trained context.
std::vector<std::int64_t> defaultLengths(std::int64_t ctx) {
  std::vector<std::int64_t> l;
  for (std::int64_t n = 1024; n <= std::max<std::int64_t>(ctx, 1024); n *= 2) l.push_back(n);
  return l;
}

nlohmann::json answerJson(const std::string& spec, bool reference, const generate::ProbeAnswer& a, double score) {
  nlohmann::json j = {{"config", spec}, {"reference", reference},           {"text", a.text},
                      {"score", score}, {"answer_tokens", a.tokens.size()}, {"seconds", a.seconds}};
  if (reference) return j;
  nlohmann::json kl = nlohmann::json::array();
  for (double x : a.kl) kl.push_back(num(x));
  j["same_answer"] = a.sameAnswer();
  j["first_divergence"] = a.firstDivergence;
  j["kl"] = std::move(kl);
  j["quantized_reads"] = a.quantizedReads;
  j["overflow"] = a.overflow.overflow;
  j["non_finite"] = a.overflow.nonFinite;
  return j;
}

// One config's figures over the probes (records' results at index `c`).
struct ConfigSummary {
  std::string spec;
  int probes = 0, same = 0, refRight = 0, bothRight = 0;
  double score = 0;
  std::vector<double> kls;  // every finite answer-position KL
  std::int64_t nonFiniteKl = 0, reads = 0, answerTokens = 0;
  double seconds = 0;
};

std::vector<ConfigSummary> summarize(const std::vector<nlohmann::json>& records) {
  std::vector<ConfigSummary> s;
  for (const nlohmann::json& r : records) {
    const nlohmann::json& res = r.at("results");
    if (s.empty()) s.resize(res.size());
    const bool refRight = res.at(0).at("score").get<double>() >= 1.0;
    for (std::size_t c = 0; c < res.size() && c < s.size(); ++c) {
      const nlohmann::json& a = res[c];
      ConfigSummary& cs = s[c];
      cs.spec = a.at("config").get<std::string>();
      ++cs.probes;
      cs.score += a.at("score").get<double>();
      cs.seconds += numOf(a, "seconds");
      cs.answerTokens += a.at("answer_tokens").get<std::int64_t>();
      if (c == 0) {
        cs.same += 1;
        cs.refRight += refRight;
        cs.bothRight += refRight;
        continue;
      }
      cs.same += a.at("same_answer").get<bool>() ? 1 : 0;
      cs.refRight += refRight;
      cs.bothRight += refRight && a.at("score").get<double>() >= 1.0;
      cs.reads += a.at("quantized_reads").get<std::int64_t>();
      for (const auto& k : a.at("kl")) {
        if (k.is_number() && std::isfinite(k.get<double>()))
          cs.kls.push_back(k.get<double>());
        else
          ++cs.nonFiniteKl;
      }
    }
  }
  for (auto& cs : s) std::sort(cs.kls.begin(), cs.kls.end());
  return s;
}

std::string pct(int num, int den) {
  return den > 0 ? fmt::format("{:.0f}%", 100.0 * num / den) : std::string("-");
}

const char* kCsvHeader =
    "probe,task,length,depth,sample,prompt_tokens,config,reference,score,same_answer,first_divergence,mean_kl,"
    "max_kl,quantized_reads,answer_tokens,non_finite,answer";

std::string quoted(std::string s) {
  for (std::size_t i = 0; (i = s.find('"', i)) != std::string::npos; i += 2) s.insert(i, "\"");
  return "\"" + s + "\"";
}

}  // namespace

// The records (one per probe, the reference's answer first in each) as a table, JSON lines or CSV: what `probe`
// prints, and `merge` of its shards.
int printProbe(const nlohmann::json& run, const std::vector<nlohmann::json>& records, bool json, bool csv) {
  if (json) {
    std::cout << nlohmann::json{{"run", run}}.dump() << "\n";
    for (const auto& r : records) std::cout << r.dump() << "\n";
    return 0;
  }
  if (csv) {
    std::cout << kCsvHeader << "\n";
    for (const auto& r : records)
      for (const auto& a : r.at("results")) {
        const bool ref = a.at("reference").get<bool>();
        double sum = 0, mx = 0;
        int n = 0;
        if (!ref)
          for (const auto& k : a.at("kl")) {
            const double x = k.is_number() ? k.get<double>() : std::nan("");
            sum += x, mx = std::isnan(x) || std::isnan(mx) ? std::nan("") : std::max(mx, x), ++n;
          }
        auto g = [](double x) { return std::isfinite(x) ? fmt::format("{:.9g}", x) : std::string(); };
        std::cout << fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
                                 r.at("probe").get<std::string>(), r.at("task").get<std::string>(),
                                 r.at("length").get<std::int64_t>(), r.at("depth").get<int>(),
                                 r.at("sample").get<int>(), r.at("prompt_tokens").get<std::int64_t>(),
                                 quoted(a.at("config").get<std::string>()), ref ? 1 : 0, g(a.at("score").get<double>()),
                                 ref ? "" : (a.at("same_answer").get<bool>() ? "1" : "0"),
                                 ref ? std::string() : std::to_string(a.at("first_divergence").get<int>()),
                                 ref || n == 0 ? std::string() : g(sum / n), ref || n == 0 ? std::string() : g(mx),
                                 ref ? std::string() : std::to_string(a.at("quantized_reads").get<std::int64_t>()),
                                 a.at("answer_tokens").get<std::int64_t>(),
                                 ref ? std::string() : std::to_string(a.at("non_finite").get<std::int64_t>()),
                                 quoted(a.at("text").get<std::string>()));
      }
    return 0;
  }
  const std::vector<ConfigSummary> s = summarize(records);
  if (s.empty()) {
    std::cout << "no probes\n";
    return 0;
  }
  std::cout << fmt::format(
      "{}: {} probes ({}), greedy answers through the unquantized cache and each config; seed {}\n",
      run.at("model").get<std::string>(), records.size(),
      fmt::join(run.at("tasks").get<std::vector<std::string>>(), ", "), run.at("seed").get<std::uint64_t>());
  std::cout << fmt::format("{:<52} {:>7} {:>13} {:>7} {:>10} {:>10} {:>8} {:>8}\n", "config", "agree", "right|ref ok",
                           "score", "mean KL", "KL 99.9%", "q reads", "seconds");
  for (std::size_t c = 0; c < s.size(); ++c) {
    const ConfigSummary& cs = s[c];
    const double meanKl =
        cs.kls.empty() ? std::nan("") : std::accumulate(cs.kls.begin(), cs.kls.end(), 0.0) / double(cs.kls.size());
    auto g = [](double x) { return std::isnan(x) ? std::string("-") : fmt::format("{:.4g}", x); };
    std::cout << fmt::format(
        "{:<52} {:>7} {:>13} {:>7.1f} {:>10} {:>10} {:>8} {:>8.0f}\n", cs.spec, c == 0 ? "-" : pct(cs.same, cs.probes),
        c == 0 ? fmt::format("{} of {}", cs.refRight, cs.probes) : fmt::format("{} of {}", cs.bothRight, cs.refRight),
        100.0 * cs.score / std::max(cs.probes, 1), c == 0 ? "-" : g(meanKl),
        c == 0 ? "-" : g(cs.kls.empty() ? std::nan("") : percentileOf(cs.kls, 0.999)),
        c == 0 ? std::string("-")
               : fmt::format("{:.0f}%", 100.0 * double(cs.reads) / double(std::max<std::int64_t>(cs.answerTokens, 1))),
        cs.seconds);
  }
  std::cout << "agree: probes whose greedy answer is the unquantized cache's, token for token; right|ref ok: probes "
               "answered right where the unquantized answer is right; score: RULER's string_match_all; KL over the "
               "answer positions reached from the reference's tokens; q reads: answer tokens that read states held "
               "quantized\n";
  // Agreement by length and depth, per config: the map the Long context page draws.
  std::set<std::int64_t> lengths;
  std::set<int> depths;
  for (const auto& r : records) {
    lengths.insert(r.at("length").get<std::int64_t>());
    depths.insert(r.at("depth").get<int>());
  }
  for (std::size_t c = 1; c < s.size(); ++c) {
    std::cout << fmt::format("\nagreement of {} by depth (rows) and length (columns):\n{:>8}", s[c].spec, "");
    for (std::int64_t l : lengths) std::cout << fmt::format(" {:>7}", l);
    std::cout << "\n";
    for (int d : depths) {
      std::cout << fmt::format("{:>8}", d < 0 ? std::string("no depth") : fmt::format("{}%", d));
      for (std::int64_t l : lengths) {
        int n = 0, same = 0;
        for (const auto& r : records)
          if (r.at("length").get<std::int64_t>() == l && r.at("depth").get<int>() == d) {
            ++n;
            same += r.at("results").at(c).at("same_answer").get<bool>() ? 1 : 0;
          }
        std::cout << fmt::format(" {:>7}", pct(same, n));
      }
      std::cout << "\n";
    }
  }
  return 0;
}

Runner addProbe(CLI::App& app) {
  struct Opts {
    std::string model, tasks, lengths, depths = "0,50,100", shard, out;
    ModelChoice how;
    std::vector<std::string> specs;
    int samples = 1, threads = 0;
    std::uint64_t seed = 0;
    bool json = false, csv = false, beyond = false, chat = false, list = false;
  };
  auto o = std::make_shared<Opts>();
  std::string taskList;
  for (const probe::TaskInfo& t : probe::tasks())
    taskList += fmt::format("\n  {:<16} {} ({})", t.name, t.what, t.origin);
  CLI::App* cmd = app.add_subcommand(
      "probe",
      "Long-context probes per cache config: passkey, needles among confusable keys, variable tracking, "
      "aggregation, a JSON tool call; agreement with the unquantized cache by length and depth");
  cmd->footer("Tasks:" + taskList);
  cmd->add_option("--model", o->model, "GGUF file or Hugging Face directory (default: the embedded SmolLM2)");
  cmd->add_option("--cache", o->specs, "cache SPEC (repeat for several)")->required();
  cmd->add_option("--tasks", o->tasks, "comma-separated tasks (default: all; see below)");
  cmd->add_option("--lengths", o->lengths,
                  "comma-separated token lengths, e.g. 1k,2k,4k (default: 1k doubling up to the model's context)");
  cmd->add_option("--depths", o->depths, "comma-separated needle depths in percent of the context")
      ->capture_default_str();
  cmd->add_option("--samples", o->samples, "probes per task, length and depth")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "the suite's seed (same seed, same text byte for byte)")->capture_default_str();
  cmd->add_flag("--beyond-context", o->beyond, "allow lengths past the model's trained context");
  cmd->add_flag("--chat", o->chat, "wrap each probe in the model's chat template (user turn)");
  auto* json =
      cmd->add_flag("--json", o->json, "a run line, then one JSON object per probe with every config's answer");
  cmd->add_flag("--csv", o->csv, "one CSV row per probe and config")->excludes(json);
  addShardOption(cmd, o->shard, "--out");
  cmd->add_option("--out", o->out, "with --shard: the shard file");
  addModelOptions(cmd, o->how);
  cmd->add_option("--threads", o->threads, "CPU threads (0: LibTorch's default)")->check(CLI::NonNegativeNumber);
  return [o, cmd]() {
    if (!*cmd) return -1;
    std::vector<cache::CacheConfig> cfgs;
    for (const auto& s : o->specs) cfgs.push_back(cache::parseSpec(s));
    probe::SuiteOptions so;
    so.samples = o->samples;
    so.seed = o->seed;
    // The grid's axes, each error naming its option.
    auto axis = [](const char* opt, auto parse) {
      try {
        return parse();
      } catch (const Error& e) {
        throw UsageError(fmt::format("{}: {}", opt, e.what()));
      }
    };
    so.tasks = axis("--tasks", [&] { return probe::parseTasks(o->tasks); });
    so.depths = axis("--depths", [&] { return probe::parseDepths(o->depths); });
    so.lengths = axis("--lengths", [&] { return probe::parseLengths(o->lengths); });
    if (so.depths.empty()) throw UsageError("--depths: give at least one depth");
    const std::optional<Shard> shard = shardOf(o->shard, o->out, "--out");
    if (shard) writeOutput(o->out, "");  // an unwritable --out fails before the model loads
    if (o->threads > 0) at::set_num_threads(o->threads);
    const runtime::Session m = openSession(o->model, o->how);
    const std::int64_t ctx = m.model().config().contextLength;
    if (so.lengths.empty()) so.lengths = defaultLengths(ctx);
    for (std::int64_t l : so.lengths)
      if (ctx > 0 && l > ctx && !o->beyond)
        throw UsageError(
            fmt::format("--lengths: {} tokens is past the model's trained context of {}; add "
                        "--beyond-context to probe there",
                        l, ctx));
    const auto t0 = std::chrono::steady_clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    auto encode = [&](const std::string& text) { return m.encodePrompt(text, o->chat); };
    const std::vector<probe::Probe> probes =
        probe::makeSuite(so, [&](const std::string& text) { return static_cast<std::int64_t>(encode(text).size()); });
    if (shard) shard->check(probes.size(), "probes");
    std::cerr << fmt::format("probe: {} probes, {} config(s) and the unquantized cache each ({:.1f} s to write them)\n",
                             probes.size(), cfgs.size(), elapsed());
    nlohmann::json specs = nlohmann::json::array(), taskNames = nlohmann::json::array();
    for (const auto& c : cfgs) specs.push_back(cache::toSpec(c));
    for (const probe::TaskInfo& t : probe::tasks())
      if (so.tasks.empty() || std::count(so.tasks.begin(), so.tasks.end(), t.task)) taskNames.push_back(t.name);
    const nlohmann::json run = {{"model", m.path()},   {"tasks", taskNames},    {"lengths", so.lengths},
                                {"depths", so.depths}, {"samples", so.samples}, {"seed", so.seed},
                                {"chat", o->chat},     {"configs", specs},      {"run_as", m.runAs()}};
    std::optional<ShardOut> out;
    if (shard) out.emplace(o->out, "probe", *shard, probes.size(), run);
    generate::AnswerRules rules;
    rules.stopIds = m.stopIds();
    rules.decode = [&](const std::vector<std::int64_t>& ids) {
      return m.tokenizer().decode(std::vector<std::int32_t>(ids.begin(), ids.end()), true);
    };
    std::vector<probe::Probe> mine;  // this shard's probes, by their index in the suite
    std::vector<std::size_t> index;
    for (std::size_t k = 0; k < probes.size(); ++k)
      if (!shard || shard->owns(k)) mine.push_back(probes[k]), index.push_back(k);
    std::vector<nlohmann::json> records;
    auto show = [&](std::size_t i) {
      std::cerr << fmt::format("probe {}/{} {} ({:.0f} s)\n", index[i] + 1, probes.size(), mine[i].id(), elapsed());
    };
    if (!mine.empty()) show(0);
    generate::answerProbes(m.model(), mine, cfgs, encode, rules, [&](std::size_t i, const generate::ProbeAnswers& as) {
      const probe::Probe& p = mine[i];
      nlohmann::json results = nlohmann::json::array();
      for (std::size_t c = 0; c < as.size(); ++c)
        results.push_back(answerJson(c == 0 ? "dynamic (reference)" : cache::toSpec(cfgs[c - 1]), c == 0, as[c],
                                     probe::score(p, as[c].text)));
      nlohmann::json rec = {{"probe", p.id()},      {"task", probe::info(p.task).name},
                            {"length", p.length},   {"depth", p.depth},
                            {"sample", p.sample},   {"prompt_tokens", as.front().promptTokens},
                            {"answers", p.answers}, {"results", std::move(results)}};
      if (out) out->add(index[i], rec);
      records.push_back(std::move(rec));
      if (i + 1 < mine.size()) show(i + 1);
      return true;
    });
    std::cerr << fmt::format("probe: done in {:.0f} s\n", elapsed());
    if (shard) {
      std::cerr << fmt::format(
          "probe: shard {} ({} of {} probes) written to {}; join the shards with kvscope-cli merge\n", shard->name(),
          records.size(), probes.size(), o->out);
      return 0;
    }
    return printProbe(run, records, o->json, o->csv);
  };
}

}  // namespace kvscope::cli
