// `plan`: what fits, from a model's config alone (a GGUF header, an HF directory or a config.json; never the
// weights): per layer what the cache keeps, then per cache config the memory and the lines llama.cpp, vLLM or SGLang
// print for it (plan/plan.h, docs/capacity.md).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>

#include "cli/commands.h"
#include "plan/plan.h"

namespace kvscope::cli {

namespace {

std::string orDash(const std::optional<double>& v, int decimals = 2) {
  return v ? fmt::format("{:.{}f}", *v, decimals) : "-";
}
std::string orDash(const std::optional<std::int64_t>& v) {
  return v ? std::to_string(*v) : "-";
}

// The layers grouped by what they keep: "0-2,4-6 sliding (8 KV heads x 64, window 128)".
void printLayers(const plan::ModelLayout& m) {
  std::cout << fmt::format(
      "model: {}{} ({}, {} layers, trained context {}, dtype {}{})\n", m.arch, m.name.empty() ? "" : " " + m.name,
      m.source, m.layers.size(), m.contextLength, m.dtype,
      m.weightBytes ? fmt::format(", weights {:.2f} GiB", static_cast<double>(*m.weightBytes) / (1 << 30)) : "");
  struct Run {
    int first, last;
    std::string what;
  };
  std::vector<Run> runs;
  for (const plan::LayerSpec& s : m.layers) {
    std::string what;
    switch (s.kind) {
      case plan::LayerKind::Full:
        what = fmt::format("full: {} KV heads x {}", s.kvHeads, s.headDimK);
        break;
      case plan::LayerKind::Sliding:
        what = fmt::format("sliding: {} KV heads x {}, window {}", s.kvHeads, s.headDimK, s.window);
        break;
      case plan::LayerKind::Shared:
        what = fmt::format("shared: reads layer {}'s KV", s.sharedFrom);
        break;
      case plan::LayerKind::Linear:
        what = fmt::format("linear: conv {} x {}, state {} x {} x {} per sequence", s.convKernel, s.convChannels,
                           s.stateHeads, s.stateDimK, s.stateDimV);
        break;
      case plan::LayerKind::Mla:
        what = fmt::format("mla: latent {} + rope {}{}", s.latent, s.ropeDim,
                           s.indexDim > 0 ? fmt::format(" + indexer {}", s.indexDim) : "");
        break;
    }
    if (s.headDimV != s.headDimK && (s.kind == plan::LayerKind::Full || s.kind == plan::LayerKind::Sliding))
      what += fmt::format(" (V {})", s.headDimV);
    if (!runs.empty() && runs.back().what == what && runs.back().last == s.index - 1)
      runs.back().last = s.index;
    else
      runs.push_back({s.index, s.index, what});
  }
  // One line per kind of layer, its ranges joined.
  std::vector<std::pair<std::string, std::vector<std::string>>> kinds;
  for (const Run& r : runs) {
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == r.what; });
    if (it == kinds.end()) kinds.push_back({r.what, {}}), it = kinds.end() - 1;
    it->second.push_back(r.first == r.last ? std::to_string(r.first) : fmt::format("{}-{}", r.first, r.last));
  }
  for (const auto& [what, ranges] : kinds) {
    std::string joined = fmt::format("{}", fmt::join(ranges, ","));
    if (joined.size() > 40) joined = joined.substr(0, 37) + "...";
    std::cout << fmt::format("  layers {:<40} {}\n", joined, what);
  }
}

}  // namespace

Runner addPlan(CLI::App& app) {
  struct Opts {
    std::string model, engine, json;
    std::vector<std::string> caches;
    plan::PlanOptions plan;
    double util = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "What fits: the KV cache's memory per layer and per cache config, and the figures llama.cpp, vLLM or "
      "SGLang log for it, from a model's config alone (GGUF header, HF directory or config.json; no weights "
      "read)");
  cmd->add_option("model", o->model, "a .gguf file, a config.json, or a directory holding one")->required();
  cmd->add_option("--cache", o->caches,
                  "a cache SPEC (repeatable); default: the engine's unquantized cache and its common formats");
  cmd->add_option("--engine", o->engine, "llamacpp, vllm or sglang (default: llamacpp for a .gguf, vllm otherwise)");
  cmd->add_option("--engine-version", o->plan.engineVersion,
                  "the engine version whose rules apply: vllm 0.24, 0.33 or 0.34 (default 0.34); sglang 0.5.9; "
                  "llamacpp 82bb485 (2026-08)");
  cmd->add_option("--json", o->json, "write the plan as JSON to FILE ('-' for stdout) instead of the table");
  auto* llama = "llama.cpp";
  cmd->add_option("--ctx,-c", o->plan.ctx, "llama.cpp -c: the total context (default 0: the trained context)")
      ->group(llama);
  cmd->add_option("--parallel,--np", o->plan.parallel, "llama.cpp -np: sequences (default 1)")->group(llama);
  cmd->add_option("--ubatch", o->plan.ubatch, "llama.cpp -ub (default 512)")->group(llama);
  cmd->add_option("--batch", o->plan.batch, "llama.cpp -b (default 2048)")->group(llama);
  cmd->add_flag("--kv-unified", o->plan.kvUnified,
                "llama.cpp -kvu: one cache for every sequence (llama-server's default when -np is not given)")
      ->group(llama);
  cmd->add_flag("--swa-full", o->plan.swaFull, "llama.cpp --swa-full: full-size sliding-window caches")->group(llama);
  auto* serving = "vLLM and SGLang";
  cmd->add_option("--max-model-len", o->plan.maxModelLen, "tokens per request (default: the trained context)")
      ->group(serving);
  cmd->add_option("--max-num-seqs", o->plan.maxNumSeqs, "vLLM --max-num-seqs (default 256)")->group(serving);
  cmd->add_option("--max-num-batched-tokens", o->plan.maxNumBatchedTokens,
                  "vLLM --max-num-batched-tokens (default: vllm serve's for the --gpu; 8192, an H100's, without one)")
      ->group(serving);
  cmd->add_option("--block-size", o->plan.blockSize, "vLLM --block-size (default: the version's, 16 or 64)")
      ->group(serving);
  cmd->add_option("--tp", o->plan.tp, "tensor-parallel GPUs (default 1): figures are per GPU")->group(serving);
  cmd->add_flag("!--no-prefix-caching", o->plan.prefixCaching, "vLLM --no-enable-prefix-caching")->group(serving);
  cmd->add_option("--page-size", o->plan.pageSize, "SGLang --page-size (default 1)")->group(serving);
  cmd->add_option("--kv-memory-gib", o->plan.kvMemoryGib,
                  "the KV cache's memory per GPU, GiB (vLLM's \"Available KV cache memory\")")
      ->group(serving);
  std::vector<std::string> gpuNames;
  for (const auto& g : plan::knownGpus()) gpuNames.push_back(g.name);
  cmd->add_option("--gpu", o->plan.gpu, fmt::format("derive the KV memory from a GPU: {}", fmt::join(gpuNames, ", ")))
      ->group(serving);
  cmd->add_option("--gpu-memory-utilization", o->util,
                  "vLLM --gpu-memory-utilization (default 0.92) or SGLang --mem-fraction-static")
      ->group(serving);
  cmd->add_option("--activation-reserve-gib", o->plan.activationReserveGib,
                  "with --gpu and vLLM: GiB kept for activations and CUDA graphs (default 2)")
      ->group(serving);

  return [cmd, o]() {
    if (!*cmd) return -1;
    const plan::ModelLayout model = plan::loadLayout(o->model);
    plan::PlanOptions opt = o->plan;
    if (o->util > 0) opt.gpuMemoryUtilization = o->util;
    if (o->util < 0 || o->util > 1) throw UsageError("--gpu-memory-utilization must be in (0, 1]");
    opt.engine = o->engine.empty() ? (model.source == "gguf" ? plan::Engine::LlamaCpp : plan::Engine::Vllm)
                                   : plan::parseEngine(o->engine);
    const std::vector<std::string> specs = o->caches.empty() ? plan::defaultSpecs(opt.engine) : o->caches;
    const plan::Plan p = plan::makePlan(model, specs, opt);
    if (!o->json.empty()) {
      writeOutput(o->json, plan::planJson(p));
      return 0;
    }
    printLayers(model);
    std::cout << fmt::format("\nengine: {} {}\n", plan::engineName(p.engine), p.engineVersion);
    for (const auto& n : p.memoryNotes) std::cout << "  " << n << "\n";
    // llama.cpp with a budget: the largest context that fits, beside the one asked for.
    const bool fitCol = p.engine == plan::Engine::LlamaCpp && p.kvMemoryGib;
    std::cout << fmt::format("\n{:<36} {:>20} {:>11} {:>10} {:>10} {:>12} {:>9}{}\n", "config", "engine type",
                             "bytes/token", "KV MiB", "state MiB", "KV tokens", "requests",
                             fitCol ? fmt::format(" {:>12}", "fits -c") : "");
    for (const plan::ConfigPlan& c : p.configs) {
      if (!c.expressible) {
        std::cout << fmt::format("{:<36} {:>20}   {}\n", c.spec, "-", c.notes.empty() ? "" : c.notes.front());
        continue;
      }
      std::cout << fmt::format("{:<36} {:>20} {:>11} {:>10} {:>10} {:>12} {:>9}{}\n", c.spec, c.engineType,
                               orDash(c.bytesPerToken, 0), orDash(c.kvMib), orDash(c.stateMib), orDash(c.kvTokens),
                               orDash(c.maxConcurrency), fitCol ? fmt::format(" {:>12}", orDash(c.fitTokens)) : "");
    }
    for (const plan::ConfigPlan& c : p.configs) {
      if (!c.expressible) continue;
      std::cout << fmt::format("\n{} ({}):\n", c.spec, c.engineType);
      for (const auto& l : c.log) std::cout << "  " << l << "\n";
      for (const auto& n : c.notes) std::cout << "  note: " << n << "\n";
    }
    return 0;
  };
}

}  // namespace kvscope::cli
