// Whole-tensor group-wise integer quantization, as the backends transformers' QuantizedLayer calls (quanto, hqq).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "kernels/path.h"

namespace kvscope::cache::detail {

struct QuantizedBlock {
  at::Tensor packed;                  ///< uint8, codes packed by kernels::packBits in the grouped layout's order
  at::Tensor scale, zero;             ///< the backend's own layouts and dtypes
  std::vector<std::int64_t> grouped;  ///< shape of the grouped 2-D code matrix
  std::vector<std::int64_t> shape;    ///< original [B, H, S, D]
  int axis = 0;
  std::int64_t payloadBytes() const { return packed.defined() ? packed.numel() : 0; }
  std::int64_t metadataBytes() const {
    return (scale.defined() ? static_cast<std::int64_t>(scale.nbytes()) : 0) +
           (zero.defined() ? static_cast<std::int64_t>(zero.nbytes()) : 0);
  }
};

class GroupCodec {
 public:
  virtual ~GroupCodec() = default;
  /// x: contiguous [B, H, S, D]. Throws CacheError when the group size does not fit the shape.
  virtual QuantizedBlock quantize(const at::Tensor& x, int axis) const = 0;
  /// Writes the dequantized [B, H, S, D] into dst (any strides), in x's original dtype.
  virtual void dequantizeInto(const QuantizedBlock& q, const at::Tensor& dst) const = 0;
};

// A codec runs the kernels of its layer's path, on the states' device: Host, LibTorch's CPU operators as the Python
// package runs them (CPU states only); Device, kvscope's device kernels (kernels/int_tensor.h: the CUDA twins, or
// their CPU loops in portable mode) for the O(n) passes, with the same roundings: the same scales, zero-points and
// dequantized values either way.

/// optimum-quanto 0.2.7 MaxOptimizer + quantize_weight (int2/int4, axis 0/-1).
std::unique_ptr<GroupCodec> makeQuantoCodec(int nbits, int groupSize,
                                            kernels::KernelPath path = kernels::KernelPath::Host);
/// hqq 0.2.8 Quantizer.quantize / dequantize (int1-8, axis 0/1), with or without its proximal optimizer.
std::unique_ptr<GroupCodec> makeHqqCodec(int nbits, int groupSize, bool optimize,
                                         kernels::KernelPath path = kernels::KernelPath::Host);

/// Packs uint8 codes (any shape, contiguous) / unpacks into a uint8 tensor of `shape`: the host path's packing, CPU
/// tensors.
at::Tensor packCodes(const at::Tensor& codes, int bits);
at::Tensor unpackCodes(const at::Tensor& packed, const std::vector<std::int64_t>& shape, int bits);

}  // namespace kvscope::cache::detail
