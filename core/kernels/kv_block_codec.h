// The block types of llama.cpp's quantized KV cache (and the legacy weight blocks kvscope writes) as scalar
// host/device functions: the CPU loops (kernels/cpu/quantize_blocks.cpp, kernels/cpu/blocks.cpp,
// kernels/cpu/kv_blocks.cpp) and the CUDA kernels (kernels/cuda/kv_blocks_cuda.cu) share this one definition of every
// rounding, and of the Hadamard rotation llama.cpp applies to a quantized cache's rows. The rows of the engines' FP4
// caches (NVFP4, its 4over6 variant, MXFP4: kernels/fp4_codec.h) go through the same row functions.
//
// Blocks are 32 values (ggml-common.h): Q8_0 {fp16 d, int8 q[32]}; Q4_0 {d, nibbles}; Q4_1 {d, m, nibbles};
// Q5_0 {d, qh (the fifth bits), nibbles}; Q5_1 {d, m, qh, nibbles}; IQ4_NL {d, 4-bit indices into a fixed table}.
// The legacy quantizers are the `gguf` Python package's (gguf.quants, float32 throughout, numpy's roundings); IQ4_NL's
// is ggml's reference (quantize_row_iq4_nl_ref). Every multiply and add rounds on its own (mulRn / addRn: no fused
// multiply-add on the device either; the CPU files are built with -ffp-contract=off).
#pragma once

#include <cmath>
#include <cstdint>
#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

#include "kernels/fp4_codec.h"  // NVFP4 / MXFP4 rows
#include "kernels/int_codec.h"  // KVS_HD, addRn / mulRn / divRn, floatBits / bitsFloat

namespace kvscope::kernels::kvcodec {

/// ggml's type numbers of the cache types (GgmlType's, and IQ4_NL's 20), and kvscope's numbers of the engines' FP4
/// formats (kernels/fp4_codec.h: blocks of 16 or 32 values, none of ggml's types).
enum Type : std::uint32_t {
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  IQ4_NL = 20,
  BF16 = 30,
  NVFP4 = 1000,
  NVFP4_4OVER6 = 1001,
  MXFP4 = 1002,
  ULTRAQUANT = 1003,
  INT8_PER_TOKEN_HEAD = 1010,
  FP8_PER_TOKEN_HEAD = 1011,
  INT4_PER_TOKEN_HEAD = 1012,
  INT4_PER_TOKEN_HEAD_F16 = 1013,   // the transform rounded to fp16 before the codes (an fp16 model's cast)
  INT4_PER_TOKEN_HEAD_BF16 = 1014,  // ... to bf16
  TQ_KEY3 = 1020,                   // TurboQuant's keys: Lloyd-Max codes of the rotated unit vector, its fp16 norm
  TQ_KEY4 = 1021,
  TQ_KEY_FP8 = 1022,  // turboquant_k8v4's keys: e4m3 without a scale
  TQ_VALUE3 = 1023,   // TurboQuant's values: uniform codes, fp16 scale and zero
  TQ_VALUE4 = 1024,
};

/// Largest head size the row functions take (their scratch row lives on the stack / in a thread's local memory).
inline constexpr int kMaxRow = 512;

KVS_HD bool isFp4(std::uint32_t t) {
  return t == NVFP4 || t == NVFP4_4OVER6 || t == MXFP4 || t == ULTRAQUANT;
}
KVS_HD fp4::Format fp4Format(std::uint32_t t) {
  switch (t) {
    case MXFP4:
      return fp4::Format::Mxfp4;
    case ULTRAQUANT:
      return fp4::Format::Ultraquant;
    case NVFP4_4OVER6:
      return fp4::Format::Nvfp4FourOverSix;
    default:
      return fp4::Format::Nvfp4;
  }
}
/// vLLM's per-token-head caches: a row's codes (int8 or e4m3), then its float32 scale.
KVS_HD bool isPerTokenHead(std::uint32_t t) {
  return t == INT8_PER_TOKEN_HEAD || t == FP8_PER_TOKEN_HEAD;
}
/// vLLM's int4 per-token-head rows, whatever the model's dtype.
KVS_HD bool isInt4PerTokenHead(std::uint32_t t) {
  return t == INT4_PER_TOKEN_HEAD || t == INT4_PER_TOKEN_HEAD_F16 || t == INT4_PER_TOKEN_HEAD_BF16;
}
/// vLLM's TurboQuant rows (turboquant_*): keys and values in their own types.
KVS_HD bool isTurboQuant(std::uint32_t t) {
  return t >= TQ_KEY3 && t <= TQ_VALUE4;
}
/// Bits per code of a TurboQuant row type.
KVS_HD int tqBits(std::uint32_t t) {
  return t == TQ_KEY_FP8 ? 8 : (t == TQ_KEY3 || t == TQ_VALUE3 ? 3 : 4);
}
KVS_HD bool isKvType(std::uint32_t t) {
  return t == F16 || t == BF16 || t == Q8_0 || t == Q4_0 || t == Q4_1 || t == Q5_0 || t == Q5_1 || t == IQ4_NL ||
         isFp4(t) || isPerTokenHead(t) || isInt4PerTokenHead(t) || isTurboQuant(t);
}
KVS_HD bool isHalfWidth(std::uint32_t t) {
  return t == F16 || t == BF16;
}
/// Values per block: 32, but 16 for NVFP4; 8 for TurboQuant's bit-packed codes and 2 for int4 per token and head (a
/// row is whole bytes of codes); 1 for the 16-bit, 8-bit per-token-head and FP8-key types (any row size).
KVS_HD int blockValues(std::uint32_t t) {
  if (isFp4(t)) return fp4::blockValues(fp4Format(t));
  if (isTurboQuant(t)) return t == TQ_KEY_FP8 ? 1 : 8;
  if (isInt4PerTokenHead(t)) return 2;
  return isHalfWidth(t) || isPerTokenHead(t) ? 1 : 32;
}

/// Bytes of one block of blockValues(t) values (F16 / BF16: 64), and how many of them are scales (fp16 d and m; the
/// FP4 formats' one E4M3 or E8M0 byte).
KVS_HD int blockBytes(std::uint32_t t) {
  if (isFp4(t)) return blockValues(t) / 2 + 1;
  switch (t) {
    case Q8_0:
      return 34;
    case Q4_0:
      return 18;
    case Q4_1:
      return 20;
    case Q5_0:
      return 22;
    case Q5_1:
      return 24;
    case IQ4_NL:
      return 18;
    default:
      return 64;
  }
}
KVS_HD int scaleBytes(std::uint32_t t) {
  return isFp4(t) ? 1 : isHalfWidth(t) ? 0 : (t == Q4_1 || t == Q5_1 ? 4 : 2);
}
/// Bytes of a row of n values: 2n for F16 / BF16, n + 4 for the 8-bit per-token-head types and n / 2 + 4 for int4;
/// TurboQuant's vLLM sizes (key_packed_size: n·b/8 codes and an fp16 norm, n for FP8 keys; value_packed_size: n·b/8
/// codes, an fp16 scale and an fp16 zero); n / blockValues(t) blocks for the others (whole blocks).
KVS_HD std::int64_t rowBytes(std::uint32_t t, std::int64_t n) {
  if (isPerTokenHead(t)) return n + 4;
  if (isInt4PerTokenHead(t)) return n / 2 + 4;
  if (t == TQ_KEY_FP8) return n;
  if (isTurboQuant(t)) return n * tqBits(t) / 8 + (t == TQ_KEY3 || t == TQ_KEY4 ? 2 : 4);
  return isHalfWidth(t) ? 2 * n : n / blockValues(t) * blockBytes(t);
}
/// The bytes of such a row that are scales (and minimums, norms).
KVS_HD std::int64_t rowScaleBytes(std::uint32_t t, std::int64_t n) {
  if (isPerTokenHead(t) || isInt4PerTokenHead(t)) return 4;
  if (isTurboQuant(t)) return rowBytes(t, n) - n * tqBits(t) / 8;
  return isHalfWidth(t) ? 0 : n / blockValues(t) * scaleBytes(t);
}

// fp16 and bf16, round to nearest even (c10::Half / __float2half_rn; c10::BFloat16's rule, NaN to 0x7FC0).
KVS_HD std::uint16_t halfBits(float f) {
#if defined(__CUDACC__)
  const __half_raw r = __float2half_rn(f);
  return r.x;
#else
  return c10::Half(f).x;
#endif
}
KVS_HD float halfValue(std::uint16_t h) {
#if defined(__CUDACC__)
  __half_raw r;
  r.x = h;
  return __half2float(__half(r));
#else
  return static_cast<float>(c10::Half(h, c10::Half::from_bits()));
#endif
}
KVS_HD std::uint16_t bf16Bits(float f) {
  if (f != f) return 0x7FC0u;
  const std::uint32_t u = floatBits(f);
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
KVS_HD float bf16Value(std::uint16_t h) {
  return bitsFloat(static_cast<std::uint32_t>(h) << 16);
}

KVS_HD std::uint16_t load16(const std::uint8_t* p) {
  return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}
KVS_HD std::uint32_t load32(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}
KVS_HD void store16(std::uint16_t h, std::uint8_t* p) {
  p[0] = static_cast<std::uint8_t>(h & 0xFF);
  p[1] = static_cast<std::uint8_t>(h >> 8);
}

KVS_HD float absf(float x) {
  return bitsFloat(floatBits(x) & 0x7FFFFFFFu);
}
KVS_HD float truncf_(float x) {
#if defined(__CUDA_ARCH__)
  return truncf(x);
#else
  return std::trunc(x);
#endif
}
KVS_HD float floorf_(float x) {
#if defined(__CUDA_ARCH__)
  return floorf(x);
#else
  return std::floor(x);
#endif
}

/// vLLM's per-token-head row (v1/attention/ops/triton_reshape_and_cache_flash.py, _reshape_cache_per_token_head): the
/// scale max(amax / 127 (int8) or / 448 (e4m3), 1e-6) in float32, each value times its reciprocal, then int8 rounds
/// half away from zero and clamps to [-128, 127], e4m3 clamps to ±448 and rounds to nearest even; the scale follows the
/// codes. Decoded as code * scale.
KVS_HD void encodePerTokenHead(bool fp8, const float* x, std::int64_t n, std::uint8_t* out) {
  float amax = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) {
    const float a = absf(x[i]);
    amax = amax < a ? a : amax;
  }
  float scale = divRn(amax, fp8 ? 448.0f : 127.0f);
  scale = scale > 1e-6f ? scale : 1e-6f;
  const float inv = divRn(1.0f, scale);
  for (std::int64_t i = 0; i < n; ++i) {
    float q = mulRn(x[i], inv);
    if (fp8) {
      q = q > 448.0f ? 448.0f : (q < -448.0f ? -448.0f : q);
      out[i] = encodeE4M3FN(q);
    } else {
      q = q >= 0.0f ? addRn(q, 0.5f) : addRn(q, -0.5f);
      q = q > 127.0f ? 127.0f : (q < -128.0f ? -128.0f : q);
      out[i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(truncf_(q)));
    }
  }
  const std::uint32_t u = floatBits(scale);
  for (int k = 0; k < 4; ++k) out[n + k] = static_cast<std::uint8_t>(u >> (8 * k));
}
KVS_HD void decodePerTokenHead(bool fp8, const std::uint8_t* in, std::int64_t n, float* y) {
  const float scale = bitsFloat(load32(in + n));
  for (std::int64_t i = 0; i < n; ++i)
    y[i] = mulRn(fp8 ? decodeE4M3FN(in[i]) : static_cast<float>(static_cast<std::int8_t>(in[i])), scale);
}

/// gguf.quants' np_roundf in float32: floor(|x|) + floor(2 (|x| - floor(|x|))), with x's sign (halves away from zero).
KVS_HD float roundAway(float x) {
  const float a = absf(x), f = floorf_(a);
  const float r = addRn(f, floorf_(mulRn(2.0f, addRn(a, -f))));
  return bitsFloat((floatBits(r) & 0x7FFFFFFFu) | (floatBits(x) & 0x80000000u));
}

/// IQ4_NL's 16 levels (ggml's kvalues_iq4nl).
KVS_HD int iq4NlLevel(int i) {
  constexpr std::int8_t v[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  return v[i];
}

/// The index of the level nearest to x (ggml's best_index_int8: ties between two levels go to the upper one; below
/// the first or above the last level, the end level).
KVS_HD int iq4NlNearest(float x) {
  if (x <= static_cast<float>(iq4NlLevel(0))) return 0;
  if (x >= static_cast<float>(iq4NlLevel(15))) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < static_cast<float>(iq4NlLevel(mid)))
      hi = mid;
    else
      lo = mid;
  }
  return addRn(x, -static_cast<float>(iq4NlLevel(hi - 1))) < addRn(static_cast<float>(iq4NlLevel(hi)), -x) ? hi - 1
                                                                                                           : hi;
}

// Codes of a 4- or 5-bit block into its bytes: low nibbles hold values 0..15, high nibbles 16..31; a 5-bit code's
// fifth bits go to qh (bit j for value j, little-endian), before the nibbles.
KVS_HD void putCodes(const std::uint8_t* q, bool five, std::uint8_t* at) {
  if (five) {
    std::uint32_t qh = 0;
    for (int i = 0; i < 32; ++i) qh |= static_cast<std::uint32_t>(q[i] >> 4) << i;
    for (int k = 0; k < 4; ++k) at[k] = static_cast<std::uint8_t>(qh >> (8 * k));
    at += 4;
  }
  for (int i = 0; i < 16; ++i) at[i] = static_cast<std::uint8_t>((q[i] & 0x0F) | ((q[i + 16] & 0x0F) << 4));
}

/// Q8_0 (gguf.quants): d = amax / 127, codes round-half-away(x / d).
KVS_HD void encodeQ8_0(const float* x, std::uint8_t* b) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) {
    const float a = absf(x[i]);
    amax = amax < a ? a : amax;
  }
  const float d = divRn(amax, 127.0f), id = d == 0.0f ? 0.0f : divRn(1.0f, d);
  store16(halfBits(d), b);
  for (int i = 0; i < 32; ++i)
    b[2 + i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(roundAway(mulRn(x[i], id))));
}

/// Q4_0 / Q5_0 (gguf.quants): the value of largest magnitude (the first of equals), d = max / -2^(bits-1), codes
/// trunc(x / d + 2^(bits-1) + 0.5) clipped to 2^bits - 1.
KVS_HD void encodeSymmetric(const float* x, bool five, std::uint8_t* b) {
  const float half = five ? 16.0f : 8.0f, top = five ? 31.0f : 15.0f;
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < 32; ++i) {
    const float a = absf(x[i]);
    if (a > amax) amax = a, max = x[i];
  }
  const float d = divRn(max, -half), id = d == 0.0f ? 0.0f : divRn(1.0f, d);
  store16(halfBits(d), b);
  std::uint8_t q[32];
  for (int i = 0; i < 32; ++i) {
    const float t = truncf_(addRn(mulRn(x[i], id), half + 0.5f));
    q[i] = static_cast<std::uint8_t>(t < top ? t : top);
  }
  putCodes(q, five, b + 2);
}

/// Q4_1 / Q5_1 (gguf.quants): d = (max - min) / (2^bits - 1), m = min, codes trunc((x - min) / d + 0.5) clipped to
/// [0, 2^bits - 1].
KVS_HD void encodeAffine(const float* x, bool five, std::uint8_t* b) {
  const float top = five ? 31.0f : 15.0f;
  float mn = x[0], mx = x[0];
  for (int i = 1; i < 32; ++i) {
    mn = x[i] < mn ? x[i] : mn;
    mx = mx < x[i] ? x[i] : mx;
  }
  const float d = divRn(addRn(mx, -mn), top), id = d == 0.0f ? 0.0f : divRn(1.0f, d);
  store16(halfBits(d), b);
  store16(halfBits(mn), b + 2);
  std::uint8_t q[32];
  for (int i = 0; i < 32; ++i) {
    const float t = truncf_(addRn(mulRn(addRn(x[i], -mn), id), 0.5f));
    const float lo = 0.0f < t ? t : 0.0f;
    q[i] = static_cast<std::uint8_t>(lo < top ? lo : top);
  }
  putCodes(q, five, b + 4);
}

/// IQ4_NL (ggml's quantize_row_iq4_nl_impl for one block, no importance weights): weights x², the scale from the
/// value of largest magnitude refined by weighted least squares over its levels, then 15 trial scales (itry = -7..7)
/// kept when they fit better; the indices from the final (fp32) scale.
KVS_HD void encodeIq4Nl(const float* x, std::uint8_t* b) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float a = absf(x[j]);
    if (a > amax) amax = a, max = x[j];
  }
  if (amax < 1e-15f) {  // ggml's GROUP_MAX_EPS: d = 0, every index the level nearest to 0
    store16(0, b);
    const auto zero = static_cast<std::uint8_t>(iq4NlNearest(0.0f));
    for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<std::uint8_t>(zero | (zero << 4));
    return;
  }
  float w[32];
  for (int j = 0; j < 32; ++j) w[j] = mulRn(x[j], x[j]);
  const float first = static_cast<float>(iq4NlLevel(0));
  float sumqx = 0.0f, sumq2 = 0.0f;
  const auto fit = [&](float id) {
    sumqx = 0.0f, sumq2 = 0.0f;
    for (int j = 0; j < 32; ++j) {
      const float q = static_cast<float>(iq4NlLevel(iq4NlNearest(mulRn(id, x[j]))));
      sumqx = addRn(sumqx, mulRn(mulRn(w[j], q), x[j]));
      sumq2 = addRn(sumq2, mulRn(mulRn(w[j], q), q));
    }
  };
  fit(divRn(1.0f, divRn(-max, first)));
  float d = divRn(sumqx, sumq2), best = mulRn(d, sumqx);
  for (int t = -7; t <= 7; ++t) {
    fit(divRn(addRn(static_cast<float>(t), first), max));
    if (sumq2 > 0.0f && mulRn(sumqx, sumqx) > mulRn(best, sumq2)) d = divRn(sumqx, sumq2), best = mulRn(d, sumqx);
  }
  store16(halfBits(d), b);
  const float id = d != 0.0f ? divRn(1.0f, d) : 0.0f;
  for (int j = 0; j < 16; ++j)
    b[2 + j] = static_cast<std::uint8_t>(iq4NlNearest(mulRn(id, x[j])) | (iq4NlNearest(mulRn(id, x[j + 16])) << 4));
}

/// One block of 32 values of a quantized type (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) into its bytes.
KVS_HD void encodeBlock(std::uint32_t t, const float* x, std::uint8_t* b) {
  switch (t) {
    case Q8_0:
      return encodeQ8_0(x, b);
    case Q4_0:
      return encodeSymmetric(x, false, b);
    case Q5_0:
      return encodeSymmetric(x, true, b);
    case Q4_1:
      return encodeAffine(x, false, b);
    case Q5_1:
      return encodeAffine(x, true, b);
    case IQ4_NL:
      return encodeIq4Nl(x, b);
    default:
      return;
  }
}

/// A block's 32 values as ggml dequantizes them (ggml-quants.c's dequantize_row_*).
KVS_HD void decodeBlock(std::uint32_t t, const std::uint8_t* b, float* y) {
  const float d = halfValue(load16(b));
  switch (t) {
    case Q8_0:
      for (int j = 0; j < 32; ++j) y[j] = mulRn(static_cast<float>(static_cast<std::int8_t>(b[2 + j])), d);
      return;
    case Q4_0:
      for (int j = 0; j < 16; ++j) {
        y[j] = mulRn(static_cast<float>((b[2 + j] & 0x0F) - 8), d);
        y[j + 16] = mulRn(static_cast<float>((b[2 + j] >> 4) - 8), d);
      }
      return;
    case Q4_1: {
      const float m = halfValue(load16(b + 2));
      for (int j = 0; j < 16; ++j) {
        y[j] = addRn(mulRn(static_cast<float>(b[4 + j] & 0x0F), d), m);
        y[j + 16] = addRn(mulRn(static_cast<float>(b[4 + j] >> 4), d), m);
      }
      return;
    }
    case Q5_0: {
      const std::uint32_t qh = load32(b + 2);
      for (int j = 0; j < 16; ++j) {
        const int x0 = static_cast<int>((b[6 + j] & 0x0F) | (((qh >> j) << 4) & 0x10)) - 16;
        const int x1 = static_cast<int>((b[6 + j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
        y[j] = mulRn(static_cast<float>(x0), d);
        y[j + 16] = mulRn(static_cast<float>(x1), d);
      }
      return;
    }
    case Q5_1: {
      const float m = halfValue(load16(b + 2));
      const std::uint32_t qh = load32(b + 4);
      for (int j = 0; j < 16; ++j) {
        const int x0 = static_cast<int>((b[8 + j] & 0x0F) | (((qh >> j) << 4) & 0x10));
        const int x1 = static_cast<int>((b[8 + j] >> 4) | ((qh >> (j + 12)) & 0x10));
        y[j] = addRn(mulRn(static_cast<float>(x0), d), m);
        y[j + 16] = addRn(mulRn(static_cast<float>(x1), d), m);
      }
      return;
    }
    case IQ4_NL:
      for (int j = 0; j < 16; ++j) {
        y[j] = mulRn(d, static_cast<float>(iq4NlLevel(b[2 + j] & 0x0F)));
        y[j + 16] = mulRn(d, static_cast<float>(iq4NlLevel(b[2 + j] >> 4)));
      }
      return;
    default:
      return;
  }
}

/// The unnormalised fast Walsh-Hadamard transform of n values in place (n a power of two; Sylvester's order, the
/// butterfly [a + b, a - b] over strides 1, 2, 4, ...: vLLM's PyTorch fast_hadamard_transform): H_n H_n = n I.
KVS_HD void fwht(float* c, int n) {
  for (int h = 1; h < n; h *= 2)
    for (int i = 0; i < n; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const float a = c[j], b = c[j + h];
        c[j] = addRn(a, b);
        c[j + h] = addRn(a, -b);
      }
}

KVS_HD float sqrtRn(float x) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(x);
#else
  return std::sqrt(x);
#endif
}

/// x[i * n .. i * n + n) = H_n x[i * n .. i * n + n) for each chunk of n values (n a power of two dividing count),
/// in place: the fast Walsh-Hadamard transform (Sylvester's order), then one multiplication by 1/sqrt(n)
/// (ggml_gen_hadamard's float32 scale). H_n is symmetric and its own inverse.
/// The normalisation of H_n: 1/sqrt(n) as ggml_gen_hadamard's float32.
KVS_HD float hadamardScale(int n) {
  return static_cast<float>(1.0 / static_cast<double>(sqrtRn(static_cast<float>(n))));
}
KVS_HD void hadamardChunks(float* x, std::int64_t count, int n) {
  const float scale = hadamardScale(n);
  for (float* c = x; c < x + count; c += n) {
    fwht(c, n);
    for (int i = 0; i < n; ++i) c[i] = mulRn(c[i], scale);
  }
}

// ---- vLLM's TurboQuant (model_executor/layers/quantization/turboquant, v1/attention/ops/triton_turboquant_*.py) ----
//
// Keys (the MSE presets): the row's float32 norm, the unit vector k / (norm + 1e-8) rotated by the normalised
// Sylvester Hadamard matrix of the head size, each coordinate's index among the Lloyd-Max centroids of N(0, 1/n)
// (the number of fp32 midpoints (c[i] + c[i+1]) / 2 at or below it: ties go up), the indices as an LSB-first bit
// stream, then fp16(norm). Read with norm correction: the centroids renormalised to unit length, times the fp16 norm,
// rotated back (H is symmetric and its own inverse; vLLM rotates the query instead: the same dot product up to
// float rounding). turboquant_k8v4's keys: each value cast to e4m3 (saturating, no scale). Values: asymmetric
// uniform codes, scale (max - min) / (2^b - 1) (at least 1e-8) and zero min in float32 for the codes, stored as fp16
// and read back from those.

/// vLLM's Lloyd-Max centroids (centroids.py, solve_lloyd_max(n, bits): float64 iterations, float32 result) for a
/// power-of-two n. The solver's output scales exactly with sigma = 1/sqrt(n): n = 64·4^k gives the n = 64 table
/// times 2^-k, n = 128·4^k the n = 128 table times 2^-k (the same bits, another exponent; tests/unit and the parity
/// test rebuild every table from the solver).
KVS_HD float tqCentroid(int n, int bits, int i) {
  constexpr std::uint32_t b3d64[4] = {0xbe899f54u, 0xbe2bed53u, 0xbdc171fcu, 0xbcfadcfbu};
  constexpr std::uint32_t b3d128[4] = {0xbe42a09fu, 0xbdf3243du, 0xbd88c955u, 0xbcb16317u};
  constexpr std::uint32_t b4d64[8] = {0xbeaec76eu, 0xbe846170u, 0xbe4f16c0u, 0xbe20cd0cu,
                                      0xbdf1444au, 0xbda82948u, 0xbd46b9ffu, 0xbc83828au};
  constexpr std::uint32_t b4d128[8] = {0xbe772cc4u, 0xbe3b36e7u, 0xbe126f17u, 0xbde3682bu,
                                       0xbdaa99f2u, 0xbd6dd0e1u, 0xbd0c8559u, 0xbc39fbaeu};
  int e = 0;
  while ((1 << e) < n) ++e;
  const bool odd = (e & 1) != 0;
  const int half = 1 << (bits - 1);
  const int k = i < half ? i : 2 * half - 1 - i;  // the tables are symmetric: the upper half mirrors the lower
  const std::uint32_t u = bits == 3 ? (odd ? b3d128[k] : b3d64[k]) : (odd ? b4d128[k] : b4d64[k]);
  const int shift = ((odd ? 7 : 6) - e) / 2;  // the exponent moves by shift: n = 64·4^-shift (or 128·4^-shift)
  const std::uint32_t exponent = ((u >> 23) & 0xFFu) + static_cast<std::uint32_t>(shift);
  const std::uint32_t mag = (u & 0x807FFFFFu) | (exponent << 23);
  return bitsFloat(i < half ? mag : mag ^ 0x80000000u);
}

/// The bit stream of n codes of b bits, LSB first (code j in bits [j·b, j·b + b)): vLLM's packing for 3 and 4 bits.
KVS_HD void packBits(const std::uint8_t* q, std::int64_t n, int b, std::uint8_t* out) {
  for (std::int64_t i = 0; i < n * b / 8; ++i) out[i] = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    const std::int64_t bit = j * b;
    const std::uint32_t v = static_cast<std::uint32_t>(q[j]) << (bit & 7);
    out[bit >> 3] = static_cast<std::uint8_t>(out[bit >> 3] | (v & 0xFFu));
    if ((v >> 8) != 0) out[(bit >> 3) + 1] = static_cast<std::uint8_t>(out[(bit >> 3) + 1] | (v >> 8));
  }
}
KVS_HD std::uint8_t unpackBits(const std::uint8_t* in, std::int64_t j, int b) {
  const std::int64_t bit = j * b;
  const std::uint32_t w = in[bit >> 3] | ((bit & 7) + b > 8 ? static_cast<std::uint32_t>(in[(bit >> 3) + 1]) << 8 : 0u);
  return static_cast<std::uint8_t>((w >> (bit & 7)) & ((1u << b) - 1u));
}

/// The midpoint between centroids i and i + 1, as vLLM's backend computes it in float32.
KVS_HD float tqMidpoint(int n, int bits, int i) {
  return mulRn(addRn(tqCentroid(n, bits, i), tqCentroid(n, bits, i + 1)), 0.5f);
}

/// The stored form of a key row already normalised and rotated (y) with its float32 norm: b-bit codes, then fp16 norm.
KVS_HD void encodeTqKeyRotated(int b, const float* y, float norm, std::int64_t n, std::uint8_t* out) {
  const int levels = 1 << b, m = static_cast<int>(n);
  float mid[15];
  for (int i = 0; i + 1 < levels; ++i) mid[i] = tqMidpoint(m, b, i);
  std::uint8_t q[kMaxRow];
  for (std::int64_t i = 0; i < n; ++i) {
    int idx = 0;
    for (int j = 0; j + 1 < levels; ++j) idx += mid[j] <= y[i] ? 1 : 0;
    q[i] = static_cast<std::uint8_t>(idx);
  }
  packBits(q, n, b, out);
  store16(halfBits(norm), out + n * b / 8);
}
/// A stored key row in the rotated basis, as vLLM's decode reads it: renormalised centroids times the fp16 norm. The
/// sum of squares runs as a vector unit adds (vLLM's kernel sums in its own order, within an fp16 step of this): 16
/// running sums, coordinate i into sum i % 16, then sums l and l + w added for w = 8, 4, 2, 1 (the CPU's AVX-512
/// read, kernels/cpu/kv_rows_simd.h, gives the same bits).
KVS_HD void decodeTqKeyRotated(int b, const std::uint8_t* in, std::int64_t n, float* y) {
  float c[16];  // the row's table once: attention reads every stored row at every step
  for (int i = 0; i < (1 << b); ++i) c[i] = tqCentroid(static_cast<int>(n), b, i);
  float part[16] = {};
  for (std::int64_t i = 0; i < n; ++i) {
    y[i] = c[unpackBits(in, i, b)];
    part[i & 15] = addRn(part[i & 15], mulRn(y[i], y[i]));
  }
  for (int w = 8; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) part[l] = addRn(part[l], part[l + w]);
  const float ss = part[0];
  const float inv = divRn(1.0f, sqrtRn(addRn(ss, 1e-16f))), norm = halfValue(load16(in + n * b / 8));
  for (std::int64_t i = 0; i < n; ++i) y[i] = mulRn(norm, mulRn(y[i], inv));
}

/// A TurboQuant key row (n a power of two, at most kMaxRow): codes then fp16 norm; FP8 keys: n e4m3 bytes.
KVS_HD void encodeTqKey(std::uint32_t t, const float* x, std::int64_t n, std::uint8_t* out) {
  if (t == TQ_KEY_FP8) {
    for (std::int64_t i = 0; i < n; ++i)
      out[i] = encodeE4M3FN(x[i] > 448.0f ? 448.0f : (x[i] < -448.0f ? -448.0f : x[i]));
    return;
  }
  float ss = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) ss = addRn(ss, mulRn(x[i], x[i]));
  const float norm = sqrtRn(ss), den = addRn(norm, 1e-8f);
  float y[kMaxRow];
  for (std::int64_t i = 0; i < n; ++i) y[i] = divRn(x[i], den);
  hadamardChunks(y, n, static_cast<int>(n));
  encodeTqKeyRotated(tqBits(t), y, norm, n, out);
}
/// A TurboQuant key row read back in the model's basis (rotated back: H is its own inverse).
KVS_HD void decodeTqKey(std::uint32_t t, const std::uint8_t* in, std::int64_t n, float* y) {
  if (t == TQ_KEY_FP8) {
    for (std::int64_t i = 0; i < n; ++i) y[i] = decodeE4M3FN(in[i]);
    return;
  }
  decodeTqKeyRotated(tqBits(t), in, n, y);
  hadamardChunks(y, n, static_cast<int>(n));
}

/// A TurboQuant value row: codes, fp16 scale, fp16 zero.
KVS_HD void encodeTqValue(std::uint32_t t, const float* x, std::int64_t n, std::uint8_t* out) {
  const int b = tqBits(t);
  const float top = static_cast<float>((1 << b) - 1);
  float mn = x[0], mx = x[0];
  for (std::int64_t i = 1; i < n; ++i) {
    mn = x[i] < mn ? x[i] : mn;
    mx = mx < x[i] ? x[i] : mx;
  }
  float scale = divRn(addRn(mx, -mn), top);
  scale = scale > 1e-8f ? scale : 1e-8f;
  std::uint8_t q[kMaxRow];
  for (std::int64_t i = 0; i < n; ++i) {
    const float c = truncf_(addRn(divRn(addRn(x[i], -mn), scale), 0.5f));
    q[i] = static_cast<std::uint8_t>(c < 0.0f ? 0.0f : (c > top ? top : c));
  }
  packBits(q, n, b, out);
  store16(halfBits(scale), out + n * b / 8);
  store16(halfBits(mn), out + n * b / 8 + 2);
}
KVS_HD void decodeTqValue(std::uint32_t t, const std::uint8_t* in, std::int64_t n, float* y) {
  const int b = tqBits(t);
  const float scale = halfValue(load16(in + n * b / 8)), zero = halfValue(load16(in + n * b / 8 + 2));
  for (std::int64_t i = 0; i < n; ++i) y[i] = addRn(mulRn(static_cast<float>(unpackBits(in, i, b)), scale), zero);
}

// ---- vLLM's int4_per_token_head (v1/attention/ops/int4_per_token_head.py) ----
//
// Each row goes through vLLM's randomized Hadamard transform first: times its fixed ±1 signs (torch.bernoulli(0.5)
// from a CPU generator seeded 0x9E3779B9), then the unnormalised transform, block-diagonally in blocks of the largest
// power of two dividing n (the signs of that block size). Then asymmetric 4-bit codes per row: scale max((max - min) /
// 15, 1e-6), zero point round-half-away(-min / scale) in [0, 15], codes round-half-away(x · (1 / scale) + zp) in
// [0, 15], two per byte (even value in the low nibble), and the float32 scale with the zero point in its low 4
// mantissa bits. Read as (q - zp) · scale, then the inverse transform (transform, signs, / block).

/// vLLM's sign i (0-based) of its RHT sign vector: every length's vector is the start of the longest's (the parity
/// test and tests/unit rebuild them with torch.bernoulli). Bit set: -1.
KVS_HD float rhtSign(int i) {
  constexpr std::uint64_t bits[8] = {0x7f7fca4e9a8ca6f2ull, 0x9480abc759bbc293ull, 0x54503bbeb55b747eull,
                                     0x05dfbc5fcdf467b7ull, 0x57563834b291e3ccull, 0x67fc4ca6e46ae225ull,
                                     0x32d9dff1cfc78691ull, 0x75625346365fdb89ull};
  return ((bits[i >> 6] >> (i & 63)) & 1u) != 0 ? -1.0f : 1.0f;
}
KVS_HD int rhtBlock(std::int64_t n) {
  return static_cast<int>(n & -n);
}
KVS_HD float roundHalfAway(float x) {
  return truncf_(x >= 0.0f ? addRn(x, 0.5f) : addRn(x, -0.5f));
}

/// vLLM's single_rht of a row: times the signs, then the unnormalised transform per block.
KVS_HD void rhtForward(const float* x, std::int64_t n, float* y) {
  const int blk = rhtBlock(n);
  for (std::int64_t i = 0; i < n; ++i) y[i] = mulRn(x[i], rhtSign(static_cast<int>(i % blk)));
  for (std::int64_t c = 0; c < n; c += blk) fwht(y + c, blk);
}

/// The int4 codes and scale word of a row already transformed (y).
KVS_HD void encodeInt4Transformed(const float* y, std::int64_t n, std::uint8_t* out) {
  float mn = bitsFloat(0x7F800000u), mx = -mn;
  for (std::int64_t i = 0; i < n; ++i) {
    mn = y[i] < mn ? y[i] : mn;
    mx = mx < y[i] ? y[i] : mx;
  }
  float scale = divRn(addRn(mx, -mn), 15.0f);
  scale = scale > 1e-6f ? scale : 1e-6f;
  float zp = roundHalfAway(divRn(-mn, scale));
  zp = zp < 0.0f ? 0.0f : (zp > 15.0f ? 15.0f : zp);
  const float inv = divRn(1.0f, scale);
  for (std::int64_t i = 0; i < n; i += 2) {
    std::uint8_t q[2];
    for (int k = 0; k < 2; ++k) {
      const float c = roundHalfAway(addRn(mulRn(y[i + k], inv), zp));
      q[k] = static_cast<std::uint8_t>(c < 0.0f ? 0.0f : (c > 15.0f ? 15.0f : c));
    }
    out[i / 2] = static_cast<std::uint8_t>(q[0] | (q[1] << 4));
  }
  const std::uint32_t u = (floatBits(scale) & ~0xFu) | static_cast<std::uint32_t>(zp);
  for (int k = 0; k < 4; ++k) out[n / 2 + k] = static_cast<std::uint8_t>(u >> (8 * k));
}
/// `t`: INT4_PER_TOKEN_HEAD quantizes the float32 transform (a float32 model); the _F16 / _BF16 types round it to
/// the model's dtype first, as vLLM's writer casts it (`.to(key.dtype)`) before its kernel reads it.
KVS_HD void encodeInt4PerTokenHead(std::uint32_t t, const float* x, std::int64_t n, std::uint8_t* out) {
  float y[kMaxRow];
  rhtForward(x, n, y);
  if (t == INT4_PER_TOKEN_HEAD_F16)
    for (std::int64_t i = 0; i < n; ++i) y[i] = halfValue(halfBits(y[i]));
  else if (t == INT4_PER_TOKEN_HEAD_BF16)
    for (std::int64_t i = 0; i < n; ++i) y[i] = bf16Value(bf16Bits(y[i]));
  encodeInt4Transformed(y, n, out);
}
/// A row's values in the transformed basis: (q - zp) · scale.
KVS_HD void decodeInt4Transformed(const std::uint8_t* in, std::int64_t n, float* y) {
  const std::uint32_t u = load32(in + n / 2);
  const float scale = bitsFloat(u & ~0xFu);
  const int zp = static_cast<int>(u & 0xFu);
  for (std::int64_t i = 0; i < n; ++i) {
    const int q = (in[i / 2] >> (4 * (i & 1))) & 0xF;
    y[i] = mulRn(static_cast<float>(q - zp), scale);
  }
}
KVS_HD void decodeInt4PerTokenHead(const std::uint8_t* in, std::int64_t n, float* y) {
  const int blk = rhtBlock(n);
  decodeInt4Transformed(in, n, y);
  for (std::int64_t c = 0; c < n; c += blk) fwht(y + c, blk);
  for (std::int64_t i = 0; i < n; ++i)
    y[i] = divRn(mulRn(y[i], rhtSign(static_cast<int>(i % blk))), static_cast<float>(blk));
}

/// n values into a row of type t (whole blocks for the block types; any n for F16 / BF16). `scale`: NVFP4's global
/// decode scale (the other types have none).
KVS_HD void encodeRow(std::uint32_t t, const float* x, std::int64_t n, std::uint8_t* out, float scale = 1.0f) {
  if (isFp4(t)) return fp4::encodeRow(fp4Format(t), x, n, scale, out);
  if (isPerTokenHead(t)) return encodePerTokenHead(t == FP8_PER_TOKEN_HEAD, x, n, out);
  if (isInt4PerTokenHead(t)) return encodeInt4PerTokenHead(t, x, n, out);
  if (t == TQ_VALUE3 || t == TQ_VALUE4) return encodeTqValue(t, x, n, out);
  if (isTurboQuant(t)) return encodeTqKey(t, x, n, out);
  if (t == F16 || t == BF16) {
    for (std::int64_t i = 0; i < n; ++i) store16(t == F16 ? halfBits(x[i]) : bf16Bits(x[i]), out + 2 * i);
    return;
  }
  const int bytes = blockBytes(t);
  for (std::int64_t i = 0; i < n / 32; ++i) encodeBlock(t, x + 32 * i, out + bytes * i);
}

/// A row of type t into its n values.
KVS_HD void decodeRow(std::uint32_t t, const std::uint8_t* in, std::int64_t n, float* y, float scale = 1.0f) {
  if (isFp4(t)) return fp4::decodeRow(fp4Format(t), in, n, scale, y);
  if (isPerTokenHead(t)) return decodePerTokenHead(t == FP8_PER_TOKEN_HEAD, in, n, y);
  if (isInt4PerTokenHead(t)) return decodeInt4PerTokenHead(in, n, y);
  if (t == TQ_VALUE3 || t == TQ_VALUE4) return decodeTqValue(t, in, n, y);
  if (isTurboQuant(t)) return decodeTqKey(t, in, n, y);
  if (t == F16 || t == BF16) {
    for (std::int64_t i = 0; i < n; ++i)
      y[i] = t == F16 ? halfValue(load16(in + 2 * i)) : bf16Value(load16(in + 2 * i));
    return;
  }
  const int bytes = blockBytes(t);
  for (std::int64_t i = 0; i < n / 32; ++i) decodeBlock(t, in + bytes * i, y + 32 * i);
}

/// A row of type t as it is stored, before the transform its format's read applies: TurboQuant's MSE keys in the
/// rotated basis (decodeTqKeyRotated), int4 per token and head before the inverse RHT; the other types as decodeRow.
KVS_HD void decodeStored(std::uint32_t t, const std::uint8_t* in, std::int64_t n, float* y, float scale = 1.0f) {
  if (t == TQ_KEY3 || t == TQ_KEY4) return decodeTqKeyRotated(tqBits(t), in, n, y);
  if (isInt4PerTokenHead(t)) return decodeInt4Transformed(in, n, y);
  decodeRow(t, in, n, y, scale);
}

/// One cache row as llama.cpp stores it: x (n values) rotated in chunks of `rotation` (0: not rotated) in the
/// scratch row `tmp` (n values), then encoded into `out`; when `back` is given, the row as attention reads it:
/// decoded and rotated back.
KVS_HD void storeRow(std::uint32_t t, const float* x, std::int64_t n, int rotation, float* tmp, std::uint8_t* out,
                     float* back, float scale = 1.0f) {
  for (std::int64_t i = 0; i < n; ++i) tmp[i] = x[i];
  if (rotation > 0) hadamardChunks(tmp, n, rotation);
  encodeRow(t, tmp, n, out, scale);
  if (back) {
    decodeRow(t, out, n, back, scale);
    if (rotation > 0) hadamardChunks(back, n, rotation);
  }
}

/// A stored row read back: decoded, then rotated back.
KVS_HD void readRow(std::uint32_t t, const std::uint8_t* in, std::int64_t n, int rotation, float* y,
                    float scale = 1.0f) {
  decodeRow(t, in, n, y, scale);
  if (rotation > 0) hadamardChunks(y, n, rotation);
}

}  // namespace kvscope::kernels::kvcodec
