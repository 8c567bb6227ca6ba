#include "kernels/cpu/packed_matmul.h"

// GCC 12 at -O3 reports the _mm512_undefined_* inside its own AVX-512 conversion intrinsics as "may be used
// uninitialized" (GCC bug 105593); nothing of ours is.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/blocks.h"
#include "kernels/cpu/simd.h"

namespace kvscope::kernels {

// The packing and the dot-product tiles index bytes with products of small loop counters (units of 32 values, lanes,
// chunks of 64 bytes: all below 2^16), the way the intrinsics take them; widening each one would only add noise.
// NOLINTBEGIN(bugprone-implicit-widening-of-multiplication-result)

namespace {

// Where a type's pieces lie in a tile (packed_matmul.h).
struct Shape {
  int groupsPerUnit = 1;  // 8 for Q4_K's super-block
  bool scaled = false;    // per-group 6-bit scale and min (Q4_K)
  int chunks = 4;         // 64-byte code chunks per group: 4 (4-bit codes) or 8 (8-bit)
  float minPerD = 0.0f;   // M = minPerD * D (Q4_0: -8, Q8_0: -128; exact), so no mbase is stored; 0: mbase stored
  std::int64_t headerBytes() const { return minPerD != 0.0f ? 32 : 64; }
  std::int64_t groupBytes() const { return (scaled ? 32 : 0) + 64 * chunks; }
  std::int64_t unitBytes() const { return headerBytes() + groupsPerUnit * groupBytes(); }
};

constexpr Shape shapeOf(GgmlType type) {
  Shape s;
  if (type == GgmlType::Q4_K) {
    s.groupsPerUnit = 8;
    s.scaled = true;
  }
  if (type == GgmlType::Q8_0) s.chunks = 8;
  if (type == GgmlType::Q4_0) s.minPerD = -8.0f;
  if (type == GgmlType::Q8_0) s.minPerD = -128.0f;
  return s;
}
Shape shapeOf(std::uint32_t type) {
  return shapeOf(static_cast<GgmlType>(type));
}

float fromBits(std::uint16_t b) {
  return static_cast<float>(c10::Half(b, c10::Half::from_bits()));
}
std::uint16_t load16(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
void store16(std::uint8_t* p, std::uint16_t v) {
  std::memcpy(p, &v, 2);
}

// The pieces of row r's group g in the repacked form.
struct GroupAt {
  const std::uint8_t* unit;   // the unit's dbase/mbase
  const std::uint8_t* group;  // the group's sc/mn (Q4_K) then its code chunks
  const std::uint8_t* codes;
  int j;  // the row's lane in its tile
};

GroupAt locate(const PackedMatrix& w, const Shape& s, std::int64_t r, std::int64_t g) {
  const std::uint8_t* tile = w.data.get() + (r / 16) * w.tileBytes;
  const std::int64_t u = g / s.groupsPerUnit, gg = g % s.groupsPerUnit;
  GroupAt a;
  a.unit = tile + u * s.unitBytes();
  a.group = a.unit + s.headerBytes() + gg * s.groupBytes();
  a.codes = a.group + (s.scaled ? 32 : 0);
  a.j = static_cast<int>(r % 16);
  return a;
}

// Row r's group g as unsigned codes with its D and M (value = D * q + M).
void readGroup(const PackedMatrix& w, const Shape& s, std::int64_t r, std::int64_t g, std::uint8_t q[32], float& D,
               float& M) {
  const GroupAt a = locate(w, s, r, g);
  D = fromBits(load16(a.unit + 2 * a.j));
  M = s.minPerD != 0.0f ? s.minPerD * D : fromBits(load16(a.unit + 32 + 2 * a.j));
  if (s.scaled) {
    D *= static_cast<float>(a.group[a.j]);
    M *= static_cast<float>(a.group[16 + a.j]);
  }
  for (int i = 0; i < 4 * s.chunks; ++i) {
    const std::uint8_t b = a.codes[64 * (i / 4) + 4 * a.j + i % 4];
    if (s.chunks == 8) {
      q[i] = b;
    } else {
      q[i] = b & 0x0F;
      q[i + 16] = b >> 4;
    }
  }
}

}  // namespace

bool packableType(std::uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q8_0:
    case GgmlType::Q4_K:
      return true;
    default:
      return false;
  }
}

std::int64_t packedTileBytes(std::uint32_t type, std::int64_t cols) {
  const Shape s = shapeOf(type);
  return cols / (32 * s.groupsPerUnit) * s.unitBytes();
}

void packPrepare(const BlockMatrix& w, PackedMatrix& out) {
  out.type = w.type;
  out.rows = w.rows;
  out.cols = w.cols;
  out.tileBytes = packedTileBytes(w.type, w.cols);
  out.data = util::allocateStreamed(static_cast<std::size_t>(out.bytes()));  // not zeroed: see packTiles
}

namespace {

// Q4_0, Q4_1 and Q8_0 hold one group per block, and the packed code bytes are the block's own: byte i of a 4-bit
// block is code i | code i + 16 << 4 as stored, an 8-bit code is the stored one XOR 0x80. So a row's group moves as
// its fp16 d (and m) bits and `chunks` words of 4 bytes, without unpacking the codes (what loading a Q8_0 model
// spent most of its time on).
void packWholeBlocks(const BlockMatrix& w, PackedMatrix& out, std::int64_t r0, std::int64_t r1) {
  const Shape s = shapeOf(w.type);
  const BlockLayout L = blockLayout(w.type);
  const auto type = static_cast<GgmlType>(w.type);
  const std::int64_t groups = w.cols / 32, unitBytes = s.unitBytes();
  const std::int64_t codesAt = type == GgmlType::Q4_1 ? 4 : 2;  // after d (and m)
  const std::uint32_t flip = type == GgmlType::Q8_0 ? 0x80808080u : 0u;
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::uint8_t* block = w.data + r * w.rowBytes;
    std::uint8_t* unit = out.data.get() + (r / 16) * out.tileBytes;
    const auto j = static_cast<int>(r % 16);
    for (std::int64_t g = 0; g < groups; ++g, block += L.bytes, unit += unitBytes) {
      std::memcpy(unit + 2 * j, block, 2);
      if (type == GgmlType::Q4_1) std::memcpy(unit + 32 + 2 * j, block + 2, 2);
      std::uint8_t* codes = unit + s.headerBytes() + 4 * j;
      for (int k = 0; k < s.chunks; ++k) {
        std::uint32_t v;
        std::memcpy(&v, block + codesAt + 4 * k, 4);
        v ^= flip;
        std::memcpy(codes + 64 * k, &v, 4);
      }
    }
  }
}

}  // namespace

void packTiles(const BlockMatrix& w, PackedMatrix& out, std::int64_t t0, std::int64_t t1) {
  const Shape s = shapeOf(w.type);
  const BlockLayout L = blockLayout(w.type);
  const auto type = static_cast<GgmlType>(w.type);
  const std::int64_t groups = w.cols / 32, perBlock = L.values / 32;
  for (std::int64_t t = t0; t < t1; ++t)  // a last tile's padding rows: zero (D = M = 0)
    if (16 * t + 16 > w.rows)
      std::memset(out.data.get() + t * out.tileBytes, 0, static_cast<std::size_t>(out.tileBytes));
  if (type != GgmlType::Q4_K) {
    packWholeBlocks(w, out, t0 * 16, std::min(t1 * 16, w.rows));
    return;
  }
  for (std::int64_t r = t0 * 16; r < std::min(t1 * 16, w.rows); ++r) {  // Q4_K: eight groups a block
    const std::uint8_t* row = w.data + r * w.rowBytes;
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::uint8_t* block = row + (g / perBlock) * L.bytes;
      std::uint8_t q[32];
      float D[2], M[2];
      unpackGroup(type, block, static_cast<int>(g % perBlock), q, D, M);
      const GroupAt a = locate(out, s, r, g);
      auto* unit = const_cast<std::uint8_t*>(a.unit);
      auto* group = const_cast<std::uint8_t*>(a.group);
      auto* codes = const_cast<std::uint8_t*>(a.codes);
      // d and -dmin as stored (the sign bit flipped), the group's scale and min
      store16(unit + 2 * a.j, load16(block));
      store16(unit + 32 + 2 * a.j, static_cast<std::uint16_t>(load16(block + 2) ^ 0x8000u));
      int sc, mn;
      scaleMinK4(static_cast<int>(g % perBlock), block + 4, sc, mn);
      group[a.j] = static_cast<std::uint8_t>(sc);
      group[16 + a.j] = static_cast<std::uint8_t>(mn);
      for (int i = 0; i < 16; ++i)
        codes[64 * (i / 4) + 4 * a.j + i % 4] = static_cast<std::uint8_t>(q[i] | (q[i + 16] << 4));
    }
  }
}

void unpackRows(const PackedMatrix& w, std::int64_t r0, std::int64_t r1, std::uint8_t* dst, std::int64_t rowBytes) {
  const Shape s = shapeOf(w.type);
  const BlockLayout L = blockLayout(w.type);
  const auto type = static_cast<GgmlType>(w.type);
  const std::int64_t blocks = w.cols / L.values;
  for (std::int64_t r = r0; r < r1; ++r) {
    std::uint8_t* row = dst + (r - r0) * rowBytes;
    for (std::int64_t bi = 0; bi < blocks; ++bi) {
      std::uint8_t* b = row + bi * L.bytes;
      if (type == GgmlType::Q4_K) {
        int sc[8], mn[8];
        for (int gg = 0; gg < 8; ++gg) {
          const GroupAt a = locate(w, s, r, bi * 8 + gg);
          if (gg == 0) {
            store16(b, load16(a.unit + 2 * a.j));
            store16(b + 2, static_cast<std::uint16_t>(load16(a.unit + 32 + 2 * a.j) ^ 0x8000u));
          }
          sc[gg] = a.group[a.j];
          mn[gg] = a.group[16 + a.j];
          for (int i = 0; i < 16; ++i) {
            const std::uint8_t c = a.codes[64 * (i / 4) + 4 * a.j + i % 4];
            const std::uint8_t lo = c & 0x0F, hi = c >> 4;  // values i and i + 16 of the group
            std::uint8_t* qs = b + 16 + 32 * (gg / 2);
            if (gg % 2 == 0) {
              qs[i] = lo;
              qs[i + 16] = hi;
            } else {
              qs[i] = static_cast<std::uint8_t>(qs[i] | (lo << 4));
              qs[i + 16] = static_cast<std::uint8_t>(qs[i + 16] | (hi << 4));
            }
          }
        }
        std::uint8_t* sm = b + 4;  // get_scale_min_k4 inverted
        for (int j = 0; j < 4; ++j) {
          sm[j] = static_cast<std::uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
          sm[j + 4] = static_cast<std::uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
          sm[j + 8] = static_cast<std::uint8_t>((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
        }
        continue;
      }
      const GroupAt a = locate(w, s, r, bi);
      store16(b, load16(a.unit + 2 * a.j));
      const int qs = type == GgmlType::Q4_1 ? 4 : 2;
      if (type == GgmlType::Q4_1) store16(b + 2, load16(a.unit + 32 + 2 * a.j));
      for (int i = 0; i < 4 * s.chunks; ++i) {
        const std::uint8_t c = a.codes[64 * (i / 4) + 4 * a.j + i % 4];
        b[qs + i] = type == GgmlType::Q8_0 ? static_cast<std::uint8_t>(c ^ 0x80) : c;
      }
    }
  }
}

void packedDequantize(const PackedMatrix& w, std::int64_t r0, std::int64_t r1, float* dst) {
  const Shape s = shapeOf(w.type);
  const std::int64_t groups = w.cols / 32;
  for (std::int64_t r = r0; r < r1; ++r)
    for (std::int64_t g = 0; g < groups; ++g) {
      std::uint8_t q[32];
      float D, M;
      readGroup(w, s, r, g, q, D, M);
      float* out = dst + (r - r0) * w.cols + 32 * g;
      for (int l = 0; l < 32; ++l) out[l] = D * static_cast<float>(q[l]) + M;
    }
}

namespace {

void portableQ8(const PackedMatrix& w, const Q8Rows& x, float* y, std::int64_t ldy, std::int64_t t0, std::int64_t t1) {
  const Shape s = shapeOf(w.type);
  const std::int64_t groups = w.cols / 32;
  for (std::int64_t r = t0 * 16; r < std::min(t1 * 16, w.rows); ++r)
    for (std::int64_t i = 0; i < x.m; ++i) {
      float acc = 0.0f;
      for (std::int64_t g = 0; g < groups; ++g) {
        std::uint8_t q[32];
        float D, M;
        readGroup(w, s, r, g, q, D, M);
        const std::int8_t* c = x.codes.data() + i * w.cols + 32 * g;
        int dot = 0;
        for (int l = 0; l < 32; ++l) dot += q[l] * c[l];
        const std::size_t at = static_cast<std::size_t>(i * groups + g);
        acc += D * x.scales[at] * static_cast<float>(dot) + M * (x.sums[2 * at] + x.sums[2 * at + 1]);
      }
      y[i * ldy + r] = acc;
    }
}

#if KVS_HAVE_AVX2_PATHS
KVS_VNNI inline __m512i bcast4(const std::int8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// Activation rows i0 .. i0 + MT - 1 against weight tile t: sixteen output rows in the lanes of one vector.
template <GgmlType T, int MT>
KVS_VNNI void tileQ8(const PackedMatrix& w, const Q8Rows& x, std::int64_t i0, float* y, std::int64_t ldy,
                     std::int64_t t) {
  constexpr Shape S = shapeOf(T);
  constexpr int Chunks = S.chunks;
  constexpr bool Scaled = S.scaled;
  constexpr int G = S.groupsPerUnit;
  const std::int64_t groups = w.cols / 32, units = groups / G;
  const __m512i nib = _mm512_set1_epi8(0x0F);
  const std::uint8_t* p = w.data.get() + t * w.tileBytes;
  __m512 acc[MT], macc[MT];
  for (int i = 0; i < MT; ++i) acc[i] = macc[i] = _mm512_setzero_ps();
  for (std::int64_t u = 0; u < units; ++u) {
    const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    const __m512 mv = S.minPerD != 0.0f ? _mm512_mul_ps(dv, _mm512_set1_ps(S.minPerD))
                                        : _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)));
    p += S.headerBytes();
    __m512 sacc[MT], smacc[MT];
    if constexpr (Scaled)
      for (int i = 0; i < MT; ++i) sacc[i] = smacc[i] = _mm512_setzero_ps();
    for (int gg = 0; gg < G; ++gg) {
      const std::int64_t g = u * G + gg;
      __m512 scf, mnf;
      if constexpr (Scaled) {
        scf = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
        mnf = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16))));
        p += 32;
      }
      // The bytes 4 KiB ahead asked for now: on a 2-core AMD EPYC (Zen 4) VM the hardware prefetcher alone streamed
      // decode_stream/Q4_K at 35 GB/s (21.5 ms); with this, 11-17 ms over runs (1 KiB ahead: 13-16, 8 KiB: 17.5), and
      // a Qwen3-30B-A3B-shaped decode step went from 68 to 80 tok/s (medians of 3 alternating runs).
      for (int l = 0; l < 64 * Chunks; l += 64) _mm_prefetch(reinterpret_cast<const char*>(p + 4096 + l), _MM_HINT_T0);
      __m512i q[8];  // 4-bit: low nibbles in q[0..3], high nibbles in q[4..7]; 8-bit: chunk c in q[c]
      for (int c = 0; c < Chunks; ++c) {
        const __m512i v = _mm512_loadu_si512(p + 64 * c);
        if constexpr (Chunks == 4) {
          q[c] = _mm512_and_si512(v, nib);
          q[c + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
        } else {
          q[c] = v;
        }
      }
      p += 64 * Chunks;
      for (int i = 0; i < MT; ++i) {
        const std::int8_t* cx = x.codes.data() + (i0 + i) * w.cols + 32 * g;
        __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
        for (int c = 0; c < 4; ++c) {  // q[c]: values 4c..4c+3, q[c + 4]: values 16 + 4c.. (both layouts)
          s0 = _mm512_dpbusd_epi32(s0, q[c], bcast4(cx + 4 * c));
          s1 = _mm512_dpbusd_epi32(s1, q[c + 4], bcast4(cx + 16 + 4 * c));
        }
        const std::size_t at = static_cast<std::size_t>((i0 + i) * groups + g);
        const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), _mm512_set1_ps(x.scales[at]));
        const __m512 sx = _mm512_set1_ps(x.sums[2 * at] + x.sums[2 * at + 1]);
        if constexpr (Scaled) {
          sacc[i] = _mm512_fmadd_ps(f, scf, sacc[i]);
          smacc[i] = _mm512_fmadd_ps(mnf, sx, smacc[i]);
        } else {
          acc[i] = _mm512_fmadd_ps(f, dv, acc[i]);
          macc[i] = _mm512_fmadd_ps(mv, sx, macc[i]);
        }
      }
    }
    if constexpr (Scaled)
      for (int i = 0; i < MT; ++i) {
        acc[i] = _mm512_fmadd_ps(sacc[i], dv, acc[i]);
        macc[i] = _mm512_fmadd_ps(smacc[i], mv, macc[i]);
      }
  }
  const std::int64_t n = std::min<std::int64_t>(16, w.rows - 16 * t);
  const auto mask = static_cast<__mmask16>((1u << n) - 1u);
  for (int i = 0; i < MT; ++i) _mm512_mask_storeu_ps(y + (i0 + i) * ldy + 16 * t, mask, _mm512_add_ps(acc[i], macc[i]));
}

// The same tile on AVX2 (no VNNI): each half of the tile (rows 0..7, 8..15: the first and second 32 bytes of every
// 64-byte chunk) in the lanes of one vector. A lane's four products are summed exactly: 4-bit codes with maddubs
// (15 * 127 * 2 fits int16), 8-bit codes as their signed value (code XOR 0x80, |a| <= 128) with sign(x, a): the
// products themselves, so Q8_0 needs no offset term (the VNNI path's 128 * sum(x), added and taken off again).
// Then the VNNI path's float arithmetic.
KVS_AVX2 inline __m256i dot4Avx2(__m256i q, const std::int8_t* c, bool eightBit) {
  std::int32_t v;
  std::memcpy(&v, c, 4);
  const __m256i xb = _mm256_set1_epi32(v);
  const __m256i ones = _mm256_set1_epi16(1);
  if (!eightBit) return _mm256_madd_epi16(_mm256_maddubs_epi16(q, xb), ones);
  const __m256i a = _mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(0x80)));
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(a), _mm256_sign_epi8(xb, a)), ones);
}

template <GgmlType T, int MT>
KVS_AVX2 void tileQ8Avx2(const PackedMatrix& w, const Q8Rows& x, std::int64_t i0, float* y, std::int64_t ldy,
                         std::int64_t t) {
  constexpr Shape S = shapeOf(T);
  constexpr int Chunks = S.chunks;
  constexpr bool Scaled = S.scaled;
  constexpr int G = S.groupsPerUnit;
  const std::int64_t groups = w.cols / 32, units = groups / G;
  const __m256i nib = _mm256_set1_epi8(0x0F);
  const std::int64_t n = std::min<std::int64_t>(16, w.rows - 16 * t);
  for (int h = 0; h < 2 && 8 * h < n; ++h) {
    const std::uint8_t* p = w.data.get() + t * w.tileBytes;
    __m256 acc[MT], macc[MT];
    for (int i = 0; i < MT; ++i) acc[i] = macc[i] = _mm256_setzero_ps();
    for (std::int64_t u = 0; u < units; ++u) {
      const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h)));
      const __m256 mv = S.minPerD != 0.0f
                            ? _mm256_mul_ps(dv, _mm256_set1_ps(S.minPerD))
                            : _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 32 + 16 * h)));
      p += S.headerBytes();
      __m256 sacc[MT], smacc[MT];
      if constexpr (Scaled)
        for (int i = 0; i < MT; ++i) sacc[i] = smacc[i] = _mm256_setzero_ps();
      for (int gg = 0; gg < G; ++gg) {
        const std::int64_t g = u * G + gg;
        __m256 scf, mnf;
        if constexpr (Scaled) {
          scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * h))));
          mnf = _mm256_cvtepi32_ps(
              _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 16 + 8 * h))));
          p += 32;
        }
        if (h == 0)
          for (int l = 0; l < 64 * Chunks; l += 64)
            _mm_prefetch(reinterpret_cast<const char*>(p + 4096 + l), _MM_HINT_T0);
        __m256i q[8];  // as the VNNI path: 4-bit low nibbles in q[0..3], high in q[4..7]; 8-bit chunk c in q[c]
        for (int c = 0; c < Chunks; ++c) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * c + 32 * h));
          if constexpr (Chunks == 4) {
            q[c] = _mm256_and_si256(v, nib);
            q[c + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
          } else {
            q[c] = v;
          }
        }
        p += 64 * Chunks;
        for (int i = 0; i < MT; ++i) {
          const std::int8_t* cx = x.codes.data() + (i0 + i) * w.cols + 32 * g;
          __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
          for (int c = 0; c < 4; ++c) {
            s0 = _mm256_add_epi32(s0, dot4Avx2(q[c], cx + 4 * c, Chunks == 8));
            s1 = _mm256_add_epi32(s1, dot4Avx2(q[c + 4], cx + 16 + 4 * c, Chunks == 8));
          }
          const std::size_t at = static_cast<std::size_t>((i0 + i) * groups + g);
          const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1)), _mm256_set1_ps(x.scales[at]));
          const __m256 sx = _mm256_set1_ps(x.sums[2 * at] + x.sums[2 * at + 1]);
          if constexpr (Scaled) {
            sacc[i] = _mm256_fmadd_ps(f, scf, sacc[i]);
            smacc[i] = _mm256_fmadd_ps(mnf, sx, smacc[i]);
          } else {
            acc[i] = _mm256_fmadd_ps(f, dv, acc[i]);
            if constexpr (Chunks != 8) macc[i] = _mm256_fmadd_ps(mv, sx, macc[i]);  // Q8_0: no offset
          }
        }
      }
      if constexpr (Scaled)
        for (int i = 0; i < MT; ++i) {
          acc[i] = _mm256_fmadd_ps(sacc[i], dv, acc[i]);
          macc[i] = _mm256_fmadd_ps(smacc[i], mv, macc[i]);
        }
    }
    const std::int64_t lanes = std::min<std::int64_t>(8, n - 8 * h);
    for (int i = 0; i < MT; ++i) {
      alignas(32) float out[8];
      _mm256_store_ps(out, _mm256_add_ps(acc[i], macc[i]));
      std::memcpy(y + (i0 + i) * ldy + 16 * t + 8 * h, out, static_cast<std::size_t>(lanes) * 4);
    }
  }
}

template <GgmlType T>
void tilesQ8Avx2(const PackedMatrix& w, const Q8Rows& x, float* y, std::int64_t ldy, std::int64_t t0, std::int64_t t1) {
  for (std::int64_t t = t0; t < t1; ++t) {
    std::int64_t i = 0;
    for (; i + 2 <= x.m; i += 2) tileQ8Avx2<T, 2>(w, x, i, y, ldy, t);
    if (i < x.m) tileQ8Avx2<T, 1>(w, x, i, y, ldy, t);
  }
}

template <GgmlType T>
void tilesQ8(const PackedMatrix& w, const Q8Rows& x, float* y, std::int64_t ldy, std::int64_t t0, std::int64_t t1) {
  // Weight tile outside, activation rows inside: a prefill reads each tile once while it sits in the cache.
  for (std::int64_t t = t0; t < t1; ++t) {
    std::int64_t i = 0;
    for (; i + 4 <= x.m; i += 4) tileQ8<T, 4>(w, x, i, y, ldy, t);
    switch (x.m - i) {
      case 3:
        tileQ8<T, 3>(w, x, i, y, ldy, t);
        break;
      case 2:
        tileQ8<T, 2>(w, x, i, y, ldy, t);
        break;
      case 1:
        tileQ8<T, 1>(w, x, i, y, ldy, t);
        break;
      default:
        break;
    }
  }
}
#endif

}  // namespace

void packedMatmulQ8(const PackedMatrix& w, const Q8Rows& x, float* y, std::int64_t ldy, std::int64_t t0,
                    std::int64_t t1) {
  if (x.m <= 0 || t0 >= t1) return;
#if KVS_HAVE_AVX2_PATHS
  if (vnniPaths()) {
    switch (static_cast<GgmlType>(w.type)) {
      case GgmlType::Q4_0:
        tilesQ8<GgmlType::Q4_0>(w, x, y, ldy, t0, t1);
        return;
      case GgmlType::Q4_1:
        tilesQ8<GgmlType::Q4_1>(w, x, y, ldy, t0, t1);
        return;
      case GgmlType::Q8_0:
        tilesQ8<GgmlType::Q8_0>(w, x, y, ldy, t0, t1);
        return;
      case GgmlType::Q4_K:
        tilesQ8<GgmlType::Q4_K>(w, x, y, ldy, t0, t1);
        return;
      default:
        break;
    }
  }
  if (avx2Paths()) {
    switch (static_cast<GgmlType>(w.type)) {
      case GgmlType::Q4_0:
        tilesQ8Avx2<GgmlType::Q4_0>(w, x, y, ldy, t0, t1);
        return;
      case GgmlType::Q4_1:
        tilesQ8Avx2<GgmlType::Q4_1>(w, x, y, ldy, t0, t1);
        return;
      case GgmlType::Q8_0:
        tilesQ8Avx2<GgmlType::Q8_0>(w, x, y, ldy, t0, t1);
        return;
      case GgmlType::Q4_K:
        tilesQ8Avx2<GgmlType::Q4_K>(w, x, y, ldy, t0, t1);
        return;
      default:
        break;
    }
  }
#endif
  portableQ8(w, x, y, ldy, t0, t1);
}

// NOLINTEND(bugprone-implicit-widening-of-multiplication-result)

}  // namespace kvscope::kernels
