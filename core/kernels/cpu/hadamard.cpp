#include "kernels/cpu/hadamard.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace kvscope::kernels {

int hadamardSizeForKeys(int headDim) {
  if (headDim <= 0 || headDim % 64 != 0) return 0;
  int n = 64;
  while (headDim % (2 * n) == 0) n *= 2;
  return n;
}

int hadamardSizeForValues(int headDim) { return headDim > 0 && headDim % 64 == 0 ? 64 : 0; }

void hadamardRotate(float* x, std::int64_t count, int n) {
  if (n < 1 || (n & (n - 1)) != 0 || count % n != 0)
    throw std::invalid_argument("hadamardRotate: chunks of " + std::to_string(n) + " over " + std::to_string(count) +
                                " values (a power of two that divides the count)");
  // ggml_gen_hadamard scales its first entry by 1.0 / sqrtf(n) in float32.
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<float>(n)));
  for (float* c = x; c < x + count; c += n) {
    for (int h = 1; h < n; h *= 2)
      for (int i = 0; i < n; i += 2 * h)
        for (int j = i; j < i + h; ++j) {
          const float a = c[j], b = c[j + h];
          c[j] = a + b;
          c[j + h] = a - b;
        }
    for (int i = 0; i < n; ++i) c[i] *= scale;
  }
}

}  // namespace kvscope::kernels
