// A model session: the one service the CLI's commands and the GUI's engine use to run a model. It loads the model
// with its tokenizer as LoadOptions say (device, dtype, the activations' arithmetic, the weights' format), and
// answers what both apps ask of a loaded model: the prompt's ids (chat template), the stop ids, whether a prompt
// fits the context, a text's evaluation windows, the perplexity of a token sequence through a cache config.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "cache/config.h"
#include "model/llama.h"
#include "runtime/load_options.h"
#include "tokenizer/tokenizer.h"

namespace kvscope::runtime {

class Session {
 public:
  /// Loads the model `o` names (an empty path: defaultModelPath()). Throws kvscope::Error: BadInput for a dtype,
  /// activations or weights value that is not among the choices and Unavailable for a device that is not here
  /// (both before anything is read); ModelNotFound, the readers' errors and LoadCancelled as runtime::loadModel.
  static Session open(const LoadOptions& o, const model::ProgressFn& progress = {});

  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;
  ~Session();

  /// The model's path as loaded (defaultModelPath() resolved).
  const std::string& path() const { return path_; }
  /// The options as asked for (`activations` may be "auto").
  const LoadOptions& options() const { return options_; }
  const model::LlamaModel& model() const { return *model_; }
  /// The model to change how it computes for a scope (generate::ScanArithmetic: the tuner's scan in float32).
  model::LlamaModel& model() { return *model_; }
  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }

  /// The arithmetic that runs: "q8" or "f32" (auto resolved: q8 where the model has block-format weights on the
  /// host kernels).
  model::Activations activations() const { return model_->activations(); }
  /// One line for the model card and the run's record: "q8 activations (llama.cpp's arithmetic)" or "f32
  /// activations (transformers' arithmetic)".
  std::string arithmetic() const;
  /// Which CPU kernels run on a CPU device, one line: "CPU kernels: avx2 (KVSCOPE_ISA=avx2; this CPU has avx512)"
  /// (kernels/cpu/simd.h); "" on a GPU.
  std::string kernelsLine() const;
  /// What a run's record says it ran as: {"dtype", "activations" (as resolved), "device", "weights"}.
  nlohmann::json runAs() const;

  /// The prompt's ids; with `chat`, wrapped as one user turn of the model's chat template. BadInput when it encodes
  /// to no tokens.
  std::vector<std::int64_t> encodePrompt(const std::string& text, bool chat) const;
  /// A text's ids as an evaluation reads them (the tokenizer's BOS, special tokens as text). BadInput, naming
  /// `what`, when fewer than 2 tokens.
  std::vector<std::int64_t> encodeText(const std::string& text, const std::string& what) const;
  /// BadInput when `promptTokens` + `maxNew` exceed the model's context.
  void checkContext(std::size_t promptTokens, int maxNew) const;
  /// EOS, and <|im_end|> / <end_of_turn> where the vocabulary has them: where a chat answer ends.
  const std::vector<std::int64_t>& stopIds() const { return stopIds_; }

  /// Perplexity of `ids` fed through a fresh cache of `cfg` in chunks of `chunk` tokens, so that the quantized
  /// states of earlier chunks are what later tokens attend to (a single prefill would never read them quantized).
  double perplexity(const cache::CacheConfig& cfg, const std::vector<std::int64_t>& ids, int chunk) const;

 private:
  Session() = default;
  LoadOptions options_;
  std::string path_;
  std::unique_ptr<model::LlamaModel> model_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::vector<std::int64_t> stopIds_;
};

/// The activations `choice` resolves to for `model` ("auto": Q8 where model.blockWeights(), else F32).
model::Activations resolveActivations(const std::string& choice, const model::LlamaModel& model);

}  // namespace kvscope::runtime
