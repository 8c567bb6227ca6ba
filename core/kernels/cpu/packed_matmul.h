// Weights repacked for 8-bit-activation products (--activations q8): sixteen rows interleaved, so that one AVX-512
// VNNI instruction multiplies four weights of each of the sixteen rows with the same four activation codes and every
// lane of the result belongs to one output row. A product then needs no horizontal sums and no per-row scalar work:
// the decode step streams the weights at memory speed, and prefill runs on integer dot products as llama.cpp's does.
//
// Formats: Q4_0, Q4_1, Q8_0 (one scale per 32 values) and Q4_K (a 6-bit scale and min per 32 values under the
// super-block's d and dmin). The repacked form holds exactly the stored values: packedDequantize gives
// kernels::dequantize's floats bit for bit, and unpackMatrix gives back the original blocks byte for byte.
//
// Layout of one tile (16 rows; a last tile of fewer rows is padded with zero rows), unit after unit along the row
// (a unit is one group of 32 values, or Q4_K's super-block of 8 groups):
//   dbase fp16[16], [Q4_1, Q4_K: mbase fp16[16]]             the rows' D and M (Q4_K: d and -dmin; Q4_0's M is
//                                                            -8 D and Q8_0's -128 D, exactly, so not stored)
//   per group: [Q4_K: sc u8[16], mn u8[16]]                  the rows' 6-bit scale and min
//              chunks (4 for 4-bit codes, 8 for 8-bit) of 64 bytes: chunk c holds, for row j at bytes 4j..4j+3,
//              the row's code bytes 4c..4c+3. A 4-bit code byte i holds value i (low nibble) and value i + 16 (high
//              nibble), as Q4_0 does; an 8-bit code byte i is value i (Q8_0's code XOR 0x80: unsigned).
// Value = D * q + M, with D = dbase (Q4_K: dbase * sc) and M = mbase (Q4_K: mbase * mn). The form takes what the
// stored one takes (Q4_K: 148 bytes per 256 values against 144), padding rows aside.
#pragma once

#include <cstdint>
#include <memory>

#include "kernels/cpu/block_matmul.h"
#include "util/process_memory.h"

namespace kvscope::kernels {

struct PackedMatrix {
  std::uint32_t type = 0;  ///< the source's ggml type
  std::int64_t rows = 0, cols = 0;
  std::int64_t tileBytes = 0;
  /// tiles() tiles of tileBytes; packPrepare allocates them without touching them, so memory becomes resident as
  /// packTiles writes it (a caller can give back the stored form's pages as it goes).
  util::StreamedBuffer data;
  std::int64_t tiles() const { return (rows + 15) / 16; }
  std::int64_t bytes() const { return tiles() * tileBytes; }
};

/// Whether `type` has a repacked form (Q4_0, Q4_1, Q8_0, Q4_K).
bool packableType(std::uint32_t type);

/// The repacked form's size for a [rows, cols] matrix of a packable type.
std::int64_t packedTileBytes(std::uint32_t type, std::int64_t cols);

/// Allocates `out` for w (packableType(w.type)); then packTiles fills tiles [t0, t1) (callers split tiles over
/// threads).
void packPrepare(const BlockMatrix& w, PackedMatrix& out);
void packTiles(const BlockMatrix& w, PackedMatrix& out, std::int64_t t0, std::int64_t t1);

/// Rows [r0, r1) written back in the stored format to `dst` (rowBytes apart, as the file held them).
void unpackRows(const PackedMatrix& w, std::int64_t r0, std::int64_t r1, std::uint8_t* dst, std::int64_t rowBytes);

/// Rows [r0, r1) as float32 into dst (cols apart): kernels::dequantize's values bit for bit.
void packedDequantize(const PackedMatrix& w, std::int64_t r0, std::int64_t r1, float* dst);

/// y[i * ldy + r] = sum_k xq[i, k] * W[r, k] for every activation row i < x.m and the rows of tiles [t0, t1):
/// AVX-512 VNNI where the CPU has it (vnniPaths), else AVX2 (avx2Paths: eight rows a vector, the same float
/// arithmetic), else the portable twin.
void packedMatmulQ8(const PackedMatrix& w, const Q8Rows& x, float* y, std::int64_t ldy, std::int64_t t0,
                    std::int64_t t1);

}  // namespace kvscope::kernels
