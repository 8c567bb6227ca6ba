// Packing of small unsigned integers (1..8 bits) into bytes, least significant bits first:
// int4 stores 2 values a byte, int2 4, int1 8, int3 8 values in 3 bytes.
#pragma once

#include <cstdint>

namespace kvscope::kernels {

constexpr std::int64_t packedBytes(std::int64_t n, int bits) {
  return (n * bits + 7) / 8;
}

/// Packs v[0..n) (each < 2^bits) into out[0..packedBytes(n, bits)).
void packBits(const std::uint8_t* v, std::int64_t n, int bits, std::uint8_t* out);
/// Inverse of packBits.
void unpackBits(const std::uint8_t* in, std::int64_t n, int bits, std::uint8_t* v);

}  // namespace kvscope::kernels
