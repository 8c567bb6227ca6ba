// Fused decode attention over an FP8 cache on a CUDA device: reads the uint8 K/V codes and their float32 scales
// directly (no full-precision copy of the cache), fp32 accumulation, online softmax. Blocks: one per (batch row,
// query head) and split of the sequence (flash-decoding: with few heads, one block per head would leave most of the
// device idle at long context); a second kernel merges the splits. The CPU twin is kernels/cpu/fp8_attention_cpu.h.
#pragma once

#include <cstdint>

#include "kernels/fp8.h"

namespace kvscope::kernels::cuda {

struct Fp8AttentionArgs {
  const float* q = nullptr;  ///< [B, Hq, D] float32, contiguous
  const std::uint8_t* k = nullptr;
  const std::uint8_t* v = nullptr;
  std::int64_t kStrideB = 0, kStrideH = 0, kStrideT = 0;  ///< in bytes (= elements); the D codes of a token are dense
  std::int64_t vStrideB = 0, vStrideH = 0, vStrideT = 0;
  const float* kScale = nullptr;  ///< [Hkv, D] float32
  const float* vScale = nullptr;
  std::int64_t B = 0, Hq = 0, Hkv = 0, L = 0, D = 0;
  float smScale = 1.0f;
  Fp8Format format = Fp8Format::E4M3FN;
  float* out = nullptr;  ///< [B, Hq, D] float32
};

/// How many sequence splits the kernel uses for this shape (what the workspace is sized by).
int fp8AttentionSplits(std::int64_t B, std::int64_t Hq, std::int64_t L);

/// Floats of workspace the call needs: B * Hq * splits * (D + 2).
std::int64_t fp8AttentionWorkspace(std::int64_t B, std::int64_t Hq, std::int64_t L, std::int64_t D);

/// Runs the attention; D <= 256. `workspace` holds fp8AttentionWorkspace() floats.
void fp8DecodeAttention(const Fp8AttentionArgs& a, float* workspace, void* stream);

}  // namespace kvscope::kernels::cuda
