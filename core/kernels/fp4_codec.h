// The 4-bit floating-point KV cache formats the engines ship, as scalar host/device functions shared by the CPU loops
// and the CUDA kernels (through kernels/kv_block_codec.h's row functions): every value is E2M1 (1 sign bit, 2
// exponent bits, 1 mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6), two to a byte, element 2i in the low nibble.
//
// NVFP4 (vLLM 0.33 `--kv-cache-dtype nvfp4`, SGLang, TensorRT-LLM): blocks of 16 values along the head dimension, an
// E4M3 scale per block, and a float32 global decode scale per layer and side (vLLM's k_scale / v_scale: 1.0 without
// checkpoint scales, amax / 448 in a Model-Optimizer checkpoint). Encoding is vLLM's reference path
// (model_executor/layers/quantization/utils/nvfp4_emulation_utils.py, ref_nvfp4_quant), the formula its CUDA writer
// (csrc/nvfp4_kv_cache_kernels.cu) computes with exact reciprocals:
//   g = 1 / k_scale; s = e4m3(min(g * (amax * fl(1/6)), 448)); os = 1 / (s * (1 / g)); code = e2m1(clamp(x * os, ±6))
// with E2M1 rounding to nearest, ties to even; a block whose scale rounds to 0 stores zeros. Decoding is vLLM's
// dequantize_to_dtype: value = e2m1 * (s * k_scale).
//
// NVFP4 4over6 (`nvfp4_4over6`): the same layout; each block's scale is chosen between amax / 6 and amax / 4 by the
// float32 squared reconstruction error of its 16 values (the /4 scale only when strictly smaller), as vLLM's SM100
// writer does (cvt_warp_fp16_to_fp4_4over6). vLLM ships no Python reference for it: this follows a reading of the
// kernel, with exact reciprocals where the GPU uses rcp.approx.
//
// MXFP4 (OCP Microscaling, SGLang's MXFP4 KV cache): blocks of 32 values, an E8M0 scale (a power of two, biased by
// 127) per block. Encoding is NVIDIA Model-Optimizer 0.47.0's (qtensor/mxfp4_tensor.py): e = ceil(log2(amax / 6))
// (at least -127), codes e2m1(x / 2^e) with ties rounded down and exact zeros stored as -0 (0x8); value = e2m1 * 2^e.
//
// UltraQuant (vLLM 0.33 `ultraquant_4bit`): E2M1 in blocks of 32 with a UE8M0 scale, vLLM's reference
// (v1/attention/ops/ultraquant/reference.py, ultraquant_encode): s = 2^clamp(floor(log2(0.156 * amax) + 0.5), -126,
// 127) (byte 0 and zeros for a zero or non-finite scale), each value to the nearest of the 15 levels ±{0, .5, 1, 1.5,
// 2, 3, 4, 6} by torch.bucketize over their midpoints (a tie goes to the lower level; beyond ±6, ±6).
//
// Rows: a row of n values is its n / 2 code bytes, then its scale bytes (n / 16 E4M3 or n / 32 E8M0), the per-token
// view of vLLM's [data | scales] page regions: 4.5 bits per value for NVFP4, 4.25 for MXFP4 and UltraQuant.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/fp8.h"        // encodeE4M3FN / decodeE4M3FN, floatBits / bitsFloat
#include "kernels/int_codec.h"  // addRn / mulRn / divRn

namespace kvscope::kernels::fp4 {

enum class Format : std::uint8_t { Nvfp4, Nvfp4FourOverSix, Mxfp4, Ultraquant };

KVS_HD float absf(float x) {
  return bitsFloat(floatBits(x) & 0x7FFFFFFFu);
}

/// max |x[i]| over n values (0 for none).
KVS_HD float amaxOf(const float* x, int n) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float a = absf(x[i]);
    amax = amax < a ? a : amax;
  }
  return amax;
}

/// Values per scale block.
KVS_HD int blockValues(Format f) {
  return f == Format::Mxfp4 || f == Format::Ultraquant ? 32 : 16;
}
/// Bytes a row of n values (a multiple of blockValues) takes: codes, then one scale byte per block.
KVS_HD std::int64_t rowBytes(Format f, std::int64_t n) {
  return n / 2 + n / blockValues(f);
}

/// The magnitude of an E2M1 code's low three bits.
KVS_HD float e2m1Magnitude(int m) {
  constexpr float v[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  return v[m & 7];
}
KVS_HD float e2m1Value(std::uint8_t code) {
  const float m = e2m1Magnitude(code & 7);
  return (code & 8) ? -m : m;
}

/// |v| to its E2M1 magnitude index, to nearest with ties to even (vLLM's cast_to_fp4, the PTX cvt.rn): 0.25 -> 0,
/// 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4; above 5, 6 (saturating). NaN -> 0.
KVS_HD int e2m1IndexEven(float a) {
  if (!(a > 0.25f)) return 0;
  if (a < 0.75f) return 1;
  if (a <= 1.25f) return 2;
  if (a < 1.75f) return 3;
  if (a <= 2.5f) return 4;
  if (a < 3.5f) return 5;
  if (a <= 5.0f) return 6;
  return 7;
}
/// |v| to its E2M1 magnitude index with ties rounded down (Model-Optimizer's MXFP4 cast_fp4: the count of bounds
/// strictly below |v|).
KVS_HD int e2m1IndexDown(float a) {
  constexpr float bounds[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  int i = 0;
  for (float b : bounds) i += a > b ? 1 : 0;
  return i;
}

KVS_HD float clampSix(float v) {
  return v > 6.0f ? 6.0f : (v < -6.0f ? -6.0f : v);
}

/// An NVFP4 block scale candidate for `amax` with `den` (6 or 4) and the encode scale g: its E4M3 byte and the
/// multiplier the values are encoded with (0 for a zero scale).
struct Nvfp4Scale {
  std::uint8_t byte = 0;
  float outScale = 0.0f;
};
KVS_HD Nvfp4Scale nvfp4Scale(float amax, float g, float den) {
  float s = mulRn(g, mulRn(amax, divRn(1.0f, den)));
  s = s > 448.0f ? 448.0f : s;
  Nvfp4Scale r;
  r.byte = encodeE4M3FN(s);
  const float sf = decodeE4M3FN(r.byte);
  r.outScale = sf == 0.0f ? 0.0f : divRn(1.0f, mulRn(sf, divRn(1.0f, g)));
  return r;
}

/// The squared reconstruction error of a 16-value block with `outScale` (4over6's criterion), float32.
KVS_HD float nvfp4Error(const float* x, float outScale) {
  float err = 0.0f;
  if (outScale == 0.0f) {
    for (std::int64_t i = 0; i < 16; ++i) err = addRn(err, mulRn(x[i], x[i]));
    return err;
  }
  const float dq = divRn(1.0f, outScale);
  for (std::int64_t i = 0; i < 16; i += 2) {
    float e[2];
    for (int j = 0; j < 2; ++j) {
      const float v = clampSix(mulRn(x[i + j], outScale));
      const float m = e2m1Magnitude(e2m1IndexEven(absf(v)));
      const float d = addRn(mulRn(v < 0.0f ? -m : m, dq), -x[i + j]);
      e[j] = mulRn(d, d);
    }
    err = addRn(err, addRn(e[0], e[1]));
  }
  return err;
}

/// One NVFP4 block of 16 values: 8 code bytes at `codes`, its E4M3 scale at `*scale`. `decodeScale` is the global
/// decode scale (vLLM's k_scale / v_scale).
KVS_HD void encodeNvfp4Block(const float* x, float decodeScale, bool fourOverSix, std::uint8_t* codes,
                             std::uint8_t* scale) {
  const float amax = amaxOf(x, 16);
  const float g = divRn(1.0f, decodeScale);
  Nvfp4Scale s = nvfp4Scale(amax, g, 6.0f);
  if (fourOverSix) {
    const Nvfp4Scale four = nvfp4Scale(amax, g, 4.0f);
    if (nvfp4Error(x, four.outScale) < nvfp4Error(x, s.outScale)) s = four;
  }
  *scale = s.byte;
  for (std::int64_t i = 0; i < 8; ++i) {
    std::uint8_t c[2];
    for (int j = 0; j < 2; ++j) {
      const float v = clampSix(mulRn(x[2 * i + j], s.outScale));
      c[j] = static_cast<std::uint8_t>(e2m1IndexEven(absf(v)) | ((floatBits(v) >> 28) & 8u));
    }
    codes[i] = static_cast<std::uint8_t>(c[0] | (c[1] << 4));
  }
}

/// 2^e as float32 for e in [-127, 127] (2^-127 is subnormal).
KVS_HD float pow2(int e) {
  return e >= -126 ? bitsFloat(static_cast<std::uint32_t>(e + 127) << 23) : bitsFloat(0x00400000u);
}

/// What a block's E2M1 values are multiplied by on decoding: NVFP4's E4M3 block scale times the global decode scale,
/// MXFP4's E8M0 2^(scale - 127), UltraQuant's the same with 0 for a block stored as zeros.
KVS_HD float blockScale(Format f, std::uint8_t scale, float decodeScale) {
  switch (f) {
    case Format::Mxfp4:
      return pow2(static_cast<int>(scale) - 127);
    case Format::Ultraquant:
      return scale == 0 ? 0.0f : pow2(static_cast<int>(scale) - 127);
    default:
      return mulRn(decodeE4M3FN(scale), decodeScale);
  }
}

KVS_HD void decodeNvfp4Block(const std::uint8_t* codes, std::uint8_t scale, float decodeScale, float* y) {
  const float s = blockScale(Format::Nvfp4, scale, decodeScale);
  for (std::int64_t i = 0; i < 8; ++i) {
    y[2 * i] = mulRn(e2m1Value(codes[i] & 0x0F), s);
    y[2 * i + 1] = mulRn(e2m1Value(codes[i] >> 4), s);
  }
}

/// One MXFP4 block of 32 values: 16 code bytes at `codes`, its E8M0 scale at `*scale`.
KVS_HD void encodeMxfp4Block(const float* x, std::uint8_t* codes, std::uint8_t* scale) {
  const float amax = amaxOf(x, 32);
  // ceil(log2(amax / 6)) as Model-Optimizer computes it: the float32 log2 (correctly rounded) of the float32 quotient.
  const float q = divRn(amax, 6.0f);
  int e = -127;
  if (q > 0.0f) {
#if defined(__CUDA_ARCH__)
    const float c = ceilf(static_cast<float>(log2(static_cast<double>(q))));
#else
    const float c = std::ceil(static_cast<float>(std::log2(static_cast<double>(q))));
#endif
    e = c < -127.0f ? -127 : static_cast<int>(c);
  }
  *scale = static_cast<std::uint8_t>(e + 127);
  const float p = pow2(e);
  for (std::int64_t i = 0; i < 16; ++i) {
    std::uint8_t c[2];
    for (int j = 0; j < 2; ++j) {
      const float v = divRn(x[2 * i + j], p);
      c[j] = static_cast<std::uint8_t>(e2m1IndexDown(absf(v)) | (v > 0.0f ? 0u : 8u));
    }
    codes[i] = static_cast<std::uint8_t>(c[0] | (c[1] << 4));
  }
}

KVS_HD void decodeMxfp4Block(const std::uint8_t* codes, std::uint8_t scale, float* y) {
  const float p = blockScale(Format::Mxfp4, scale, 1.0f);
  for (std::int64_t i = 0; i < 16; ++i) {
    y[2 * i] = mulRn(e2m1Value(codes[i] & 0x0F), p);
    y[2 * i + 1] = mulRn(e2m1Value(codes[i] >> 4), p);
  }
}

/// The E2M1 code of v by vLLM UltraQuant's torch.bucketize over the midpoints of its 15 sorted levels (right=False:
/// a value on a midpoint takes the lower level, toward -inf), as its SORTED_TO_BITS writes it.
KVS_HD std::uint8_t ultraquantCode(float v) {
  constexpr float mid[14] = {-5.0f, -3.5f, -2.5f, -1.75f, -1.25f, -0.75f, -0.25f,
                             0.25f, 0.75f, 1.25f, 1.75f,  2.5f,   3.5f,   5.0f};
  int i = 0;  // the number of midpoints strictly below v
  for (float m : mid) i += m < v ? 1 : 0;
  return static_cast<std::uint8_t>(i < 7 ? 15 - i : i - 7);
}

/// One UltraQuant block of 32 values.
KVS_HD void encodeUltraquantBlock(const float* x, std::uint8_t* codes, std::uint8_t* scale) {
  const float amax = amaxOf(x, 32);
  const float raw = mulRn(amax, 0.156f);
  const bool zero = !(raw > 0.0f) || !(raw <= 3.402823466e38f);
  int e = 0;
  if (!zero) {
#if defined(__CUDA_ARCH__)
    const float l = static_cast<float>(log2(static_cast<double>(raw)));
    const float f = floorf(addRn(l, 0.5f));
#else
    const float l = static_cast<float>(std::log2(static_cast<double>(raw)));
    const float f = std::floor(addRn(l, 0.5f));
#endif
    e = f < -126.0f ? -126 : (f > 127.0f ? 127 : static_cast<int>(f));
  }
  *scale = zero ? 0 : static_cast<std::uint8_t>(e + 127);
  const float s = zero ? 1.0f : pow2(e);
  for (std::int64_t i = 0; i < 16; ++i) {
    const std::uint8_t lo = zero ? 0 : ultraquantCode(divRn(x[2 * i], s));
    const std::uint8_t hi = zero ? 0 : ultraquantCode(divRn(x[2 * i + 1], s));
    codes[i] = static_cast<std::uint8_t>(lo | (hi << 4));
  }
}

KVS_HD void decodeUltraquantBlock(const std::uint8_t* codes, std::uint8_t scale, float* y) {
  const float p = blockScale(Format::Ultraquant, scale, 1.0f);
  for (std::int64_t i = 0; i < 16; ++i) {
    y[2 * i] = mulRn(e2m1Value(codes[i] & 0x0F), p);
    y[2 * i + 1] = mulRn(e2m1Value(codes[i] >> 4), p);
  }
}

/// n values (a multiple of blockValues(f)) into a row: n / 2 code bytes, then the scales.
KVS_HD void encodeRow(Format f, const float* x, std::int64_t n, float decodeScale, std::uint8_t* out) {
  std::uint8_t* scales = out + n / 2;
  const int bv = blockValues(f);
  for (std::int64_t b = 0; b < n / bv; ++b) {
    if (f == Format::Mxfp4)
      encodeMxfp4Block(x + b * bv, out + b * bv / 2, scales + b);
    else if (f == Format::Ultraquant)
      encodeUltraquantBlock(x + b * bv, out + b * bv / 2, scales + b);
    else
      encodeNvfp4Block(x + b * bv, decodeScale, f == Format::Nvfp4FourOverSix, out + b * bv / 2, scales + b);
  }
}

KVS_HD void decodeRow(Format f, const std::uint8_t* in, std::int64_t n, float decodeScale, float* y) {
  const std::uint8_t* scales = in + n / 2;
  const int bv = blockValues(f);
  for (std::int64_t b = 0; b < n / bv; ++b) {
    if (f == Format::Mxfp4)
      decodeMxfp4Block(in + b * bv / 2, scales[b], y + b * bv);
    else if (f == Format::Ultraquant)
      decodeUltraquantBlock(in + b * bv / 2, scales[b], y + b * bv);
    else
      decodeNvfp4Block(in + b * bv / 2, scales[b], decodeScale, y + b * bv);
  }
}

}  // namespace kvscope::kernels::fp4
