// Quantizers for the formats kvscope writes (model/weight.h: Weight::requantized), in the `gguf` Python package's
// arithmetic (gguf.quants), float32 throughout: the block codecs shared with the CUDA kernels
// (kernels/kv_block_codec.h). Built without contraction into fused multiply-adds (CMake), like numpy's separate
// roundings.

#include "kernels/cpu/blocks.h"
#include "kernels/kv_block_codec.h"
#include "util/error.h"

namespace kvscope::kernels {

void quantizeRows(std::uint32_t type, const float* src, std::int64_t n, std::uint8_t* dst) {
  if (!quantizable(type))
    throw Error(ErrorCode::Internal, "quantizeRows: kvscope writes Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 only");
  const BlockLayout L = blockLayout(type);
  if (n % L.values != 0) throw Error(ErrorCode::Internal, "quantizeRows: not whole blocks of 32");
  for (std::int64_t i = 0; i < n / L.values; ++i) kvcodec::encodeBlock(type, src + i * L.values, dst + i * L.bytes);
}

}  // namespace kvscope::kernels
