#include "kernels/int_tensor.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "kernels/cpu/bitpack.h"
#include "kernels/cpu/int_cpu.h"
#include "util/error.h"
#if defined(KVSCOPE_WITH_CUDA)
#include "kernels/cuda/int_cuda.h"
#include "kernels/cuda/runtime.h"
#endif

namespace kvscope::kernels {
namespace {

IntElem elemOf(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return IntElem::F32;
    case at::kBFloat16:
      return IntElem::BF16;
    case at::kHalf:
      return IntElem::F16;
    default:
      throw Error(ErrorCode::Internal,
                  fmt::format("int codec: dtype {} is not supported (fp32, bf16, fp16)", c10::toString(t)));
  }
}

void checkArgs(std::int64_t R, std::int64_t C, int dim, int bits, const char* what) {
  if (dim != 0 && dim != 1) throw Error(ErrorCode::Internal, fmt::format("{}: dim must be 0 or 1, got {}", what, dim));
  if (bits != 1 && bits != 2 && bits != 3 && bits != 4 && bits != 8)
    throw Error(ErrorCode::Internal, fmt::format("{}: bits must be one of 1, 2, 3, 4, 8, got {}", what, bits));
  if (R < 0 || C < 0) throw Error(ErrorCode::Internal, fmt::format("{}: negative shape", what));
}

at::Tensor perGroup(const at::Tensor& t, std::int64_t groups, const at::Device& dev, const char* what) {
  if (t.numel() != groups)
    throw Error(ErrorCode::Internal, fmt::format("{}: {} per-group values for {} groups", what, t.numel(), groups));
  return t.to(dev, at::kFloat).contiguous();
}

[[noreturn]] void noKernel(const at::Device& d, const char* what) {
  throw Error(ErrorCode::Internal, fmt::format("{}: no kernel for device {}", what, d.str()));
}

}  // namespace

std::pair<at::Tensor, at::Tensor> groupMinMax(const at::Tensor& g, int dim) {
  if (g.dim() != 2 || !g.is_contiguous())
    throw Error(ErrorCode::Internal, "group min/max: g must be a contiguous [R, C]");
  const std::int64_t R = g.size(0), C = g.size(1);
  checkArgs(R, C, dim, 8, "group min/max");
  const IntElem t = elemOf(g.scalar_type());
  const std::vector<std::int64_t> shape = dim == 1 ? std::vector<std::int64_t>{R, 1} : std::vector<std::int64_t>{1, C};
  at::Tensor mn = at::empty(shape, g.options().dtype(at::kFloat)), mx = at::empty_like(mn);
  if (g.is_cpu()) {
    groupMinMaxCpu(t, g.const_data_ptr(), R, C, dim, mn.mutable_data_ptr<float>(), mx.mutable_data_ptr<float>());
    return {mn, mx};
  }
#if defined(KVSCOPE_WITH_CUDA)
  if (g.is_cuda()) {
    cuda::DeviceScope scope(g.get_device());
    cuda::groupMinMax(t, g.const_data_ptr(), R, C, dim, mn.mutable_data_ptr<float>(), mx.mutable_data_ptr<float>(),
                      cuda::currentStream(g.get_device()));
    cuda::checkLastError("group min/max kernel");
    return {mn, mx};
  }
#endif
  noKernel(g.device(), "group min/max");
}

at::Tensor quantizePack(const at::Tensor& g, int dim, const at::Tensor& scale, const at::Tensor& zero, IntScheme s,
                        int bits) {
  if (g.dim() != 2 || !g.is_contiguous())
    throw Error(ErrorCode::Internal, "quantize+pack: g must be a contiguous [R, C]");
  const std::int64_t R = g.size(0), C = g.size(1);
  checkArgs(R, C, dim, bits, "quantize+pack");
  const IntElem t = elemOf(g.scalar_type());
  const std::int64_t groups = dim == 1 ? R : C;
  const at::Tensor sc = perGroup(scale, groups, g.device(), "quantize+pack scale");
  const at::Tensor ze = perGroup(zero, groups, g.device(), "quantize+pack zero");
  at::Tensor out = at::empty({packedBytes(R * C, bits)}, g.options().dtype(at::kByte));
  if (g.is_cpu()) {
    quantizePackCpu(t, g.const_data_ptr(), R, C, dim, sc.const_data_ptr<float>(), ze.const_data_ptr<float>(), s, bits,
                    out.mutable_data_ptr<std::uint8_t>());
    return out;
  }
#if defined(KVSCOPE_WITH_CUDA)
  if (g.is_cuda()) {
    cuda::DeviceScope scope(g.get_device());
    cuda::quantizePack(t, g.const_data_ptr(), R, C, dim, sc.const_data_ptr<float>(), ze.const_data_ptr<float>(), s,
                       bits, out.mutable_data_ptr<std::uint8_t>(), cuda::currentStream(g.get_device()));
    cuda::checkLastError("quantize+pack kernel");
    return out;
  }
#endif
  noKernel(g.device(), "quantize+pack");
}

at::Tensor unpackDequantize(const at::Tensor& packed, std::int64_t R, std::int64_t C, int dim, const at::Tensor& scale,
                            const at::Tensor& zero, IntScheme s, int bits, at::ScalarType dtype) {
  checkArgs(R, C, dim, bits, "unpack+dequantize");
  const IntElem t = elemOf(dtype);
  if (packed.scalar_type() != at::kByte || !packed.is_contiguous() || packed.numel() != packedBytes(R * C, bits))
    throw Error(ErrorCode::Internal, fmt::format("unpack+dequantize: expected {} contiguous packed bytes, got {}",
                                                 packedBytes(R * C, bits), packed.numel()));
  const std::int64_t groups = dim == 1 ? R : C;
  const at::Tensor sc = perGroup(scale, groups, packed.device(), "unpack+dequantize scale");
  const at::Tensor ze = perGroup(zero, groups, packed.device(), "unpack+dequantize zero");
  at::Tensor out = at::empty({R, C}, packed.options().dtype(dtype));
  if (packed.is_cpu()) {
    unpackDequantizeCpu(packed.const_data_ptr<std::uint8_t>(), R, C, dim, sc.const_data_ptr<float>(),
                        ze.const_data_ptr<float>(), s, bits, t, out.mutable_data_ptr());
    return out;
  }
#if defined(KVSCOPE_WITH_CUDA)
  if (packed.is_cuda()) {
    cuda::DeviceScope scope(packed.get_device());
    cuda::unpackDequantize(packed.const_data_ptr<std::uint8_t>(), R, C, dim, sc.const_data_ptr<float>(),
                           ze.const_data_ptr<float>(), s, bits, t, out.mutable_data_ptr(),
                           cuda::currentStream(packed.get_device()));
    cuda::checkLastError("unpack+dequantize kernel");
    return out;
  }
#endif
  noKernel(packed.device(), "unpack+dequantize");
}

}  // namespace kvscope::kernels
