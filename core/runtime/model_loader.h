// Finding and loading a model with its tokenizer: the one service the CLI and the GUI's engine share, so that both
// apps find the same model (also the one an installed package ships) and refuse a bad one with the same message.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/llama.h"
#include "runtime/load_options.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace kvscope::runtime {

/// The named model path does not exist, or no model was named and none is where one is looked for (ErrorCode::BadFile:
/// a file the user can supply, exit 2).
class ModelNotFound : public Error {
 public:
  explicit ModelNotFound(const std::string& what) : Error(ErrorCode::BadFile, what) {}
};

struct LoadedModel {
  std::string path;
  std::unique_ptr<model::LlamaModel> model;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
};

/// Where a model is looked for when none is named, in order: $KVSCOPE_MODEL; the embedded model packaging/setup.sh
/// fetches ($KVSCOPE_CACHE, default ~/.cache/kvscope, then model/SmolLM2-135M-Instruct.Q4_1.gguf); the GGUF files
/// an installed package ships in <the program's folder>/../share/kvscope/models, by name.
std::vector<std::string> modelSearchPlaces();
/// The first of modelSearchPlaces() that exists ($KVSCOPE_MODEL is taken as given, whether or not it exists: the
/// load then names it); empty when there is none.
std::string defaultModelPath();

/// "fp32", "bf16" or "fp16"; an Error (BadInput) naming the value otherwise.
at::ScalarType parseDtype(const std::string& name);

/// A GGUF file (tokenizer from its metadata) or a Hugging Face directory (config.json, safetensors, tokenizer.json),
/// loaded into the execution context `ctx` (its device and dtype: device::makeContext). An empty path loads
/// defaultModelPath(). Throws ModelNotFound (saying where it looked), or the readers' errors (model::FormatError,
/// tokenizer errors) naming the file and the problem; model::LoadCancelled when `progress` returns false; out of
/// memory (the host's or the device's) as LibTorch raises it. `requantize`: LlamaModel::load's (--weights).
LoadedModel loadModel(const std::string& path, const device::ExecutionContext& ctx,
                      const model::ProgressFn& progress = {}, std::uint32_t requantize = 0);
/// The same on the CPU, activations in `dtype` (parseDtype's names).
LoadedModel loadModel(const std::string& path, const std::string& dtype, const model::ProgressFn& progress = {});

}  // namespace kvscope::runtime
