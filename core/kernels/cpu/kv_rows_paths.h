// What the two vector reads of stored cache rows share (kv_rows_simd.cpp for AVX-512, kv_rows_avx2.cpp for AVX2):
// the lookup tables, and each path's entry point. Internal to kernels/cpu; callers use kv_rows_simd.h.
#pragma once

#include <cstdint>

#include "kernels/fp4_codec.h"
#include "kernels/fp8.h"
#include "kernels/kv_block_codec.h"

namespace kvscope::kernels::kvrows {

/// The value tables the vector paths look codes up in, each the scalar codec's own values.
struct Tables {
  alignas(64) float e4m3[256];
  alignas(64) float e2m1[16];
  alignas(64) float iq4[16];
  alignas(64) float signs[kvcodec::kMaxRow];  // vLLM's RHT signs
  // E2M1's and IQ4_NL's values are bfloat16 numbers (their low 16 bits are zero): the upper 16 bits' high and low
  // bytes, for a byte shuffle (the AVX2 read).
  alignas(16) std::uint8_t e2m1Hi[16], e2m1Lo[16], iq4Hi[16], iq4Lo[16];
  Tables() {
    for (int i = 0; i < 256; ++i) e4m3[i] = decodeE4M3FN(static_cast<std::uint8_t>(i));
    for (int i = 0; i < 16; ++i) {
      e2m1[i] = fp4::e2m1Value(static_cast<std::uint8_t>(i));
      iq4[i] = static_cast<float>(kvcodec::iq4NlLevel(i));
    }
    for (int i = 0; i < kvcodec::kMaxRow; ++i) signs[i] = kvcodec::rhtSign(i);
    for (int i = 0; i < 16; ++i) {
      e2m1Hi[i] = static_cast<std::uint8_t>(floatBits(e2m1[i]) >> 24);
      e2m1Lo[i] = static_cast<std::uint8_t>(floatBits(e2m1[i]) >> 16);
      iq4Hi[i] = static_cast<std::uint8_t>(floatBits(iq4[i]) >> 24);
      iq4Lo[i] = static_cast<std::uint8_t>(floatBits(iq4[i]) >> 16);
    }
  }
};
const Tables& tables();

/// TurboQuant's key centroids for rows of D values (2^b of them, then zeros): the table once for all rows.
inline void tqKeyCentroids(std::uint32_t t, std::int64_t D, float out[16]) {
  for (int i = 0; i < 16; ++i) out[i] = 0.0f;
  if (t == kvcodec::TQ_KEY3 || t == kvcodec::TQ_KEY4)
    for (int i = 0; i < (1 << kvcodec::tqBits(t)); ++i)
      out[i] = kvcodec::tqCentroid(static_cast<int>(D), kvcodec::tqBits(t), i);
}

/// readKvRowsSimd's work on each path, once its preconditions hold (kv_rows_simd.cpp checks them).
void readRowsAvx512(std::uint32_t t, const std::uint8_t* rows, std::int64_t stride, std::int64_t n, std::int64_t D,
                    int rotation, bool interleaved, float scale, bool stored, float* out);
void readRowsAvx2(std::uint32_t t, const std::uint8_t* rows, std::int64_t stride, std::int64_t n, std::int64_t D,
                  int rotation, bool interleaved, float scale, bool stored, float* out);

}  // namespace kvscope::kernels::kvrows
