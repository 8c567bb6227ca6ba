#include "kernels/cpu/simd.h"

#include <atomic>
#include <cstdlib>

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

bool cpuHasVnni() {
#if KVS_HAVE_AVX2_PATHS
  return cpuHasAvx512() && __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

Isa best() {
  static const Isa b = !cpuHasAvx2() ? Isa::Scalar : cpuHasAvx512() ? Isa::Avx512 : Isa::Avx2;
  return b;
}

const char* envIsa() {
  const char* v = std::getenv("KVSCOPE_ISA");
  return v && *v ? v : nullptr;
}

// KVSCOPE_ISA's path where it names one the CPU runs, else the best.
Isa initial() {
  Isa asked;
  if (const char* v = envIsa(); v && parseIsa(v, asked) && asked <= best()) return asked;
  return best();
}

std::atomic<int>& current() {
  static std::atomic<int> c{static_cast<int>(initial())};
  return c;
}

}  // namespace

Isa isa() {
  return static_cast<Isa>(current().load(std::memory_order_relaxed));
}

Isa bestIsa() {
  return best();
}

std::vector<Isa> runnableIsas() {
  std::vector<Isa> out;
  for (Isa p : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    if (p <= best()) out.push_back(p);
  return out;
}

void setIsa(Isa p) {
  current().store(static_cast<int>(p <= best() ? p : best()), std::memory_order_relaxed);
}

const char* isaName(Isa p) {
  switch (p) {
    case Isa::Avx512:
      return "avx512";
    case Isa::Avx2:
      return "avx2";
    default:
      return "scalar";
  }
}

bool parseIsa(const std::string& name, Isa& out) {
  for (Isa p : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    if (name == isaName(p)) {
      out = p;
      return true;
    }
  return false;
}

std::string isaRequestProblem(bool* unknownName) {
  const char* v = envIsa();
  Isa asked = Isa::Scalar;
  const bool unknown = v && !parseIsa(v, asked);
  if (unknownName) *unknownName = unknown;
  if (!v) return "";
  if (unknown) return std::string("KVSCOPE_ISA=") + v + " is not one of scalar, avx2, avx512";
  if (asked > best()) return std::string("KVSCOPE_ISA=") + v + ": this CPU has no " + isaName(asked) + " path";
  return "";
}

std::string isaSummary() {
  const Isa now = isa();
  const char* v = envIsa();
  std::string why;
  if (const std::string problem = isaRequestProblem(); !problem.empty())
    why = problem;
  else if (now == best())
    why = "the best this CPU has";
  else if (v && std::string(v) == isaName(now))
    why = std::string("KVSCOPE_ISA=") + v + "; this CPU has " + isaName(best());
  else
    why = std::string("forced; this CPU has ") + isaName(best());
  return std::string(isaName(now)) + " (" + (vnniPaths() ? "VNNI; " : "") + why + ")";
}

bool vnniPaths() {
  static const bool has = cpuHasVnni();
  return has && avx512Paths();
}

}  // namespace kvscope::kernels
