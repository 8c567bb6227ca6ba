// Vectorized CPU kernels and the one switch that picks their instruction set. Each kernel has a portable twin that
// computes the same values, and where a hand-written AVX2 or AVX-512 path exists, the same values again; the path
// that runs is `isa()`: the best this CPU has, or the one KVSCOPE_ISA=scalar|avx2|avx512 asks for (read once, at the
// first question), so that one machine can run, test and time every path it can execute.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

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

/// The instruction sets the kernels have paths for, in order: each includes the ones before it.
enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2 };

/// The path the kernels run now.
Isa isa();
/// The best path this CPU can run (AVX2 means AVX2 + FMA + F16C; AVX-512 means F, BW, VL and DQ, with the OS saving
/// the registers).
Isa bestIsa();
/// Every path this CPU can run, the portable one first.
std::vector<Isa> runnableIsas();
/// Runs `p` from now on, or the best this CPU has where it lacks `p`. For tests and measurements (IsaScope).
void setIsa(Isa p);
/// "scalar", "avx2" or "avx512": KVSCOPE_ISA's spellings.
const char* isaName(Isa p);
/// KVSCOPE_ISA's value as a path; false where it is not one of the three names.
bool parseIsa(const std::string& name, Isa& out);
/// What KVSCOPE_ISA asked for that cannot run, in one line ("" where it is unset or honoured): an unknown name (then
/// `*unknownName` is set true, where given), or a path this CPU lacks. The kernels then run the best the CPU has
/// (kvscope-cli refuses an unknown name: exit 2).
std::string isaRequestProblem(bool* unknownName = nullptr);
/// The path in use and why, for the model card, `bench` and `doctor`: "avx512 (VNNI; the best this CPU has)",
/// "avx2 (KVSCOPE_ISA=avx2; this CPU has avx512)".
std::string isaSummary();

/// Runs `p` while it lives (clamped to what the CPU has), then the path that ran before.
class IsaScope {
 public:
  explicit IsaScope(Isa p) : before_(isa()) { setIsa(p); }
  ~IsaScope() { setIsa(before_); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;

 private:
  Isa before_;
};

/// Whether the AVX2/FMA/F16C paths run.
inline bool avx2Paths() {
  return isa() >= Isa::Avx2;
}
/// Whether the AVX-512 (F, BW, VL, DQ) paths run.
inline bool avx512Paths() {
  return isa() >= Isa::Avx512;
}
/// Whether the AVX-512 VNNI paths run: the CPU has VNNI and the AVX-512 paths run.
bool vnniPaths();

// Rows of activations in tiles of four, then the one to three left: run(std::integral_constant<int, MT>, first row).
template <class Run>
inline void forTiles(std::int64_t m, Run&& run) {
  std::int64_t i = 0;
  for (; i + 4 <= m; i += 4) run(std::integral_constant<int, 4>{}, i);
  switch (m - i) {
    case 3:
      run(std::integral_constant<int, 3>{}, i);
      break;
    case 2:
      run(std::integral_constant<int, 2>{}, i);
      break;
    case 1:
      run(std::integral_constant<int, 1>{}, i);
      break;
    default:
      break;
  }
}

#if KVS_HAVE_AVX2_PATHS
/// The sum of v's eight lanes.
KVS_AVX2 inline float hsum(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}
#endif

}  // namespace kvscope::kernels

// A loop written once (a function `name##Body`, always inlined) and compiled three times: for x86-64-v4 (AVX-512),
// for AVX2 and for the baseline; `name` calls the one isa() picks, at each call. The compiler vectorizes each copy
// for its own instruction set (GCC; under clang and the sanitizers the three are the one plain loop). The bodies'
// files set their floating-point options in core/CMakeLists.txt: the copies compute the same values.
#define KVS_BODY __attribute__((always_inline)) inline
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define KVS_MULTIVERSION(ret, name, params, args)                 \
  __attribute__((target("arch=x86-64-v4"))) ret name##V4 params { \
    return name##Body args;                                       \
  }                                                               \
  __attribute__((target("avx2"))) ret name##V3 params {           \
    return name##Body args;                                       \
  }                                                               \
  ret name params {                                               \
    switch (::kvscope::kernels::isa()) {                          \
      case ::kvscope::kernels::Isa::Avx512:                       \
        return name##V4 args;                                     \
      case ::kvscope::kernels::Isa::Avx2:                         \
        return name##V3 args;                                     \
      default:                                                    \
        return name##Body args;                                   \
    }                                                             \
  }
#else
#define KVS_MULTIVERSION(ret, name, params, args) \
  ret name params {                               \
    return name##Body args;                       \
  }
#endif
