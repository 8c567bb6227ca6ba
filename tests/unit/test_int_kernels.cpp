// The scalar int code shared by the CPU loops and the CUDA kernels (kernels/int_codec.h), run on the CPU, against the
// quanto and hqq codecs' LibTorch ops (which match the Python packages): same min/max, same packed codes, same
// dequantized values, bit for bit, for every layout, bit width and dtype.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "cache/detail/group_codec.h"
#include "kernels/cpu/bitpack.h"
#include "kernels/int_tensor.h"
#include "tensor_helpers.h"
#include "test_helpers.h"

using namespace kvscope;
using kernels::IntScheme;
using testutil::sameBits;

namespace {

at::Tensor states(at::ScalarType dt, std::int64_t S = 64) {
  return testutil::codecStates(11, dt, S);
}

// Packed codes equal except in zero-range quanto groups, whose codes are 0/0 (any code decodes to the minimum).
std::int64_t codeMismatches(const at::Tensor& a, const at::Tensor& b, std::int64_t n, int bits) {
  at::Tensor ua = cache::detail::unpackCodes(a, {n}, bits), ub = cache::detail::unpackCodes(b, {n}, bits);
  return (ua != ub).sum().item<std::int64_t>();
}

}  // namespace

TEST(IntKernelsCpu, QuantoLayoutsMatchTheCodec) {
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16, at::kHalf})
    for (int bits : {2, 4})
      for (int axis : {0, -1})
        for (int gs : {32, 64}) {
          SCOPED_TRACE(std::string(c10::toString(dt)) + " bits " + std::to_string(bits) + " axis " +
                       std::to_string(axis) + " gs " + std::to_string(gs));
          const at::Tensor x = states(dt);
          auto codec = cache::detail::makeQuantoCodec(bits, gs);
          const auto q = codec->quantize(x, axis);
          // The grouped matrix as the codec builds it.
          at::Tensor g;
          if (axis == 0) {
            g = x.reshape({-1, gs});
          } else {
            const std::int64_t groups = x.numel() / x.size(-1) / gs;
            g = x.reshape({groups, gs, x.size(-1)}).permute({1, 2, 0}).reshape({gs, -1}).contiguous();
          }
          const int dim = (axis == 0 && g.size(0) != 1) ? 1 : 0;
          auto [mn, mx] = kernels::groupMinMax(g, dim);
          EXPECT_TRUE(at::equal(mn.to(dt), at::amin(g, {dim}, true)));
          EXPECT_TRUE(at::equal(mx.to(dt), at::amax(g, {dim}, true)));
          const at::Tensor packed = kernels::quantizePack(g, dim, q.scale, q.zero, IntScheme::Quanto, bits);
          const std::int64_t zeroRange = ((mx == mn).sum().item<std::int64_t>()) * (dim == 1 ? g.size(1) : g.size(0));
          EXPECT_LE(codeMismatches(packed, q.packed, g.numel(), bits), zeroRange);
          if (axis == 0) EXPECT_GT(zeroRange, 0);  // the constant token fills whole groups
          const at::Tensor mine = kernels::unpackDequantize(q.packed, g.size(0), g.size(1), dim, q.scale, q.zero,
                                                            IntScheme::Quanto, bits, dt);
          at::Tensor ref = q.scale * cache::detail::unpackCodes(q.packed, q.grouped, bits);
          ref -= q.zero;
          EXPECT_TRUE(sameBits(mine, ref));
        }
}

TEST(IntKernelsCpu, HqqLayoutsMatchTheCodec) {
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16, at::kHalf})
    for (int bits : {1, 2, 3, 4, 8})
      for (int axis : {0, 1}) {
        SCOPED_TRACE(std::string(c10::toString(dt)) + " bits " + std::to_string(bits) + " axis " +
                     std::to_string(axis));
        const std::int64_t gs = 64;
        const at::Tensor x = states(dt);
        auto codec = cache::detail::makeHqqCodec(bits, gs, /*optimize=*/false);
        const auto q = codec->quantize(x, axis);
        at::Tensor W = x.to(at::kFloat);
        W = axis == 1 ? W.reshape({-1, gs}) : W.reshape({gs, -1});
        auto [mn, mx] = kernels::groupMinMax(W, axis);
        EXPECT_TRUE(at::equal(mn, std::get<0>(W.min(axis, true))));
        EXPECT_TRUE(at::equal(mx, std::get<0>(W.max(axis, true))));
        // hqq's float32 inverse scale and zero, as the codec computes them.
        const std::int64_t maxv = (std::int64_t{1} << bits) - 1;
        const at::Tensor denom = mx - mn;
        at::Tensor scale = denom.reciprocal() * maxv;
        scale = at::where(denom.abs() <= 1e-4, at::full_like(scale, 1.0), scale).clamp_max(2e4);
        const at::Tensor zero = -mn * scale;
        const at::Tensor packed = kernels::quantizePack(W, axis, scale, zero, IntScheme::Hqq, bits);
        EXPECT_TRUE(at::equal(packed, q.packed));
        const at::Tensor mine =
            kernels::unpackDequantize(q.packed, W.size(0), W.size(1), axis, q.scale, q.zero, IntScheme::Hqq, bits, dt);
        at::Tensor ref = at::empty(x.sizes(), x.options());
        codec->dequantizeInto(q, ref);
        EXPECT_TRUE(sameBits(mine.reshape(x.sizes()), ref));
      }
}

TEST(IntKernelsCpu, PackingIsTheBitpackLayout) {
  for (int bits : {1, 2, 3, 4, 8}) {
    const std::int64_t n = 8 * 5 + 3;  // a partial last chunk
    const at::Tensor codes = at::randint(0, 1 << bits, {1, n}, at::kByte);
    // Hqq with scale 1, zero 0 on float codes quantizes each value to itself.
    const at::Tensor packed =
        kernels::quantizePack(codes.to(at::kFloat), 1, at::ones({1, 1}), at::zeros({1, 1}), IntScheme::Hqq, bits);
    EXPECT_TRUE(at::equal(packed, cache::detail::packCodes(codes, bits))) << bits;
  }
}

TEST(IntKernelsCpu, BadArgumentsAreClearErrors) {
  const at::Tensor g = at::zeros({4, 8});
  EXPECT_ERROR_CODE(kernels::quantizePack(g, 1, at::ones({4, 1}), at::zeros({4, 1}), IntScheme::Hqq, 5),
                    ErrorCode::Internal);
  EXPECT_ERROR_CODE(kernels::quantizePack(g, 1, at::ones({3, 1}), at::zeros({4, 1}), IntScheme::Hqq, 4),
                    ErrorCode::Internal);
  EXPECT_ERROR_CODE(kernels::groupMinMax(g.t(), 1), ErrorCode::Internal);
  EXPECT_ERROR_CODE(kernels::unpackDequantize(at::zeros({3}, at::kByte), 4, 8, 1, at::ones({4, 1}), at::zeros({4, 1}),
                                              IntScheme::Hqq, 4, at::kFloat),
                    ErrorCode::Internal);
}
