// Matrix products straight from weights in ggml's block formats (blocks.h), with float32 activations: each weight
// group is widened in registers to float and multiplied with the activation row, so a decode step reads every weight
// byte once and never materializes a float32 copy of the weights. Activations stay float32 (they are not quantized to
// 8 bits as llama.cpp's dot products do), so the result is the dequantize-then-matmul product up to float32
// rounding: what the transformers parity tests hold kvscope to.
//
// Single-threaded over a range of weight rows; model/weight.cpp splits the rows over LibTorch's thread pool. An
// AVX2 + FMA + F16C path where the CPU has it (simd.h), and a portable twin that tests compare it with.
#pragma once

#include <cstdint>
#include <vector>

namespace kvscope::kernels {

/// A [rows, cols] weight matrix in one ggml type: each row is cols / values-per-block blocks, rowBytes apart.
struct BlockMatrix {
  std::uint32_t type = 0;
  std::int64_t rows = 0, cols = 0;
  const std::uint8_t* data = nullptr;
  std::int64_t rowBytes = 0;
};

/// The sums of every 16 values of each of `m` rows of x (row stride ldx; cols a multiple of 16) into
/// out[i * cols / 16 + j]: the M * sum(x) terms of the affine view, computed once per product.
void rowSums16(const float* x, std::int64_t m, std::int64_t ldx, std::int64_t cols, float* out);

/// y[i * ldy + r] = sum_k x[i * ldx + k] * W[r, k] for i < m and r in [r0, r1). `xsum` is rowSums16 of x for
/// the quantized types (unused for F32/F16/BF16). The type must have a layout (blockLayout) and cols be a whole
/// number of its blocks.
void blockMatmul(const BlockMatrix& w, const float* x, std::int64_t m, std::int64_t ldx, const float* xsum, float* y,
                 std::int64_t ldy, std::int64_t r0, std::int64_t r1);

/// Activation rows quantized as llama.cpp's dot products take them (its q8_0): every 32 values as 32 int8 codes and
/// one float scale d = amax / 127, and the sum of every 16 values as the codes give them (d * sum of codes), for the
/// M terms. Faster products at the cost of an activation rounding of up to 1/254 of each group's largest value.
struct Q8Rows {
  std::int64_t m = 0, cols = 0;
  std::vector<std::int8_t> codes;  ///< m x cols
  std::vector<float> scales;       ///< m x cols / 32
  std::vector<float> sums;         ///< m x cols / 16
};
/// Quantizes `m` rows of x (stride ldx; cols a multiple of 32).
void quantizeRowsQ8(const float* x, std::int64_t m, std::int64_t ldx, std::int64_t cols, Q8Rows& out);

/// y[i * ldy + r] = sum_k xq[i, k] * W[r, k] for r in [r0, r1), with the activation codes: integer dot products per
/// group (AVX-512 VNNI, or the portable twin: slow, for CPUs without VNNI and for tests). W must be of a quantized type
/// (blockLayout(type).quantized()).
void blockMatmulQ8(const BlockMatrix& w, const Q8Rows& x, float* y, std::int64_t ldy, std::int64_t r0, std::int64_t r1);

/// Whether blockMatmulQ8 on this type beats dequantizing to float32 and a GEMM at any number of activation rows (a
/// prefill chunk, a MoE expert's tokens), as a packed form does: MXFP4 on the VNNI and AVX2 paths (mxfp4_matmul.h).
/// The other stored forms' 8-bit products fall behind the GEMM past a few dozen rows.
bool q8KernelsTakeBatches(std::uint32_t type);

}  // namespace kvscope::kernels
