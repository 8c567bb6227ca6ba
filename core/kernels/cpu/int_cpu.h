// Group-wise int quantization on the CPU with the scalar code the CUDA kernels use (kernels/int_codec.h): the CPU
// twin of kernels/cuda/int_cuda.h, tested against the ATen codecs (cache/quanto_codec.cpp, cache/hqq_codec.cpp).
// Plain pointers; x is a contiguous [R, C] matrix of T, groups along `dim` (see int_codec.h).
#pragma once

#include <cstdint>

#include "kernels/int_codec.h"

namespace kvscope::kernels {

/// mn[g], mx[g]: min and max of each group, as float32 (exact: T values). NaN propagates.
void groupMinMaxCpu(IntElem t, const void* x, std::int64_t R, std::int64_t C, int dim, float* mn, float* mx);

/// out[0 .. packedBytes(R * C, bits)): codes of x with each group's scale and zero, packed.
void quantizePackCpu(IntElem t, const void* x, std::int64_t R, std::int64_t C, int dim, const float* scale,
                     const float* zero, IntScheme s, int bits, std::uint8_t* out);

/// out (contiguous [R, C] of T): the values of the packed codes.
void unpackDequantizeCpu(const std::uint8_t* packed, std::int64_t R, std::int64_t C, int dim, const float* scale,
                         const float* zero, IntScheme s, int bits, IntElem t, void* out);

}  // namespace kvscope::kernels
