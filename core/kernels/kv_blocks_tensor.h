// KV cache rows (llama.cpp's blocks, the engines' FP4 blocks) over ATen tensors, on the CPU (at::parallel_for over
// rows) or on a CUDA device (kernels/cuda/kv_blocks_cuda.h), both through the scalar codecs of
// kernels/kv_block_codec.h: the same bytes and values on either. Types are ggml's numbers (kvcodec::Type); `rotation` >
// 0: rows are Hadamard-rotated in chunks of that size before they are encoded, and rotated back as they are read. Bad
// arguments: an Error, Internal (kvscope's caches pass them) but for a head size above the codecs' kMaxRow, which a
// model can ask for (BadInput).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace kvscope::kernels {

/// Encodes each row of x [B, H, T, D] (fp32, bf16 or fp16) into `rows`, uint8 [B, H, T, kvRowBytes(type, D)] on x's
/// device with a dense last dimension (a view into a larger buffer, as a SeqBuffer's tail, is written in place).
/// Returns the rows as attention reads them (decoded and rotated back, float32 [B, H, T, D]) when `decode`, else an
/// undefined tensor. `scale`: NVFP4's global decode scale (the other types ignore it).
at::Tensor storeKvRows(const at::Tensor& x, std::uint32_t type, int rotation, const at::Tensor& rows, bool decode,
                       float scale = 1.0f);

/// The values of stored rows uint8 [B, H, S, kvRowBytes(type, D)] (dense last dimension): float32 [B, H, S, D] on
/// their device.
at::Tensor readKvRows(const at::Tensor& rows, std::uint32_t type, std::int64_t D, int rotation, float scale = 1.0f);

/// x [B, H, T, D] through a row of `type` and back (rotated, encoded, decoded, rotated back), float32: what llama.cpp's
/// attention multiplies when it converts a query row to the keys' dot type.
at::Tensor roundThroughKvRows(const at::Tensor& x, std::uint32_t type, int rotation);

/// x [..., D] with each row's two halves interleaved: out[..., 2i + j] = x[..., j * D/2 + i] (llama.cpp's order of a
/// Llama-family model's Q/K channels). deinterleaveHalves is its inverse. Either device.
at::Tensor interleaveHalves(const at::Tensor& x);
at::Tensor deinterleaveHalves(const at::Tensor& x);

}  // namespace kvscope::kernels
