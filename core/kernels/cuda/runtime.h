// Small CUDA runtime helpers for the ATen glue (kernels/*.cpp) and the execution context (device/context.cpp): no CUDA
// header is seen by the callers. Built only with the CUDA kernels (KVSCOPE_WITH_CUDA).
#pragma once

#include <cstdint>
#include <string>

namespace kvscope::kernels::cuda {

/// Makes `device` current for the scope and restores the previous one.
class DeviceScope {
 public:
  explicit DeviceScope(int device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
};

/// Throws an Error naming `what` when the last launch or call failed (Internal; OutOfMemory for a failed allocation).
void checkLastError(const char* what);

/// CUDA devices the runtime sees (0 without a driver or a device); asks the runtime only, not LibTorch.
int deviceCount();
/// The device's name and its memory in bytes (empty and 0 when it cannot be asked).
std::string deviceName(int device);
std::int64_t deviceTotalMemory(int device);

/// LibTorch's current stream on `device` (a cudaStream_t): where kvscope's kernels launch, in order with LibTorch's
/// own work on that stream.
void* currentStream(int device);
/// Waits for the device's current stream.
void synchronize(int device);
/// Bytes LibTorch's caching allocator holds for tensors on `device` now and at most since resetPeak(device).
std::int64_t allocatedBytes(int device);
std::int64_t peakAllocatedBytes(int device);
void resetPeak(int device);

}  // namespace kvscope::kernels::cuda
