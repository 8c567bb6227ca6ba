// The Hadamard rotation llama.cpp applies to K and V before a quantized KV cache stores them (src/llama-kv-cache.cpp,
// since its PR #21038): each consecutive chunk of n values (n a power of two, at least 64) is multiplied by the
// orthonormal Walsh-Hadamard matrix H_n (Sylvester's order, entries ±1/sqrt(n)). H_n is symmetric and H_n² = I, so
// rotating Q with K's matrix leaves Q·K unchanged, and rotating the attention output with V's undoes V's.
//
// Torch-free; the cache layers that emulate llama.cpp's types call it on their rows.
#pragma once

#include <cstdint>

namespace kvscope::kernels {

/// llama.cpp's rotation sizes for a head size (keys and values are judged apart, each by its own type): 0 when the
/// head size is not a multiple of 64 (no rotation); keys: the largest power of two (>= 64) dividing the head size;
/// values: always 64.
int hadamardSizeForKeys(int headDim);
int hadamardSizeForValues(int headDim);

/// x[i * n .. i * n + n) = H_n x[i * n .. i * n + n) for each of the `count / n` chunks, in place (n a power of two,
/// count a multiple of n): the fast transform (n log n additions), then one multiplication by 1/sqrt(n).
void hadamardRotate(float* x, std::int64_t count, int n);

}  // namespace kvscope::kernels
