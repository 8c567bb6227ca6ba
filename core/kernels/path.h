// Which of kvscope's two kernel sets a model's caches run, and the one place below the context that asks where a
// tensor lies.
//
// The execution context (device/context.h) chooses the path once (ExecutionContext::kernelPath()); the model hands it
// to its caches (LlamaModel::makeCache), the cache to its layers, the layers to their codecs. Code above the kernels
// branches on that choice, never on a tensor's device. The kernels themselves (kernels/*_tensor.h,
// kernels/fp8_attention.h) dispatch a tensor to its CPU loop or its CUDA twin, which share their scalar code.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace kvscope::kernels {

enum class KernelPath : std::uint8_t {
  /// kvscope's CPU kernels: attention reads a layer's stored form in place, the codecs run their host loops. CPU
  /// tensors only.
  Host,
  /// LibTorch's operators and kvscope's device kernels (the CUDA twins, or their CPU loops in portable mode), on the
  /// tensors' own device: a layer's states dequantized whole for attention, the codecs' device passes.
  Device,
};

/// Whether t's memory is the host's: what the kernels dispatch on (a CPU loop or a CUDA kernel), and what a host path
/// checks its inputs against.
inline bool inHostMemory(const at::Tensor& t) {
  return t.is_cpu();
}

}  // namespace kvscope::kernels
