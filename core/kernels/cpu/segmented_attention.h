// Attention that reads a cache in its stored form: each side (keys, values) is a TokenSource that produces float32
// rows a tile at a time (fp8 codes x scales, packed int groups x scale/zero, a full-precision buffer, or several of
// these one after the other), so no full-precision copy of the history exists. One pass per (batch row, KV head,
// split of the sequence) with an online softmax; the splits are merged at the end (split-K), so a long context keeps
// every thread busy. Grouped-query heads share each dequantized tile. fp32 accumulation. Torch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace kvscope::kernels {

/// The linear map B from the rows a source stores to the model's rows: x = B r, with B r = P (S (H_c r) · scale) for
/// each chunk of c values (H_c the unnormalised Walsh-Hadamard transform in Sylvester's order, S the diagonal of
/// `signs` where given, P the deinterleave x[i] = y[2i], x[D/2 + i] = y[2i + 1] where `interleaved`). A cache that
/// stores rotated rows (llama.cpp's, TurboQuant's keys, vLLM's int4 per token and head) lets attention read them
/// unrotated: the queries go through B's transpose once, the output through B once, instead of every row through B
/// at every step (vLLM rotates its queries too). chunk 0 and no interleave: the identity.
struct RowBasis {
  int chunk = 0;
  std::vector<float> signs;  ///< c signs (±1), or empty
  float scale = 1.0f;
  bool interleaved = false;
  bool identity() const { return chunk == 0 && !interleaved; }
  bool operator==(const RowBasis& o) const {
    return chunk == o.chunk && signs == o.signs && scale == o.scale && interleaved == o.interleaved;
  }
};
/// v (dim values) := B^T v, and := B v.
void intoBasis(const RowBasis& basis, float* v, std::int64_t dim);
void fromBasis(const RowBasis& basis, float* v, std::int64_t dim);

/// One side (keys or values) of a layer's cache as attention reads it: tokens [0, length()) of every (batch row,
/// KV head), produced as float32 rows of `dim` values.
class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual std::int64_t length() const = 0;
  virtual std::int64_t dim() const = 0;
  /// Writes tokens [t0, t0 + n) of (b, h) into out (n rows of dim floats, dense). t0 + n <= length().
  virtual void read(std::int64_t b, std::int64_t h, std::int64_t t0, std::int64_t n, float* out) const = 0;
  /// The basis readInBasis() writes rows in (identity: read()'s rows).
  virtual RowBasis basis() const { return {}; }
  /// The tokens read() writes, r rather than B r (basis()).
  virtual void readInBasis(std::int64_t b, std::int64_t h, std::int64_t t0, std::int64_t n, float* out) const {
    read(b, h, t0, n, out);
  }
};

/// Several sources one after the other along the sequence (quantized history, full-precision window, new tokens).
class ConcatSource final : public TokenSource {
 public:
  void add(std::shared_ptr<const TokenSource> part);
  std::int64_t length() const override { return length_; }
  std::int64_t dim() const override { return dim_; }
  void read(std::int64_t b, std::int64_t h, std::int64_t t0, std::int64_t n, float* out) const override;
  /// The parts' basis where they all have the same one, else the identity (every part read in the model's basis).
  RowBasis basis() const override { return mixed_ ? RowBasis{} : basis_; }
  void readInBasis(std::int64_t b, std::int64_t h, std::int64_t t0, std::int64_t n, float* out) const override;
  bool empty() const { return parts_.empty(); }

 private:
  void readParts(std::int64_t b, std::int64_t h, std::int64_t t0, std::int64_t n, float* out, bool inBasis) const;
  std::vector<std::shared_ptr<const TokenSource>> parts_;
  RowBasis basis_;
  bool mixed_ = false;
  std::vector<std::int64_t> starts_;
  std::int64_t length_ = 0;
  std::int64_t dim_ = 0;
};

/// Runs fn(begin, end) over [0, n) on the caller's thread pool (LibTorch's intra-op pool in kvscope).
using ParallelFor = std::function<void(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& fn)>;

struct SegmentedAttentionArgs {
  const float* q = nullptr;  ///< [B, Hq, T, D], dense
  std::int64_t B = 0, Hq = 0, Hkv = 0, T = 0, D = 0;
  float smScale = 1.0f;  ///< softmax scale (1/sqrt(D) for Llama)
  /// Query t (of T) sees keys [0, L - T + t]: the T queries are the newest T positions of the L keys.
  bool causal = true;
  /// [Hq] learned sink logits (gpt-oss), or nullptr: each query row's softmax adds exp(sink) to its denominator,
  /// unscaled by smScale, with no value behind it.
  const float* sinks = nullptr;
  float* out = nullptr;    ///< [B, Hq, T, D], dense
  int threads = 1;         ///< how many workers the parallel loop has (chooses the sequence splits)
  std::int64_t tile = 64;  ///< tokens dequantized at a time
};

/// out = softmax(smScale * q k^T [causal]) v, query head h reading KV head h / (Hq / Hkv). keys and values hold the
/// same number of tokens L >= T. NaN or infinite stored values propagate into the rows that read them, as in
/// LibTorch's scaled_dot_product_attention.
void segmentedAttention(const SegmentedAttentionArgs& a, const TokenSource& keys, const TokenSource& values,
                        const ParallelFor& parallel);

}  // namespace kvscope::kernels
