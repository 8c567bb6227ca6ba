// Decode attention (one query token) over an FP8 cache on the CPU, reading the uint8 codes and their float32 scales
// directly: the reference the fused CUDA kernel (kernels/cuda/fp8_attention_cuda.h) is tested against. fp32 throughout.
#pragma once

#include <cstdint>

#include "kernels/fp8.h"

namespace kvscope::kernels {

/// One (batch row, query head): out[d] = sum_t p_t * v_t[d], p = softmax_t(smScale * q . k_t), where
/// k_t[d] = decode(kc[t * kStride + d]) * ks[d] and v_t[d] = decode(vc[t * vStride + d]) * vs[d] (t < L, d < D).
/// `scores` is scratch for L floats.
void fp8DecodeAttentionHead(const float* q, const std::uint8_t* kc, std::int64_t kStride, const std::uint8_t* vc,
                            std::int64_t vStride, const float* ks, const float* vs, std::int64_t L, std::int64_t D,
                            float smScale, Fp8Format format, float* out, float* scores);

}  // namespace kvscope::kernels
