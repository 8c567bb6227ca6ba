#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/fp8_cuda.h"
#include "kernels/fp8.h"

namespace kvscope::kernels::cuda {
namespace {

template <class T>
__device__ __forceinline__ float load(const T* p);
template <>
__device__ __forceinline__ float load<float>(const float* p) { return *p; }
template <>
__device__ __forceinline__ float load<__nv_bfloat16>(const __nv_bfloat16* p) { return __bfloat162float(*p); }
template <>
__device__ __forceinline__ float load<__half>(const __half* p) { return __half2float(*p); }

template <class T>
__device__ __forceinline__ void store(T* p, float v);
template <>
__device__ __forceinline__ void store<float>(float* p, float v) { *p = v; }
template <>
__device__ __forceinline__ void store<__nv_bfloat16>(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ void store<__half>(__half* p, float v) { *p = __float2half_rn(v); }

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
      encodeKernel<<<g, 256, 0, st>>>(static_cast<const __nv_bfloat16*>(x), xStride, scale, scaleRows, period, n,
                                      out, outStride, format, saturate, counts);
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
