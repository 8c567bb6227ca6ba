// What the model-running subcommands share: loading a model with its tokenizer, prompts, and measurements.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache/config.h"
#include "cache/stats.h"
#include "generate/generate.h"
#include "model/llama.h"
#include "runtime/session.h"
#include "tokenizer/tokenizer.h"

namespace CLI {
class App;
}

namespace kvscope::cli {

/// How a command runs its model: the options every model-running command takes (addModelOptions); the path is the
/// command's --model.
using ModelChoice = runtime::LoadOptions;

/// runtime::defaultModelPath(): $KVSCOPE_MODEL, the embedded model packaging/setup.sh fetched, or the one an
/// installed package ships; empty when there is none.
std::string defaultModelPath();
/// The model session (runtime::Session, shared with the GUI's engine) for `path` (empty: defaultModelPath()) run as
/// `how` says. Throws as Session::open: bad options and an absent device before anything is read.
runtime::Session openSession(const std::string& path, ModelChoice how);
/// ModelChoice's options on `cmd`.
void addModelOptions(CLI::App* cmd, ModelChoice& how);
/// --prompt or --prompt-file; UsageError when both are empty.
std::string promptText(const std::string& prompt, const std::string& file);

/// One config's figures in `compare` and `sweep`.
struct RunFigures {
  std::string spec;
  cache::TensorMemory memory;  ///< at the end of the run
  std::int64_t peakHeld = 0;   ///< largest held bytes over the steps
  double prefillTokS = 0, decodeTokS = 0;
  double meanKl = 0, maxKl = 0, top1 = 1;
  int firstDivergence = -1;
  double perplexity = 0;
  std::int64_t overflow = 0, nonFinite = 0;
  int newTokens = 0;
  double ratio() const { return memory.compressionRatio(); }
};

RunFigures measure(const runtime::Session& m, const cache::CacheConfig& cfg, const std::vector<std::int64_t>& prompt,
                   int maxNew, int pplChunk, bool shadow);

}  // namespace kvscope::cli
