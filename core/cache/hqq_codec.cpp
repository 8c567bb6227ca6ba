// hqq's Quantizer.quantize / dequantize as transformers' HQQQuantizedLayer calls them, op for op in LibTorch:
// float32 compute; groups of q_group_size consecutive values (axis=1) or strided columns (axis=0); inverse scale
// max_v / (max - min) (1 where the range is <= 1e-4, clamped to 2e4), zero = -min * scale; then hqq's proximal
// optimizer of the zero-point (its default, lp 0.7, beta 10, up to 20 iterations with early stop); codes =
// clamp(round(x * scale + zero)); scale and zero stored in the input dtype; dequantize = (codes - zero) * (1/scale).
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>

#include "cache/detail/group_codec.h"
#include "cache/layer.h"
#include "kernels/int_tensor.h"

namespace kvscope::cache::detail {
namespace {

constexpr double kLpNorm = 0.7;
constexpr double kBeta = 1e1;
constexpr int kIters = 20;

at::Tensor shrinkLp(const at::Tensor& x) {
  at::Tensor out = at::abs(x);
  out.sub_(out.pow(kLpNorm - 1) * (1.0 / kBeta)).clamp_min_(0.0);
  out.mul_(at::sign(x));
  return out;
}

class HqqCodec final : public GroupCodec {
 public:
  HqqCodec(int nbits, int groupSize, bool optimize, kernels::KernelPath path)
      : bits_(nbits), groupSize_(groupSize), optimize_(optimize), device_(path == kernels::KernelPath::Device) {}

  QuantizedBlock quantize(const at::Tensor& x, int axis) const override {
    const std::int64_t gs = groupSize_;
    if (x.numel() % gs != 0) {
      throw CacheError(
          fmt::format("hqq: q_group_size {} must divide the number of cached values ({} = {} x {} x {} x {})", gs,
                      x.numel(), x.size(0), x.size(1), x.size(2), x.size(3)));
    }
    at::Tensor W = x.to(at::kFloat);
    W = axis == 1 ? W.reshape({-1, gs}) : W.reshape({gs, -1});
    // The device path: kvscope's kernels (kernels/int_tensor.h) for the O(n) passes, with these roundings.
    at::Tensor mn, mx;
    if (device_) {
      std::tie(mn, mx) = kernels::groupMinMax(W.contiguous(), axis);
    } else {
      mn = std::get<0>(W.min(axis, true)), mx = std::get<0>(W.max(axis, true));
    }
    const std::int64_t maxv = (std::int64_t{1} << bits_) - 1;
    const at::Tensor denom = mx - mn;
    at::Tensor scale = denom.reciprocal() * maxv;  // Python's `max_v / denom` is reciprocal() * max_v
    scale = at::where(denom.abs() <= 1e-4, at::full_like(scale, 1.0), scale);
    scale = scale.clamp_max(2e4);
    at::Tensor zero = -mn * scale;

    if (optimize_) {
      // hqq's loop: each iteration updates the zero, then stops once the error no longer improves. The host path
      // reads that test as it goes; a device would wait for it every iteration, so the device path runs every
      // iteration and masks out the updates after the stop (the same zero, no host round trip).
      at::Tensor best = at::full({}, INFINITY, W.options());
      at::Tensor going = at::ones({}, W.options().dtype(at::kBool));
      for (int i = 0; i < kIters; ++i) {
        const at::Tensor wq = at::round(W * scale + zero).clamp_(0, maxv);
        const at::Tensor wr = (wq - zero) / scale;
        const at::Tensor we = shrinkLp(W - wr);
        const at::Tensor next = at::mean(wq - (W - we) * scale, {axis}, true);
        const at::Tensor err = at::abs(W - wr).mean().to(at::kFloat);
        if (!device_) {
          zero = next;
          if (!err.lt(best).item<bool>()) break;
          best = err;
          continue;
        }
        zero = at::where(going, next, zero);
        going = going & err.lt(best);
        best = at::where(going, err, best);
      }
    }
    QuantizedBlock q;
    if (device_) {
      q.packed = kernels::quantizePack(W.contiguous(), axis, scale, zero, kernels::IntScheme::Hqq, bits_);
    } else {
      // round(W * scale + zero).clamp(0, maxv), in place on one working copy (not a temporary per op).
      at::Tensor t = W * scale;
      t.add_(zero).round_().clamp_(0, maxv);
      q.packed = packCodes(t.to(at::kByte), bits_);
    }
    q.scale = scale.reciprocal().to(x.scalar_type());  // `1.0 / scale`, then cast to the compute dtype
    q.zero = zero.to(x.scalar_type());
    q.grouped = W.sizes().vec();
    q.shape = x.sizes().vec();
    q.axis = axis;
    return q;
  }

  void dequantizeInto(const QuantizedBlock& q, const at::Tensor& dst) const override {
    if (device_) {
      dst.copy_(kernels::unpackDequantize(q.packed, q.grouped[0], q.grouped[1], q.axis, q.scale, q.zero,
                                          kernels::IntScheme::Hqq, bits_, q.scale.scalar_type())
                    .reshape(q.shape));
      return;
    }
    at::Tensor wr = unpackCodes(q.packed, q.grouped, bits_).to(q.scale.scalar_type());
    wr.sub_(q.zero).mul_(q.scale);  // (codes - zero) * scale on the one working copy
    dst.copy_(wr.reshape(q.shape));
  }

 private:
  int bits_;
  int groupSize_;
  bool optimize_;
  bool device_;  // the device path
};

}  // namespace

std::unique_ptr<GroupCodec> makeHqqCodec(int nbits, int groupSize, bool optimize, kernels::KernelPath path) {
  return std::make_unique<HqqCodec>(nbits, groupSize, optimize, path);
}

}  // namespace kvscope::cache::detail
