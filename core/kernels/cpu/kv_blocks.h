// The block types llama.cpp stores a quantized KV cache in (-ctk / -ctv): each row of a head's K or V (head_dim
// values) is split into blocks of 32 along the head dimension, and each block is one ggml block (ggml-common.h). The
// legacy types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) are blocks.h's, written as the `gguf` package writes them; IQ4_NL (ggml
// type 20: an fp16 scale and 32 4-bit indices into a fixed non-uniform table) is written here as ggml's reference
// quantizer writes it (quantize_row_iq4_nl_ref: the scale searched over 15 candidates, each value to its nearest
// table level). F16 and BF16 rows are the values rounded to nearest even.
//
// Torch-free: checked entry points (an Internal Error for a type or size they do not take) of the scalar codecs in
// kernels/kv_block_codec.h, which the CUDA kernels share; kernels/kv_blocks_tensor.h runs them over tensors.
#pragma once

#include <cstdint>

namespace kvscope::kernels {

/// ggml's type number of IQ4_NL.
inline constexpr std::uint32_t kTypeIq4Nl = 20;
/// kvscope's numbers of the engines' FP4 row types (kernels/fp4_codec.h): NVFP4 (vLLM's `nvfp4`, blocks of 16 with an
/// E4M3 scale and a global decode scale), NVFP4 with vLLM's 4over6 scale choice, MXFP4 (blocks of 32, E8M0) and vLLM's
/// UltraQuant (blocks of 32, UE8M0 scales from 0.156 amax).
inline constexpr std::uint32_t kTypeNvfp4 = 1000, kTypeNvfp4FourOverSix = 1001, kTypeMxfp4 = 1002,
                               kTypeUltraquant = 1003;
/// vLLM's per-token-head caches: each row's int8 or e4m3 codes, then its float32 scale; int4 codes after vLLM's
/// randomized Hadamard transform, then the float32 scale carrying the zero point in its low 4 bits.
inline constexpr std::uint32_t kTypeInt8PerTokenHead = 1010, kTypeFp8PerTokenHead = 1011, kTypeInt4PerTokenHead = 1012;
/// The same int4 rows for an fp16 or bf16 model: the transform rounded to the model's dtype before the codes, as
/// vLLM's writer casts it.
inline constexpr std::uint32_t kTypeInt4PerTokenHeadF16 = 1013, kTypeInt4PerTokenHeadBf16 = 1014;
/// vLLM's TurboQuant rows: keys as 3- or 4-bit Lloyd-Max codes of the Hadamard-rotated unit vector and an fp16 norm,
/// or e4m3 without a scale (turboquant_k8v4); values as 3- or 4-bit uniform codes with an fp16 scale and zero.
inline constexpr std::uint32_t kTypeTqKey3 = 1020, kTypeTqKey4 = 1021, kTypeTqKeyFp8 = 1022, kTypeTqValue3 = 1023,
                               kTypeTqValue4 = 1024;

/// Of a row of n values (whole blocks), the bytes that are scales: fp16 d (and m for Q4_1 / Q5_1) per block of 32, the
/// FP4 types' scale byte per block, the per-token-head types' float32; none for F16 / BF16. Throws an Error (Internal)
/// for other types.
std::int64_t kvRowScaleBytes(std::uint32_t type, std::int64_t n);

/// Bytes a row of n values takes: 2n for F16 / BF16 (any n), whole blocks for the others (else an Error, Internal).
std::int64_t kvRowBytes(std::uint32_t ggmlType, std::int64_t n);

/// n values (whole blocks; any n for F16 / BF16) into blocks of `ggmlType` (F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
/// IQ4_NL, or one of the FP4 types above). `scale`: NVFP4's global decode scale (ignored by the others).
void quantizeKvRow(std::uint32_t ggmlType, const float* src, std::int64_t n, std::uint8_t* dst, float scale = 1.0f);
/// The inverse: n values (whole blocks) of `ggmlType` into float32, as ggml (or the FP4 format's engine) dequantizes
/// them.
void dequantizeKvRow(std::uint32_t ggmlType, const std::uint8_t* src, std::int64_t n, float* dst, float scale = 1.0f);

/// Adds one stored row of n values of `type` to histograms: scaleBins[256] counts its scales (block scales, per-row
/// scales, TurboQuant's key norm) by the float32 exponent field of their value; codeBins[16] counts its 3- or 4-bit
/// codes (FP4's E2M1 codes, TurboQuant's centroid and value codes, int4's), where the format has such codes. Returns
/// what the scales are ("E4M3 block scales", "fp16 norms", ...; empty for a 16-bit type, which has none).
const char* kvRowHistogram(std::uint32_t type, const std::uint8_t* row, std::int64_t n, std::int64_t* scaleBins,
                           std::int64_t* codeBins);

/// The index of IQ4_NL's level (kvcodec::iq4NlLevel: ggml's kvalues_iq4nl) nearest to x (ggml's best_index_int8: ties
/// between two levels go to the upper one; below the first or above the last level, the end level).
int iq4NlNearestLevel(float x);

}  // namespace kvscope::kernels
