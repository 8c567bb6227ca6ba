// ggml's MXFP4 weights (gpt-oss's experts) times 8-bit activation rows, as llama.cpp's MXFP4 x Q8_0 dot product
// computes it: per block, the integer sum of the doubled E2M1 values times the activation codes, times the block's
// half scale and the activations' scale. The signs move onto the activation codes, so each block is one unsigned x
// signed dot product (VNNI's vpdpbusd over two blocks, or the AVX2 twin's vpmaddubsw) with no offset term.
#pragma once

#include <cstdint>

#include "kernels/cpu/block_matmul.h"

namespace kvscope::kernels {

/// blockMatmulQ8 for an MXFP4 matrix on the AVX-512 VNNI or AVX2 path; false (nothing written) for another type or
/// where neither path runs.
bool mxfp4MatmulQ8(const BlockMatrix& w, const Q8Rows& x, float* y, std::int64_t ldy, std::int64_t r0, std::int64_t r1);

}  // namespace kvscope::kernels
