// FP8 encode/decode of cache states held as ATen tensors, on whatever device they are: kvscope's CPU kernels
// (kernels/cpu/fp8_cpu.h), its CUDA kernels when built with them, LibTorch's float8 cast anywhere else; all three
// bit-identical (same scalar conversions, kernels/fp8.h; the cast is the definition they are tested against).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

#include "kernels/cpu/fp8_cpu.h"

namespace kvscope::kernels {

/// dst[b, h, t, :] = fp8(x[b, h, t, :] / expanded[h, :]) for x [B, H, T, D] (fp32/bf16/fp16) and dst uint8 of the same
/// shape; both need dense [T, D] planes (stride(3) == 1, stride(2) == D), as the cache buffers and their slots have.
/// `expanded` is the float32 [H, D] scale. With `saturate`, x/scale is clamped to +-max first (NaN stays NaN).
/// Returns the counts, or nullopt when x's device has no kvscope kernel (the caller then uses ATen's cast).
std::optional<Fp8Counts> fp8EncodeOnDevice(const at::Tensor& x, const at::Tensor& dst, const at::Tensor& expanded,
                                           Fp8Format format, bool saturate);

/// dst[b, h, t, :] = T(decode(q[b, h, t, :]) * expanded[h, :]) (float32 multiply, then the cast to dst's dtype).
/// Returns false when q's device has no kvscope kernel.
bool fp8DecodeOnDevice(const at::Tensor& q, const at::Tensor& dst, const at::Tensor& expanded, Fp8Format format);

/// fp8EncodeOnDevice's contract on any device (x contiguous); the overflow and NaN counts.
Fp8Counts fp8Encode(const at::Tensor& x, const at::Tensor& dst, const at::Tensor& expanded, Fp8Format format,
                    bool saturate);
/// The same, with the counts left where they were counted: on the CPU (or through LibTorch's cast) in `host`; with
/// kvscope's device kernels in `device`, an int64 [2] tensor (overflow, non-finite) on the device, so that encoding
/// waits for nothing (the caller copies the counts to the host when it needs them, several at once).
struct Fp8CountsDeferred {
  Fp8Counts host;
  at::Tensor device;
};
Fp8CountsDeferred fp8EncodeDeferred(const at::Tensor& x, const at::Tensor& dst, const at::Tensor& expanded,
                                    Fp8Format format, bool saturate);
/// fp8DecodeOnDevice's contract on any device (q's planes may be strided rows of a larger buffer).
void fp8Decode(const at::Tensor& q, const at::Tensor& dst, const at::Tensor& expanded, Fp8Format format);

/// True when this build has CUDA kernels and a CUDA device can be used now.
bool cudaKernelsUsable();

}  // namespace kvscope::kernels
