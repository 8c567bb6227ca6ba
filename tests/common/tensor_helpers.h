// Tensor helpers shared by the C++ tests that link LibTorch (unit, parity and GPU tests).
#pragma once

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/fp8_tensor.h"
#include "model/safetensors.h"

namespace kvscope::testutil {

/// Same shape, dtype and values, bit for bit, NaN compared as NaN (fp8's frozen scale turns overflows into NaN).
inline bool sameBits(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() && at::equal(a.isnan(), b.isnan()) &&
         at::equal(at::nan_to_num(a), at::nan_to_num(b));
}

/// Standard-normal states [B, H, T, D] in `dt` (drawn in float32, from LibTorch's global generator).
inline at::Tensor randn(std::int64_t B, std::int64_t H, std::int64_t T, std::int64_t D,
                        at::ScalarType dt = at::kFloat) {
  return at::randn({B, H, T, D}).to(dt);
}

/// Standard-normal float32 states [B, H, T, D] drawn after at::manual_seed(seed): each seed its own draw.
inline at::Tensor drawn(std::int64_t seed, std::int64_t B, std::int64_t H, std::int64_t T, std::int64_t D) {
  at::manual_seed(static_cast<std::uint64_t>(seed));
  return randn(B, H, T, D);
}

/// States [2, 3, S, 64] in `dt` for the int codecs, drawn after at::manual_seed(seed): head 1 scaled by 20 (a wide
/// range) and token 5 constant (zero-range groups along the head dim).
inline at::Tensor codecStates(std::uint64_t seed, at::ScalarType dt, std::int64_t S = 64) {
  at::manual_seed(seed);
  at::Tensor x = at::randn({2, 3, S, 64});
  x.select(1, 1).mul_(20);
  x.select(2, 5).fill_(0.25f);
  return x.to(dt);
}

/// A copy of tensor `name` of a safetensors file (F32, BF16, F16 or I64; any other dtype throws).
inline at::Tensor loadTensor(const model::SafetensorsFile& f, const std::string& name) {
  const auto& e = f.at(name);
  at::ScalarType t = at::kFloat;
  if (e.dtype == "BF16")
    t = at::kBFloat16;
  else if (e.dtype == "F16")
    t = at::kHalf;
  else if (e.dtype == "I64")
    t = at::kLong;
  else if (e.dtype == "U8")
    t = at::kByte;
  else if (e.dtype != "F32")
    throw std::runtime_error("unexpected dtype " + e.dtype);
  return at::from_blob(const_cast<std::uint8_t*>(e.data), e.shape, at::TensorOptions().dtype(t)).clone();
}

}  // namespace kvscope::testutil

/// Skips the test where LibTorch sees no CUDA device or kvscope's kernels cannot run on it.
#define KVS_NEED_CUDA()                                                                               \
  do {                                                                                                \
    if (!at::hasCUDA() || !::kvscope::kernels::cudaKernelsUsable()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)
