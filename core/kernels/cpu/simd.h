// Vectorized CPU kernels: target clones (KVS_CLONES), and hand-written paths (AVX2 + FMA + F16C) chosen at run time.
// Each has a portable twin that computes the same values; tests switch the fast paths off to compare the two on the
// same machine.
#pragma once

// Function multi-versioning: a loop compiled for AVX-512, AVX2 and the baseline, the best picked at load time (GCC;
// plain code under clang and the sanitizers).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define KVS_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define KVS_CLONES
#endif

#if defined(__x86_64__)
#define KVS_HAVE_AVX2_PATHS 1
#define KVS_AVX2 __attribute__((target("avx2,fma,f16c")))
#define KVS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define KVS_VNNI __attribute__((target("avx512vnni,avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#else
#define KVS_HAVE_AVX2_PATHS 0
#define KVS_AVX2
#define KVS_AVX512
#define KVS_VNNI
#endif

#if KVS_HAVE_AVX2_PATHS
#include <immintrin.h>
#endif

namespace kvscope::kernels {

#if KVS_HAVE_AVX2_PATHS
/// The sum of v's eight lanes.
KVS_AVX2 inline float hsum(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}
#endif

/// Whether the AVX2/FMA/F16C paths run: the CPU has them and they are not switched off.
bool avx2Paths();
/// Switches the AVX2 paths off (false) or back on where the CPU has them (true). For tests and measurements.
void setAvx2Paths(bool on);
/// Whether the AVX-512 (F, BW, VL, DQ) paths run: the CPU has them, and they and the AVX2 paths are switched on.
bool avx512Paths();
/// Switches the AVX-512 paths off (false; the AVX2 paths then run where they would) or back on.
void setAvx512Paths(bool on);
/// Whether the AVX-512 VNNI paths run: the CPU has VNNI and the AVX-512 paths are on.
bool vnniPaths();

}  // namespace kvscope::kernels
