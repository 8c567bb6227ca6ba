#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/runtime.h"

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
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": CUDA error: " + cudaGetErrorString(e));
}

}  // namespace kvscope::kernels::cuda
