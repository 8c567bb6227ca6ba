// `compare`, `sweep` and `bench`: several cache configs on the same model and prompt, the unquantized baseline
// always in the same run.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "cache/sweep.h"
#include "cli/commands.h"
#include "cli/runtime.h"
#include "kernels/cpu/simd.h"
#include "runtime/model_loader.h"
#include "util/layer_ranges.h"
#include "util/process_memory.h"

namespace kvscope::cli {

namespace {

struct CommonOpts {
  std::string model, prompt, promptFile;
  ModelChoice how;
  bool chat = false, json = false, csv = false;
  int maxNew = 64, pplChunk = 32, threads = 0;
};

void addCommon(CLI::App* cmd, CommonOpts& o) {
  cmd->add_option("--model", o.model, "GGUF file or Hugging Face directory (default: the embedded SmolLM2)");
  auto* p = cmd->add_option("--prompt", o.prompt, "prompt text");
  cmd->add_option("--prompt-file", o.promptFile, "read the prompt from a file")->excludes(p);
  cmd->add_flag("--chat", o.chat, "wrap the prompt in the model's chat template");
  cmd->add_option("--max-new", o.maxNew, "greedy tokens generated per config")->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--ppl-chunk", o.pplChunk, "tokens per forward when measuring the prompt's perplexity")
      ->check(CLI::Range(1, 1 << 16));
  addModelOptions(cmd, o.how);
  cmd->add_option("--threads", o.threads, "CPU threads (0: LibTorch's default)")->check(CLI::NonNegativeNumber);
  auto* j = cmd->add_flag("--json", o.json, "one JSON object per config");
  cmd->add_flag("--csv", o.csv, "CSV with a header line")->excludes(j);
}

nlohmann::json toJson(const RunFigures& f) {
  return {{"config", f.spec},
          {"kv_bytes",
           {{"payload", f.memory.payload},
            {"metadata", f.memory.metadata},
            {"residual", f.memory.residual},
            {"transient", f.memory.transient},
            {"reserved", f.memory.reserved},
            {"unquantized", f.memory.unquantized},
            {"stored", f.memory.stored()},
            {"peak_held", f.peakHeld}}},
          {"compression_ratio", f.ratio()},
          {"prefill_tok_s", f.prefillTokS},
          {"decode_tok_s", f.decodeTokS},
          {"mean_kl", f.meanKl},
          {"max_kl", f.maxKl},
          {"top1_agreement", f.top1},
          {"first_divergence", f.firstDivergence},
          {"perplexity", f.perplexity},
          {"overflow", f.overflow},
          {"non_finite", f.nonFinite},
          {"new_tokens", f.newTokens}};
}

// A row back from its JSON (a shard file's record): toJson(figuresFromJson(j)) == j.
RunFigures figuresFromJson(const nlohmann::json& j) {
  auto d = [&](const char* key) {  // NaN and inf are written as null
    const auto& v = j.at(key);
    return v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>();
  };
  RunFigures f;
  f.spec = j.at("config").get<std::string>();
  const auto& b = j.at("kv_bytes");
  f.memory.payload = b.at("payload").get<std::int64_t>();
  f.memory.metadata = b.at("metadata").get<std::int64_t>();
  f.memory.residual = b.at("residual").get<std::int64_t>();
  f.memory.transient = b.at("transient").get<std::int64_t>();
  f.memory.reserved = b.at("reserved").get<std::int64_t>();
  f.memory.unquantized = b.at("unquantized").get<std::int64_t>();
  f.peakHeld = b.at("peak_held").get<std::int64_t>();
  f.prefillTokS = d("prefill_tok_s");
  f.decodeTokS = d("decode_tok_s");
  f.meanKl = d("mean_kl");
  f.maxKl = d("max_kl");
  f.top1 = d("top1_agreement");
  f.firstDivergence = j.at("first_divergence").get<int>();
  f.perplexity = d("perplexity");
  f.overflow = j.at("overflow").get<std::int64_t>();
  f.nonFinite = j.at("non_finite").get<std::int64_t>();
  f.newTokens = j.at("new_tokens").get<int>();
  return f;
}

const char* kCsvHeader =
    "config,stored_bytes,payload_bytes,metadata_bytes,residual_bytes,peak_held_bytes,unquantized_bytes,"
    "compression_ratio,prefill_tok_s,decode_tok_s,mean_kl,max_kl,top1_agreement,first_divergence,perplexity,"
    "overflow,non_finite";

std::string csvRow(const RunFigures& f) {
  return fmt::format("\"{}\",{},{},{},{},{},{},{:.4f},{:.2f},{:.2f},{:.6g},{:.6g},{:.4f},{},{:.4f},{},{}", f.spec,
                     f.memory.stored(), f.memory.payload, f.memory.metadata, f.memory.residual, f.peakHeld,
                     f.memory.unquantized, f.ratio(), f.prefillTokS, f.decodeTokS, f.meanKl, f.maxKl, f.top1,
                     f.firstDivergence, f.perplexity, f.overflow, f.nonFinite);
}

void printTableHeader() {
  std::cout << fmt::format("{:<40} {:>10} {:>7} {:>10} {:>9} {:>9} {:>9} {:>9} {:>6} {:>5} {:>8} {:>8}\n", "config",
                           "KV MiB", "ratio", "peak MiB", "prefill", "decode", "mean KL", "max KL", "top-1", "div",
                           "ppl", "NaN/inf");
}

void printRow(const RunFigures& f) {
  std::cout << fmt::format(
      "{:<40} {:>10.3f} {:>6.2f}x {:>10.3f} {:>9.1f} {:>9.1f} {:>9.3g} {:>9.3g} {:>5.1f}% {:>5} "
      "{:>8.3f} {:>8}\n",
      f.spec, f.memory.stored() / 1048576.0, f.ratio(), f.peakHeld / 1048576.0, f.prefillTokS, f.decodeTokS, f.meanKl,
      f.maxKl, 100.0 * f.top1, f.firstDivergence < 0 ? std::string("-") : std::to_string(f.firstDivergence),
      f.perplexity, f.nonFinite);
  std::cout.flush();
}

void emit(bool json, bool csv, const RunFigures& f) {
  if (json)
    std::cout << toJson(f).dump() << "\n" << std::flush;
  else if (csv)
    std::cout << csvRow(f) << "\n" << std::flush;
  else
    printRow(f);
}
void emit(const CommonOpts& o, const RunFigures& f) {
  emit(o.json, o.csv, f);
}

// What a sweep prints before its rows, and after them: the best under the budget (exit 3 when none meets it).
void sweepHead(const nlohmann::json& run, const SweepPrint& how) {
  if (!how.json && !how.csv) {
    std::cout << fmt::format("sweep: {} configs + the unquantized baseline, prompt {} tokens, {} greedy tokens each\n",
                             run.at("configs").size(), run.at("prompt_tokens").get<std::size_t>(),
                             run.at("max_new").get<int>());
    printTableHeader();
  } else if (how.csv) {
    std::cout << kCsvHeader << "\n";
  }
}

int sweepBest(const std::vector<RunFigures>& all, const SweepPrint& how) {
  if (!how.maxKl && !how.maxBytes) return 0;
  std::vector<cache::SweepOutcome> outcomes;
  outcomes.reserve(all.size());
  for (const auto& f : all) outcomes.push_back({f.memory.stored(), f.meanKl, true, true, f.nonFinite == 0});
  const cache::SweepBudget b =
      how.maxKl ? cache::SweepBudget{cache::SweepBudget::Kind::MaxMeanKl, *how.maxKl}
                : cache::SweepBudget{cache::SweepBudget::Kind::MaxStoredBytes, static_cast<double>(*how.maxBytes)};
  const auto at = cache::bestUnderBudget(outcomes, b);
  const RunFigures* best = at ? &all[*at] : nullptr;
  const std::string budget =
      how.maxKl ? fmt::format("mean KL <= {}", *how.maxKl) : fmt::format("stored KV <= {} bytes", *how.maxBytes);
  if (!best) {
    std::cerr << "kvscope-cli: no config meets the budget (" << budget << ")\n";
    return 3;
  }
  if (how.json)
    std::cout << nlohmann::json{{"best", best->spec}, {"budget", budget}}.dump() << "\n";
  else
    std::cout << fmt::format("best under {}: {} ({:.3f} MiB, {:.2f}x, mean KL {:.4g})\n", budget, best->spec,
                             best->memory.stored() / 1048576.0, best->ratio(), best->meanKl);
  return 0;
}

}  // namespace

int printSweep(const nlohmann::json& run, const std::vector<nlohmann::json>& rows, const SweepPrint& how) {
  sweepHead(run, how);
  std::vector<RunFigures> all;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const RunFigures f = figuresFromJson(rows[i]);
    emit(how.json, how.csv, f);
    if (i > 0) all.push_back(f);
  }
  return sweepBest(all, how);
}

Runner addCompare(CLI::App& app) {
  auto o = std::make_shared<CommonOpts>();
  auto specs = std::make_shared<std::vector<std::string>>();
  CLI::App* cmd =
      app.add_subcommand("compare", "The same prompt through each cache config and the unquantized baseline");
  addCommon(cmd, *o);
  cmd->add_option("--cache", *specs, "cache SPEC (repeat for several)")->required();
  return [o, specs, cmd]() {
    if (!*cmd) return -1;
    std::vector<cache::CacheConfig> cfgs{cache::parseSpec("dynamic")};
    for (const auto& s : *specs) {
      const auto c = cache::parseSpec(s);
      if (c.backend != cache::Backend::Dynamic) cfgs.push_back(c);
    }
    if (o->threads > 0) at::set_num_threads(o->threads);
    const std::string text = promptText(o->prompt, o->promptFile);
    const runtime::Session m = openSession(o->model, o->how);
    const auto prompt = m.encodePrompt(text, o->chat);
    m.checkContext(prompt.size(), o->maxNew);
    if (!o->json && !o->csv) {
      // Layers of their own shape (Gemma 4's full layers) and layers that store nothing (its shared-KV ones).
      const model::ModelConfig& c = m.model().config();
      std::vector<int> wide, shared;
      for (int l = 0; l < c.layers; ++l) {
        if (c.layerSpecs[static_cast<std::size_t>(l)].kvFrom >= 0)
          shared.push_back(l);
        else if (c.headDimOf(l) != c.headDim || c.kvHeadsOf(l) != c.kvHeads)
          wide.push_back(l);
      }
      std::string shape = fmt::format("{} KV heads x {}", c.kvHeads, c.headDim);
      if (!wide.empty())
        shape += fmt::format(", {} x {} on layers {}", c.kvHeadsOf(wide.front()), c.headDimOf(wide.front()),
                             util::layerRanges(wide));
      if (!shared.empty()) shape += fmt::format(", layers {} reading another's KV", util::layerRanges(shared));
      std::cout << fmt::format(
          "{} ({} layers, {}), prompt {} tokens, {} greedy tokens per config; KL and "
          "top-1 against the unquantized cache fed the same tokens\n",
          m.path(), c.layers, shape, prompt.size(), o->maxNew);
      printTableHeader();
    } else if (o->csv) {
      std::cout << kCsvHeader << "\n";
    }
    for (const auto& c : cfgs)
      emit(*o, measure(m, c, prompt, o->maxNew, o->pplChunk, c.backend != cache::Backend::Dynamic));
    return 0;
  };
}

Runner addSweep(CLI::App& app) {
  auto o = std::make_shared<CommonOpts>();
  auto grids = std::make_shared<std::vector<std::string>>();
  auto how = std::make_shared<SweepPrint>();
  auto out = std::make_shared<std::string>();
  auto shardText = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("sweep", "A grid of cache configs, the same figures, and the best under a budget");
  addCommon(cmd, *o);
  cmd->add_option("--grid", *grids, "e.g. 'quanto:nbits=2,4;q_group_size=32,64,128' (repeatable)")->required();
  auto* k = cmd->add_option("--max-kl", how->maxKl, "budget: the smallest cache whose mean KL stays under this");
  cmd->add_option("--max-bytes", how->maxBytes, "budget: the lowest mean KL whose stored KV bytes stay under this")
      ->excludes(k);
  cmd->add_option("--out", *out,
                  "append each finished config to this JSON-lines file as it finishes (the file is replaced "
                  "atomically after every run, so a crash of a later run keeps the earlier ones); with --shard, "
                  "the shard file (written afresh)");
  addShardOption(cmd, *shardText, "--out");
  return [o, grids, how, out, shardText, cmd]() {
    if (!*cmd) return -1;
    const std::vector<cache::CacheConfig> cfgs = cache::planSweep(*grids);  // every grid point valid up front
    // Sharded: item 0 is the baseline (shard 1 runs it), item i+1 config i.
    const std::optional<Shard> shard = shardOf(*shardText, *out, "--out");
    if (shard) shard->check(cfgs.size(), "configs");
    if (o->threads > 0) at::set_num_threads(o->threads);
    const std::string text = promptText(o->prompt, o->promptFile);
    // The results file: what it already holds is kept (appended to); it is written once now, so that an unwritable
    // path fails before the model loads, then replaced atomically after every finished run.
    std::string results;
    if (!out->empty() && !shard) {
      if (std::filesystem::exists(*out)) {
        std::ifstream in(*out, std::ios::binary);
        if (!in) throw UsageError(fmt::format("cannot read `{}` to append to it", *out));
        results.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        if (!results.empty() && results.back() != '\n') results += '\n';
      }
      writeOutput(*out, results);
    }
    if (shard) writeOutput(*out, "");
    const runtime::Session m = openSession(o->model, o->how);
    const auto prompt = m.encodePrompt(text, o->chat);
    m.checkContext(prompt.size(), o->maxNew);
    nlohmann::json specs = nlohmann::json::array();
    for (const auto& c : cfgs) specs.push_back(cache::toSpec(c));
    const nlohmann::json run = {
        {"model", m.path()},    {"prompt", text},           {"chat", o->chat},  {"prompt_tokens", prompt.size()},
        {"max_new", o->maxNew}, {"ppl_chunk", o->pplChunk}, {"configs", specs}, {"run_as", m.runAs()}};
    if (shard) {
      ShardOut file(*out, "sweep", *shard, cfgs.size() + 1, run);
      std::size_t done = 0;
      if (shard->owns(0))
        file.add(0, toJson(measure(m, cache::parseSpec("dynamic"), prompt, o->maxNew, o->pplChunk, false)));
      for (std::size_t i = 0; i < cfgs.size(); ++i)
        if (shard->owns(i + 1)) {
          file.add(i + 1, toJson(measure(m, cfgs[i], prompt, o->maxNew, o->pplChunk, true)));
          std::cerr << fmt::format("sweep: shard {}: {} ({} done)\n", shard->name(), specs[i].get<std::string>(),
                                   ++done);
        }
      std::cerr << fmt::format(
          "sweep: shard {} ({} of {} configs) written to {}; join the shards with kvscope-cli "
          "merge\n",
          shard->name(), done, cfgs.size(), *out);
      return 0;
    }
    SweepPrint print = *how;
    print.json = o->json;
    print.csv = o->csv;
    sweepHead(run, print);
    std::vector<RunFigures> all;
    const RunFigures base = measure(m, cache::parseSpec("dynamic"), prompt, o->maxNew, o->pplChunk, false);
    emit(*o, base);
    for (std::size_t i = 0; i < cfgs.size(); ++i) {
      all.push_back(measure(m, cfgs[i], prompt, o->maxNew, o->pplChunk, true));
      emit(*o, all.back());
      if (!out->empty()) {  // survives a crash of a later run: the file is whole after every rename
        results += toJson(all.back()).dump() + "\n";
        writeOutput(*out, results);
      }
    }
    return sweepBest(all, print);
  };
}

namespace {

// Many short generations in one process, each with a cache created and dropped, cycling the configs: the resident
// memory after the first tenth (warm: allocator pools, LibTorch's caches) against the end.
void soak(const runtime::Session& m, const std::vector<cache::CacheConfig>& cfgs, int runs, std::int64_t ctx,
          int newTokens, bool json) {
  at::manual_seed(1);
  const std::int64_t len = std::min<std::int64_t>(ctx, 256);
  const at::Tensor ids = at::randint(3, m.model().config().vocab, {len}, at::kLong);
  const std::vector<std::int64_t> prompt(ids.data_ptr<std::int64_t>(), ids.data_ptr<std::int64_t>() + len);
  const int warm = std::max(1, runs / 10);
  std::int64_t warmRss = 0;
  for (int i = 0; i < runs; ++i) {
    {
      auto kv = m.model().makeCache(cfgs[static_cast<std::size_t>(i) % cfgs.size()]);
      generate::GenerateOptions g;
      g.maxNew = newTokens;
      g.topCandidates = 0;
      generate::generate(m.model(), *kv, prompt, g);
    }
    if (i + 1 == warm) warmRss = util::residentBytes();
  }
  const std::int64_t endRss = util::residentBytes();
  const double growth = warmRss > 0 ? 100.0 * static_cast<double>(endRss - warmRss) / static_cast<double>(warmRss) : 0;
  if (json)
    std::cout << nlohmann::json{{"soak_runs", runs},
                                {"rss_after_warmup_bytes", warmRss},
                                {"rss_end_bytes", endRss},
                                {"growth_percent", growth}}
                     .dump()
              << "\n";
  else
    std::cout << fmt::format(
        "soak: {} generations ({} prompt + {} new tokens, {} configs in turn): resident {:.1f} MiB "
        "after {}, {:.1f} MiB after {} ({:+.2f}%)\n",
        runs, len, newTokens, cfgs.size(), warmRss / 1048576.0, warm, endRss / 1048576.0, runs, growth);
}

}  // namespace

Runner addBench(CLI::App& app) {
  struct BenchOpts {
    std::string model;
    ModelChoice how;
    std::vector<std::string> specs;
    std::vector<std::int64_t> contexts{256};
    int newTokens = 32, threads = 0, repeat = 3, soak = 0;
    std::int64_t prefillChunk = -1;
    std::string text;
    bool json = false, beyondContext = false, noBaseline = false, noWarmup = false;
    std::uint64_t seed = 0;
  };
  auto o = std::make_shared<BenchOpts>();
  CLI::App* cmd = app.add_subcommand("bench",
                                     "Prefill and decode tok/s per cache config and context length, beside "
                                     "the dynamic baseline in the same run");
  cmd->add_option("--model", o->model, "GGUF file or Hugging Face directory (default: the embedded SmolLM2)");
  cmd->add_option("--cache", o->specs, "cache SPEC (repeat for several)")->required();
  cmd->add_option("--context", o->contexts, "prompt lengths (repeat or list)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  cmd->add_option("--new", o->newTokens, "decode steps timed at each context")->check(CLI::Range(1, 1 << 16));
  addModelOptions(cmd, o->how);
  cmd->add_option("--threads", o->threads, "CPU threads (0: LibTorch's default)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", o->seed, "seed of the random prompt tokens");
  cmd->add_option("--repeat", o->repeat, "rounds; configs run interleaved in each round, medians reported")
      ->check(CLI::Range(1, 100));
  cmd->add_option(
         "--prefill-chunk", o->prefillChunk,
         "prompt tokens per forward pass (0: one shot; default: 512 in fused mode, one shot in reference mode)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 20));
  cmd->add_option("--text", o->text,
                  "build each prompt from this text file's tokens (repeated to the context length) instead of random "
                  "tokens");
  cmd->add_flag("--beyond-context", o->beyondContext,
                "allow contexts past the model's trained length (speed and memory only: the text degrades there)");
  cmd->add_flag("--no-baseline", o->noBaseline,
                "run only the listed configs (a process per config measures peak memory without another run's "
                "leftovers); the ratio column is then against the first config");
  cmd->add_option("--soak", o->soak,
                  "after the table: this many short generations in this process, cycling the configs with caches "
                  "created and dropped, and the resident memory's growth")
      ->check(CLI::Range(0, 1000000));
  cmd->add_flag("--no-warmup", o->noWarmup,
                "skip the untimed warm-up generation before the first round (as llama-bench's --no-warmup: the "
                "first round then also pays for mapping the weights' pages and the allocator's first requests)");
  cmd->add_flag("--json", o->json, "one JSON object per (config, context)");
  return [o, cmd]() {
    if (!*cmd) return -1;
    std::vector<cache::CacheConfig> cfgs;
    if (!o->noBaseline) cfgs.push_back(cache::parseSpec("dynamic"));
    for (const auto& s : o->specs) {
      const auto c = cache::parseSpec(s);
      if (o->noBaseline || !(c.backend == cache::Backend::Dynamic && !c.mixed())) cfgs.push_back(c);
    }
    if (o->threads > 0) at::set_num_threads(o->threads);
    const runtime::Session m = openSession(o->model, o->how);
    const auto& mc = m.model().config();
    for (auto ctx : o->contexts)
      if (!o->beyondContext && mc.contextLength > 0 && ctx + o->newTokens > mc.contextLength)
        throw UsageError(
            fmt::format("context {} + {} new tokens exceed the model's {} (--beyond-context measures past "
                        "it)",
                        ctx, o->newTokens, mc.contextLength));
    std::vector<std::int64_t> textIds;
    if (!o->text.empty()) {
      const std::string t = promptText("", o->text);
      const auto ids = m.tokenizer().encode(t, /*addSpecial=*/false, /*parseSpecial=*/false);
      textIds.assign(ids.begin(), ids.end());
      if (textIds.empty()) throw UsageError(fmt::format("`{}` encodes to no tokens", o->text));
    }
    if (!o->json && !m.kernelsLine().empty()) std::cout << m.kernelsLine() << "\n";
    if (!o->json)
      std::cout << fmt::format("{:<36} {:>8} {:>12} {:>12} {:>19} {:>10} {:>10} {:>10}\n", "config", "context",
                               "prefill t/s", "decode t/s", o->noBaseline ? "vs first (range)" : "vs dynamic (range)",
                               "KV MiB", "held MiB", "peak MiB");
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
    };
    auto randomPrompt = [&mc](std::int64_t len) {
      const at::Tensor ids = at::randint(3, mc.vocab, {len}, at::kLong);
      return std::vector<std::int64_t>(ids.data_ptr<std::int64_t>(), ids.data_ptr<std::int64_t>() + len);
    };
    // One generation of newTokens after the prompt: its timings and the cache's memory. The cache's own cost: without
    // the error maps and amax statistics the workbench's views draw.
    auto runOnce = [&](const cache::CacheConfig& cfg, const std::vector<std::int64_t>& prompt) {
      cache::StatsOptions quiet;
      quiet.enabled = false;
      auto kv = m.model().makeCache(cfg, quiet);
      generate::GenerateOptions g;
      g.maxNew = o->newTokens + 1;  // the first token comes from the prefill
      g.topCandidates = 0;
      g.prefillChunk = o->prefillChunk;
      g.beyondContext = o->beyondContext;
      auto r = generate::generate(m.model(), *kv, prompt, g);
      return std::pair{std::move(r), kv->totalMemory()};
    };
    if (!o->noWarmup) {  // llama-bench's warm-up: a short untimed run, so no round pays for first touches
      at::manual_seed(o->seed + 1);
      runOnce(cfgs.front(), randomPrompt(std::min<std::int64_t>(o->contexts.front(), 64)));
    }
    for (auto ctx : o->contexts) {
      at::manual_seed(o->seed);
      std::vector<std::int64_t> prompt;
      if (textIds.empty()) {
        prompt = randomPrompt(ctx);
      } else {
        while (static_cast<std::int64_t>(prompt.size()) < ctx)
          prompt.insert(prompt.end(), textIds.begin(),
                        textIds.begin() + std::min<std::int64_t>(static_cast<std::int64_t>(textIds.size()),
                                                                 ctx - static_cast<std::int64_t>(prompt.size())));
      }
      // Rounds of every config in turn, so that a slow moment of a shared machine hits all of them alike; the ratio
      // to dynamic is taken within each round.
      const std::size_t n = cfgs.size();
      std::vector<std::vector<double>> prefill(n), decode(n), ratio(n), peak(n);
      std::vector<cache::TensorMemory> mem(n);
      for (int round = 0; round < o->repeat; ++round) {
        for (std::size_t i = 0; i < n; ++i) {
          // The peak memory during this run alone: on the CPU the process's resident set (freed heap returned and
          // the peak restarted first, Linux), so weights + LibTorch + this run's cache and working memory; on a
          // CUDA device what LibTorch's allocator held there (weights + cache + activations).
          const device::ExecutionContext& dev = m.model().context();
          dev.resetPeak();
          {
            const auto [r, memory] = runOnce(cfgs[i], prompt);
            prefill[i].push_back(ctx / r.prefillSeconds);
            decode[i].push_back(o->newTokens / r.decodeSeconds);
            mem[i] = memory;
          }
          peak[i].push_back(static_cast<double>(dev.memory().peak));
        }
        for (std::size_t i = 0; i < n; ++i) ratio[i].push_back(decode[i].back() / decode[0].back());
      }
      for (std::size_t i = 0; i < n; ++i) {
        const auto [lo, hi] = std::minmax_element(ratio[i].begin(), ratio[i].end());
        if (o->json) {
          std::cout << nlohmann::json{{"config", cache::toSpec(cfgs[i])},
                                      {"context", ctx},
                                      {"rounds", o->repeat},
                                      {"prefill_tok_s", median(prefill[i])},
                                      {"decode_tok_s", median(decode[i])},
                                      {"decode_vs_dynamic", median(ratio[i])},
                                      {"decode_vs_dynamic_min", *lo},
                                      {"decode_vs_dynamic_max", *hi},
                                      {"kv_stored_bytes", mem[i].stored()},
                                      {"kv_held_bytes", mem[i].held()},
                                      {"device", m.model().context().device().str()},
                                      {"activations", model::activationsName(m.activations())},
                                      {"cpu_kernels", m.kernelsLine().empty()
                                                          ? nlohmann::json(nullptr)
                                                          : nlohmann::json(kernels::isaName(kernels::isa()))},
                                      {m.model().context().device().is_cpu() ? "peak_rss_bytes" : "peak_device_bytes",
                                       static_cast<std::int64_t>(median(peak[i]))}}
                           .dump()
                    << "\n"
                    << std::flush;
        } else {
          std::cout << fmt::format(
                           "{:<36} {:>8} {:>12.1f} {:>12.1f} {:>7.3f}x ({:.2f}-{:.2f}) {:>10.2f} {:>10.2f} {:>10.1f}\n",
                           cache::toSpec(cfgs[i]), ctx, median(prefill[i]), median(decode[i]), median(ratio[i]), *lo,
                           *hi, mem[i].stored() / 1048576.0, mem[i].held() / 1048576.0, median(peak[i]) / 1048576.0)
                    << std::flush;
        }
      }
    }
    if (o->soak > 0) soak(m, cfgs, o->soak, static_cast<std::int64_t>(o->contexts.front()), o->newTokens, o->json);
    return 0;
  };
}

}  // namespace kvscope::cli
