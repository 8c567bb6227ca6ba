// LibTorch's CUDA state as kvscope's kernels and the execution context need it: the current stream and the caching
// allocator's figures (libc10_cuda; the CUDA operators themselves live in libtorch_cuda, loaded on demand by
// device/context.cpp).
#include "kernels/cuda/runtime.h"

#if defined(KVSCOPE_WITH_C10_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>

namespace kvscope::kernels::cuda {

void* currentStream(int device) {
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
}

void synchronize(int device) {
  c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).synchronize();
}

namespace {
const c10::CachingDeviceAllocator::Stat& allocated(const c10::CachingDeviceAllocator::DeviceStats& s) {
  return s.allocated_bytes[static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
}
}  // namespace

std::int64_t allocatedBytes(int device) {
  return allocated(c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device))).current;
}

std::int64_t peakAllocatedBytes(int device) {
  return allocated(c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device))).peak;
}

void resetPeak(int device) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device));
}

}  // namespace kvscope::kernels::cuda

#else  // a LibTorch without CUDA: no CUDA tensors exist, the legacy stream serves the kernel tests

#include <cuda_runtime.h>

namespace kvscope::kernels::cuda {
void* currentStream(int) {
  return nullptr;
}
void synchronize(int device) {
  DeviceScope scope(device);
  cudaDeviceSynchronize();
}
std::int64_t allocatedBytes(int) {
  return 0;
}
std::int64_t peakAllocatedBytes(int) {
  return 0;
}
void resetPeak(int) {}
}  // namespace kvscope::kernels::cuda

#endif
