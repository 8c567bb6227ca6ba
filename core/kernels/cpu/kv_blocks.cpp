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

const char* kvRowHistogram(std::uint32_t type, const std::uint8_t* row, std::int64_t n, std::int64_t* scaleBins,
                           std::int64_t* codeBins) {
  if (!kvcodec::isKvType(type)) unsupported(type);
  checkWhole(type, n);
  const auto scale = [&](float v) { ++scaleBins[(floatBits(v) >> 23) & 0xFFu]; };
  if (kvcodec::isFp4(type)) {
    const int bv = kvcodec::blockValues(type);
    for (std::int64_t i = 0; i < n / 2; ++i) {
      ++codeBins[row[i] & 0xF];
      ++codeBins[row[i] >> 4];
    }
    const bool e4m3 = type == kTypeNvfp4 || type == kTypeNvfp4FourOverSix;
    for (std::int64_t b = 0; b < n / bv; ++b) {
      const std::uint8_t s = row[n / 2 + b];
      scale(e4m3 ? decodeE4M3FN(s) : (s == 0 ? 0.0f : bitsFloat(static_cast<std::uint32_t>(s) << 23)));
    }
    return e4m3 ? "E4M3 block scales" : (type == kTypeMxfp4 ? "E8M0 block scales" : "UE8M0 group scales");
  }
  if (kvcodec::isTurboQuant(type)) {
    if (type == kTypeTqKeyFp8) return "";  // e4m3 without a scale
    const int b = kvcodec::tqBits(type);
    for (std::int64_t i = 0; i < n; ++i) ++codeBins[kvcodec::unpackBits(row, i, b)];
    scale(kvcodec::halfValue(kvcodec::load16(row + n * b / 8)));
    return type == kTypeTqKey3 || type == kTypeTqKey4 ? "fp16 key norms" : "fp16 value scales";
  }
  if (kvcodec::isPerTokenHead(type)) {
    scale(bitsFloat(kvcodec::load32(row + n)));
    return "float32 scales per token and head";
  }
  if (kvcodec::isInt4PerTokenHead(type)) {
    for (std::int64_t i = 0; i < n / 2; ++i) {
      ++codeBins[row[i] & 0xF];
      ++codeBins[row[i] >> 4];
    }
    scale(bitsFloat(kvcodec::load32(row + n / 2) & ~0xFu));
    return "float32 scales per token and head";
  }
  if (kvcodec::isHalfWidth(type)) return "";
  const int bytes = kvcodec::blockBytes(type);  // ggml's blocks of 32: the fp16 d first
  for (std::int64_t b = 0; b < n / 32; ++b) scale(kvcodec::halfValue(kvcodec::load16(row + b * bytes)));
  return "fp16 block scales";
}

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
