// llama.cpp's K/V rotation (kernels/cpu/hadamard.h): the fast transform against the explicit matrix built as
// ggml_gen_hadamard builds it, H² = I and norms kept, and llama.cpp's rule for the rotation size per head size.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/hadamard.h"
#include "test_helpers.h"

using namespace kvscope;

namespace {

// ggml_gen_hadamard: H[0][0] = 1 / sqrt(n), then Sylvester's doubling [[H, H], [H, -H]].
std::vector<float> explicitHadamard(int n) {
  std::vector<float> h(static_cast<std::size_t>(n) * n);
  h[0] = static_cast<float>(1.0 / std::sqrt(static_cast<float>(n)));
  for (int s = 1; s < n; s *= 2)
    for (int i = 0; i < s; ++i)
      for (int j = 0; j < s; ++j) {
        const float v = h[static_cast<std::size_t>(i) * n + j];
        h[static_cast<std::size_t>(i + s) * n + j] = v;
        h[static_cast<std::size_t>(i) * n + j + s] = v;
        h[static_cast<std::size_t>(i + s) * n + j + s] = -v;
      }
  return h;
}

}  // namespace

TEST(Hadamard, FastTransformIsTheExplicitMatrix) {
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 2.0f);
  for (int n : {64, 128, 256}) {
    const auto h = explicitHadamard(n);
    std::vector<float> x(static_cast<std::size_t>(3 * n));
    for (auto& v : x) v = g(rng);
    std::vector<float> y = x;
    kernels::hadamardRotate(y.data(), static_cast<std::int64_t>(y.size()), n);
    for (int c = 0; c < 3; ++c) {
      double norm = 0, normY = 0;
      for (int i = 0; i < n; ++i) {
        double ref = 0;
        for (int k = 0; k < n; ++k) ref += static_cast<double>(h[static_cast<std::size_t>(i) * n + k]) * x[c * n + k];
        EXPECT_NEAR(y[c * n + i], ref, 1e-5 * std::sqrt(n)) << "n " << n << " chunk " << c << " row " << i;
        norm += static_cast<double>(x[c * n + i]) * x[c * n + i];
        normY += static_cast<double>(y[c * n + i]) * y[c * n + i];
      }
      EXPECT_NEAR(normY, norm, 1e-5 * norm);  // orthonormal
    }
    std::vector<float> back = y;  // H² = I
    kernels::hadamardRotate(back.data(), static_cast<std::int64_t>(back.size()), n);
    for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(back[i], x[i], 1e-5f) << i;
  }
  std::vector<float> x(96);
  EXPECT_ERROR_CODE(kernels::hadamardRotate(x.data(), 96, 64), ErrorCode::Internal);  // not whole chunks
  EXPECT_ERROR_CODE(kernels::hadamardRotate(x.data(), 96, 48), ErrorCode::Internal);  // not a power of two
}

TEST(Hadamard, LlamaCppRotationSizes) {
  // Keys: the largest power of two from 64 that divides the head size; values: 64; neither off multiples of 64.
  EXPECT_EQ(kernels::hadamardSizeForKeys(64), 64);
  EXPECT_EQ(kernels::hadamardSizeForKeys(128), 128);
  EXPECT_EQ(kernels::hadamardSizeForKeys(192), 64);
  EXPECT_EQ(kernels::hadamardSizeForKeys(256), 256);
  EXPECT_EQ(kernels::hadamardSizeForKeys(96), 0);
  EXPECT_EQ(kernels::hadamardSizeForKeys(80), 0);
  EXPECT_EQ(kernels::hadamardSizeForValues(128), 64);
  EXPECT_EQ(kernels::hadamardSizeForValues(64), 64);
  EXPECT_EQ(kernels::hadamardSizeForValues(96), 0);
}
