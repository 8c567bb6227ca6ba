// ggml block formats -> float32, and GGUF tensors -> at::Tensor.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "model/gguf.h"

namespace kvscope::model {

/// Throws FormatError ("tensor type X is not supported (kvscope reads ...)") for a ggml type kvscope does not read.
void checkReadable(std::uint32_t type);

/// Dequantizes n elements (a whole number of blocks) of ggml `type` from `src` into `dst`. Throws FormatError for
/// types kvscope does not read.
void dequantizeRow(std::uint32_t type, const std::uint8_t* src, std::int64_t n, float* dst);

/// The tensor as a [dims reversed] at::Tensor of `dtype` on the CPU (ggml's dims[0] is the last torch dimension).
at::Tensor toTensor(const GgufFile::Tensor& t, at::ScalarType dtype = at::kFloat);

}  // namespace kvscope::model
