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
#include "tokenizer/tokenizer.h"

namespace CLI {
class App;
}

namespace kvscope::cli {

struct Loaded {
  std::string path;
  std::unique_ptr<model::LlamaModel> model;
  std::unique_ptr<tokenizer::Tokenizer> tok;
};

/// runtime::defaultModelPath(): $KVSCOPE_MODEL, the embedded model packaging/setup.sh fetched, or the one an
/// installed package ships; empty when there is none.
std::string defaultModelPath();
/// How a command runs its model: the options every model-running command takes (addModelOptions).
struct ModelChoice {
  std::string dtype = "fp32";        ///< --dtype: the activations' (and on a device the weights')
  std::string activations = "f32";   ///< --activations f32|q8: how decode steps multiply block weights
  std::string device = "cpu";        ///< --device cpu|cuda|cuda:N
  std::string weights = "stored";    ///< --weights stored|q8_0|q5_1|q5_0|q4_1|q4_0: float matrices quantized at load
};

/// runtime::loadModel (shared with the GUI's engine): a GGUF file (tokenizer from its metadata) or a Hugging Face
/// directory (tokenizer.json); an empty path loads defaultModelPath(). Throws UsageError (no such model, an unknown
/// dtype) / FormatError / TokenizerError with the path and the problem. The device ("cpu", "cuda", "cuda:N") is
/// checked before anything is read: one that is not here is an Error (Unavailable) naming what there is.
Loaded loadModel(const std::string& path, const ModelChoice& how = {});
/// The choice as JSON ({"dtype", "activations", "device", "weights"}): what a shard file says its run ran as.
nlohmann::json modelChoiceJson(const ModelChoice& how);
/// ModelChoice's options on `cmd`.
void addModelOptions(CLI::App* cmd, ModelChoice& how);
/// The prompt's ids; with `chat`, wrapped as one user turn of the model's chat template.
std::vector<std::int64_t> encodePrompt(const Loaded& m, const std::string& text, bool chat);
/// --prompt or --prompt-file; UsageError when both are empty.
std::string promptText(const std::string& prompt, const std::string& file);
/// UsageError when `promptTokens` + `maxNew` exceed the model's context (before anything runs or is printed).
void checkContext(const Loaded& m, std::size_t promptTokens, int maxNew);
/// EOS and <|im_end|> when the vocabulary has it.
std::vector<std::int64_t> stopIds(const Loaded& m);

/// Perplexity of `ids` fed through a fresh cache of `cfg` in chunks of `chunk` tokens, so that the quantized
/// states of earlier chunks are what later tokens attend to (a single prefill would never read them quantized).
double perplexity(const model::LlamaModel& model, const cache::CacheConfig& cfg, const std::vector<std::int64_t>& ids,
                  int chunk);

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

RunFigures measure(const Loaded& m, const cache::CacheConfig& cfg, const std::vector<std::int64_t>& prompt, int maxNew,
                   int pplChunk, bool shadow);

}  // namespace kvscope::cli
