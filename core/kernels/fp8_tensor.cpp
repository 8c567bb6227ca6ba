#include "kernels/fp8_tensor.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "util/error.h"

#if defined(KVSCOPE_WITH_CUDA)
#include "kernels/cuda/fp8_cuda.h"
#include "kernels/cuda/runtime.h"
#endif

namespace kvscope::kernels {
namespace {

ElemType elemOf(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return ElemType::F32;
    case at::kBFloat16:
      return ElemType::BF16;
    case at::kHalf:
      return ElemType::F16;
    default:
      throw Error(ErrorCode::Internal,
                  fmt::format("fp8 codec: dtype {} is not supported (fp32, bf16, fp16)", c10::toString(t)));
  }
}

// A [B, H, T, D] tensor whose [T, D] planes are dense: each (b, h) is one run of T * D elements.
[[maybe_unused]] bool densePlanes(const at::Tensor& t) {
  return t.dim() == 4 && (t.size(3) <= 1 || t.stride(3) == 1) && (t.size(2) <= 1 || t.stride(2) == t.size(3));
}

[[maybe_unused]] void checkShapes(const at::Tensor& a, const at::Tensor& b, const at::Tensor& expanded,
                                  const char* what) {
  if (a.dim() != 4 || a.sizes() != b.sizes())
    throw Error(ErrorCode::Internal, fmt::format("{}: states and codes must have the same [B, H, T, D] shape", what));
  if (expanded.dim() != 2 || expanded.size(0) != a.size(1) || expanded.size(1) != a.size(3))
    throw Error(ErrorCode::Internal,
                fmt::format("{}: the scale must be [H, D] = [{}, {}]", what, a.size(1), a.size(3)));
  if (!densePlanes(a) || !densePlanes(b))
    throw Error(ErrorCode::Internal, fmt::format("{}: each (batch, head) plane must be dense", what));
}

}  // namespace

namespace {

float formatMax(Fp8Format f) {
  return fp8Max(f);
}
at::ScalarType castType(Fp8Format f) {
  return f == Fp8Format::E4M3FN ? at::kFloat8_e4m3fn : at::kFloat8_e5m2;
}

at::Tensor fp8EncodeCuda(const at::Tensor& x, const at::Tensor& dst, const at::Tensor& expanded, Fp8Format format,
                         bool saturate);

// Devices without kvscope kernels: LibTorch's own float8 cast, the definition the kernels are bit-exact with.
Fp8Counts encodeGeneric(const at::Tensor& x, const at::Tensor& dst, const at::Tensor& expanded, Fp8Format format,
                        bool saturate) {
  at::Tensor a = x.to(at::kFloat) / expanded.to(x.device()).view({1, expanded.size(0), 1, expanded.size(1)});
  Fp8Counts c;
  c.overflow = (a.abs() > formatMax(format)).sum().item<std::int64_t>();
  if (saturate) a = a.clamp(-formatMax(format), formatMax(format));
  const at::Tensor q = a.to(castType(format));
  c.nonFinite = (~q.to(at::kFloat).isfinite()).sum().item<std::int64_t>();
  dst.copy_(q.view(at::kByte));
  return c;
}

}  // namespace

Fp8Counts fp8Encode(const at::Tensor& x, const at::Tensor& dst, const at::Tensor& expanded, Fp8Format format,
                    bool saturate) {
  const Fp8CountsDeferred d = fp8EncodeDeferred(x, dst, expanded, format, saturate);
  if (!d.device.defined()) return d.host;
  const at::Tensor host = d.device.cpu();
  return Fp8Counts{host[0].item<std::int64_t>(), host[1].item<std::int64_t>()};
}

Fp8CountsDeferred fp8EncodeDeferred(const at::Tensor& x, const at::Tensor& dst, const at::Tensor& expanded,
                                    Fp8Format format, bool saturate) {
  Fp8CountsDeferred out;
  Fp8Counts& total = out.host;
  const std::int64_t B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3);
  if (T == 0) return out;
  if (!x.is_cpu()) {
    out.device = fp8EncodeCuda(x, dst, expanded, format, saturate);
    if (!out.device.defined()) out.host = encodeGeneric(x, dst, expanded, format, saturate);
    return out;
  }
  const ElemType type = elemOf(x.scalar_type());
  const auto esize = static_cast<std::int64_t>(x.element_size());
  const auto* xp = static_cast<const std::uint8_t*>(x.const_data_ptr());
  auto* dp = dst.mutable_data_ptr<std::uint8_t>();
  const float* sp = expanded.const_data_ptr<float>();
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      total += fp8EncodeRun(type, xp + ((b * H + h) * T * D) * esize, sp + h * D, D, T * D,
                            dp + b * dst.stride(0) + h * dst.stride(1), format, saturate);
  return out;
}

void fp8Decode(const at::Tensor& q, const at::Tensor& dst, const at::Tensor& expanded, Fp8Format format) {
  const std::int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  if (T == 0) return;
  if (!q.is_cpu()) {
    if (fp8DecodeOnDevice(q, dst, expanded, format)) return;
    const at::Tensor f = q.view(castType(format)).to(at::kFloat);
    dst.copy_((f * expanded.to(q.device()).view({1, H, 1, D})).to(dst.scalar_type()));
    return;
  }
  const ElemType type = elemOf(dst.scalar_type());
  const auto esize = static_cast<std::int64_t>(dst.element_size());
  const auto* qp = q.const_data_ptr<std::uint8_t>();
  auto* dp = static_cast<std::uint8_t*>(dst.mutable_data_ptr());
  const float* sp = expanded.const_data_ptr<float>();
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      fp8DecodeRun(type, qp + b * q.stride(0) + h * q.stride(1), sp + h * D, D, T * D,
                   dp + (b * dst.stride(0) + h * dst.stride(1)) * esize, format);
}

bool cudaKernelsUsable() {
#if defined(KVSCOPE_WITH_CUDA)
  return cuda::deviceAvailable();
#else
  return false;
#endif
}

namespace {
// The CUDA encode with its counts left on the device (undefined when x's device has no kvscope kernel).
at::Tensor fp8EncodeCuda(const at::Tensor& x, const at::Tensor& dst, const at::Tensor& expanded, Fp8Format format,
                         bool saturate) {
#if defined(KVSCOPE_WITH_CUDA)
  if (!x.is_cuda()) return {};
  checkShapes(x, dst, expanded, "fp8 encode");
  if (!dst.is_cuda() || dst.get_device() != x.get_device() || dst.scalar_type() != at::kByte)
    throw Error(ErrorCode::Internal, "fp8 encode: the codes must be uint8 on the states' device");
  const ElemType type = elemOf(x.scalar_type());
  const std::int64_t B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3);
  at::Tensor counts = at::zeros({2}, x.options().dtype(at::kLong));
  if (x.numel() == 0) return counts;
  const at::Tensor s = expanded.to(x.device(), at::kFloat).contiguous();
  cuda::DeviceScope scope(x.get_device());
  const auto esize = static_cast<std::int64_t>(x.element_size());
  const auto* xp = static_cast<const std::uint8_t*>(x.const_data_ptr());
  auto* dp = dst.mutable_data_ptr<std::uint8_t>();
  auto* cp = reinterpret_cast<unsigned long long*>(counts.mutable_data_ptr<std::int64_t>());
  // One launch for all (b, h) runs when the batch stride continues the head stride, else one per batch row.
  const bool flat = B == 1 || (x.stride(0) == H * x.stride(1) && dst.stride(0) == H * dst.stride(1));
  const std::int64_t launches = flat ? 1 : B, rows = flat ? B * H : H;
  for (std::int64_t b = 0; b < launches; ++b)
    cuda::fp8Encode(type, xp + b * x.stride(0) * esize, x.stride(1), s.const_data_ptr<float>(), H, D, rows, T * D,
                    dp + b * dst.stride(0), dst.stride(1), format, saturate, cp, cuda::currentStream(x.get_device()));
  cuda::checkLastError("fp8 encode kernel");
  return counts;
#else
  (void)x, (void)dst, (void)expanded, (void)format, (void)saturate;
  return {};
#endif
}
}  // namespace

std::optional<Fp8Counts> fp8EncodeOnDevice(const at::Tensor& x, const at::Tensor& dst, const at::Tensor& expanded,
                                           Fp8Format format, bool saturate) {
  const at::Tensor counts = fp8EncodeCuda(x, dst, expanded, format, saturate);
  if (!counts.defined()) return std::nullopt;
  const at::Tensor host = counts.cpu();
  Fp8Counts total;
  total.overflow = host[0].item<std::int64_t>();
  total.nonFinite = host[1].item<std::int64_t>();
  return total;
}

bool fp8DecodeOnDevice(const at::Tensor& q, const at::Tensor& dst, const at::Tensor& expanded, Fp8Format format) {
#if defined(KVSCOPE_WITH_CUDA)
  if (!q.is_cuda()) return false;
  checkShapes(dst, q, expanded, "fp8 decode");
  if (!dst.is_cuda() || dst.get_device() != q.get_device() || q.scalar_type() != at::kByte)
    throw Error(ErrorCode::Internal, "fp8 decode: uint8 codes and the output must be on one device");
  const ElemType type = elemOf(dst.scalar_type());
  const std::int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  if (q.numel() == 0) return true;
  const at::Tensor s = expanded.to(q.device(), at::kFloat).contiguous();
  cuda::DeviceScope scope(q.get_device());
  const auto esize = static_cast<std::int64_t>(dst.element_size());
  const auto* qp = q.const_data_ptr<std::uint8_t>();
  auto* dp = static_cast<std::uint8_t*>(dst.mutable_data_ptr());
  const bool flat = B == 1 || (q.stride(0) == H * q.stride(1) && dst.stride(0) == H * dst.stride(1));
  const std::int64_t launches = flat ? 1 : B, rows = flat ? B * H : H;
  for (std::int64_t b = 0; b < launches; ++b)
    cuda::fp8Decode(type, qp + b * q.stride(0), q.stride(1), s.const_data_ptr<float>(), H, D, rows, T * D,
                    dp + b * dst.stride(0) * esize, dst.stride(1), format, cuda::currentStream(q.get_device()));
  cuda::checkLastError("fp8 decode kernel");
  return true;
#else
  (void)q, (void)dst, (void)expanded, (void)format;
  return false;
#endif
}

}  // namespace kvscope::kernels
