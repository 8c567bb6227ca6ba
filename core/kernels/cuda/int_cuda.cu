#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cpu/bitpack.h"
#include "kernels/cuda/int_cuda.h"

namespace kvscope::kernels::cuda {
namespace {

__device__ __forceinline__ float load(IntElem t, const void* x, std::int64_t i) {
  switch (t) {
    case IntElem::F32:
      return static_cast<const float*>(x)[i];
    case IntElem::BF16:
      return __uint_as_float(static_cast<unsigned>(static_cast<const unsigned short*>(x)[i]) << 16);
    default:
      return __half2float(static_cast<const __half*>(x)[i]);
  }
}

__device__ __forceinline__ void store(IntElem t, void* out, std::int64_t i, float v) {
  switch (t) {
    case IntElem::F32:
      static_cast<float*>(out)[i] = v;
      break;
    case IntElem::BF16:
      static_cast<unsigned short*>(out)[i] = static_cast<unsigned short>(__float_as_uint(v) >> 16);
      break;
    default:
      static_cast<__half*>(out)[i] = __float2half_rn(v);
      break;
  }
}

__device__ __forceinline__ void combine(float& mn, float& mx, float a, float b) {
  if (a != a || b != b || mn != mn) {
    mn = mx = NAN;
    return;
  }
  mn = fminf(mn, a);
  mx = fmaxf(mx, b);
}

// dim 1: one warp per row (group = row of C values).
__global__ void minMaxRows(IntElem t, const void* x, std::int64_t R, std::int64_t C, float* mn, float* mx) {
  const std::int64_t row = blockIdx.x * static_cast<std::int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= R) return;
  float lo = INFINITY, hi = -INFINITY;
  for (std::int64_t j = lane; j < C; j += 32) {
    const float v = load(t, x, row * C + j);
    combine(lo, hi, v, v);
  }
  for (int o = 16; o > 0; o /= 2) {
    const float a = __shfl_xor_sync(0xFFFFFFFFu, lo, o), b = __shfl_xor_sync(0xFFFFFFFFu, hi, o);
    combine(lo, hi, a, b);
  }
  if (lane == 0) mn[row] = lo, mx[row] = hi;
}

// dim 0: one thread per column (group = column of R values); neighbouring threads read neighbouring values.
__global__ void minMaxCols(IntElem t, const void* x, std::int64_t R, std::int64_t C, float* mn, float* mx) {
  const std::int64_t col = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (col >= C) return;
  float lo = INFINITY, hi = -INFINITY;
  for (std::int64_t r = 0; r < R; ++r) {
    const float v = load(t, x, r * C + col);
    combine(lo, hi, v, v);
  }
  mn[col] = lo, mx[col] = hi;
}

// One thread per 8 codes (= `bits` whole bytes).
__global__ void quantizePackKernel(IntElem t, const void* x, std::int64_t n, std::int64_t C, int dim,
                                   const float* scale, const float* zero, IntScheme s, int bits, std::uint8_t* out,
                                   std::int64_t bytes) {
  const std::int64_t chunks = (n + 7) / 8;
  for (std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; k < chunks;
       k += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::uint8_t c[8] = {};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const std::int64_t i = k * 8 + j;
      if (i < n) {
        const std::int64_t g = groupOf(i, C, dim);
        c[j] = quantizeOne(load(t, x, i), scale[g], zero[g], bits, s, t);
      }
    }
    const std::uint64_t w = packEight(c, bits);
    const std::int64_t take = k * bits + bits <= bytes ? bits : bytes - k * bits;
    for (std::int64_t b = 0; b < take; ++b) out[k * bits + b] = static_cast<std::uint8_t>(w >> (8 * b));
  }
}

__global__ void unpackDequantizeKernel(const std::uint8_t* packed, std::int64_t n, std::int64_t C, int dim,
                                       const float* scale, const float* zero, IntScheme s, int bits, IntElem t,
                                       void* out, std::int64_t bytes) {
  const std::int64_t chunks = (n + 7) / 8;
  for (std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; k < chunks;
       k += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::uint64_t w = 0;
    const std::int64_t take = k * bits + bits <= bytes ? bits : bytes - k * bits;
    for (std::int64_t b = 0; b < take; ++b) w |= static_cast<std::uint64_t>(packed[k * bits + b]) << (8 * b);
    std::uint8_t c[8];
    unpackEight(w, bits, c);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const std::int64_t i = k * 8 + j;
      if (i < n) {
        const std::int64_t g = groupOf(i, C, dim);
        store(t, out, i, dequantizeOne(c[j], scale[g], zero[g], s, t));
      }
    }
  }
}

unsigned blocksFor(std::int64_t work, int threads) {
  return static_cast<unsigned>(std::clamp<std::int64_t>((work + threads - 1) / threads, 1, 65535));
}

}  // namespace

void groupMinMax(IntElem t, const void* x, std::int64_t R, std::int64_t C, int dim, float* mn, float* mx,
                 void* stream) {
  if (R == 0 || C == 0) return;
  auto st = static_cast<cudaStream_t>(stream);
  if (dim == 1) {
    minMaxRows<<<static_cast<unsigned>((R + 7) / 8), 256, 0, st>>>(t, x, R, C, mn, mx);
  } else {
    minMaxCols<<<static_cast<unsigned>((C + 255) / 256), 256, 0, st>>>(t, x, R, C, mn, mx);
  }
}

void quantizePack(IntElem t, const void* x, std::int64_t R, std::int64_t C, int dim, const float* scale,
                  const float* zero, IntScheme s, int bits, std::uint8_t* out, void* stream) {
  const std::int64_t n = R * C;
  if (n == 0) return;
  quantizePackKernel<<<blocksFor((n + 7) / 8, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      t, x, n, C, dim, scale, zero, s, bits, out, packedBytes(n, bits));
}

void unpackDequantize(const std::uint8_t* packed, std::int64_t R, std::int64_t C, int dim, const float* scale,
                      const float* zero, IntScheme s, int bits, IntElem t, void* out, void* stream) {
  const std::int64_t n = R * C;
  if (n == 0) return;
  unpackDequantizeKernel<<<blocksFor((n + 7) / 8, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      packed, n, C, dim, scale, zero, s, bits, t, out, packedBytes(n, bits));
}

}  // namespace kvscope::kernels::cuda
