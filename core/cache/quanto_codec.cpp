// optimum-quanto's group-wise affine quantization, op for op in LibTorch so that results match the Python package:
// group() reshapes; MaxOptimizer takes per-group min/max, scale = (max - min) / (2^bits - 1), shift = -min, in the
// input dtype; codes = clamp(round((x + shift) / scale), 0, 2^bits - 1); dequantize = scale * codes - shift.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include "cache/detail/group_codec.h"
#include "cache/layer.h"
#include "kernels/cpu/bitpack.h"
#include "kernels/int_tensor.h"

namespace kvscope::cache::detail {

at::Tensor packCodes(const at::Tensor& codes, int bits) {
  const at::Tensor c = codes.contiguous();
  at::Tensor out = at::empty({kernels::packedBytes(c.numel(), bits)}, c.options());
  kernels::packBits(c.const_data_ptr<std::uint8_t>(), c.numel(), bits, out.mutable_data_ptr<std::uint8_t>());
  return out;
}

at::Tensor unpackCodes(const at::Tensor& packed, const std::vector<std::int64_t>& shape, int bits) {
  const at::Tensor p = packed.contiguous();
  at::Tensor out = at::empty(shape, p.options());
  kernels::unpackBits(p.const_data_ptr<std::uint8_t>(), out.numel(), bits, out.mutable_data_ptr<std::uint8_t>());
  return out;
}

namespace {

class QuantoCodec final : public GroupCodec {
 public:
  QuantoCodec(int nbits, int groupSize, kernels::KernelPath path)
      : bits_(nbits), groupSize_(groupSize), device_(path == kernels::KernelPath::Device) {}

  QuantizedBlock quantize(const at::Tensor& x, int axis) const override {
    const std::int64_t gs = groupSize_;
    const std::int64_t axisDim = axis == 0 ? x.size(0) : x.size(-1);
    const std::int64_t axisNumel = x.numel() / axisDim;
    if (gs > axisNumel || axisNumel % gs != 0) {
      throw CacheError(fmt::format(
          "quanto: Group size ({}) must be a divisor of ({}): with axis={} the groups run over {} for states of "
          "shape [{}, {}, {}, {}]",
          gs, axisNumel, axis, axis == 0 ? "kv_heads x seq x head_dim" : "batch x kv_heads x seq", x.size(0), x.size(1),
          x.size(2), x.size(3)));
    }
    at::Tensor g;
    if (axis == 0) {
      g = x.reshape({-1, gs});
    } else {
      const std::int64_t groups = axisNumel / gs;
      g = x.reshape({groups, gs, axisDim}).permute({1, 2, 0}).reshape({gs, axisDim * groups});
    }
    // AffineOptimizer drops the axis when the grouped tensor has a single row/column along it.
    const std::int64_t dim = (axis == 0 && g.size(0) != 1) ? 1 : 0;
    // The device path: kvscope's kernels (kernels/int_tensor.h), which do these ops' roundings element-wise.
    const bool device = device_;
    const at::Tensor gc = device ? g.contiguous() : g;
    at::Tensor rmin, rmax;
    if (device) {
      auto [mn, mx] = kernels::groupMinMax(gc, static_cast<int>(dim));
      rmin = mn.to(g.scalar_type()), rmax = mx.to(g.scalar_type());
    } else {
      rmin = at::amin(g, {dim}, true), rmax = at::amax(g, {dim}, true);
    }
    const std::int64_t levels = (std::int64_t{1} << bits_) - 1;
    QuantizedBlock q;
    // On CUDA a tensor divisor: LibTorch's CUDA division by a scalar multiplies by the reciprocal (1/3, 1/15 inexact).
    q.scale = device ? (rmax - rmin) / at::full_like(rmax, static_cast<double>(levels)) : (rmax - rmin) / levels;
    q.zero = -rmin;
    if (device) {
      q.packed = kernels::quantizePack(gc, static_cast<int>(dim), q.scale, q.zero, kernels::IntScheme::Quanto, bits_);
    } else {
      // The ops of round((g + zero) / scale).clamp(0, levels), in place on one working copy: a temporary per op,
      // each the size of the states, had been alive at once until the statement ended (four copies of a flush's
      // whole history).
      at::Tensor t = g + q.zero;
      t.div_(q.scale).round_().clamp_(0, levels);
      q.packed = packCodes(t.to(at::kByte), bits_);
    }
    q.grouped = g.sizes().vec();
    q.shape = x.sizes().vec();
    q.axis = axis;
    return q;
  }

  void dequantizeInto(const QuantizedBlock& q, const at::Tensor& dst) const override {
    at::Tensor dq;
    if (device_) {
      const int dim = (q.axis == 0 && q.grouped[0] != 1) ? 1 : 0;
      dq = kernels::unpackDequantize(q.packed, q.grouped[0], q.grouped[1], dim, q.scale, q.zero,
                                     kernels::IntScheme::Quanto, bits_, q.scale.scalar_type());
    } else {
      const at::Tensor codes = unpackCodes(q.packed, q.grouped, bits_);
      if (q.axis == 0 && dst.is_contiguous() && dst.scalar_type() == q.scale.scalar_type()) {
        // Straight into dst, without a second copy of the states: the same two ops.
        at::Tensor out = dst.view(q.grouped);
        at::mul_out(out, q.scale, codes);
        out.sub_(q.zero);
        return;
      }
      dq = q.scale * codes;
      dq -= q.zero;
    }
    if (q.axis == 0) {
      dst.copy_(dq.reshape(q.shape));
    } else {
      const std::int64_t gs = dq.size(0), axisDim = q.shape[3];
      const std::int64_t groups = dq.numel() / axisDim / gs;
      dst.copy_(dq.reshape({gs, axisDim, groups}).permute({2, 0, 1}).reshape(q.shape));
    }
  }

 private:
  int bits_;
  int groupSize_;
  bool device_;  // the device path
};

}  // namespace

std::unique_ptr<GroupCodec> makeQuantoCodec(int nbits, int groupSize, kernels::KernelPath path) {
  return std::make_unique<QuantoCodec>(nbits, groupSize, path);
}

}  // namespace kvscope::cache::detail
