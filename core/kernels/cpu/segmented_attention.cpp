#include "kernels/cpu/segmented_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

// The inner loops are dot products and axpys over head_dim: compiled for AVX-512, AVX2 and the baseline, chosen at
// run time. Their sums may be reassociated (kernels/CMakeLists: -fassociative-math on this file), which is why fused
// attention agrees with the reference within a tolerance rather than bit for bit.
#if defined(__x86_64__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define KVS_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define KVS_CLONES
#endif

namespace kvscope::kernels {

void ConcatSource::add(std::shared_ptr<const TokenSource> part) {
  if (!part || part->length() == 0) return;
  if (dim_ == 0) dim_ = part->dim();
  if (part->dim() != dim_)
    throw std::invalid_argument("segmented attention: parts of one side have head_dim " + std::to_string(dim_) +
                                " and " + std::to_string(part->dim()));
  starts_.push_back(length_);
  length_ += part->length();
  parts_.push_back(std::move(part));
}

void ConcatSource::read(std::int64_t b, std::int64_t h, std::int64_t t0, std::int64_t n, float* out) const {
  // The part holding t0, then the following ones until n tokens are written.
  auto it = std::upper_bound(starts_.begin(), starts_.end(), t0);
  std::size_t i = static_cast<std::size_t>(it - starts_.begin()) - 1;
  while (n > 0 && i < parts_.size()) {
    const std::int64_t local = t0 - starts_[i];
    const std::int64_t take = std::min(n, parts_[i]->length() - local);
    parts_[i]->read(b, h, local, take, out);
    out += take * dim_;
    t0 += take;
    n -= take;
    ++i;
  }
}

namespace {

// exp(x) for x <= 0 (scores minus their running maximum), branch-free so that the loop over a tile vectorizes:
// Cephes' expf (range reduction by ln 2, degree-5 polynomial), within 2 ulp of std::exp; NaN stays NaN, and
// arguments below -87.3 give ~1e-38 instead of 0.
inline float expNonPositive(float x) {
  x = x < -87.3f ? -87.3f : x;
  const float fx = std::nearbyint(x * 1.44269504088896341f);
  const float r = x - fx * 0.693359375f + fx * 2.12194440e-4f;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * r * r + r + 1.0f;
  const std::int32_t e = (static_cast<std::int32_t>(fx) + 127) << 23;
  float scale;
  std::memcpy(&scale, &e, sizeof scale);
  return y * scale;
}

// Online-softmax state of one query row over the keys seen so far: running max m, sum l, and sum p * v (acc).
// One tile of n keys/values (dense rows of D floats), for the query rows of one KV head.
KVS_CLONES void attendTile(const float* q, std::int64_t rows, std::int64_t T, std::int64_t D, const float* kt,
                           const float* vt, std::int64_t n, std::int64_t t0, std::int64_t L, bool causal, float* m,
                           float* l, float* acc, float* scores) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t t = r % T;
    // The last key this query may see (inclusive), relative to the tile.
    const std::int64_t last = causal ? (L - T + t) - t0 : n - 1;
    const std::int64_t nn = std::min(n, last + 1);
    if (nn <= 0) continue;
    const float* qr = q + r * D;
    float mt = -INFINITY;
    for (std::int64_t j = 0; j < nn; ++j) {
      const float* kr = kt + j * D;
      float s = 0.0f;
      for (std::int64_t d = 0; d < D; ++d) s += qr[d] * kr[d];
      scores[j] = s;
      if (s > mt) mt = s;  // NaN scores are not a maximum: they stay NaN below and spread into the row
    }
    const float mOld = m[r];
    const float mNew = mOld > mt ? mOld : mt;
    float* ar = acc + r * D;
    if (mNew != mOld) {
      const float corr = mOld == -INFINITY ? 0.0f : std::exp(mOld - mNew);
      l[r] *= corr;
      for (std::int64_t d = 0; d < D; ++d) ar[d] *= corr;
      m[r] = mNew;
    }
    float sum = 0.0f;
    for (std::int64_t j = 0; j < nn; ++j) {
      scores[j] = expNonPositive(scores[j] - mNew);
      sum += scores[j];
    }
    for (std::int64_t j = 0; j < nn; ++j) {
      const float p = scores[j];
      const float* vr = vt + j * D;
      for (std::int64_t d = 0; d < D; ++d) ar[d] += p * vr[d];
    }
    l[r] += sum;
  }
}

}  // namespace

void segmentedAttention(const SegmentedAttentionArgs& a, const TokenSource& keys, const TokenSource& values,
                        const ParallelFor& parallel) {
  const std::int64_t L = keys.length();
  if (values.length() != L)
    throw std::invalid_argument("segmented attention: " + std::to_string(L) + " keys but " +
                                std::to_string(values.length()) + " values");
  if (a.Hkv <= 0 || a.Hq % a.Hkv != 0)
    throw std::invalid_argument("segmented attention: query heads are not a multiple of the KV heads");
  if (L < a.T || L == 0) throw std::invalid_argument("segmented attention: fewer keys than queries");
  if (keys.dim() != a.D || values.dim() != a.D)
    throw std::invalid_argument("segmented attention: head_dim of the cache differs from the queries'");
  const std::int64_t B = a.B, Hkv = a.Hkv, G = a.Hq / a.Hkv, T = a.T, D = a.D, rows = G * T;
  const std::int64_t tile = std::max<std::int64_t>(a.tile, 1);
  // Split the sequence so that every worker has a few tasks, none shorter than 4 tiles.
  const std::int64_t want = std::max<std::int64_t>(1, (4 * std::max(a.threads, 1) + B * Hkv - 1) / (B * Hkv));
  const std::int64_t splits = std::clamp<std::int64_t>(L / (4 * tile), 1, want);
  const std::int64_t per = (L + splits - 1) / splits;
  // Partial results per task: m, l [rows] and acc [rows, D].
  const std::int64_t tasks = B * Hkv * splits, stride = rows * (D + 2);
  std::vector<float> part(static_cast<std::size_t>(tasks * stride));
  // Queries pre-scaled by the softmax scale, per (b, KV head) as [G * T, D].
  std::vector<float> qs(static_cast<std::size_t>(B * a.Hq * T * D));
  for (std::int64_t i = 0; i < B * a.Hq * T * D; ++i) qs[i] = a.q[i] * a.smScale;

  parallel(tasks, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> kt(static_cast<std::size_t>(tile * D)), vt(static_cast<std::size_t>(tile * D)),
        scores(static_cast<std::size_t>(tile));
    for (std::int64_t task = begin; task < end; ++task) {
      const std::int64_t s = task % splits, bh = task / splits, b = bh / Hkv, hk = bh % Hkv;
      float* m = part.data() + task * stride;
      float* l = m + rows;
      float* acc = l + rows;
      std::fill(m, m + rows, -INFINITY);
      std::fill(l, l + rows + rows * D, 0.0f);
      const float* q = qs.data() + (b * a.Hq + hk * G) * T * D;  // the G query heads of this KV head, [G * T, D]
      const std::int64_t from = s * per, to = std::min(L, from + per);
      for (std::int64_t t0 = from; t0 < to; t0 += tile) {
        const std::int64_t n = std::min(tile, to - t0);
        keys.read(b, hk, t0, n, kt.data());
        values.read(b, hk, t0, n, vt.data());
        attendTile(q, rows, T, D, kt.data(), vt.data(), n, t0, L, a.causal, m, l, acc, scores.data());
      }
    }
  });

  // Merge the splits of every query row.
  for (std::int64_t bh = 0; bh < B * Hkv; ++bh) {
    const std::int64_t b = bh / Hkv, hk = bh % Hkv;
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t g = r / T, t = r % T;
      float* o = a.out + ((b * a.Hq + hk * G + g) * T + t) * D;
      float mMax = -INFINITY;
      for (std::int64_t s = 0; s < splits; ++s) {
        const float ms = part[(bh * splits + s) * stride + r];
        if (ms > mMax) mMax = ms;
      }
      std::fill(o, o + D, 0.0f);
      float lSum = 0.0f;
      for (std::int64_t s = 0; s < splits; ++s) {
        const float* m = part.data() + (bh * splits + s) * stride;
        if (m[r] == -INFINITY && !std::isnan(m[rows + r])) continue;  // a split with no key for this row
        const float w = mMax == -INFINITY ? 1.0f : std::exp(m[r] - mMax);
        lSum += w * m[rows + r];
        const float* acc = m + 2 * rows + r * D;
        for (std::int64_t d = 0; d < D; ++d) o[d] += w * acc[d];
      }
      const float inv = 1.0f / lSum;
      for (std::int64_t d = 0; d < D; ++d) o[d] *= inv;
    }
  }
}

}  // namespace kvscope::kernels
