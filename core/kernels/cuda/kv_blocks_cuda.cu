#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/kv_blocks_cuda.h"
#include "kernels/kv_block_codec.h"

namespace kvscope::kernels::cuda {
namespace {

constexpr int kThreads = 128;

unsigned blocksFor(std::int64_t n) {
  return static_cast<unsigned>(std::max<std::int64_t>((n + kThreads - 1) / kThreads, 1));
}

__device__ __forceinline__ std::int64_t rowOffset(std::int64_t r, std::int64_t H, std::int64_t T, KvRowStrides s) {
  return r / (H * T) * s.b + r / T % H * s.h + r % T * s.t;
}

__global__ void storeRows(std::uint32_t type, const float* x, std::int64_t rows, std::int64_t H, std::int64_t T,
                          std::int64_t D, int rotation, std::uint8_t* out, KvRowStrides s, float* back, float scale) {
  const std::int64_t r = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  float tmp[kvcodec::kMaxRow];
  kvcodec::storeRow(type, x + r * D, D, rotation, tmp, out + rowOffset(r, H, T, s), back ? back + r * D : nullptr,
                    scale);
}

__global__ void readRows(std::uint32_t type, const std::uint8_t* in, KvRowStrides s, std::int64_t rows, std::int64_t H,
                         std::int64_t T, std::int64_t D, int rotation, float scale, float* out) {
  const std::int64_t r = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  kvcodec::readRow(type, in + rowOffset(r, H, T, s), D, rotation, out + r * D, scale);
}

}  // namespace

void storeKvRows(std::uint32_t type, const float* x, std::int64_t B, std::int64_t H, std::int64_t T, std::int64_t D,
                 int rotation, std::uint8_t* rows, KvRowStrides strides, float* back, float scale, void* stream) {
  const std::int64_t n = B * H * T;
  if (n == 0) return;
  storeRows<<<blocksFor(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(type, x, n, H, T, D, rotation, rows,
                                                                              strides, back, scale);
}

void readKvRows(std::uint32_t type, const std::uint8_t* rows, KvRowStrides strides, std::int64_t B, std::int64_t H,
                std::int64_t T, std::int64_t D, int rotation, float scale, float* out, void* stream) {
  const std::int64_t n = B * H * T;
  if (n == 0) return;
  readRows<<<blocksFor(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(type, rows, strides, n, H, T, D, rotation,
                                                                             scale, out);
}

}  // namespace kvscope::kernels::cuda
