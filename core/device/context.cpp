#include "device/context.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "util/error.h"
#include "util/process_memory.h"

#if defined(KVSCOPE_WITH_CUDA)
#include "kernels/cuda/runtime.h"
#endif

namespace kvscope::device {

namespace {

// LibTorch's CUDA operators live in libtorch_cuda, which registers them when it is loaded. kvscope's programs do not
// link it (loading it costs every process about 0.2 s and 350 MB, CPU runs included): it is loaded here, once, the
// first time a CUDA device is asked for, before anything asks LibTorch about CUDA (LibTorch settles its CUDA hooks on
// the first question). Returns the reason when it cannot be loaded.
const std::string& loadCudaBackend() {
  static std::string problem;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string tried;
    std::vector<std::string> names{"libtorch_cuda.so"};
#if defined(KVSCOPE_TORCH_LIB_DIR)
    names.push_back(std::string(KVSCOPE_TORCH_LIB_DIR) + "/libtorch_cuda.so");
#endif
    for (const auto& n : names) {
      if (dlopen(n.c_str(), RTLD_NOW | RTLD_GLOBAL)) return;
      const char* e = dlerror();
      tried += fmt::format("{}{}", tried.empty() ? "" : "; ", e ? e : n);
    }
    problem = fmt::format("LibTorch's CUDA backend cannot be loaded ({})", tried);
  });
  return problem;
}

// CUDA devices that are here: the CUDA runtime's count (without loading LibTorch's backend when it is 0), then
// LibTorch's, which needs the backend.
int cudaDevices(std::string* why) {
#if defined(KVSCOPE_WITH_CUDA)
  if (kernels::cuda::deviceCount() == 0) {
    if (why) *why = "no CUDA device is present (the CUDA runtime sees none)";
    return 0;
  }
#else
  if (!std::filesystem::exists("/dev/nvidiactl")) {
    if (why) *why = "no CUDA device is present (no NVIDIA driver: /dev/nvidiactl is missing)";
    return 0;
  }
#endif
  if (const std::string& p = loadCudaBackend(); !p.empty()) {
    if (why) *why = p;
    return 0;
  }
  if (!at::hasCUDA()) {
    if (why) *why = "LibTorch sees no CUDA device";
    return 0;
  }
  return static_cast<int>(at::detail::getCUDAHooks().deviceCount());
}

}  // namespace

ExecutionContext::ExecutionContext(c10::Device device, at::ScalarType dtype, bool portable)
    : device_(device), dtype_(dtype), portable_(portable && device.is_cpu()) {}

std::string ExecutionContext::name() const {
  return portable_ ? "cpu (portable)" : device_.str();
}

at::TensorOptions ExecutionContext::options(at::ScalarType type) const {
  return at::TensorOptions().dtype(type).device(device_);
}

at::Tensor ExecutionContext::place(const at::Tensor& t) const {
  return !t.defined() || t.device() == device_ ? t : t.to(device_);
}

at::Generator ExecutionContext::generator(std::uint64_t seed) const {
  at::Generator g = device_.is_cpu() ? at::make_generator<at::CPUGeneratorImpl>(seed)
                                     : at::detail::getCUDAHooks().getNewGenerator(device_.index());
  if (!device_.is_cpu()) g.set_current_seed(seed);
  return g;
}

void ExecutionContext::synchronize() const {
#if defined(KVSCOPE_WITH_CUDA)
  if (device_.is_cuda()) kernels::cuda::synchronize(device_.index());
#endif
}

DeviceMemory ExecutionContext::memory() const {
  DeviceMemory m;
#if defined(KVSCOPE_WITH_CUDA)
  if (device_.is_cuda()) {
    m.used = kernels::cuda::allocatedBytes(device_.index());
    m.peak = kernels::cuda::peakAllocatedBytes(device_.index());
    m.total = kernels::cuda::deviceTotalMemory(device_.index());
    return m;
  }
#endif
  m.used = util::residentBytes();
  m.peak = util::peakResidentBytes();
  return m;
}

void ExecutionContext::resetPeak() const {
#if defined(KVSCOPE_WITH_CUDA)
  if (device_.is_cuda()) {
    kernels::cuda::resetPeak(device_.index());
    return;
  }
#endif
  util::resetPeakResident();
}

ExecutionContext makeContext(const std::string& name, at::ScalarType dtype, bool portable) {
  if (name == "cpu") return ExecutionContext(c10::Device(c10::kCPU), dtype, portable);
  int index = -1;
  if (name == "cuda") {
    index = 0;
  } else if (name.rfind("cuda:", 0) == 0 && name.size() > 5 && name.size() <= 8 &&
             name.find_first_not_of("0123456789", 5) == std::string::npos) {
    index = std::atoi(name.c_str() + 5);
  } else {
    throw Error(ErrorCode::BadInput, fmt::format("unknown device `{}` (cpu, cuda or cuda:N)", name));
  }
  std::string why;
  const int n = cudaDevices(&why);
  if (n == 0)
    throw Error(ErrorCode::Unavailable, fmt::format("device `{}` is not available: {}; use --device cpu", name, why));
  if (index >= n)
    throw Error(ErrorCode::Unavailable,
                fmt::format("device `{}` is not available: this machine has {} CUDA device{} (cuda:0{})", name, n,
                            n == 1 ? "" : "s", n == 1 ? "" : fmt::format(" to cuda:{}", n - 1)));
  return ExecutionContext(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index)), dtype);
}

std::vector<std::string> availableDevices() {
  std::vector<std::string> out{"cpu"};
  const int n = cudaDevices(nullptr);
  for (int i = 0; i < n; ++i) out.push_back(fmt::format("cuda:{}", i));
  return out;
}

std::string describeDevice(const std::string& name) {
#if defined(KVSCOPE_WITH_CUDA)
  if (name.rfind("cuda:", 0) == 0) {
    const int i = std::atoi(name.c_str() + 5);
    const std::string model = kernels::cuda::deviceName(i);
    const std::int64_t total = kernels::cuda::deviceTotalMemory(i);
    if (!model.empty()) return fmt::format("{} — {}, {:.1f} GiB", name, model, static_cast<double>(total) / (1 << 30));
  }
#endif
  return name;
}

}  // namespace kvscope::device
