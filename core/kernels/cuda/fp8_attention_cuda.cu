#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/fp8_attention_cuda.h"

namespace kvscope::kernels::cuda {
namespace {

constexpr int kThreads = 256;  // also the tile: one key per thread for the scores
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ float warpMax(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}
__device__ __forceinline__ float warpSum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

// Block-wide max / sum; `red` holds kWarps floats. Every thread gets the result.
__device__ __forceinline__ float blockMax(float v, float* red) {
  v = warpMax(v);
  __syncthreads();
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float r = red[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) r = fmaxf(r, red[w]);
  return r;
}
__device__ __forceinline__ float blockSum(float v, float* red) {
  v = warpSum(v);
  __syncthreads();
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float r = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) r += red[w];
  return r;
}

// grid (B * Hq, splits). Each block: keys [t0, t1) of one (batch row, query head); writes its unnormalized
// accumulator (without the value scale), its running max and its softmax denominator to the workspace.
template <bool Vec16>
__global__ void __launch_bounds__(kThreads) splitKernel(Fp8AttentionArgs a, std::int64_t chunk, float* ws) {
  extern __shared__ float sm[];
  float* lut = sm;               // 256
  float* qs = lut + 256;         // D
  float* p = qs + a.D;           // kThreads
  float* part = p + kThreads;    // kThreads
  float* red = part + kThreads;  // kWarps
  const int tid = threadIdx.x;
  const std::int64_t bh = blockIdx.x, b = bh / a.Hq, hq = bh % a.Hq, hk = hq / (a.Hq / a.Hkv);
  const int splits = gridDim.y, split = blockIdx.y;
  const std::int64_t t0 = split * chunk, t1 = min(a.L, t0 + chunk);
  for (int i = tid; i < 256; i += kThreads) lut[i] = decodeFp8(static_cast<std::uint8_t>(i), a.format);
  for (std::int64_t d = tid; d < a.D; d += kThreads) qs[d] = a.q[bh * a.D + d] * a.kScale[hk * a.D + d] * a.smScale;
  __syncthreads();
  const std::uint8_t* K = a.k + b * a.kStrideB + hk * a.kStrideH;
  const std::uint8_t* V = a.v + b * a.vStrideB + hk * a.vStrideH;
  const int D = static_cast<int>(a.D);
  const int nsub = kThreads / D, sub = tid / D, dd = tid % D;
  const bool accumulates = sub < nsub;
  float m = -INFINITY, l = 0.0f, acc = 0.0f;
  for (std::int64_t tile = t0; tile < t1; tile += kThreads) {
    const std::int64_t tok = tile + tid;
    float s = -INFINITY;
    if (tok < t1) {
      const std::uint8_t* row = K + tok * a.kStrideT;
      s = 0.0f;
      if constexpr (Vec16) {  // the token's codes in 16-byte loads
        for (int j = 0; j < D; j += 16) {
          const uint4 c = __ldg(reinterpret_cast<const uint4*>(row + j));
          const unsigned words[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const unsigned w = words[k];
            const float* qj = qs + j + 4 * k;
            s += qj[0] * lut[w & 0xFFu];
            s += qj[1] * lut[(w >> 8) & 0xFFu];
            s += qj[2] * lut[(w >> 16) & 0xFFu];
            s += qj[3] * lut[w >> 24];
          }
        }
      } else {
        for (int j = 0; j < D; ++j) s += qs[j] * lut[row[j]];
      }
    }
    const float newM = fmaxf(m, blockMax(s, red));
    const float corr = m == -INFINITY ? 0.0f : expf(m - newM);
    const float e = tok < t1 ? expf(s - newM) : 0.0f;
    p[tid] = e;
    l = l * corr + blockSum(e, red);  // blockSum's barriers also publish p[]
    m = newM;
    if (accumulates) {
      acc *= corr;
      const int n = t1 - tile < kThreads ? static_cast<int>(t1 - tile) : kThreads;
      for (int j = sub; j < n; j += nsub) acc += p[j] * lut[V[(tile + j) * a.vStrideT + dd]];
    }
    __syncthreads();  // p[] is rewritten by the next tile
  }
  part[tid] = accumulates ? acc : 0.0f;
  __syncthreads();
  float* w = ws + (bh * splits + split) * (a.D + 2);
  for (int d = tid; d < D; d += kThreads) {
    float sum = 0.0f;
    for (int s2 = 0; s2 < nsub; ++s2) sum += part[s2 * D + d];
    w[d] = sum;
  }
  if (tid == 0) w[a.D] = m, w[a.D + 1] = l;
}

// grid B * Hq: merges the splits (each rescaled to the common max) and applies the value scale.
__global__ void mergeKernel(Fp8AttentionArgs a, int splits, const float* ws) {
  const std::int64_t bh = blockIdx.x, hq = bh % a.Hq, hk = hq / (a.Hq / a.Hkv);
  const float* w = ws + bh * splits * (a.D + 2);
  float M = -INFINITY;
  for (int s = 0; s < splits; ++s) M = fmaxf(M, w[s * (a.D + 2) + a.D]);
  float denom = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float ms = w[s * (a.D + 2) + a.D];
    if (ms != -INFINITY) denom += w[s * (a.D + 2) + a.D + 1] * expf(ms - M);
  }
  for (std::int64_t d = threadIdx.x; d < a.D; d += blockDim.x) {
    float num = 0.0f;
    for (int s = 0; s < splits; ++s) {
      const float ms = w[s * (a.D + 2) + a.D];
      if (ms != -INFINITY) num += w[s * (a.D + 2) + d] * expf(ms - M);
    }
    a.out[bh * a.D + d] = num / denom * a.vScale[hk * a.D + d];
  }
}

int smCount() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return 80;
  return n > 0 ? n : 80;
}

std::int64_t chunkFor(std::int64_t B, std::int64_t Hq, std::int64_t L) {
  // Enough blocks for two waves over the multiprocessors, each split a whole number of tiles.
  const std::int64_t heads = std::max<std::int64_t>(1, B * Hq);
  const std::int64_t want = std::max<std::int64_t>(1, (2 * smCount() + heads - 1) / heads);
  const std::int64_t tiles = std::max<std::int64_t>(1, (L + kThreads - 1) / kThreads);
  const std::int64_t splits = std::min(want, tiles);
  return ((tiles + splits - 1) / splits) * kThreads;
}

}  // namespace

int fp8AttentionSplits(std::int64_t B, std::int64_t Hq, std::int64_t L) {
  const std::int64_t chunk = chunkFor(B, Hq, L);
  return static_cast<int>(std::max<std::int64_t>(1, (L + chunk - 1) / chunk));
}

std::int64_t fp8AttentionWorkspace(std::int64_t B, std::int64_t Hq, std::int64_t L, std::int64_t D) {
  return B * Hq * fp8AttentionSplits(B, Hq, L) * (D + 2);
}

void fp8DecodeAttention(const Fp8AttentionArgs& a, float* workspace, void* stream) {
  if (a.B == 0 || a.Hq == 0) return;
  auto st = static_cast<cudaStream_t>(stream);
  const std::int64_t chunk = chunkFor(a.B, a.Hq, a.L);
  const int splits = fp8AttentionSplits(a.B, a.Hq, a.L);
  const dim3 grid(static_cast<unsigned>(a.B * a.Hq), static_cast<unsigned>(splits));
  const std::size_t shared = (256 + a.D + 2 * kThreads + kWarps) * sizeof(float);
  const auto aligned16 = [](const void* ptr, std::int64_t s0, std::int64_t s1, std::int64_t s2) {
    return (reinterpret_cast<std::uintptr_t>(ptr) % 16) == 0 && s0 % 16 == 0 && s1 % 16 == 0 && s2 % 16 == 0;
  };
  if (a.D % 16 == 0 && aligned16(a.k, a.kStrideB, a.kStrideH, a.kStrideT)) {
    splitKernel<true><<<grid, kThreads, shared, st>>>(a, chunk, workspace);
  } else {
    splitKernel<false><<<grid, kThreads, shared, st>>>(a, chunk, workspace);
  }
  mergeKernel<<<static_cast<unsigned>(a.B * a.Hq), static_cast<unsigned>(std::min<std::int64_t>(a.D, 256)), 0, st>>>(
      a, splits, workspace);
}

}  // namespace kvscope::kernels::cuda
