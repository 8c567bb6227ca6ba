// The execution context: where a model, its caches and a generation run (the device, the activations' dtype, the
// stream kernels launch on, the random numbers), created once by the CLI or the GUI's engine and passed to the model
// (LlamaModel::load), the cache (LlamaModel::makeCache) and the generation (through the model). Code below it asks
// the context, never `is_cuda()`, where two paths differ: the model its hostKernels(), a cache the kernel path chosen
// from it once (kernelPath(), kernels/path.h), which the cache hands to its layers and their codecs.
//
// Two paths exist. Host kernels: the CPU runs kvscope's own kernels (weights in their block formats, attention that
// reads a layer's stored form in place). Device path: weights as dense tensors of the context's dtype, LibTorch's
// operators, and attention over a layer's states dequantized for one layer at a time (fp8 decode steps read the codes
// with the fused kernel). A CUDA device always takes the device path; the CPU takes it in portable mode, so that the
// device's code is tested on any machine.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/path.h"

namespace kvscope::device {

/// A device's memory in bytes, as its allocator accounts it. CPU: the process's resident set (total 0: not known).
struct DeviceMemory {
  std::int64_t used = 0;   ///< held now by tensors (CUDA: LibTorch's caching allocator; CPU: resident set)
  std::int64_t peak = 0;   ///< the most held since the last resetPeak()
  std::int64_t total = 0;  ///< the device's capacity (0: unknown)
};

class ExecutionContext {
 public:
  /// The CPU with its host kernels, float32 activations.
  ExecutionContext() = default;
  /// `portable`: on the CPU, take the device path (see above); ignored on a device, which always takes it.
  ExecutionContext(c10::Device device, at::ScalarType dtype, bool portable = false);

  const c10::Device& device() const { return device_; }
  /// The activations' dtype (and the dense weights' on the device path).
  at::ScalarType dtype() const { return dtype_; }
  /// True where kvscope's CPU kernels run (block weights, attention over the stored form in place).
  bool hostKernels() const { return device_.is_cpu() && !portable_; }
  /// The kernels a cache of this context runs: Host where hostKernels(), else Device (CUDA, or the portable CPU).
  kernels::KernelPath kernelPath() const {
    return hostKernels() ? kernels::KernelPath::Host : kernels::KernelPath::Device;
  }
  /// "cpu", "cpu (portable)", "cuda:0".
  std::string name() const;

  /// Options for a tensor of `type` on the device.
  at::TensorOptions options(at::ScalarType type) const;
  /// `t` on the device (a no-op when it is there).
  at::Tensor place(const at::Tensor& t) const;
  /// A random-number generator of the device, seeded: the same seed gives the same samples on the same device.
  at::Generator generator(std::uint64_t seed) const;
  /// Waits for the work queued on the device's current stream (timings); a no-op on the CPU.
  void synchronize() const;
  /// The device's memory now; resetPeak() restarts the peak there.
  DeviceMemory memory() const;
  void resetPeak() const;

 private:
  c10::Device device_{c10::kCPU};
  at::ScalarType dtype_ = at::kFloat;
  bool portable_ = false;
};

/// The context for a device name: "cpu", "cuda" (device 0) or "cuda:N", and a dtype. Throws kvscope::Error:
/// BadInput for a name that is not a device, Unavailable when the device is not here (this build or this LibTorch has
/// no CUDA, no CUDA device is present, N is out of range), with what there is instead. A CUDA device loads LibTorch's
/// CUDA backend first (once per process).
ExecutionContext makeContext(const std::string& device, at::ScalarType dtype, bool portable = false);

/// The devices a model can run on here: "cpu", then "cuda:0", "cuda:1", ... The CUDA probe asks the CUDA runtime
/// and loads LibTorch's CUDA backend only when a device is present.
std::vector<std::string> availableDevices();

/// "cuda:0 — NVIDIA H200, 139.8 GiB" style line for a device name (the name alone where nothing more is known).
std::string describeDevice(const std::string& device);

}  // namespace kvscope::device
