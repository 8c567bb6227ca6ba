#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/runtime.h"
#include "util/error.h"

namespace kvscope::kernels::cuda {

DeviceScope::DeviceScope(int device) {
  int current = 0;
  if (cudaGetDevice(&current) == cudaSuccess && current != device && cudaSetDevice(device) == cudaSuccess)
    previous_ = current;
}

DeviceScope::~DeviceScope() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

void checkLastError(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return;
  // kvscope's kernels launched with arguments kvscope checked: a failed launch is kvscope's (or the device's) failure.
  throw Error(e == cudaErrorMemoryAllocation ? ErrorCode::OutOfMemory : ErrorCode::Internal,
              std::string(what) + ": CUDA error: " + cudaGetErrorString(e));
}

}  // namespace kvscope::kernels::cuda

namespace kvscope::kernels::cuda {

int deviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: not an error to keep for the next launch check
    return 0;
  }
  return n;
}

std::string deviceName(int device) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return p.name;
}

std::int64_t deviceTotalMemory(int device) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return static_cast<std::int64_t>(p.totalGlobalMem);
}

}  // namespace kvscope::kernels::cuda
