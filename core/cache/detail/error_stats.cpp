#include "cache/detail/error_stats.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

namespace kvscope::cache::detail {

std::vector<float> toVector(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kFloat).contiguous().cpu();
  std::vector<float> v(static_cast<std::size_t>(c.numel()));
  if (!v.empty()) std::memcpy(v.data(), c.data_ptr<float>(), v.size() * sizeof(float));
  return v;
}

std::vector<float> amaxPerHead(const at::Tensor& x) { return toVector(x.abs().amax({0, 2, 3})); }

ErrorMap errorMap(const at::Tensor& x, const at::Tensor& xq, std::int64_t tokenStart, std::int64_t bin) {
  ErrorMap m;
  const std::int64_t B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3);
  if (T == 0) return m;
  bin = std::max<std::int64_t>(bin, 1);
  const std::int64_t R = (T + bin - 1) / bin, pad = R * bin - T;
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor e = xq.to(at::kFloat) - xf;
  at::Tensor x2 = xf.square(), e2 = e.square(), ea = e.abs();
  if (pad > 0) {
    x2 = at::constant_pad_nd(x2, {0, 0, 0, pad});
    e2 = at::constant_pad_nd(e2, {0, 0, 0, pad});
    ea = at::constant_pad_nd(ea, {0, 0, 0, pad});
  }
  const std::vector<std::int64_t> shape{B, H, R, bin, D};
  const at::Tensor sx = x2.reshape(shape).sum(at::IntArrayRef{0, 3});
  const at::Tensor se = e2.reshape(shape).sum(at::IntArrayRef{0, 3});
  // ||x|| == 0 (an all-zero range): the relative error is 0 when the error is 0 too, else infinite.
  const at::Tensor rel = at::where(sx > 0, (se / sx).sqrt(), at::where(se > 0, at::full_like(se, INFINITY), at::zeros_like(se)));
  m.heads = H;
  m.ranges = R;
  m.channels = D;
  m.tokenStart = tokenStart;
  m.tokenBin = bin;
  m.relL2 = toVector(rel);
  m.maxAbs = toVector(ea.reshape(shape).amax({0, 3}));
  return m;
}

}  // namespace kvscope::cache::detail
