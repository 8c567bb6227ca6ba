// KV cache rows (llama.cpp's blocks, the engines' FP4 blocks) on a CUDA device, sharing the scalar code of the CPU twin
// (kernels/kv_block_codec.h): a cache row stored (rotated, encoded, optionally decoded back) and stored rows read
// (decoded, rotated back), one thread per row. Plain device pointers; `stream` is a cudaStream_t (nullptr: the default
// stream).
#pragma once

#include <cstdint>

namespace kvscope::kernels::cuda {

/// Byte strides of a rows tensor uint8 [B, H, T, row bytes] (its last dimension dense).
struct KvRowStrides {
  std::int64_t b = 0, h = 0, t = 0;
};

/// x: float32 [B, H, T, D] contiguous; rows: the destination rows; back (nullable): float32 [B, H, T, D] contiguous,
/// the rows as attention reads them. `scale`: NVFP4's global decode scale.
void storeKvRows(std::uint32_t type, const float* x, std::int64_t B, std::int64_t H, std::int64_t T, std::int64_t D,
                 int rotation, std::uint8_t* rows, KvRowStrides strides, float* back, float scale, void* stream);

/// out: float32 [B, H, T, D] contiguous, the values of the rows.
void readKvRows(std::uint32_t type, const std::uint8_t* rows, KvRowStrides strides, std::int64_t B, std::int64_t H,
                std::int64_t T, std::int64_t D, int rotation, float scale, float* out, void* stream);

}  // namespace kvscope::kernels::cuda
