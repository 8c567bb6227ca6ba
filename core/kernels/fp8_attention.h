// Decode attention straight from an FP8 cache: one query token per (batch row, head), K and V read as their uint8
// codes and float32 scales (no full-precision copy of the cache), grouped-query heads, fp32 accumulation. The CPU
// runs the reference loops (kernels/cpu/fp8_attention_cpu.h); CUDA the fused kernel (kernels/cuda/
// fp8_attention_cuda.h). Equal, within fp32 accumulation order, to LibTorch's scaled_dot_product_attention on the
// dequantized K/V (decode(code) * scale in float32) with enable_gqa.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

#include "kernels/fp8.h"

namespace kvscope::kernels {

/// q [B, Hq, 1, D] (fp32/bf16/fp16); kCodes, vCodes uint8 [B, Hkv, L, D] on q's device whose last dim is dense (the
/// cache buffer's valid view is); kScale, vScale float32 [Hkv, D]: every (head, channel)'s scale (a per-tensor or
/// per-head scale expanded). Hq a multiple of Hkv; query head h reads KV head h / (Hq / Hkv). `scale` is the softmax
/// scale (default 1/sqrt(D)). Returns [B, Hq, 1, D] in q's dtype. Throws an Error naming a bad input.
at::Tensor fp8DecodeAttention(const at::Tensor& q, const at::Tensor& kCodes, const at::Tensor& vCodes,
                              const at::Tensor& kScale, const at::Tensor& vScale, Fp8Format format,
                              std::optional<double> scale = std::nullopt);

}  // namespace kvscope::kernels
