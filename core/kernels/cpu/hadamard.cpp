#include "kernels/cpu/hadamard.h"

#include <string>

#include "kernels/kv_block_codec.h"
#include "util/error.h"

namespace kvscope::kernels {

int hadamardSizeForKeys(int headDim) {
  if (headDim <= 0 || headDim % 64 != 0) return 0;
  int n = 64;
  while (headDim % (2 * n) == 0) n *= 2;
  return n;
}

int hadamardSizeForValues(int headDim) {
  return headDim > 0 && headDim % 64 == 0 ? 64 : 0;
}

void hadamardRotate(float* x, std::int64_t count, int n) {
  if (n < 1 || (n & (n - 1)) != 0 || count % n != 0)
    throw Error(ErrorCode::Internal, "hadamardRotate: chunks of " + std::to_string(n) + " over " +
                                         std::to_string(count) + " values (a power of two that divides the count)");
  kvcodec::hadamardChunks(x, count, n);
}

}  // namespace kvscope::kernels
