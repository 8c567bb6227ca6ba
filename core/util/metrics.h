// Figures written once for every place that reports them. Torch-free, Qt-free.
#pragma once

#include <cmath>
#include <cstdint>

namespace kvscope {

/// exp(mean negative log-likelihood) of `tokens` scored tokens whose NLLs sum to `nllSum` (NaN for none).
inline double perplexity(double nllSum, std::int64_t tokens) {
  return tokens > 0 ? std::exp(nllSum / static_cast<double>(tokens)) : std::nan("");
}

}  // namespace kvscope
