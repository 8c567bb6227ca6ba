#include "cache/detail/error_stats.h"

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kvscope::cache::detail {

namespace {

// The statistics run on every update, on a handful of tokens: on the host path plain loops over the CPU tensors,
// without the per-op dispatch cost of a dozen small ATen calls; the device path takes the ATen ops.

template <class T>
void amaxLoop(const at::Tensor& x, std::vector<float>& out) {
  const std::int64_t B = x.size(0), H = x.size(1), T_ = x.size(2), D = x.size(3);
  const auto* p = static_cast<const T*>(x.const_data_ptr());
  const auto s = x.strides();
  out.assign(static_cast<std::size_t>(H), 0.0f);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h) {
      float m = out[h];
      for (std::int64_t t = 0; t < T_; ++t) {
        const T* row = p + b * s[0] + h * s[1] + t * s[2];
        for (std::int64_t d = 0; d < D; ++d) {
          const float v = std::fabs(static_cast<float>(row[d * s[3]]));
          m = v > m || std::isnan(v) ? v : m;
        }
      }
      out[h] = m;
    }
}

// sqrt(e2 / x2); when ||x|| == 0 (an all-zero range): 0 if the error is 0 too, else infinite (NaN stays NaN).
float relative(double e2, double x2) {
  if (x2 > 0) return static_cast<float>(std::sqrt(e2 / x2));
  if (std::isnan(e2)) return NAN;
  return e2 > 0 ? INFINITY : 0.0f;
}

template <class T>
void errorLoop(const at::Tensor& x, const at::Tensor& xq, std::int64_t bin, ErrorMap& m) {
  const std::int64_t B = x.size(0), H = x.size(1), T_ = x.size(2), D = x.size(3), R = m.ranges;
  const auto* px = static_cast<const T*>(x.const_data_ptr());
  const auto* pq = static_cast<const T*>(xq.const_data_ptr());
  const auto sx = x.strides(), sq = xq.strides();
  std::vector<double> sumX(static_cast<std::size_t>(H * R * D), 0.0), sumE(sumX.size(), 0.0);
  m.maxAbs.assign(sumX.size(), 0.0f);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t t = 0; t < T_; ++t) {
        const std::size_t cell = static_cast<std::size_t>((h * R + t / bin) * D);
        const T* rx = px + b * sx[0] + h * sx[1] + t * sx[2];
        const T* rq = pq + b * sq[0] + h * sq[1] + t * sq[2];
        for (std::int64_t d = 0; d < D; ++d) {
          const float a = static_cast<float>(rx[d * sx[3]]);
          const float e = static_cast<float>(rq[d * sq[3]]) - a;
          sumX[cell + d] += static_cast<double>(a) * a;
          sumE[cell + d] += static_cast<double>(e) * e;
          const float ae = std::fabs(e);
          float& mx = m.maxAbs[cell + d];
          mx = ae > mx || std::isnan(ae) ? ae : mx;
        }
      }
  m.relL2.resize(sumX.size());
  for (std::size_t i = 0; i < sumX.size(); ++i) m.relL2[i] = relative(sumE[i], sumX[i]);
  m.headRelL2.assign(static_cast<std::size_t>(H), 0.0f);
  for (std::int64_t h = 0; h < H; ++h) {
    double x2 = 0, e2 = 0;
    for (std::int64_t i = h * R * D; i < (h + 1) * R * D; ++i) x2 += sumX[i], e2 += sumE[i];
    m.headRelL2[h] = relative(e2, x2);
  }
}

template <class F>
bool dispatchHost(const at::Tensor& x, kernels::KernelPath path, F&& f) {
  if (path != kernels::KernelPath::Host) return false;
  switch (x.scalar_type()) {
    case at::kFloat:
      f(float{});
      return true;
    case at::kBFloat16:
      f(c10::BFloat16{});
      return true;
    case at::kHalf:
      f(c10::Half{});
      return true;
    default:
      return false;
  }
}

}  // namespace

std::vector<float> hostVector(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kFloat).contiguous();
  std::vector<float> v(static_cast<std::size_t>(c.numel()));
  if (!v.empty()) std::memcpy(v.data(), c.const_data_ptr<float>(), v.size() * sizeof(float));
  return v;
}

void valuesOf(const at::Tensor& t, kernels::KernelPath path, std::vector<float>& out, DeferredStats& d) {
  if (path == kernels::KernelPath::Host) {
    out = hostVector(t);
    return;
  }
  out.clear();  // until the values arrive (stats() settles before anyone reads)
  d.add(t, [&out, n = t.numel()](const double* h) { out.assign(h, h + n); });
}

void amaxPerHead(const at::Tensor& x, kernels::KernelPath path, std::vector<float>& out, DeferredStats& d) {
  if (dispatchHost(x, path, [&](auto tag) { amaxLoop<decltype(tag)>(x, out); })) return;
  valuesOf(x.abs().amax({0, 2, 3}), path, out, d);
}

void errorMap(const at::Tensor& x, const at::Tensor& xq, std::int64_t tokenStart, std::int64_t bin,
              kernels::KernelPath path, ErrorMap& m, DeferredStats& d) {
  m = ErrorMap{};
  const std::int64_t B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3);
  if (T == 0) return;
  bin = std::max<std::int64_t>(bin, 1);
  const std::int64_t R = (T + bin - 1) / bin, pad = R * bin - T;
  m.heads = H;
  m.ranges = R;
  m.channels = D;
  m.tokenStart = tokenStart;
  m.tokenBin = bin;
  m.tokens = T;
  if (xq.scalar_type() == x.scalar_type() &&
      dispatchHost(x, path, [&](auto tag) { errorLoop<decltype(tag)>(x, xq, bin, m); }))
    return;
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
  const at::Tensor rel =
      at::where(sx > 0, (se / sx).sqrt(), at::where(se > 0, at::full_like(se, INFINITY), at::zeros_like(se)));
  const at::Tensor mx = ea.reshape(shape).amax({0, 3});
  // One value for the map: [relL2 | maxAbs | sum x^2 per head | sum e^2 per head].
  const at::Tensor all = at::cat({rel.reshape({-1}), mx.reshape({-1}), sx.sum(at::IntArrayRef{1, 2}).reshape({-1}),
                                  se.sum(at::IntArrayRef{1, 2}).reshape({-1})});
  auto fill = [&m, cells = H * R * D, H](const double* h) {
    m.relL2.assign(h, h + cells);
    m.maxAbs.assign(h + cells, h + 2 * cells);
    m.headRelL2.resize(static_cast<std::size_t>(H));
    for (std::int64_t i = 0; i < H; ++i) m.headRelL2[i] = relative(h[2 * cells + H + i], h[2 * cells + i]);
  };
  if (path == kernels::KernelPath::Host) {  // a dtype the loops do not take: ATen's result is already here
    const at::Tensor c = all.to(at::kDouble).contiguous();
    fill(c.const_data_ptr<double>());
    return;
  }
  d.add(all, fill);
}

}  // namespace kvscope::cache::detail
