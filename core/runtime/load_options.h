// How a model is loaded: what every model-running command's options (--device, --dtype, --activations, --weights)
// and the GUI's run panel choose. Torch-free, so that the GUI's form offers the same choices the CLI checks.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvscope::runtime {

struct LoadOptions {
  std::string path;                  ///< a GGUF file or a Hugging Face directory; empty: defaultModelPath()
  std::string device = "cpu";        ///< cpu, cuda or cuda:N
  std::string dtype = "fp32";        ///< the activations' (and on a device the weights')
  std::string activations = "auto";  ///< auto, f32 or q8: how block-format weights are multiplied
  std::string weights = "stored";    ///< stored, or a llama.cpp format float matrices are quantized to at load
};

/// The choices of each option, in the order forms and help list them; the first is the default.
const std::vector<std::string>& dtypeNames();  ///< fp32, bf16, fp16
/// Bits per value of a dtype name: 32 for fp32, 16 for bf16 and fp16, 0 for another name (a record that says none).
int dtypeBits(std::string_view name);
const std::vector<std::string>& activationsNames();  ///< auto, f32, q8
const std::vector<std::string>& weightsNames();      ///< stored, q8_0, q5_1, q5_0, q4_1, q4_0

/// What each activations choice means, for help texts and tooltips.
std::string activationsHelp();

/// Throws kvscope::Error (BadInput) naming the option, the value and the choices, for a dtype, activations or
/// weights value that is not among them (before anything is read).
void checkLoadOptions(const LoadOptions& o);

}  // namespace kvscope::runtime
