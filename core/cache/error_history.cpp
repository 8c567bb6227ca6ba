#include "cache/error_history.h"

#include <algorithm>
#include <cmath>

namespace kvscope::cache {

namespace {
// The larger of two errors, NaN only where both are (nothing quantized either).
float maxOf(float a, float b) {
  return std::isnan(a) ? b : std::isnan(b) ? a : std::max(a, b);
}

}  // namespace

std::vector<float> ErrorHistory::merged(std::vector<float> src, std::int64_t cells, std::int64_t rows, int times) {
  for (int i = 0; i < times; ++i) {
    const std::int64_t out = (rows + 1) / 2;
    for (std::int64_t r = 0; r < out; ++r)
      for (std::int64_t c = 0; c < cells; ++c) {
        const float a = src[static_cast<std::size_t>(2 * r * cells + c)];
        const float b = 2 * r + 1 < rows ? src[static_cast<std::size_t>((2 * r + 1) * cells + c)] : std::nanf("");
        src[static_cast<std::size_t>(r * cells + c)] = maxOf(a, b);
      }
    rows = out;
    src.resize(static_cast<std::size_t>(rows * cells));
  }
  return src;
}

std::int64_t ErrorHistory::rowCapacity() const {
  const std::int64_t cells = std::max<std::int64_t>(heads_ * channels_, 1);
  return std::max<std::int64_t>(maxCells_ / cells, 16);
}

std::vector<float> ErrorHistory::valuesAt(std::int64_t tokensPerRow) const {
  int times = 0;
  for (std::int64_t w = tokensPerRow_; w < tokensPerRow; w *= 2) ++times;
  return merged(rows_, heads_ * channels_, rows(), times);
}

void ErrorHistory::grow(std::int64_t tokens) {
  const std::int64_t cells = heads_ * channels_;
  int times = 0;
  std::int64_t width = tokensPerRow_;
  while (rowsFor(tokens, width) > rowCapacity()) width *= 2, ++times;
  if (times > 0) {
    rows_ = merged(std::move(rows_), cells, rows(), times);
    tokensPerRow_ = width;
  }
  rows_.resize(static_cast<std::size_t>(rowsFor(tokens, tokensPerRow_) * cells), std::nanf(""));
  tokenMean_.resize(static_cast<std::size_t>(tokens), std::nanf(""));
  seen_.resize(static_cast<std::size_t>(tokens), false);
  tokens_ = tokens;
}

void ErrorHistory::add(const TensorStats& s) {
  if (!s.quantized) return;
  for (const ErrorMap* m : {&s.error, &s.drift}) {
    if (m->empty() || m->tokens <= 0) continue;
    if (m->heads != heads_ || m->channels != channels_) {
      reset();
      heads_ = m->heads;
      channels_ = m->channels;
    }
    add(*m);
  }
}

// A token's first map sets its error; a later one (a drift) adds to it. In a row of several tokens, a first error
// raises the row's max, and an added drift is added to the row: a bound for every token it touched.
void ErrorHistory::add(const ErrorMap& m) {
  const std::int64_t end = m.tokenStart + m.tokens;
  if (end > tokens_) grow(end);
  for (std::int64_t r = 0; r < m.ranges; ++r) {
    const std::int64_t t0 = m.tokenStart + r * m.tokenBin, t1 = std::min(t0 + m.tokenBin, end);
    if (t0 >= t1) continue;
    double sum = 0;
    std::int64_t finite = 0;
    for (std::int64_t h = 0; h < heads_; ++h)
      for (std::int64_t c = 0; c < channels_; ++c)
        if (const float e = m.maxAbs[static_cast<std::size_t>((h * m.ranges + r) * channels_ + c)]; std::isfinite(e))
          sum += e, ++finite;
    const float mean = finite ? static_cast<float>(sum / static_cast<double>(finite)) : std::nanf("");
    for (std::int64_t row = t0 / tokensPerRow_; row * tokensPerRow_ < t1; ++row) {
      const std::int64_t a = std::max(t0, row * tokensPerRow_), b = std::min(t1, (row + 1) * tokensPerRow_);
      bool fresh = false, seen = false;
      for (std::int64_t t = a; t < b; ++t) (seen_[static_cast<std::size_t>(t)] ? seen : fresh) = true;
      for (std::int64_t h = 0; h < heads_; ++h) {
        const float* src = &m.maxAbs[static_cast<std::size_t>((h * m.ranges + r) * channels_)];
        float* dst = &rows_[static_cast<std::size_t>((row * heads_ + h) * channels_)];
        for (std::int64_t c = 0; c < channels_; ++c) {
          float v = dst[c];
          if (seen) v = std::isnan(v) ? src[c] : v + src[c];
          if (fresh) v = maxOf(v, src[c]);
          dst[c] = v;
        }
      }
    }
    for (std::int64_t t = t0; t < t1; ++t) {
      float& e = tokenMean_[static_cast<std::size_t>(t)];
      e = std::isnan(e) ? mean : std::isnan(mean) ? e : e + mean;
      seen_[static_cast<std::size_t>(t)] = true;
    }
  }
}

void ErrorHistory::truncate(std::int64_t n) {
  if (n >= tokens_) return;
  tokens_ = std::max<std::int64_t>(n, 0);
  if (tokens_ == 0) tokensPerRow_ = 1;
  rows_.resize(static_cast<std::size_t>(rows() * heads_ * channels_));
  tokenMean_.resize(static_cast<std::size_t>(tokens_));
  seen_.resize(static_cast<std::size_t>(tokens_));
}

void ErrorHistory::reset() {
  tokens_ = heads_ = channels_ = 0;
  tokensPerRow_ = 1;
  rows_.clear();
  tokenMean_.clear();
  seen_.clear();
}

}  // namespace kvscope::cache
