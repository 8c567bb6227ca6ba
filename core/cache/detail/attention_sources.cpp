#include "cache/detail/attention_sources.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <optional>

#include "kernels/cpu/bitpack.h"
#include "kernels/cpu/kv_blocks.h"
#include "kernels/cpu/kv_rows_simd.h"
#include "kernels/cpu/simd.h"
#include "kernels/kv_block_codec.h"
#include "kernels/kv_blocks_tensor.h"
#include "util/error.h"

#if KVS_HAVE_AVX2_PATHS
#include <immintrin.h>
#endif

// The fp8 and int decode loops run for every cached value at every decode step: KVS_MULTIVERSION (kernels/cpu/simd.h).
namespace kvscope::cache::detail {
namespace {

// FP8 codes times their channels' scales, branch-free so that it vectorizes: the exponent is rebiased in the integer
// domain (normals), subnormals come from the integer mantissa, NaN (and e5m2's inf) are selected by mask. Equal to
// kernels::decodeFp8 for all 256 codes (tests/unit/test_fused_attention.cpp checks it).
// n rows of D codes (row stride `stride` bytes) into n dense rows of D floats.
KVS_BODY void decodeE4M3RowsBody(const std::uint8_t* c, std::int64_t stride, const float* s, std::int64_t n,
                                 std::int64_t D, float* o) {
  for (std::int64_t t = 0; t < n; ++t, c += stride, o += D)
    for (std::int64_t d = 0; d < D; ++d) {
      const std::uint32_t b = c[d], em = b & 0x7Fu, sign = (b & 0x80u) << 24;
      const float normal = kernels::bitsFloat((em << 20) + (120u << 23));
      const float sub = static_cast<float>(em & 7u) * (1.0f / 512.0f);
      std::uint32_t u = kernels::floatBits(em < 8u ? sub : normal);
      u = em == 0x7Fu ? 0x7FC00000u : u;
      o[d] = kernels::bitsFloat(u | sign) * s[d];
    }
}
KVS_MULTIVERSION(void, decodeE4M3Rows,
                 (const std::uint8_t* c, std::int64_t stride, const float* s, std::int64_t n, std::int64_t D, float* o),
                 (c, stride, s, n, D, o))

KVS_BODY void decodeE5M2RowsBody(const std::uint8_t* c, std::int64_t stride, const float* s, std::int64_t n,
                                 std::int64_t D, float* o) {
  for (std::int64_t t = 0; t < n; ++t, c += stride, o += D)
    for (std::int64_t d = 0; d < D; ++d) {
      const std::uint32_t b = c[d], em = b & 0x7Fu, sign = (b & 0x80u) << 24;
      const float normal = kernels::bitsFloat((em << 21) + (112u << 23));
      const float sub = static_cast<float>(em & 3u) * (1.0f / 65536.0f);
      std::uint32_t u = kernels::floatBits(em < 4u ? sub : normal);
      u = em == 0x7Cu ? 0x7F800000u : u;
      u = em > 0x7Cu ? 0x7FC00000u : u;
      o[d] = kernels::bitsFloat(u | sign) * s[d];
    }
}
KVS_MULTIVERSION(void, decodeE5M2Rows,
                 (const std::uint8_t* c, std::int64_t stride, const float* s, std::int64_t n, std::int64_t D, float* o),
                 (c, stride, s, n, D, o))

#if KVS_HAVE_AVX2_PATHS
// FP8 through the CPU's half-precision conversion (F16C), 16 codes at a time; D a multiple of 16.
// - e5m2 is the top byte of an fp16: code << 8 is the fp16 of the same value.
// - e4m3fn's exponent and mantissa, put at fp16's bits 7..13 (sign at 15), are an fp16 of the value / 2^8 (exponent
//   bias 15 instead of 7; e4m3 subnormals land on fp16 subnormals of the same mantissa). Times 256 exact.
// NaN codes (e5m2's too) become the portable loop's NaN, 0x7FC00000 with the code's sign, by mask: a cache that stored
// NaN (the fp8 seed's overflow=nan) decodes at the speed of one that did not. The tests pin the bits.
KVS_AVX2 void decodeFp8RowsAvx2(const std::uint8_t* c, std::int64_t stride, const float* s, std::int64_t n,
                                std::int64_t D, float* o, bool e4m3) {
  const __m128i low7 = _mm_set1_epi8(0x7F), nan4 = _mm_set1_epi8(0x7F), inf5 = _mm_set1_epi8(0x7C);
  const __m128i signBit = _mm_set1_epi8(static_cast<char>(0x80));
  const __m256i quietNan = _mm256_set1_epi32(0x7FC00000);
  const __m256i clear14 = _mm256_set1_epi16(static_cast<short>(0xBFFF));
  const __m256 k256 = _mm256_set1_ps(256.0f);
  for (std::int64_t t = 0; t < n; ++t, c += stride, o += D)
    for (std::int64_t d = 0; d < D; d += 16) {
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c + d));
      const __m128i em = _mm_and_si128(x, low7);
      const __m128i special = e4m3 ? _mm_cmpeq_epi8(em, nan4) : _mm_cmpgt_epi8(em, inf5);
      __m256i h = _mm256_slli_epi16(_mm256_cvtepu8_epi16(x), 8);
      if (e4m3) h = _mm256_and_si256(_mm256_srai_epi16(h, 1), clear14);
      __m256 lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
      __m256 hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
      if (e4m3) lo = _mm256_mul_ps(lo, k256), hi = _mm256_mul_ps(hi, k256);
      if (_mm_movemask_epi8(special) != 0) {
        const __m128i signs = _mm_and_si128(x, signBit);  // 0x80 where the code is negative
        const __m256 nanLo =
            _mm256_castsi256_ps(_mm256_or_si256(_mm256_slli_epi32(_mm256_cvtepu8_epi32(signs), 24), quietNan));
        const __m256 nanHi = _mm256_castsi256_ps(
            _mm256_or_si256(_mm256_slli_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(signs, 8)), 24), quietNan));
        lo = _mm256_blendv_ps(lo, nanLo, _mm256_castsi256_ps(_mm256_cvtepi8_epi32(special)));
        hi = _mm256_blendv_ps(hi, nanHi, _mm256_castsi256_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(special, 8))));
      }
      _mm256_storeu_ps(o + d, _mm256_mul_ps(lo, _mm256_loadu_ps(s + d)));
      _mm256_storeu_ps(o + d + 8, _mm256_mul_ps(hi, _mm256_loadu_ps(s + d + 8)));
    }
}
#endif

// n rows of fp8 codes (either format) times their channels' scales: the AVX2 path where it runs, else the portable
// loops.
void decodeFp8Rows(const std::uint8_t* c, std::int64_t stride, const float* s, std::int64_t n, std::int64_t D, float* o,
                   kernels::Fp8Format f) {
#if KVS_HAVE_AVX2_PATHS
  if (D % 16 == 0 && kernels::avx2Paths())
    return decodeFp8RowsAvx2(c, stride, s, n, D, o, f == kernels::Fp8Format::E4M3FN);
#endif
  if (f == kernels::Fp8Format::E4M3FN)
    decodeE4M3Rows(c, stride, s, n, D, o);
  else
    decodeE5M2Rows(c, stride, s, n, D, o);
}

using kernels::TokenSource;

// Rows of n values of type T (float, bf16, fp16) as float32.
template <typename T>
void widen(const T* in, std::int64_t n, float* out) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);
}

void widenAny(const at::Tensor& t, const void* p, std::int64_t n, float* out) {
  switch (t.scalar_type()) {
    case at::kFloat:
      widen(static_cast<const float*>(p), n, out);
      break;
    case at::kBFloat16:
      widen(static_cast<const c10::BFloat16*>(p), n, out);
      break;
    case at::kHalf:
      widen(static_cast<const c10::Half*>(p), n, out);
      break;
    default:
      throw Error(ErrorCode::Internal, "attention source: states must be fp32, bf16 or fp16");
  }
}

void checkDense(const at::Tensor& x, const char* what) {
  if (x.dim() != 4 || (x.size(3) > 1 && x.stride(3) != 1))
    throw Error(ErrorCode::Internal, std::string("attention source: ") + what + " must be [B, H, S, D] with a dense D");
}

// read() is the CPU kernels' access: a source over device tensors is read whole (dense()) instead.
void checkHost(const at::Tensor& x) {
  if (!kernels::inHostMemory(x))
    throw Error(ErrorCode::Internal, "attention source: read() on " + x.device().str() + " states (use dense())");
}

using detail::StoredSource;

class FpSource final : public StoredSource {
 public:
  explicit FpSource(at::Tensor x) : x_(std::move(x)) { checkDense(x_, "full-precision states"); }
  std::int64_t length() const override { return x_.size(2); }
  std::int64_t dim() const override { return x_.size(3); }
  at::Tensor dense(std::int64_t, std::int64_t, at::ScalarType dtype) const override { return x_.to(dtype); }
  void read(std::int64_t b, std::int64_t h, std::int64_t t0, std::int64_t n, float* out) const override {
    checkHost(x_);
    const std::int64_t D = x_.size(3), es = static_cast<std::int64_t>(x_.element_size());
    const auto* base = static_cast<const std::uint8_t*>(x_.const_data_ptr()) +
                       (b * x_.stride(0) + h * x_.stride(1) + t0 * x_.stride(2)) * es;
    if (x_.stride(2) == D) return widenAny(x_, base, n * D, out);
    for (std::int64_t t = 0; t < n; ++t) widenAny(x_, base + t * x_.stride(2) * es, D, out + t * D);
  }

 private:
  at::Tensor x_;
};

class Fp8Source final : public StoredSource {
 public:
  Fp8Source(at::Tensor codes, const at::Tensor& scale, kernels::Fp8Format f)
      : view_{std::move(codes), scale.to(at::kFloat).contiguous(), f} {
    checkDense(view_.codes, "fp8 codes");
  }
  std::int64_t length() const override { return view_.codes.size(2); }
  std::int64_t dim() const override { return view_.codes.size(3); }
  const detail::Fp8View* fp8View() const override { return &view_; }
  // LibTorch's float8 cast (the definition the codecs are bit-exact with) times the scale, in float32.
  at::Tensor dense(std::int64_t, std::int64_t H, at::ScalarType dtype) const override {
    const at::ScalarType f8 = view_.format == kernels::Fp8Format::E4M3FN ? at::kFloat8_e4m3fn : at::kFloat8_e5m2;
    const at::Tensor f = view_.codes.view(f8).to(at::kFloat);
    return (f * view_.scale.view({1, H, 1, f.size(3)})).to(dtype);
  }
  void read(std::int64_t b, std::int64_t h, std::int64_t t0, std::int64_t n, float* out) const override {
    const at::Tensor& codes = view_.codes;
    checkHost(codes);
    const std::int64_t D = codes.size(3);
    const float* s = view_.scale.const_data_ptr<float>() + h * D;
    const std::uint8_t* base = codes.const_data_ptr<std::uint8_t>() + b * codes.stride(0) + h * codes.stride(1);
    const std::uint8_t* rows = base + t0 * codes.stride(2);
    decodeFp8Rows(rows, codes.stride(2), s, n, D, out, view_.format);
  }

 private:
  detail::Fp8View view_;
};

// n codes of `bits` bits from position p0 of an LSB-first packed stream of `bytes` bytes.
void unpackRun(const std::uint8_t* packed, std::int64_t bytes, std::int64_t p0, std::int64_t n, int bits,
               std::uint8_t* out) {
  if ((p0 * bits) % 8 == 0) return kernels::unpackBits(packed + p0 * bits / 8, n, bits, out);
  const std::uint32_t mask = (1u << bits) - 1u;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t bit = (p0 + i) * bits, byte = bit >> 3;
    std::uint32_t w = packed[byte];
    if (byte + 1 < bytes) w |= static_cast<std::uint32_t>(packed[byte + 1]) << 8;
    out[i] = static_cast<std::uint8_t>((w >> (bit & 7)) & mask);
  }
}

std::uint8_t codeAt(const std::uint8_t* packed, std::int64_t bytes, std::int64_t p, int bits) {
  std::uint8_t c;
  unpackRun(packed, bytes, p, 1, bits, &c);
  return c;
}

// Codes to values, as the codecs dequantize: quanto `scale * code - zero`, hqq `(code - zero) * scale`, each op
// rounded on its own (this file is compiled without contraction into fused multiply-adds). One group's scale and zero
// (affineOne) or one per value (affineEach).
KVS_BODY void affineOneBody(const std::uint8_t* c, std::int64_t n, float s, float z, bool quanto, float* o) {
  if (quanto)
    for (std::int64_t i = 0; i < n; ++i) o[i] = s * static_cast<float>(c[i]) - z;
  else
    for (std::int64_t i = 0; i < n; ++i) o[i] = (static_cast<float>(c[i]) - z) * s;
}
KVS_MULTIVERSION(void, affineOne, (const std::uint8_t* c, std::int64_t n, float s, float z, bool quanto, float* o),
                 (c, n, s, z, quanto, o))

KVS_BODY void affineEachBody(const std::uint8_t* c, std::int64_t n, const float* s, const float* z, bool quanto,
                             float* o) {
  if (quanto)
    for (std::int64_t i = 0; i < n; ++i) o[i] = s[i] * static_cast<float>(c[i]) - z[i];
  else
    for (std::int64_t i = 0; i < n; ++i) o[i] = (static_cast<float>(c[i]) - z[i]) * s[i];
}
KVS_MULTIVERSION(void, affineEach,
                 (const std::uint8_t* c, std::int64_t n, const float* s, const float* z, bool quanto, float* o),
                 (c, n, s, z, quanto, o))

// A GroupCodec block (quanto or hqq) in its packed layout. The value at flat index i of the [B, H, S, D] states sits
// at code position pos(i) of the grouped matrix [R, C] and belongs to group grp(i):
// - reshape layouts (quanto axis=0, hqq axis=0/1): pos = i; groups are rows (i / C) or columns (i % C), by which
//   dimension the codec reduced over;
// - quanto axis=-1: the states were reshaped to [groups, gs, D] and permuted to [gs, D * groups]: i = (g * gs + j) *
//   D + d sits at j * (D * groups) + d * groups + g and belongs to column d * groups + g.
class GroupSource final : public StoredSource {
 public:
  GroupSource(const QuantizedBlock& q, IntScheme scheme, int bits, const GroupCodec& codec,
              std::vector<std::int64_t> rows)
      : block_(q),
        codec_(codec),
        packed_(q.packed.contiguous()),
        scale_(q.scale.to(at::kFloat).contiguous()),
        zero_(q.zero.to(at::kFloat).contiguous()),
        quanto_(scheme == IntScheme::Quanto),
        bits_(bits),
        rows_(std::move(rows)) {
    H_ = q.shape[1], S_ = q.shape[2], D_ = q.shape[3];
    R_ = q.grouped[0], C_ = q.grouped[1];
    permuted_ = scheme == IntScheme::Quanto && q.axis != 0;
    // Which dimension holds one group: the codec keeps a [R, 1] scale (row groups) or a [1, C] one (column groups).
    rowGroups_ = scale_.dim() == 2 && scale_.size(1) == 1 && scale_.size(0) == R_;
    bytes_ = packed_.numel();
  }
  std::int64_t length() const override { return S_; }
  std::int64_t dim() const override { return D_; }

  // The codec's own dequantization (its device kernels), batch rows in the order attention reads them.
  at::Tensor dense(std::int64_t, std::int64_t, at::ScalarType dtype) const override {
    at::Tensor d = at::empty(block_.shape, packed_.options().dtype(dtype));
    codec_.dequantizeInto(block_, d);
    bool identity = true;
    for (std::size_t i = 0; i < rows_.size(); ++i) identity = identity && rows_[i] == static_cast<std::int64_t>(i);
    return identity ? d : d.index_select(0, at::tensor(rows_, at::kLong).to(d.device()));
  }

  void read(std::int64_t b, std::int64_t h, std::int64_t t0, std::int64_t n, float* out) const override {
    checkHost(packed_);
    const std::int64_t row = rows_.empty() ? b : rows_[static_cast<std::size_t>(b)];
    const std::uint8_t* pk = packed_.const_data_ptr<std::uint8_t>();
    const float* s = scale_.const_data_ptr<float>();
    const float* z = zero_.const_data_ptr<float>();
    const std::int64_t i0 = ((row * H_ + h) * S_ + t0) * D_;
    if (!permuted_) {
      // Tokens t0.. of one (row, head) are consecutive in the reshape layouts: one run of n * D codes.
      std::uint8_t codes[4096];
      const std::int64_t total = n * D_;
      for (std::int64_t p0 = 0; p0 < total; p0 += 4096) {
        const std::int64_t m = std::min<std::int64_t>(4096, total - p0);
        unpackRun(pk, bytes_, i0 + p0, m, bits_, codes);
        float* o = out + p0;
        if (rowGroups_) {
          // Runs of one group at a time.
          for (std::int64_t d = 0; d < m;) {
            const std::int64_t g = (i0 + p0 + d) / C_;
            const std::int64_t end = std::min(m, (g + 1) * C_ - i0 - p0);
            affineOne(codes + d, end - d, s[g], z[g], quanto_, o + d);
            d = end;
          }
        } else {
          // Column groups: consecutive values belong to consecutive groups (wrapping at C).
          for (std::int64_t d = 0; d < m;) {
            const std::int64_t c = (i0 + p0 + d) % C_;
            const std::int64_t end = std::min(m, d + (C_ - c));
            affineEach(codes + d, end - d, s + c, z + c, quanto_, o + d);
            d = end;
          }
        }
      }
      return;
    }
    for (std::int64_t t = 0; t < n; ++t) {
      const std::int64_t it = i0 + t * D_;
      float* o = out + t * D_;
      const std::int64_t gs = R_, groups = C_ / D_;
      const std::int64_t gIdx = it / (gs * D_), j = (it / D_) % gs;
      for (std::int64_t d = 0; d < D_; ++d) {
        const std::int64_t col = d * groups + gIdx;
        const std::uint8_t c = codeAt(pk, bytes_, j * C_ + col, bits_);
        affineOne(&c, 1, s[col], z[col], quanto_, o + d);
      }
    }
  }

 private:
  QuantizedBlock block_;
  const GroupCodec& codec_;
  at::Tensor packed_, scale_, zero_;
  bool quanto_;
  int bits_;
  std::vector<std::int64_t> rows_;
  std::int64_t H_ = 0, S_ = 0, D_ = 0, R_ = 0, C_ = 0, bytes_ = 0;
  bool permuted_ = false, rowGroups_ = true;
};

// kivi's dequantization, `code * scale + zero` (each op rounded on its own, as above): a scale and zero per value
// (mulAddEach) or one for the run (mulAddOne).
KVS_BODY void mulAddEachBody(const std::uint8_t* c, std::int64_t n, const float* s, const float* z, float* o) {
  for (std::int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(c[i]) * s[i] + z[i];
}
KVS_MULTIVERSION(void, mulAddEach, (const std::uint8_t* c, std::int64_t n, const float* s, const float* z, float* o),
                 (c, n, s, z, o))

KVS_BODY void mulAddOneBody(const std::uint8_t* c, std::int64_t n, float s, float z, float* o) {
  for (std::int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(c[i]) * s + z;
}
KVS_MULTIVERSION(void, mulAddOne, (const std::uint8_t* c, std::int64_t n, float s, float z, float* o), (c, n, s, z, o))

class KiviSource final : public StoredSource {
 public:
  KiviSource(at::Tensor codes, const at::Tensor& scale, const at::Tensor& zero, int bits, std::int64_t group, bool keys,
             std::int64_t D, std::int64_t length)
      : codes_(std::move(codes)),
        scale_(scale.to(at::kFloat).contiguous()),
        zero_(zero.to(at::kFloat).contiguous()),
        bits_(bits),
        group_(group),
        keys_(keys),
        D_(D),
        length_(length) {}
  std::int64_t length() const override { return length_; }
  std::int64_t dim() const override { return D_; }
  // code * scale + zero in float32 (each op rounded on its own, as read()), scales broadcast over their groups.
  at::Tensor dense(std::int64_t, std::int64_t, at::ScalarType dtype) const override {
    const at::Tensor c =
        detail::unpackRows(codes_.narrow(2, 0, length_), D_, bits_, kernels::KernelPath::Device).to(at::kFloat);
    at::Tensor s, z;
    if (keys_) {  // [B, H, groups, D]: one row per group of tokens
      s = scale_.repeat_interleave(group_, 2).narrow(2, 0, length_);
      z = zero_.repeat_interleave(group_, 2).narrow(2, 0, length_);
    } else {  // [B, H, T, D / vg]: one value per group of channels
      const std::int64_t vg = std::min(group_, D_);
      s = scale_.narrow(2, 0, length_).repeat_interleave(vg, 3).narrow(3, 0, D_);
      z = zero_.narrow(2, 0, length_).repeat_interleave(vg, 3).narrow(3, 0, D_);
    }
    return (c * s + z).to(dtype);
  }
  void read(std::int64_t b, std::int64_t h, std::int64_t t0, std::int64_t n, float* out) const override {
    checkHost(codes_);
    const std::uint8_t* base = codes_.const_data_ptr<std::uint8_t>() + b * codes_.stride(0) + h * codes_.stride(1);
    const std::int64_t sH = scale_.size(2), sD = scale_.size(3);  // groups or tokens; D or D / group
    const float* s = scale_.const_data_ptr<float>() + (b * scale_.size(1) + h) * sH * sD;
    const float* z = zero_.const_data_ptr<float>() + (b * zero_.size(1) + h) * sH * sD;
    const std::int64_t vg = std::min(group_, D_);
    // Tokens are consecutive rows of packed codes: unpacked up to 64 tokens at a time when the rows are dense (no
    // padding bits between them), else a row at a time.
    const std::int64_t rowBytes = codes_.stride(2);
    const bool dense = rowBytes * 8 == D_ * bits_;
    const std::int64_t chunk = dense ? std::max<std::int64_t>(1, 4096 / D_) : 1;
    std::uint8_t codes[4096];
    for (std::int64_t c0 = 0; c0 < n; c0 += chunk) {
      const std::int64_t m = std::min(chunk, n - c0);
      kernels::unpackBits(base + (t0 + c0) * rowBytes, m * D_, bits_, codes);
      for (std::int64_t t = 0; t < m; ++t) {
        const std::int64_t tok = t0 + c0 + t;
        const std::uint8_t* ct = codes + t * D_;
        float* o = out + (c0 + t) * D_;
        if (keys_) {
          // Per channel, one group of tokens shares a row of scales and zeros.
          mulAddEach(ct, D_, s + (tok / group_) * sD, z + (tok / group_) * sD, o);
        } else {
          // Per token, in groups of vg channels.
          const float* sr = s + tok * sD;
          const float* zr = z + tok * sD;
          for (std::int64_t g = 0; g * vg < D_; ++g)
            mulAddOne(ct + g * vg, std::min(vg, D_ - g * vg), sr[g], zr[g], o + g * vg);
        }
      }
    }
  }

 private:
  at::Tensor codes_, scale_, zero_;
  int bits_;
  std::int64_t group_;
  bool keys_;
  std::int64_t D_, length_;
};

// Block-quantized cache rows: each token's row of blocks decoded as its engine decodes it (ggml, vLLM,
// Model-Optimizer), then rotated back (H_n is its own inverse) when the layer rotated it before storing.
class KvRowSource final : public StoredSource {
 public:
  KvRowSource(at::Tensor rows, std::uint32_t type, std::int64_t D, int rotation, bool interleaved, float scale)
      : rows_(std::move(rows)), type_(type), D_(D), rotation_(rotation), interleaved_(interleaved), scale_(scale) {
    checkDense(rows_, "cache rows");
    if (rows_.scalar_type() != at::kByte || rows_.size(3) != kernels::kvRowBytes(type, D))
      throw Error(ErrorCode::Internal, "attention source: cache rows must be uint8 [B, H, S, row bytes]");
    if (D > kernels::kvcodec::kMaxRow)  // read()'s scratch row; the rows' writer (storeKvRows) refuses such rows too
      throw Error(ErrorCode::Internal, "attention source: cache rows above the row codecs' head size");
    namespace kvc = kernels::kvcodec;
    // The basis the rows are stored in (kernels::RowBasis): the transform each row goes through when it is read.
    const bool tqKey = type_ == kvc::TQ_KEY3 || type_ == kvc::TQ_KEY4, int4 = kvc::isInt4PerTokenHead(type_);
    if ((tqKey || int4) && rotation_ > 0) return;  // two transforms: read in the model's basis
    if (tqKey) {
      basis_.chunk = static_cast<int>(D);
      basis_.scale = kvc::hadamardScale(basis_.chunk);
    } else if (int4) {
      basis_.chunk = kvc::rhtBlock(D);
      for (int i = 0; i < basis_.chunk; ++i) basis_.signs.push_back(kvc::rhtSign(i));
      basis_.scale = 1.0f / static_cast<float>(basis_.chunk);
    } else if (rotation_ > 0) {
      basis_.chunk = rotation_;
      basis_.scale = kvc::hadamardScale(rotation_);
    }
    basis_.interleaved = interleaved_;
  }
  std::int64_t length() const override { return rows_.size(2); }
  std::int64_t dim() const override { return D_; }
  at::Tensor dense(std::int64_t /*B*/, std::int64_t /*H*/, at::ScalarType dtype) const override {  // the rows' own
    at::Tensor out = kernels::readKvRows(rows_, type_, D_, rotation_, scale_);
    if (interleaved_) out = kernels::deinterleaveHalves(out);
    return dtype == at::kFloat ? out : out.to(dtype);
  }
  void read(std::int64_t b, std::int64_t h, std::int64_t t0, std::int64_t n, float* out) const override {
    checkHost(rows_);
    const std::uint8_t* row =
        rows_.const_data_ptr<std::uint8_t>() + b * rows_.stride(0) + h * rows_.stride(1) + t0 * rows_.stride(2);
    if (kernels::readKvRowsSimd(type_, row, rows_.stride(2), n, D_, rotation_, interleaved_, scale_, out)) return;
    float row0[kernels::kvcodec::kMaxRow];
    for (std::int64_t t = 0; t < n; ++t, row += rows_.stride(2)) {
      float* y = out + t * D_;
      kernels::kvcodec::readRow(type_, row, D_, rotation_, interleaved_ ? row0 : y, scale_);
      if (interleaved_)
        for (std::int64_t i = 0; i < D_ / 2; ++i) y[i] = row0[2 * i], y[D_ / 2 + i] = row0[2 * i + 1];
    }
  }
  kernels::RowBasis basis() const override { return basis_; }
  void readInBasis(std::int64_t b, std::int64_t h, std::int64_t t0, std::int64_t n, float* out) const override {
    if (basis_.identity()) return read(b, h, t0, n, out);
    checkHost(rows_);
    const std::uint8_t* row =
        rows_.const_data_ptr<std::uint8_t>() + b * rows_.stride(0) + h * rows_.stride(1) + t0 * rows_.stride(2);
    if (kernels::readKvRowsSimd(type_, row, rows_.stride(2), n, D_, 0, false, scale_, out, /*stored=*/true)) return;
    for (std::int64_t t = 0; t < n; ++t, row += rows_.stride(2))
      kernels::kvcodec::decodeStored(type_, row, D_, out + t * D_, scale_);
  }

 private:
  kernels::RowBasis basis_;
  at::Tensor rows_;
  std::uint32_t type_;
  std::int64_t D_;
  int rotation_;
  bool interleaved_;
  float scale_;
};

}  // namespace

SourcePtr fpSource(const at::Tensor& x) {
  return std::make_shared<FpSource>(x);
}

SourcePtr kvRowSource(const at::Tensor& rows, std::uint32_t type, std::int64_t D, int rotation, bool interleaved,
                      float scale) {
  return std::make_shared<KvRowSource>(rows, type, D, rotation, interleaved, scale);
}

SourcePtr fp8Source(const at::Tensor& codes, const at::Tensor& expandedScale, kernels::Fp8Format format) {
  return std::make_shared<Fp8Source>(codes, expandedScale, format);
}

SourcePtr groupSource(const QuantizedBlock& block, IntScheme scheme, int bits, const GroupCodec& codec,
                      std::vector<std::int64_t> rows) {
  return std::make_shared<GroupSource>(block, scheme, bits, codec, std::move(rows));
}

SourcePtr kiviSource(const at::Tensor& codes, const at::Tensor& scale, const at::Tensor& zero, int bits,
                     std::int64_t group, bool keys, std::int64_t D, std::int64_t length) {
  if (D > 4096) throw Error(ErrorCode::BadInput, "attention source: kivi head_dim above 4096");
  return std::make_shared<KiviSource>(codes, scale, zero, bits, group, keys, D, length);
}

namespace {
// Sources one after the other: the CPU kernels read through kernels::ConcatSource, the device path concatenates.
class Concat final : public StoredSource {
 public:
  explicit Concat(const std::vector<SourcePtr>& parts) {
    for (const auto& p : parts)
      if (p && p->length() > 0) {
        parts_.push_back(p);
        cat_.add(p);
      }
  }
  std::int64_t length() const override { return cat_.length(); }
  std::int64_t dim() const override { return cat_.dim(); }
  void read(std::int64_t b, std::int64_t h, std::int64_t t0, std::int64_t n, float* out) const override {
    cat_.read(b, h, t0, n, out);
  }
  kernels::RowBasis basis() const override { return cat_.basis(); }
  void readInBasis(std::int64_t b, std::int64_t h, std::int64_t t0, std::int64_t n, float* out) const override {
    cat_.readInBasis(b, h, t0, n, out);
  }
  at::Tensor dense(std::int64_t B, std::int64_t H, at::ScalarType dtype) const override {
    std::vector<at::Tensor> xs;
    for (const auto& p : parts_) xs.push_back(p->dense(B, H, dtype));
    if (xs.empty()) return at::empty({B, H, 0, 0}, at::TensorOptions().dtype(dtype));
    return xs.size() == 1 ? xs[0] : at::cat(xs, 2);
  }

 private:
  std::vector<SourcePtr> parts_;
  kernels::ConcatSource cat_;
};
}  // namespace

SourcePtr concat(const std::vector<SourcePtr>& parts) {
  return std::make_shared<Concat>(parts);
}

namespace {
// Tokens [from, length) of a source: a sliding-window layer's keys a query can still see.
class Tail final : public StoredSource {
 public:
  Tail(SourcePtr s, std::int64_t from) : s_(std::move(s)), from_(from) {
    if (auto* v = s_->fp8View()) view_ = detail::Fp8View{v->codes.narrow(2, from_, length()), v->scale, v->format};
  }
  std::int64_t length() const override { return s_->length() - from_; }
  std::int64_t dim() const override { return s_->dim(); }
  void read(std::int64_t b, std::int64_t h, std::int64_t t0, std::int64_t n, float* out) const override {
    s_->read(b, h, from_ + t0, n, out);
  }
  kernels::RowBasis basis() const override { return s_->basis(); }
  void readInBasis(std::int64_t b, std::int64_t h, std::int64_t t0, std::int64_t n, float* out) const override {
    s_->readInBasis(b, h, from_ + t0, n, out);
  }
  at::Tensor dense(std::int64_t B, std::int64_t H, at::ScalarType dtype) const override {
    return s_->dense(B, H, dtype).narrow(2, from_, length());
  }
  const detail::Fp8View* fp8View() const override { return view_ ? &*view_ : nullptr; }

 private:
  SourcePtr s_;
  std::int64_t from_;
  std::optional<detail::Fp8View> view_;
};
}  // namespace

SourcePtr tail(const SourcePtr& s, std::int64_t from) {
  if (from <= 0) return s;
  return std::make_shared<Tail>(s, from);
}

at::Tensor packRows(const at::Tensor& codes, int bits, kernels::KernelPath path) {
  const std::int64_t D = codes.size(3), pb = kernels::packedBytes(D, bits);
  if (path == kernels::KernelPath::Device) {
    // LSB-first: code i of a row sits in byte i / per at bit (i % per) * bits.
    if (8 % bits != 0) throw Error(ErrorCode::Internal, "packRows: a device packs 1, 2, 4 or 8 bits");
    const std::int64_t per = 8 / bits;
    const at::Tensor c = at::constant_pad_nd(codes.to(at::kInt), {0, pb * per - D})
                             .view({codes.size(0), codes.size(1), codes.size(2), pb, per});
    const at::Tensor shifts = at::arange(0, 8, bits, c.options());
    return at::bitwise_left_shift(c, shifts).sum(-1).to(at::kByte);
  }
  const at::Tensor c = codes.contiguous();
  const std::int64_t rows = c.numel() / std::max<std::int64_t>(D, 1);
  at::Tensor out = at::empty({c.size(0), c.size(1), c.size(2), pb}, c.options());
  const auto* in = c.const_data_ptr<std::uint8_t>();
  auto* o = out.mutable_data_ptr<std::uint8_t>();
  if ((D * bits) % 8 == 0) {
    kernels::packBits(in, rows * D, bits, o);
  } else {
    for (std::int64_t r = 0; r < rows; ++r) kernels::packBits(in + r * D, D, bits, o + r * pb);
  }
  return out;
}

at::Tensor unpackRows(const at::Tensor& packed, std::int64_t D, int bits, kernels::KernelPath path) {
  if (path == kernels::KernelPath::Device) {
    if (8 % bits != 0) throw Error(ErrorCode::Internal, "unpackRows: a device unpacks 1, 2, 4 or 8 bits");
    const std::int64_t per = 8 / bits;
    const at::Tensor p = packed.to(at::kInt).unsqueeze(-1);
    const at::Tensor shifts = at::arange(0, 8, bits, p.options());
    const at::Tensor c = at::bitwise_and(at::bitwise_right_shift(p, shifts), (1 << bits) - 1);
    return c.view({packed.size(0), packed.size(1), packed.size(2), packed.size(3) * per}).narrow(3, 0, D).to(at::kByte);
  }
  const at::Tensor p = packed.contiguous();
  const std::int64_t pb = p.size(3), rows = p.numel() / std::max<std::int64_t>(pb, 1);
  at::Tensor out = at::empty({p.size(0), p.size(1), p.size(2), D}, p.options());
  const auto* in = p.const_data_ptr<std::uint8_t>();
  auto* o = out.mutable_data_ptr<std::uint8_t>();
  if ((D * bits) % 8 == 0) {
    kernels::unpackBits(in, rows * D, bits, o);
  } else {
    for (std::int64_t r = 0; r < rows; ++r) kernels::unpackBits(in + r * pb, D, bits, o + r * D);
  }
  return out;
}

}  // namespace kvscope::cache::detail
