// Group-wise int quantization on a CUDA device, sharing the scalar code of the CPU twin (kernels/cpu/int_cpu.h):
// group min/max, quantize + pack, unpack + dequantize for the quanto and hqq layouts. Plain device pointers; `stream`
// is a cudaStream_t (nullptr: the default stream). Same arguments as the CPU functions.
#pragma once

#include <cstdint>

#include "kernels/int_codec.h"

namespace kvscope::kernels::cuda {

void groupMinMax(IntElem t, const void* x, std::int64_t R, std::int64_t C, int dim, float* mn, float* mx, void* stream);

void quantizePack(IntElem t, const void* x, std::int64_t R, std::int64_t C, int dim, const float* scale,
                  const float* zero, IntScheme s, int bits, std::uint8_t* out, void* stream);

void unpackDequantize(const std::uint8_t* packed, std::int64_t R, std::int64_t C, int dim, const float* scale,
                      const float* zero, IntScheme s, int bits, IntElem t, void* out, void* stream);

}  // namespace kvscope::kernels::cuda
