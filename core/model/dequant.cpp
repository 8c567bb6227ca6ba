#include "model/dequant.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>

#include "kernels/cpu/blocks.h"

namespace kvscope::model {

void checkReadable(std::uint32_t type) {
  if (kernels::blockLayout(type).values == 0)
    throw FormatError(
        fmt::format("tensor type {} is not supported (kvscope reads F32, F16, BF16, Q4_0, Q4_1, Q5_0, "
                    "Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4)",
                    kernels::ggmlTypeName(type)));
}

void dequantizeRow(std::uint32_t type, const std::uint8_t* src, std::int64_t n, float* dst) {
  checkReadable(type);
  const kernels::BlockLayout L = kernels::blockLayout(type);
  // Chunks of whole blocks over LibTorch's threads.
  const std::int64_t per = L.values * 256;
  at::parallel_for(0, (n + per - 1) / per, 1, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) {
      const std::int64_t first = c * per, count = std::min(per, n - first);
      kernels::dequantize(type, src + first / L.values * L.bytes, count, dst + first);
    }
  });
}

at::Tensor toTensor(const GgufFile::Tensor& t, at::ScalarType dtype) {
  std::vector<std::int64_t> shape(t.dims.rbegin(), t.dims.rend());
  at::Tensor out = at::empty(shape, at::kFloat);
  try {
    dequantizeRow(t.type, t.data, t.numel(), out.data_ptr<float>());
  } catch (const FormatError& e) {
    throw FormatError(fmt::format("tensor `{}`: {}", t.name, e.what()));
  }
  return dtype == at::kFloat ? out : out.to(dtype);
}

}  // namespace kvscope::model
