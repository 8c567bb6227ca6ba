#include "cli/runtime.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cache/kv_cache.h"
#include "cli/commands.h"
#include "model/gguf.h"
#include "plan/layout.h"
#include "runtime/model_loader.h"
#include "util/metrics.h"

namespace kvscope::cli {

std::string defaultModelPath() {
  return runtime::defaultModelPath();
}

cache::LayerWindows layerWindows(const std::string& path) {
  const plan::ModelLayout m = plan::loadLayout(path);
  cache::LayerWindows w;
  for (const plan::LayerSpec& l : m.layers) w.push_back(l.kind == plan::LayerKind::Sliding ? l.window : 0);
  return w;
}

std::vector<double> layerValues(const std::string& path) {
  const plan::ModelLayout m = plan::loadLayout(path);
  std::vector<double> v;
  for (const plan::LayerSpec& l : m.layers)
    v.push_back(l.kind == plan::LayerKind::Shared ? 0.0 : static_cast<double>(l.kvHeads) * (l.headDimK + l.headDimV));
  return v;
}

runtime::Session openSession(const std::string& path, ModelChoice how) {
  how.path = path;
  return runtime::Session::open(how);
}

void addModelOptions(CLI::App* cmd, ModelChoice& how) {
  cmd->add_option("--dtype", how.dtype, "activations, norms and biases (weights keep their file's format)")
      ->check(CLI::IsMember(runtime::dtypeNames()));
  cmd->add_option("--activations", how.activations, runtime::activationsHelp())
      ->check(CLI::IsMember(runtime::activationsNames()));
  cmd->add_option("--device", how.device,
                  "where the model and its caches run: cpu, or cuda / cuda:N where LibTorch sees a CUDA device "
                  "(weights then in --dtype on the device)");
  cmd->add_option(
         "--weights", how.weights,
         "stored: every matrix as its file stores it; q8_0, q5_1, q5_0, q4_1, q4_0: float matrices (F32/F16/BF16, e.g. "
         "a Hugging Face model) quantized at load as llama.cpp's formats, the output matrix kept")
      ->check(CLI::IsMember(runtime::weightsNames()));
}

std::string promptText(const std::string& prompt, const std::string& file) {
  if (!file.empty()) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw UsageError(fmt::format("cannot read prompt file `{}`", file));
    std::stringstream ss;
    ss << in.rdbuf();
    if (ss.str().empty()) throw UsageError(fmt::format("prompt file `{}` is empty", file));
    return ss.str();
  }
  if (prompt.empty()) throw UsageError("empty prompt (give --prompt or --prompt-file)");
  return prompt;
}

RunFigures measure(const runtime::Session& m, const cache::CacheConfig& cfg, const std::vector<std::int64_t>& prompt,
                   int maxNew, int pplChunk, bool shadow) {
  RunFigures f;
  f.spec = cache::toSpec(cfg);
  auto kv = m.model().makeCache(cfg);
  generate::GenerateOptions o;
  o.maxNew = maxNew;
  o.shadow = shadow;
  o.stopIds = {};  // the same number of steps for every config
  o.topCandidates = 0;
  const auto r = generate::generate(m.model(), *kv, prompt, o, [&](const generate::StepEvent& ev) {
    f.peakHeld = std::max(f.peakHeld, ev.memory.held());
    return true;
  });
  f.memory = kv->totalMemory();
  f.newTokens = static_cast<int>(r.tokens.size());
  f.prefillTokS = r.prefillSeconds > 0 ? r.promptTokens / r.prefillSeconds : 0;
  f.decodeTokS = r.decodeSeconds > 0 ? (r.tokens.size() - 1) / r.decodeSeconds : 0;
  f.meanKl = r.meanKl;
  f.maxKl = r.maxKl;
  f.top1 = r.top1Agreement;
  f.firstDivergence = r.firstDivergence;
  const cache::OverflowTotals totals = kv->overflowTotals();
  f.overflow = totals.overflow;
  f.nonFinite = totals.nonFinite;
  f.perplexity = m.perplexity(cfg, prompt, pplChunk);
  return f;
}

}  // namespace kvscope::cli
