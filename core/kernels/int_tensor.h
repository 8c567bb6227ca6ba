// Group-wise int quantization of ATen tensors (CPU or CUDA) with kvscope's loops/kernels (kernels/int_codec.h): what
// the quanto and hqq codecs use for CUDA states. g is a contiguous [R, C] matrix of fp32/bf16/fp16; groups run along
// `dim` (1: rows, 0: columns); per-group tensors have ATen's keepdim shape ([R, 1] or [1, C]).
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

#include "kernels/int_codec.h"

namespace kvscope::kernels {

/// Min and max of each group, float32 (exact), NaN propagating.
std::pair<at::Tensor, at::Tensor> groupMinMax(const at::Tensor& g, int dim);

/// uint8 [packedBytes(R * C, bits)]: the codes of g with each group's scale and zero (any float dtype: converted to
/// float32 exactly), packed as kernels/cpu/bitpack.h. bits in {1, 2, 3, 4, 8}.
at::Tensor quantizePack(const at::Tensor& g, int dim, const at::Tensor& scale, const at::Tensor& zero, IntScheme s,
                        int bits);

/// [R, C] of `dtype`: the values of packed codes (scale and zero as the codec stores them).
at::Tensor unpackDequantize(const at::Tensor& packed, std::int64_t R, std::int64_t C, int dim, const at::Tensor& scale,
                            const at::Tensor& zero, IntScheme s, int bits, at::ScalarType dtype);

}  // namespace kvscope::kernels
