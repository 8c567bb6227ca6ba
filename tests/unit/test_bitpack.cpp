#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/cpu/bitpack.h"

using namespace kvscope::kernels;

// Lengths around the 16-byte SIMD blocks of the 2- and 4-bit unpacks (32 and 64 codes) and their tails.
TEST(BitPack, RoundTripsEveryWidthAndLength) {
  std::mt19937 rng(3);
  for (int bits = 1; bits <= 8; ++bits) {
    for (std::int64_t n : {0, 1, 2, 3, 7, 8, 9, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000, 4099}) {
      std::vector<std::uint8_t> v(static_cast<std::size_t>(n));
      for (auto& x : v) x = static_cast<std::uint8_t>(rng() & ((1u << bits) - 1u));
      std::vector<std::uint8_t> packed(static_cast<std::size_t>(packedBytes(n, bits)) + 1, 0xAA);
      packBits(v.data(), n, bits, packed.data());
      EXPECT_EQ(packed.back(), 0xAA) << "wrote past the end, bits " << bits << " n " << n;
      std::vector<std::uint8_t> back(static_cast<std::size_t>(n));
      unpackBits(packed.data(), n, bits, back.data());
      EXPECT_EQ(back, v) << "bits " << bits << " n " << n;
    }
  }
}

TEST(BitPack, DensityIsBitsPerValue) {
  EXPECT_EQ(packedBytes(64, 4), 32);
  EXPECT_EQ(packedBytes(64, 2), 16);
  EXPECT_EQ(packedBytes(64, 1), 8);
  EXPECT_EQ(packedBytes(64, 3), 24);
  EXPECT_EQ(packedBytes(3, 4), 2);
}

TEST(BitPack, Int4LowNibbleFirst) {
  const std::uint8_t v[2] = {0x3, 0xC};
  std::uint8_t p = 0;
  packBits(v, 2, 4, &p);
  EXPECT_EQ(p, 0xC3);
}
