#include "kernels/cpu/simd.h"

#include <atomic>

#if KVS_HAVE_AVX2_PATHS
#include <cpuid.h>
#endif

namespace kvscope::kernels {
namespace {

bool cpuHasAvx2() {
#if KVS_HAVE_AVX2_PATHS
  // CPUID leaf 1: FMA (ECX 12), OSXSAVE (27), AVX (28), F16C (29); leaf 7: AVX2 (EBX 5); XCR0: the OS saves the
  // SSE and AVX registers (bits 1, 2).
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const unsigned need1 = (1u << 12) | (1u << 27) | (1u << 28) | (1u << 29);
  if ((c & need1) != need1) return false;
  unsigned xlo = 0, xhi = 0;
  __asm__("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  if ((xlo & 6u) != 6u) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (b & (1u << 5)) != 0;
#else
  return false;
#endif
}

bool cpuHasAvx512() {
#if KVS_HAVE_AVX2_PATHS
  // GCC's CPU model checks CPUID and that the OS saves the ZMM and mask registers (XCR0 bits 5..7).
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

std::atomic<bool>& enabled512() {
  static std::atomic<bool> on{cpuHasAvx512()};
  return on;
}

std::atomic<bool>& enabled() {
  static std::atomic<bool> on{cpuHasAvx2()};
  return on;
}

}  // namespace

bool avx2Paths() {
  return enabled().load(std::memory_order_relaxed);
}

void setAvx2Paths(bool on) {
  enabled().store(on && cpuHasAvx2(), std::memory_order_relaxed);
}

bool avx512Paths() {
  return avx2Paths() && enabled512().load(std::memory_order_relaxed);
}

bool vnniPaths() {
#if KVS_HAVE_AVX2_PATHS
  static const bool has = cpuHasAvx512() && __builtin_cpu_supports("avx512vnni");
  return has && avx512Paths();
#else
  return false;
#endif
}

void setAvx512Paths(bool on) {
  enabled512().store(on && cpuHasAvx512(), std::memory_order_relaxed);
}

}  // namespace kvscope::kernels
