#include "cache/calibration.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "cache/layer.h"

namespace kvscope::cache {

namespace {
std::int64_t groupCount(Fp8Granularity g, std::int64_t H, std::int64_t D) {
  return g == Fp8Granularity::Tensor ? 1 : g == Fp8Granularity::Head ? H : H * D;
}

// |x| as float32 [groups, n]: one row per scale group.
at::Tensor byGroup(const at::Tensor& x, Fp8Granularity g) {
  at::Tensor a = x.abs().to(at::kFloat);
  switch (g) {
    case Fp8Granularity::Tensor:
      return a.reshape({1, -1});
    case Fp8Granularity::Head:
      return a.transpose(0, 1).reshape({a.size(1), -1});
    case Fp8Granularity::Channel:
      return a.permute({1, 3, 0, 2}).reshape({a.size(1) * a.size(3), -1});
  }
  return a;
}
}  // namespace

Fp8Calibrator::Fp8Calibrator(int layers, const CalibrationOptions& options) : opt_(options) {
  if (layers <= 0) throw ConfigError("layers", fmt::format("calibration needs at least one layer, got {}", layers));
  if (opt_.percentile && !(opt_.percentileValue > 0.0 && opt_.percentileValue <= 100.0))
    throw ConfigError("percentile", fmt::format("percentile must lie in (0, 100], got {}", opt_.percentileValue));
  if (!std::isfinite(opt_.headroom) || opt_.headroom <= 0.0)
    throw ConfigError("headroom", fmt::format("`headroom` must be a positive number, got {}", opt_.headroom));
  keys_.resize(static_cast<std::size_t>(layers));
  values_.resize(static_cast<std::size_t>(layers));
}

void Fp8Calibrator::add(int layer, bool keys, const at::Tensor& x) {
  if (layer < 0 || layer >= static_cast<int>(keys_.size()))
    throw CacheError(fmt::format("calibration: layer {} out of range [0, {})", layer, keys_.size()));
  if (x.dim() != 4) throw CacheError("calibration: states must be [batch, kv_heads, seq, head_dim]");
  Groups& g = (keys ? keys_ : values_)[static_cast<std::size_t>(layer)];
  const std::int64_t H = x.size(1), D = x.size(3), n = groupCount(opt_.granularity, H, D);
  if (g.amax.empty()) {
    g.H = H, g.D = D;
    g.amax.assign(static_cast<std::size_t>(n), 0.0f);
    if (opt_.percentile) g.values.resize(static_cast<std::size_t>(n));
  } else if (g.H != H || g.D != D) {
    throw CacheError(
        fmt::format("calibration: layer {} had {} heads x {} channels, now {} x {}", layer, g.H, g.D, H, D));
  }
  const at::Tensor a = byGroup(x, opt_.granularity).contiguous();
  const at::Tensor amax = a.amax(1).contiguous();
  for (std::int64_t i = 0; i < n; ++i) {
    g.amax[static_cast<std::size_t>(i)] = std::max(g.amax[static_cast<std::size_t>(i)], amax[i].item<float>());
    if (opt_.percentile) {
      const float* p = a[i].const_data_ptr<float>();
      auto& v = g.values[static_cast<std::size_t>(i)];
      v.insert(v.end(), p, p + a.size(1));
    }
  }
  seen_ += x.numel();
}

std::vector<std::vector<float>> Fp8Calibrator::scales(bool keys) const {
  const auto& side = keys ? keys_ : values_;
  std::vector<std::vector<float>> out;
  for (std::size_t l = 0; l < side.size(); ++l) {
    const Groups& g = side[l];
    if (g.amax.empty() && l < sources_.size() && sources_[l] >= 0 && static_cast<std::size_t>(sources_[l]) < l) {
      out.push_back(out[static_cast<std::size_t>(sources_[l])]);  // a shared layer stores nothing: its source's
      continue;
    }
    if (g.amax.empty()) throw CacheError(fmt::format("calibration: layer {} saw no {}", l, keys ? "keys" : "values"));
    std::vector<float> s;
    for (std::size_t i = 0; i < g.amax.size(); ++i) {
      float stat = g.amax[i];
      if (opt_.percentile) {
        std::vector<float> v = g.values[i];
        // Nearest rank: the smallest value with at least p% of the values at or below it.
        const auto rank = static_cast<std::size_t>(
            std::max(1.0, std::ceil(opt_.percentileValue / 100.0 * static_cast<double>(v.size()))) - 1);
        std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(rank), v.end());
        stat = v[rank];
      }
      s.push_back(std::max(static_cast<float>(stat * opt_.headroom) / fp8Max(opt_.format), FLT_MIN));
    }
    out.push_back(std::move(s));
  }
  return out;
}

OverflowCount countOverflow(const at::Tensor& x, const std::vector<float>& scale, Fp8Granularity granularity,
                            Fp8Format format) {
  OverflowCount c;
  const std::int64_t H = x.size(1), D = x.size(3);
  if (static_cast<std::int64_t>(scale.size()) != groupCount(granularity, H, D))
    throw CacheError(
        fmt::format("countOverflow: {} scales for granularity on {} heads x {} channels", scale.size(), H, D));
  at::Tensor s = at::tensor(scale, at::kFloat);
  s = granularity == Fp8Granularity::Tensor ? s.view({1, 1, 1, 1})
      : granularity == Fp8Granularity::Head ? s.view({1, H, 1, 1})
                                            : s.view({1, H, 1, D});
  const at::Tensor a = x.to(at::kFloat) / s.to(x.device());
  c.values = x.numel();
  c.beyondMax = (a.abs() > fp8Max(format)).sum().item<std::int64_t>();
  const at::Tensor q = a.to(format == Fp8Format::E5M2 ? at::kFloat8_e5m2 : at::kFloat8_e4m3fn).to(at::kFloat);
  c.nonFinite = (~q.isfinite()).sum().item<std::int64_t>();
  return c;
}

float seedScale(const at::Tensor& prompt) {
  return std::max(prompt.abs().amax().to(at::kFloat).item<float>() / 448.0f, FLT_MIN);
}

}  // namespace kvscope::cache
