#include "runtime/load_options.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "util/error.h"

namespace kvscope::runtime {

const std::vector<std::string>& dtypeNames() {
  static const std::vector<std::string> names{"fp32", "bf16", "fp16"};
  return names;
}

int dtypeBits(std::string_view name) {
  return name == "fp32" ? 32 : (name == "bf16" || name == "fp16") ? 16 : 0;
}

const std::vector<std::string>& activationsNames() {
  static const std::vector<std::string> names{"auto", "f32", "q8"};
  return names;
}

const std::vector<std::string>& weightsNames() {
  static const std::vector<std::string> names{"stored", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0"};
  return names;
}

std::string activationsHelp() {
  return "how block-format weights are multiplied: auto (the default) computes as the weights' own engine does: "
         "8-bit activations per 32 values where the weights are llama.cpp block formats (llama.cpp's arithmetic), "
         "float32 where they are float tensors (transformers'); f32 always float32 (transformers' numbers on a "
         "GGUF); q8 always 8-bit";
}

namespace {
void checkChoice(const char* option, const std::string& value, const std::vector<std::string>& choices) {
  if (std::find(choices.begin(), choices.end(), value) != choices.end()) return;
  throw Error(ErrorCode::BadInput, fmt::format("unknown {} `{}` ({})", option, value, fmt::join(choices, ", ")));
}
}  // namespace

void checkLoadOptions(const LoadOptions& o) {
  checkChoice("dtype", o.dtype, dtypeNames());
  checkChoice("activations", o.activations, activationsNames());
  checkChoice("weights", o.weights, weightsNames());
}

}  // namespace kvscope::runtime
