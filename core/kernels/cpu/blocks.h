// ggml's weight formats (ggml-common.h) as kvscope reads them: each type's block layout, its dequantization to
// float32 (the reference every kernel is tested against), and the affine view the block matmul kernels read.
//
// The affine view: every block splits into groups of 32 values, and each half (16 values) of a group is
// D * q + M with q an unsigned byte (0..255). Q4_0 is d * q - 8d, Q4_1 d * q + m, Q8_0 d * (q ^ 0x80) - 128d, Q4_K
// (d * sc) * q - dmin * mn per group of 32, Q6_K (d * sc) * q - 32 (d * sc) per half, MXFP4 d * q - 12d with q its
// doubled E2M1 value (ggml's kvalues_mxfp4, -12 .. 12) plus 12 and d half its E8M0 scale (GGML_E8M0_TO_FP32_HALF). A
// dot product with a float32 row is then D * (q . x) + M * sum(x), and sum(x) is computed once per activation row.
//
// No torch here: the model layer (model/weight.h) turns these into LibTorch tensors and threads.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/ggml_type.h"

namespace kvscope::kernels {

struct BlockLayout {
  std::int64_t values = 0;  ///< values per block (1 for F32/F16/BF16); 0 for a type kvscope does not read
  std::int64_t bytes = 0;   ///< bytes per block
  bool quantized() const { return values > 1; }
};

/// The layout of ggml type `type` (its number) where kvscope keeps it in memory as stored; values == 0 for the other
/// types (the loader converts or refuses them).
constexpr BlockLayout blockLayout(std::uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q8_0:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::MXFP4: {
      const GgmlTypeInfo* t = ggmlTypeInfo(type);
      return {t->blockValues, t->blockBytes};
    }
    default:
      return {};
  }
}
constexpr BlockLayout blockLayout(GgmlType type) {
  return blockLayout(static_cast<std::uint32_t>(type));
}

/// ggml's MXFP4 (gpt-oss's experts): a block is its E8M0 scale byte, then 16 bytes whose low nibbles are values 0-15
/// and high nibbles values 16-31, each an index into these doubled E2M1 values, multiplied by half the scale.
inline constexpr std::int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
/// GGML_E8M0_TO_FP32_HALF: 2^(e - 128), the two smallest exponents as float32 subnormals.
inline float e8m0Half(std::uint8_t e) {
  const std::uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<std::uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// Q4_K / Q5_K: the 6-bit scale and min of group j (0..7) from the block's 12 scale bytes (ggml's
/// get_scale_min_k4).
inline void scaleMinK4(int j, const std::uint8_t* s, int& sc, int& mn) {
  if (j < 4) {
    sc = s[j] & 63;
    mn = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

/// `n` values (whole blocks) of `type` from `src` into `dst`, in ggml's reference arithmetic. Precondition:
/// blockLayout(type).values > 0 and divides n.
void dequantize(std::uint32_t type, const std::uint8_t* src, std::int64_t n, float* dst);

/// The types quantizeRows() writes: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1.
constexpr bool quantizable(std::uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
      return true;
    default:
      return false;
  }
}

/// `n` float32 values (whole blocks of 32) into blocks of `type` (quantizable(type)), bit for bit as the `gguf`
/// Python package's reference quantizers write them (gguf.quants: the scale from the block's largest magnitude, or
/// its min and max for Q4_1 and Q5_1, stored as fp16; codes rounded as numpy rounds them there).
void quantizeRows(std::uint32_t type, const float* src, std::int64_t n, std::uint8_t* dst);

/// Index of the first of `blocks` blocks whose values are not all finite, or -1. For the quantized types a block's
/// values are finite exactly when its fp16 scales are, so only the scales are read.
std::int64_t firstNonFiniteBlock(std::uint32_t type, const std::uint8_t* src, std::int64_t blocks);

/// The affine view of group `g` (0 .. values/32 - 1) of one block of a quantized type: q[32], and D, M for each
/// half. Portable code: the reference the vector paths are tested against.
void unpackGroup(GgmlType type, const std::uint8_t* block, int g, std::uint8_t q[32], float D[2], float M[2]);

}  // namespace kvscope::kernels
