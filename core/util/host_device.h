// KVS_HD: a function the CPU code and the CUDA kernels share (host and device under nvcc, inline elsewhere).
#pragma once

#if defined(__CUDACC__)
#define KVS_HD __host__ __device__ __forceinline__
#else
#define KVS_HD inline
#endif
