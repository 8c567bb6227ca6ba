#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/fp8_cuda.h"
#include "kernels/fp8.h"

namespace kvscope::kernels::cuda {
namespace {

template <class T>
__device__ __forceinline__ float load(const T* p);
template <>
__device__ __forceinline__ float load<float>(const float* p) {
  return *p;
}
template <>
__device__ __forceinline__ float load<__nv_bfloat16>(const __nv_bfloat16* p) {
  return __bfloat162float(*p);
}
template <>
__device__ __forceinline__ float load<__half>(const __half* p) {
  return __half2float(*p);
}

template <class T>
__device__ __forceinline__ void store(T* p, float v);
template <>
__device__ __forceinline__ void store<float>(float* p, float v) {
  *p = v;
}
template <>
__device__ __forceinline__ void store<__nv_bfloat16>(__nv_bfloat16* p, float v) {
  *p = __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ void store<__half>(__half* p, float v) {
  *p = __float2half_rn(v);
}

template <class T>
__global__ void encodeKernel(const T* x, std::int64_t xStride, const float* scale, std::int64_t scaleRows,
                             std::int64_t period, std::int64_t n, std::uint8_t* out, std::int64_t outStride,
                             Fp8Format format, bool saturate, unsigned long long* counts) {
  const std::int64_t r = blockIdx.y;
  const float* s = scale + (r % scaleRows) * period;
  const float kMax = fp8Max(format);
  unsigned long long overflow = 0, nonFinite = 0;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float a = __fdiv_rn(load(x + r * xStride + i), s[i % period]);
    overflow += fabsf(a) > kMax;
    if (saturate) a = a > kMax ? kMax : (a < -kMax ? -kMax : a);
    const std::uint8_t c = encodeFp8(a, format);
    nonFinite += fp8NonFinite(c, format);
    out[r * outStride + i] = c;
  }
  if (counts && (overflow | nonFinite)) {
    atomicAdd(counts, overflow);
    atomicAdd(counts + 1, nonFinite);
  }
}

template <class T>
__global__ void decodeKernel(const std::uint8_t* q, std::int64_t qStride, const float* scale, std::int64_t scaleRows,
                             std::int64_t period, std::int64_t n, T* out, std::int64_t outStride, Fp8Format format) {
  const std::int64_t r = blockIdx.y;
  const float* s = scale + (r % scaleRows) * period;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    store(out + r * outStride + i, __fmul_rn(decodeFp8(q[r * qStride + i], format), s[i % period]));
}

// The bulk decode: 16 codes a thread from one 16-byte load, converted two at a time by the hardware's fp8x2 -> half2
// conversion (exact: every e4m3fn and e5m2 value is a half), widened to float and multiplied by the scale in float32
// (the same product as decodeFp8(c) * s, so the results equal the scalar kernel's), stored as 16-byte vectors.
template <class T>
__device__ __forceinline__ void store16(T* out, const float (&v)[16]);
template <>
__device__ __forceinline__ void store16<float>(float* out, const float (&v)[16]) {
  float4* o = reinterpret_cast<float4*>(out);
#pragma unroll
  for (int k = 0; k < 4; ++k) o[k] = make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
}
template <>
__device__ __forceinline__ void store16<__nv_bfloat16>(__nv_bfloat16* out, const float (&v)[16]) {
  __nv_bfloat162 h[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) h[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
  uint4* o = reinterpret_cast<uint4*>(out);
  const uint4* src = reinterpret_cast<const uint4*>(h);
  o[0] = src[0];
  o[1] = src[1];
}
template <>
__device__ __forceinline__ void store16<__half>(__half* out, const float (&v)[16]) {
  __half2 h[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) h[k] = __floats2half2_rn(v[2 * k], v[2 * k + 1]);
  uint4* o = reinterpret_cast<uint4*>(out);
  const uint4* src = reinterpret_cast<const uint4*>(h);
  o[0] = src[0];
  o[1] = src[1];
}

template <class T, __nv_fp8_interpretation_t Kind>
__global__ void __launch_bounds__(256)
    decodeKernel16(const std::uint8_t* q, std::int64_t qStride, const float* scale, std::int64_t scaleRows,
                   std::int64_t period, std::int64_t n16, T* out, std::int64_t outStride) {
  const std::int64_t r = blockIdx.y;
  const float* s = scale + (r % scaleRows) * period;
  const uint4* qr = reinterpret_cast<const uint4*>(q + r * qStride);
  T* orow = out + r * outStride;
  const std::int64_t p16 = period / 16;
  for (std::int64_t v = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; v < n16;
       v += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const uint4 c = __ldg(qr + v);
    const float4* sv = reinterpret_cast<const float4*>(s + (v % p16) * 16);
    float sc[16];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float4 f = __ldg(sv + k);
      sc[4 * k] = f.x, sc[4 * k + 1] = f.y, sc[4 * k + 2] = f.z, sc[4 * k + 3] = f.w;
    }
    const unsigned words[4] = {c.x, c.y, c.z, c.w};
    float vals[16];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const auto pair = static_cast<__nv_fp8x2_storage_t>(words[k / 2] >> (16 * (k % 2)));
      const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, Kind)));
      vals[2 * k] = __fmul_rn(f.x, sc[2 * k]);
      vals[2 * k + 1] = __fmul_rn(f.y, sc[2 * k + 1]);
    }
    store16(orow + v * 16, vals);
  }
}

bool aligned16(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0;
}

dim3 grid(std::int64_t rows, std::int64_t n) {
  const std::int64_t blocks = (n + 255) / 256;
  return dim3(static_cast<unsigned>(blocks < 1024 ? (blocks > 0 ? blocks : 1) : 1024), static_cast<unsigned>(rows));
}

}  // namespace

void fp8Encode(ElemType type, const void* x, std::int64_t xStride, const float* scale, std::int64_t scaleRows,
               std::int64_t period, std::int64_t rows, std::int64_t n, std::uint8_t* out, std::int64_t outStride,
               Fp8Format format, bool saturate, unsigned long long* counts, void* stream) {
  if (rows == 0 || n == 0) return;
  auto st = static_cast<cudaStream_t>(stream);
  const dim3 g = grid(rows, n);
  switch (type) {
    case ElemType::F32:
      encodeKernel<<<g, 256, 0, st>>>(static_cast<const float*>(x), xStride, scale, scaleRows, period, n, out,
                                      outStride, format, saturate, counts);
      break;
    case ElemType::BF16:
      encodeKernel<<<g, 256, 0, st>>>(static_cast<const __nv_bfloat16*>(x), xStride, scale, scaleRows, period, n, out,
                                      outStride, format, saturate, counts);
      break;
    case ElemType::F16:
      encodeKernel<<<g, 256, 0, st>>>(static_cast<const __half*>(x), xStride, scale, scaleRows, period, n, out,
                                      outStride, format, saturate, counts);
      break;
  }
}

void fp8Decode(ElemType type, const std::uint8_t* q, std::int64_t qStride, const float* scale, std::int64_t scaleRows,
               std::int64_t period, std::int64_t rows, std::int64_t n, void* out, std::int64_t outStride,
               Fp8Format format, void* stream) {
  if (rows == 0 || n == 0) return;
  auto st = static_cast<cudaStream_t>(stream);
  const std::int64_t esize = type == ElemType::F32 ? 4 : 2;
  if (n % 16 == 0 && period % 16 == 0 && qStride % 16 == 0 && (outStride * esize) % 16 == 0 && aligned16(q) &&
      aligned16(out) && aligned16(scale) && rows <= 65535) {
    // Enough blocks to fill the device a few times over; the grid-stride loop covers the rest.
    std::int64_t blocks = (n / 16 + 255) / 256;
    const std::int64_t cap = std::max<std::int64_t>(1, 4096 / rows);
    const dim3 g(static_cast<unsigned>(std::min(blocks, cap)), static_cast<unsigned>(rows));
    const bool e4 = format == Fp8Format::E4M3FN;
#define KVS_DECODE16(TYPE)                                                                                   \
  (e4 ? decodeKernel16<TYPE, __NV_E4M3>                                                                      \
       <<<g, 256, 0, st>>>(q, qStride, scale, scaleRows, period, n / 16, static_cast<TYPE*>(out), outStride) \
      : decodeKernel16<TYPE, __NV_E5M2>                                                                      \
       <<<g, 256, 0, st>>>(q, qStride, scale, scaleRows, period, n / 16, static_cast<TYPE*>(out), outStride))
    switch (type) {
      case ElemType::F32:
        KVS_DECODE16(float);
        break;
      case ElemType::BF16:
        KVS_DECODE16(__nv_bfloat16);
        break;
      case ElemType::F16:
        KVS_DECODE16(__half);
        break;
    }
#undef KVS_DECODE16
    return;
  }
  const dim3 g = grid(rows, n);
  switch (type) {
    case ElemType::F32:
      decodeKernel<<<g, 256, 0, st>>>(q, qStride, scale, scaleRows, period, n, static_cast<float*>(out), outStride,
                                      format);
      break;
    case ElemType::BF16:
      decodeKernel<<<g, 256, 0, st>>>(q, qStride, scale, scaleRows, period, n, static_cast<__nv_bfloat16*>(out),
                                      outStride, format);
      break;
    case ElemType::F16:
      decodeKernel<<<g, 256, 0, st>>>(q, qStride, scale, scaleRows, period, n, static_cast<__half*>(out), outStride,
                                      format);
      break;
  }
}

bool deviceAvailable() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

}  // namespace kvscope::kernels::cuda
