// FP8 encode/decode on a CUDA device: the same scalar conversions as the CPU codec (kernels/fp8.h), so results are
// bit-identical. Plain device pointers; `stream` is a cudaStream_t (nullptr: the default stream).
#pragma once

#include <cstdint>

#include "kernels/cpu/fp8_cpu.h"

namespace kvscope::kernels::cuda {

/// Encodes `rows` runs of n values each (run r starts at x + r * xStride elements and writes out + r * outStride
/// bytes), scale period `period` (scale + (r % scaleRows) * period). Counts land in counts[0..1] (device int64).
void fp8Encode(ElemType type, const void* x, std::int64_t xStride, const float* scale, std::int64_t scaleRows,
               std::int64_t period, std::int64_t rows, std::int64_t n, std::uint8_t* out, std::int64_t outStride,
               Fp8Format format, bool saturate, unsigned long long* counts, void* stream);

void fp8Decode(ElemType type, const std::uint8_t* q, std::int64_t qStride, const float* scale, std::int64_t scaleRows,
               std::int64_t period, std::int64_t rows, std::int64_t n, void* out, std::int64_t outStride,
               Fp8Format format, void* stream);

/// True when a CUDA device can be used now.
bool deviceAvailable();

}  // namespace kvscope::kernels::cuda
