#include "kernels/cpu/segmented_attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>

#include "kernels/cpu/simd.h"
#include "util/error.h"

// The inner loops are dot products and axpys over head_dim: KVS_MULTIVERSION (kernels/cpu/simd.h), or the AVX2 tile.
// Their sums may be reassociated (core/CMakeLists: -fassociative-math on this file), which is why fused
// attention agrees with the reference within a tolerance rather than bit for bit.

namespace kvscope::kernels {

void ConcatSource::add(std::shared_ptr<const TokenSource> part) {
  if (!part || part->length() == 0) return;
  if (dim_ == 0) dim_ = part->dim();
  if (part->dim() != dim_)
    throw Error(ErrorCode::Internal, "segmented attention: parts of one side have head_dim " + std::to_string(dim_) +
                                         " and " + std::to_string(part->dim()));
  starts_.push_back(length_);
  length_ += part->length();
  if (parts_.empty())
    basis_ = part->basis();
  else
    mixed_ = mixed_ || !(part->basis() == basis_);
  parts_.push_back(std::move(part));
}

void ConcatSource::read(std::int64_t b, std::int64_t h, std::int64_t t0, std::int64_t n, float* out) const {
  readParts(b, h, t0, n, out, false);
}

void ConcatSource::readInBasis(std::int64_t b, std::int64_t h, std::int64_t t0, std::int64_t n, float* out) const {
  readParts(b, h, t0, n, out, !mixed_ && !basis_.identity());
}

void ConcatSource::readParts(std::int64_t b, std::int64_t h, std::int64_t t0, std::int64_t n, float* out,
                             bool inBasis) const {
  // The part holding t0, then the following ones until n tokens are written.
  auto it = std::upper_bound(starts_.begin(), starts_.end(), t0);
  std::size_t i = static_cast<std::size_t>(it - starts_.begin()) - 1;
  while (n > 0 && i < parts_.size()) {
    const std::int64_t local = t0 - starts_[i];
    const std::int64_t take = std::min(n, parts_[i]->length() - local);
    if (inBasis)
      parts_[i]->readInBasis(b, h, local, take, out);
    else
      parts_[i]->read(b, h, local, take, out);
    out += take * dim_;
    t0 += take;
    n -= take;
    ++i;
  }
}

namespace {

// The unnormalised transform of each chunk of c values (Sylvester's order: strides 1, 2, 4, ...).
void fwhtChunks(float* v, std::int64_t dim, int c) {
  for (float* x = v; x < v + dim; x += c)
    for (int h = 1; h < c; h *= 2)
      for (int i = 0; i < c; i += 2 * h)
        for (int j = i; j < i + h; ++j) {
          const float a = x[j], b = x[j + h];
          x[j] = a + b;
          x[j + h] = a - b;
        }
}

}  // namespace

void intoBasis(const RowBasis& basis, float* v, std::int64_t dim) {
  if (basis.interleaved) {  // P^T: the model's halves into even and odd channels
    std::vector<float> t(v, v + dim);
    for (std::int64_t i = 0; i < dim / 2; ++i) v[2 * i] = t[static_cast<std::size_t>(i)], v[2 * i + 1] = t[dim / 2 + i];
  }
  if (basis.chunk <= 0) return;
  if (!basis.signs.empty())
    for (std::int64_t i = 0; i < dim; ++i) v[i] *= basis.signs[static_cast<std::size_t>(i % basis.chunk)];
  fwhtChunks(v, dim, basis.chunk);
  for (std::int64_t i = 0; i < dim; ++i) v[i] *= basis.scale;
}

void fromBasis(const RowBasis& basis, float* v, std::int64_t dim) {
  if (basis.chunk > 0) {
    fwhtChunks(v, dim, basis.chunk);
    if (!basis.signs.empty())
      for (std::int64_t i = 0; i < dim; ++i) v[i] *= basis.signs[static_cast<std::size_t>(i % basis.chunk)];
    for (std::int64_t i = 0; i < dim; ++i) v[i] *= basis.scale;
  }
  if (basis.interleaved) {
    std::vector<float> t(v, v + dim);
    for (std::int64_t i = 0; i < dim / 2; ++i) v[i] = t[static_cast<std::size_t>(2 * i)], v[dim / 2 + i] = t[2 * i + 1];
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

// A row's running max becomes max(m, mt); the sum l and the weighted values ar seen so far are rescaled to it.
// Returns the new max.
inline float raiseMax(float mt, float& m, float& l, float* ar, std::int64_t D) {
  const float mOld = m;
  const float mNew = mOld > mt ? mOld : mt;
  if (mNew != mOld) {
    const float corr = mOld == -INFINITY ? 0.0f : std::exp(mOld - mNew);
    l *= corr;
    for (std::int64_t d = 0; d < D; ++d) ar[d] *= corr;
    m = mNew;
  }
  return mNew;
}

// Online-softmax state of one query row over the keys seen so far: running max m, sum l, and sum p * v (acc).
// One tile of n keys/values (dense rows of D floats), for the query rows of one KV head.
KVS_BODY void attendTileBody(const float* q, std::int64_t rows, std::int64_t T, std::int64_t D, const float* kt,
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
    float* ar = acc + r * D;
    const float mNew = raiseMax(mt, m[r], l[r], ar, D);
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
KVS_MULTIVERSION(void, attendTile,
                 (const float* q, std::int64_t rows, std::int64_t T, std::int64_t D, const float* kt, const float* vt,
                  std::int64_t n, std::int64_t t0, std::int64_t L, bool causal, float* m, float* l, float* acc,
                  float* scores),
                 (q, rows, T, D, kt, vt, n, t0, L, causal, m, l, acc, scores))

#if KVS_HAVE_AVX2_PATHS
// The same tile step by hand for AVX2 + FMA (head_dim a multiple of 8). Scores: eight keys at a time, each with its
// own accumulator (eight independent FMA chains instead of one), reduced together by a transpose of horizontal adds.
// Weighted values: the output row stays in registers (64 floats) across the tile's keys.

KVS_AVX2 inline float hmax(__m256 v) {
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  x = _mm_max_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

// Lane i of the result: the sum of a[i]'s lanes.
KVS_AVX2 inline __m256 hsum8x8(const __m256* a) {
  const __m256 h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 lo = _mm256_hadd_ps(h01, h23), hi = _mm256_hadd_ps(h45, h67);
  return _mm256_add_ps(_mm256_permute2f128_ps(lo, hi, 0x20), _mm256_permute2f128_ps(lo, hi, 0x31));
}

// expNonPositive, eight lanes: the same Cephes reduction and polynomial. max(-87.3, NaN) keeps the NaN.
KVS_AVX2 inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(-87.3f), x);
  const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fmadd_ps(fx, _mm256_set1_ps(2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(_mm256_mul_ps(y, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

// ar[0, 8 * NC) += sum_j p[j] * v[j * D + 0, 8 * NC), ar kept in registers over the keys.
template <int NC>
KVS_AVX2 inline void weightedValues(const float* p, std::int64_t nn, const float* v, std::int64_t D, float* ar) {
  __m256 a[NC];
  for (int i = 0; i < NC; ++i) a[i] = _mm256_loadu_ps(ar + std::ptrdiff_t{8} * i);
  for (std::int64_t j = 0; j < nn; ++j) {
    const __m256 pj = _mm256_broadcast_ss(p + j);
    const float* vr = v + j * D;
    for (int i = 0; i < NC; ++i) a[i] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vr + std::ptrdiff_t{8} * i), a[i]);
  }
  for (int i = 0; i < NC; ++i) _mm256_storeu_ps(ar + std::ptrdiff_t{8} * i, a[i]);
}

KVS_AVX2 void attendTileAvx2(const float* q, std::int64_t rows, std::int64_t T, std::int64_t D, const float* kt,
                             const float* vt, std::int64_t n, std::int64_t t0, std::int64_t L, bool causal, float* m,
                             float* l, float* acc, float* scores) {
  const std::int64_t C = D / 8;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t t = r % T;
    const std::int64_t last = causal ? (L - T + t) - t0 : n - 1;
    const std::int64_t nn = std::min(n, last + 1);
    if (nn <= 0) continue;
    const float* qr = q + r * D;
    // Scores, eight keys at a time. max(s, running) ignores NaN scores, as the portable loop does.
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    std::int64_t j = 0;
    for (; j + 8 <= nn; j += 8) {
      __m256 a[8];
      for (int k = 0; k < 8; ++k) a[k] = _mm256_setzero_ps();
      const float* k0 = kt + j * D;
      for (std::int64_t c = 0; c < C; ++c) {
        const __m256 qv = _mm256_loadu_ps(qr + 8 * c);
        for (int k = 0; k < 8; ++k) a[k] = _mm256_fmadd_ps(_mm256_loadu_ps(k0 + k * D + 8 * c), qv, a[k]);
      }
      const __m256 s = hsum8x8(a);
      _mm256_storeu_ps(scores + j, s);
      vmax = _mm256_max_ps(s, vmax);
    }
    float mt = hmax(vmax);
    for (; j < nn; ++j) {
      __m256 a = _mm256_setzero_ps();
      for (std::int64_t c = 0; c < C; ++c)
        a = _mm256_fmadd_ps(_mm256_loadu_ps(kt + j * D + 8 * c), _mm256_loadu_ps(qr + 8 * c), a);
      const float s = hsum(a);
      scores[j] = s;
      if (s > mt) mt = s;
    }
    float* ar = acc + r * D;
    const float mNew = raiseMax(mt, m[r], l[r], ar, D);
    const __m256 mv = _mm256_set1_ps(mNew);
    __m256 sumv = _mm256_setzero_ps();
    j = 0;
    for (; j + 8 <= nn; j += 8) {
      const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(scores + j), mv));
      _mm256_storeu_ps(scores + j, e);
      sumv = _mm256_add_ps(sumv, e);
    }
    float sum = hsum(sumv);
    for (; j < nn; ++j) {
      scores[j] = expNonPositive(scores[j] - mNew);
      sum += scores[j];
    }
    for (std::int64_t d0 = 0; d0 < D; d0 += 64) {
      switch (std::min<std::int64_t>(8, (D - d0) / 8)) {
        case 8:
          weightedValues<8>(scores, nn, vt + d0, D, ar + d0);
          break;
        case 7:
          weightedValues<7>(scores, nn, vt + d0, D, ar + d0);
          break;
        case 6:
          weightedValues<6>(scores, nn, vt + d0, D, ar + d0);
          break;
        case 5:
          weightedValues<5>(scores, nn, vt + d0, D, ar + d0);
          break;
        case 4:
          weightedValues<4>(scores, nn, vt + d0, D, ar + d0);
          break;
        case 3:
          weightedValues<3>(scores, nn, vt + d0, D, ar + d0);
          break;
        case 2:
          weightedValues<2>(scores, nn, vt + d0, D, ar + d0);
          break;
        default:
          weightedValues<1>(scores, nn, vt + d0, D, ar + d0);
          break;
      }
    }
    l[r] += sum;
  }
}
#endif

using TileFn = void (*)(const float*, std::int64_t, std::int64_t, std::int64_t, const float*, const float*,
                        std::int64_t, std::int64_t, std::int64_t, bool, float*, float*, float*, float*);

TileFn tileFunction(std::int64_t D) {
#if KVS_HAVE_AVX2_PATHS
  if (avx2Paths() && D % 8 == 0) return attendTileAvx2;
#endif
  (void)D;
  return attendTile;
}

}  // namespace

void segmentedAttention(const SegmentedAttentionArgs& a, const TokenSource& keys, const TokenSource& values,
                        const ParallelFor& parallel) {
  const std::int64_t L = keys.length();
  if (values.length() != L)
    throw Error(ErrorCode::Internal, "segmented attention: " + std::to_string(L) + " keys but " +
                                         std::to_string(values.length()) + " values");
  if (a.Hkv <= 0 || a.Hq % a.Hkv != 0)
    throw Error(ErrorCode::Internal, "segmented attention: query heads are not a multiple of the KV heads");
  if (L < a.T || L == 0) throw Error(ErrorCode::Internal, "segmented attention: fewer keys than queries");
  if (keys.dim() != a.D || values.dim() != a.D)
    throw Error(ErrorCode::Internal, "segmented attention: head_dim of the cache differs from the queries'");
  const std::int64_t B = a.B, Hkv = a.Hkv, G = a.Hq / a.Hkv, T = a.T, D = a.D, rows = G * T;
  const std::int64_t tile = std::max<std::int64_t>(a.tile, 1);
  // Split the sequence so that every worker has several tasks of whole tiles, none shorter than 4 tiles, and the
  // workers (which take equal runs of tasks) the same number of them where the length allows.
  const std::int64_t threads = std::max(a.threads, 1);
  std::int64_t want = std::max<std::int64_t>(1, (8 * threads + B * Hkv - 1) / (B * Hkv));
  for (std::int64_t s = want; s < want + threads; ++s)
    if ((B * Hkv * s) % threads == 0) {
      want = s;
      break;
    }
  const std::int64_t splits = std::clamp<std::int64_t>(L / (4 * tile), 1, want);
  const std::int64_t per = ((L + splits - 1) / splits + tile - 1) / tile * tile;
  // Partial results per task: m, l [rows] and acc [rows, D].
  const std::int64_t tasks = B * Hkv * splits, stride = rows * (D + 2);
  std::vector<float> part(static_cast<std::size_t>(tasks * stride));
  // Queries pre-scaled by the softmax scale, per (b, KV head) as [G * T, D].
  std::vector<float> qs(static_cast<std::size_t>(B * a.Hq * T * D));
  for (std::int64_t i = 0; i < B * a.Hq * T * D; ++i) qs[i] = a.q[i] * a.smScale;
  // Rows read in the bases the sources store them in: the queries into the keys' basis, the output out of the
  // values' basis below.
  const RowBasis kb = keys.basis(), vb = values.basis();
  if (!kb.identity())
    for (std::int64_t r = 0; r < B * a.Hq * T; ++r) intoBasis(kb, qs.data() + r * D, D);

  const TileFn tileFn = tileFunction(D);
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
        keys.readInBasis(b, hk, t0, n, kt.data());
        values.readInBasis(b, hk, t0, n, vt.data());
        tileFn(q, rows, T, D, kt.data(), vt.data(), n, t0, L, a.causal, m, l, acc, scores.data());
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
      // A learned sink: one more logit in the softmax, with no value (it only adds to the denominator).
      const float sink = a.sinks ? a.sinks[hk * G + g] : -INFINITY;
      if (sink > mMax) mMax = sink;
      std::fill(o, o + D, 0.0f);
      float lSum = sink == -INFINITY ? 0.0f : std::exp(sink - mMax);
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
      if (!vb.identity()) fromBasis(vb, o, D);
    }
  }
}

}  // namespace kvscope::kernels
