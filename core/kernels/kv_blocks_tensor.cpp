#include "kernels/kv_blocks_tensor.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <stdexcept>
#include <vector>

#include "kernels/cpu/kv_blocks.h"
#include "kernels/cpu/kv_rows_simd.h"
#include "kernels/kv_block_codec.h"
#include "util/error.h"
#if defined(KVSCOPE_WITH_CUDA)
#include "kernels/cuda/kv_blocks_cuda.h"
#include "kernels/cuda/runtime.h"
#endif

namespace kvscope::kernels {
namespace {

void checkRowArgs(std::uint32_t type, std::int64_t D, int rotation, const char* what) {
  kvRowBytes(type, D);  // the type and the row size (whole blocks), or an Internal error
  if (D > kvcodec::kMaxRow)
    throw Error(ErrorCode::BadInput,
                fmt::format("{}: head size {} is above the {} the row codecs take", what, D, kvcodec::kMaxRow));
  if (rotation < 0 || (rotation > 0 && ((rotation & (rotation - 1)) != 0 || D % rotation != 0)))
    throw Error(ErrorCode::Internal, fmt::format("{}: rotation chunks of {} over rows of {}", what, rotation, D));
}

void checkRows(const at::Tensor& rows, std::int64_t rowBytes, const char* what) {
  if (rows.scalar_type() != at::kByte || rows.dim() != 4 || rows.size(3) != rowBytes ||
      (rows.size(3) > 1 && rows.stride(3) != 1))
    throw Error(ErrorCode::Internal,
                fmt::format("{}: rows must be uint8 [B, H, T, {}] with a dense last dimension", what, rowBytes));
}

[[noreturn]] void noKernel(const at::Device& d, const char* what) {
  throw Error(ErrorCode::Internal, fmt::format("{}: no kernel for device {}", what, d.str()));
}

}  // namespace

at::Tensor storeKvRows(const at::Tensor& x, std::uint32_t type, int rotation, const at::Tensor& rows, bool decode,
                       float scale) {
  if (x.dim() != 4) throw Error(ErrorCode::Internal, "store kv rows: x must be [B, H, T, D]");
  const std::int64_t B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3);
  checkRowArgs(type, D, rotation, "store kv rows");
  const std::int64_t rowBytes = kvRowBytes(type, D);
  checkRows(rows, rowBytes, "store kv rows");
  if (rows.size(0) != B || rows.size(1) != H || rows.size(2) != T || rows.device() != x.device())
    throw Error(ErrorCode::Internal, "store kv rows: rows must match x's [B, H, T] and device");
  const at::Tensor xf = x.to(at::kFloat).contiguous();
  at::Tensor back = decode ? at::empty({B, H, T, D}, xf.options()) : at::Tensor();
  const float* src = xf.const_data_ptr<float>();
  std::uint8_t* dst = static_cast<std::uint8_t*>(rows.data_ptr());
  float* out = decode ? back.mutable_data_ptr<float>() : nullptr;
  const std::int64_t sb = rows.stride(0), sh = rows.stride(1), st = rows.stride(2);
  if (x.is_cpu()) {
    at::parallel_for(0, B * H * T, 64, [&](std::int64_t begin, std::int64_t end) {
      std::vector<float> tmp(static_cast<std::size_t>(D));
      for (std::int64_t r = begin; r < end; ++r)
        kvcodec::storeRow(type, src + r * D, D, rotation, tmp.data(),
                          dst + r / (H * T) * sb + r / T % H * sh + r % T * st, out ? out + r * D : nullptr, scale);
    });
    return back;
  }
#if defined(KVSCOPE_WITH_CUDA)
  if (x.is_cuda()) {
    cuda::DeviceScope scope(x.get_device());
    cuda::storeKvRows(type, src, B, H, T, D, rotation, dst, {sb, sh, st}, out, scale,
                      cuda::currentStream(x.get_device()));
    cuda::checkLastError("store kv rows kernel");
    return back;
  }
#endif
  noKernel(x.device(), "store kv rows");
}

at::Tensor readKvRows(const at::Tensor& rows, std::uint32_t type, std::int64_t D, int rotation, float scale) {
  checkRowArgs(type, D, rotation, "read kv rows");
  checkRows(rows, kvRowBytes(type, D), "read kv rows");
  const std::int64_t B = rows.size(0), H = rows.size(1), T = rows.size(2);
  at::Tensor out = at::empty({B, H, T, D}, rows.options().dtype(at::kFloat));
  const std::uint8_t* src = rows.const_data_ptr<std::uint8_t>();
  float* dst = out.mutable_data_ptr<float>();
  const std::int64_t sb = rows.stride(0), sh = rows.stride(1), st = rows.stride(2);
  if (rows.is_cpu()) {
    at::parallel_for(0, B * H * T, 64, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) {
        const std::uint8_t* row = src + r / (H * T) * sb + r / T % H * sh + r % T * st;
        if (!readKvRowsSimd(type, row, st, 1, D, rotation, false, scale, dst + r * D))
          kvcodec::readRow(type, row, D, rotation, dst + r * D, scale);
      }
    });
    return out;
  }
#if defined(KVSCOPE_WITH_CUDA)
  if (rows.is_cuda()) {
    cuda::DeviceScope scope(rows.get_device());
    cuda::readKvRows(type, src, {sb, sh, st}, B, H, T, D, rotation, scale, dst, cuda::currentStream(rows.get_device()));
    cuda::checkLastError("read kv rows kernel");
    return out;
  }
#endif
  noKernel(rows.device(), "read kv rows");
}

at::Tensor roundThroughKvRows(const at::Tensor& x, std::uint32_t type, int rotation) {
  if (x.dim() != 4) throw Error(ErrorCode::Internal, "round through kv rows: x must be [B, H, T, D]");
  const at::Tensor rows =
      at::empty({x.size(0), x.size(1), x.size(2), kvRowBytes(type, x.size(3))}, x.options().dtype(at::kByte));
  return storeKvRows(x, type, rotation, rows, /*decode=*/true);
}

at::Tensor interleaveHalves(const at::Tensor& x) {
  const std::int64_t D = x.size(-1);
  if (D % 2 != 0) throw Error(ErrorCode::Internal, fmt::format("interleave halves: odd row size {}", D));
  return x.unflatten(-1, {2, D / 2}).transpose(-1, -2).flatten(-2);
}

at::Tensor deinterleaveHalves(const at::Tensor& x) {
  const std::int64_t D = x.size(-1);
  if (D % 2 != 0) throw Error(ErrorCode::Internal, fmt::format("deinterleave halves: odd row size {}", D));
  return x.unflatten(-1, {D / 2, 2}).transpose(-1, -2).flatten(-2);
}

}  // namespace kvscope::kernels
