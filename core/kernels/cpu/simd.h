// Vectorized CPU kernels: target clones (KVS_CLONES), and hand-written paths (AVX2 + FMA + F16C) chosen at run time. Each has a portable twin that
// computes the same values; tests switch the fast paths off to compare the two on the same machine.
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
#else
#define KVS_HAVE_AVX2_PATHS 0
#define KVS_AVX2
#endif

namespace kvscope::kernels {

/// Whether the AVX2/FMA/F16C paths run: the CPU has them and they are not switched off.
bool avx2Paths();
/// Switches the AVX2 paths off (false) or back on where the CPU has them (true). For tests and measurements.
void setAvx2Paths(bool on);

}  // namespace kvscope::kernels
