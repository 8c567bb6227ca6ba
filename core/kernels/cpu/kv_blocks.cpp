// llama.cpp's KV cache block types (kv_blocks.h): the checked entry points of the codecs shared with the CUDA
// kernels (kernels/kv_block_codec.h). Built without contraction into fused multiply-adds (CMake), as the reference
// quantizers round each operation on its own.
#include "kernels/cpu/kv_blocks.h"

#include <string>

#include "kernels/kv_block_codec.h"
#include "util/error.h"

namespace kvscope::kernels {

namespace {

[[noreturn]] void unsupported(std::uint32_t type) {
  throw Error(ErrorCode::Internal,
              "kv cache blocks: ggml type " + std::to_string(type) +
                  " is not a KV cache row type kvscope writes (f16, bf16, q8_0, q4_0, q4_1, q5_0, "
                  "q5_1, iq4_nl, nvfp4, nvfp4 4over6, mxfp4, ultraquant, int8 / fp8 / int4 per token and head, "
                  "turboquant keys and values)");
}

void checkWhole(std::uint32_t type, std::int64_t n) {
  const int block = kvcodec::blockValues(type);
  if (n % block != 0)
    throw Error(ErrorCode::Internal,
                "kv cache blocks: " + std::to_string(n) + " values are not whole blocks of " + std::to_string(block));
}

}  // namespace

int iq4NlNearestLevel(float x) {
  return kvcodec::iq4NlNearest(x);
}

std::int64_t kvRowBytes(std::uint32_t type, std::int64_t n) {
  if (!kvcodec::isKvType(type)) unsupported(type);
  if (!kvcodec::isHalfWidth(type)) checkWhole(type, n);
  return kvcodec::rowBytes(type, n);
}

std::int64_t kvRowScaleBytes(std::uint32_t type, std::int64_t n) {
  if (!kvcodec::isKvType(type)) unsupported(type);
  checkWhole(type, n);
  return kvcodec::rowScaleBytes(type, n);
}

void quantizeKvRow(std::uint32_t type, const float* src, std::int64_t n, std::uint8_t* dst, float scale) {
  if (!kvcodec::isKvType(type)) unsupported(type);
  if (!kvcodec::isHalfWidth(type)) checkWhole(type, n);
  kvcodec::encodeRow(type, src, n, dst, scale);
}

void dequantizeKvRow(std::uint32_t type, const std::uint8_t* src, std::int64_t n, float* dst, float scale) {
  if (!kvcodec::isKvType(type)) unsupported(type);
  if (!kvcodec::isHalfWidth(type)) checkWhole(type, n);
  kvcodec::decodeRow(type, src, n, dst, scale);
}

}  // namespace kvscope::kernels
