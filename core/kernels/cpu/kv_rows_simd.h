// Stored KV cache rows read back on the CPU with AVX-512 or AVX2 (the path kernels::isa() runs): the fused attention's
// hot loop (every stored row of a layer is read at every decode step). Each row decodes as the scalar codec decodes it
// (kernels/kv_block_codec.h's readRow: the block or row format, the rotation back, llama.cpp's interleaved key halves),
// bit for bit; tests/unit compares the two on every row type. Torch-free.
#pragma once

#include <cstdint>

namespace kvscope::kernels {

/// Decodes n stored rows of `type` (kernels/cpu/kv_blocks.h's row types), `stride` bytes apart, into n dense rows of D
/// floats at `out`: rotated back in chunks of `rotation` (0: none), and with the two halves taken from the row's even
/// and odd channels where `interleaved`. `scale`: NVFP4's global decode scale. Returns false, writing nothing, where
/// it has no path: neither vector path runs (kernels/cpu/simd.h: the scalar path), or D is not a multiple of 16 (32
/// where interleaved, a chunk of the rotation, or a power of two for TurboQuant's keys); the caller then decodes with
/// the scalar codec. `stored`: the rows as stored (kvcodec::decodeStored: without the transform TurboQuant's keys and
/// int4 per token and head apply on reading).
bool readKvRowsSimd(std::uint32_t type, const std::uint8_t* rows, std::int64_t stride, std::int64_t n, std::int64_t D,
                    int rotation, bool interleaved, float scale, float* out, bool stored = false);

}  // namespace kvscope::kernels
