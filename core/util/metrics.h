// Figures written once for every place that reports them. Torch-free, Qt-free.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace kvscope {

/// exp(mean negative log-likelihood) of `tokens` scored tokens whose NLLs sum to `nllSum` (NaN for none).
inline double perplexity(double nllSum, std::int64_t tokens) {
  return tokens > 0 ? std::exp(nllSum / static_cast<double>(tokens)) : std::nan("");
}

/// A figure and its standard error (0 where llama-perplexity gives none: ten samples or fewer).
struct Estimate {
  double value = std::nan(""), error = std::nan("");
};

/// The mean of `count` samples from their sum and sum of squares, with the standard error of the mean, as
/// llama-perplexity computes it: sqrt((E[x^2] - E[x]^2) / (count - 1)), 0 for ten samples or fewer.
inline Estimate meanOf(double sum, double sum2, std::int64_t count) {
  if (count < 1) return {};
  const double n = static_cast<double>(count), f = sum / n, v = sum2 / n - f * f;
  return {f, v > 0 && count > 10 ? std::sqrt(v / (n - 1)) : 0.0};
}

/// The value at `fraction` (0..1) of ascending `sorted` values, interpolated linearly between the two around
/// fraction * (n - 1), as llama-perplexity's percentiles; NaN for none.
inline double percentileOf(const std::vector<double>& sorted, double fraction) {
  if (sorted.empty()) return std::nan("");
  if (fraction <= 0) return sorted.front();
  if (fraction >= 1) return sorted.back();
  const double p = fraction * static_cast<double>(sorted.size() - 1);
  const auto i = static_cast<std::size_t>(p);
  const double t = p - static_cast<double>(i);
  return (1 - t) * sorted[i] + t * sorted[std::min(i + 1, sorted.size() - 1)];
}

/// The median of ascending `sorted` values (the mean of the middle two for an even count); NaN for none.
inline double medianOf(const std::vector<double>& sorted) {
  const std::size_t n = sorted.size();
  if (n == 0) return std::nan("");
  return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

/// A fraction `hits / count` with the binomial standard error sqrt(p (1 - p) / (count - 1)).
inline Estimate fractionOf(std::int64_t hits, std::int64_t count) {
  if (count < 1) return {};
  const double p = static_cast<double>(hits) / static_cast<double>(count);
  return {p, count > 1 ? std::sqrt(p * (1 - p) / static_cast<double>(count - 1)) : 0.0};
}

}  // namespace kvscope
