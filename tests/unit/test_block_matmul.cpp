// The block-format weight kernels (kernels/cpu/blocks.h, block_matmul.h, model/weight.h) against the dequantized
// matrix multiplied in double: every type kvscope keeps in memory, activation rows 1..17 (the tiles of four and the
// one to three left, and the GEMM path past Weight::kKernelRows), odd row counts, tails in the float types, the
// AVX-512, AVX2 and portable paths (on a CPU without AVX-512 the first runs the AVX2 path again).
//
// Stated tolerance: |y - ref| <= 1e-5 * sum_k |x_k| * max_k |w_rk| per output. Float32 accumulation over these
// lengths stays near 1e-6 of that; one wrong quant step (one weight off by its scale) is >= 2e-4 of it.
#include <ATen/ATen.h>
#include <c10/util/Half.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>

#include "kernels/cpu/block_matmul.h"
#include "kernels/cpu/blocks.h"
#include "kernels/cpu/packed_matmul.h"
#include "kernels/cpu/simd.h"
#include "model/llama.h"
#include "model/weight.h"
#include "random_model.h"
#include "test_helpers.h"

using namespace kvscope;
using kernels::GgmlType;

namespace {

struct Case {
  GgmlType type;
  std::int64_t cols;
};

const Case kCases[] = {{GgmlType::F32, 45},   {GgmlType::F16, 77},   {GgmlType::BF16, 40},  {GgmlType::Q4_0, 96},
                       {GgmlType::Q4_1, 64},  {GgmlType::Q5_0, 160}, {GgmlType::Q5_1, 96},  {GgmlType::Q8_0, 128},
                       {GgmlType::Q4_K, 512}, {GgmlType::Q5_K, 256}, {GgmlType::Q6_K, 512}, {GgmlType::MXFP4, 96}};

void putHalf(std::uint8_t* p, float v) {
  const std::uint16_t h = c10::Half(v).x;
  std::memcpy(p, &h, 2);
}

// Random bytes with finite scales where the format has them (a random fp16 could be NaN).
std::vector<std::uint8_t> randomMatrix(GgmlType t, std::int64_t rows, std::int64_t cols, unsigned seed) {
  const kernels::BlockLayout L = kernels::blockLayout(static_cast<std::uint32_t>(t));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.002f, 0.05f), sign(-1.0f, 1.0f);
  const std::int64_t blocks = rows * cols / L.values;
  std::vector<std::uint8_t> v(static_cast<std::size_t>(blocks * L.bytes));
  for (auto& b : v) b = static_cast<std::uint8_t>(byte(rng));
  for (std::int64_t i = 0; i < blocks; ++i) {
    std::uint8_t* b = v.data() + i * L.bytes;
    switch (t) {
      case GgmlType::F32:
        for (std::int64_t k = 0; k < L.values; ++k) {
          const float x = sign(rng);
          std::memcpy(b, &x, 4);
        }
        break;
      case GgmlType::F16:
        putHalf(b, sign(rng));
        break;
      case GgmlType::BF16: {
        const float x = sign(rng);
        std::uint32_t bits;
        std::memcpy(&bits, &x, 4);
        const std::uint16_t h = static_cast<std::uint16_t>(bits >> 16);
        std::memcpy(b, &h, 2);
        break;
      }
      case GgmlType::Q4_1:
      case GgmlType::Q5_1:
        putHalf(b + 2, sign(rng) * 0.3f);
        [[fallthrough]];
      case GgmlType::Q4_0:
      case GgmlType::Q5_0:
      case GgmlType::Q8_0:
        putHalf(b, scale(rng));
        break;
      case GgmlType::Q4_K:
      case GgmlType::Q5_K:
        putHalf(b, scale(rng) * 0.1f);
        putHalf(b + 2, scale(rng) * 0.1f);
        break;
      case GgmlType::Q6_K:
        putHalf(b + 208, scale(rng) * 0.05f);
        break;
      case GgmlType::MXFP4:  // E8M0 scales from 2^-12 to 2^-4, so values reach 12 * 2^-5
        b[0] = static_cast<std::uint8_t>(116 + byte(rng) % 9);
        break;
      default:
        break;
    }
  }
  return v;
}

std::vector<float> dequantized(GgmlType t, const std::vector<std::uint8_t>& data, std::int64_t n) {
  std::vector<float> w(static_cast<std::size_t>(n));
  kernels::dequantize(static_cast<std::uint32_t>(t), data.data(), n, w.data());
  return w;
}

// Checks y [m, rows] against the double product of x [m, cols] and w [rows, cols].
void expectProduct(const std::vector<float>& w, const float* x, const float* y, std::int64_t m, std::int64_t rows,
                   std::int64_t cols, const std::string& what) {
  int bad = 0;
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t r = 0; r < rows; ++r) {
      double ref = 0, xa = 0, wmax = 0;
      for (std::int64_t k = 0; k < cols; ++k) {
        const double wk = w[static_cast<std::size_t>(r * cols + k)], xk = x[i * cols + k];
        ref += wk * xk;
        xa += std::abs(xk);
        wmax = std::max(wmax, std::abs(wk));
      }
      const double got = y[i * rows + r];
      if (std::abs(got - ref) > 1e-5 * xa * wmax + 1e-30 && bad++ < 3)
        ADD_FAILURE() << what << ": row " << i << ", output " << r << ": " << got << " vs " << ref;
    }
  EXPECT_EQ(bad, 0) << what;
}

enum class Path { Avx512, Avx2, Portable };
// Runs `p` while it lives (or the best this CPU has below it), then the path that ran before.
struct Paths {
  explicit Paths(Path p)
      : scope(p == Path::Avx512 ? kernels::Isa::Avx512
              : p == Path::Avx2 ? kernels::Isa::Avx2
                                : kernels::Isa::Scalar) {}
  kernels::IsaScope scope;
};

std::string name(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
      return "F32";
    case GgmlType::F16:
      return "F16";
    case GgmlType::BF16:
      return "BF16";
    case GgmlType::Q4_0:
      return "Q4_0";
    case GgmlType::Q4_1:
      return "Q4_1";
    case GgmlType::Q5_0:
      return "Q5_0";
    case GgmlType::Q5_1:
      return "Q5_1";
    case GgmlType::Q8_0:
      return "Q8_0";
    case GgmlType::Q4_K:
      return "Q4_K";
    case GgmlType::Q5_K:
      return "Q5_K";
    case GgmlType::Q6_K:
      return "Q6_K";
    case GgmlType::MXFP4:
      return "MXFP4";
    default:
      break;
  }
  return "?";
}

// x's rows as 8-bit activations give them: each value its code times its group's scale.
at::Tensor codesTimesScales(const at::Tensor& x) {
  const std::int64_t m = x.size(0), cols = x.size(1);
  kernels::Q8Rows q;
  kernels::quantizeRowsQ8(x.contiguous().data_ptr<float>(), m, cols, cols, q);
  at::Tensor out = at::empty({m, cols});
  float* o = out.data_ptr<float>();
  for (std::int64_t i = 0; i < m * cols; ++i)
    o[i] = q.codes[static_cast<std::size_t>(i)] * q.scales[static_cast<std::size_t>(i / 32)];
  return out;
}

}  // namespace

TEST(BlockMatmul, EightBitActivationsQuantizeAlikeOnBothPaths) {
  // Random rows, rows of exact halves (ties: std::round carries them away from zero), a zero group, and NaN and
  // infinite values: codes, scales and sums equal with AVX-512 on and off.
  at::manual_seed(3);
  const std::int64_t m = 7, cols = 96;
  at::Tensor x = at::randn({m, cols}) * 3;
  x[1] = at::arange(cols).to(at::kFloat) / 2 - 24;  // halves: with amax 127 the scale is 1, the products the values
  x[1][0] = 127;
  x[1][32] = -127;
  x[1][64] = 127;
  x[2].narrow(0, 0, 32).zero_();
  x[3][5] = std::numeric_limits<float>::quiet_NaN();
  x[4][40] = std::numeric_limits<float>::infinity();
  x[5][70] = -std::numeric_limits<float>::infinity();
  x[6] = at::randn({cols}) * 1e-30;
  x = x.contiguous();
  kernels::Q8Rows a, b;
  {
    const Paths p(Path::Avx2);
    kernels::quantizeRowsQ8(x.data_ptr<float>(), m, cols, cols, a);
  }
  {
    const Paths p(Path::Avx512);
    kernels::quantizeRowsQ8(x.data_ptr<float>(), m, cols, cols, b);
  }
  EXPECT_EQ(a.codes, b.codes);
  EXPECT_EQ(0, std::memcmp(a.scales.data(), b.scales.data(), a.scales.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(a.sums.data(), b.sums.data(), a.sums.size() * sizeof(float)));
  EXPECT_NE(a.codes[32 + 1], 0);  // the halves row holds codes
}

TEST(BlockFormats, DequantizationIsAlikeOnEveryPath) {
  // Every type, in rows of 512 values and a tail (F16: one not a whole 16), each vector decode this CPU runs (AVX2,
  // AVX-512) against the scalar one, bit for bit.
  for (const Case& c : kCases) {
    for (const std::int64_t rows : {1, 13}) {
      const std::int64_t n = rows * c.cols;
      const auto data = randomMatrix(c.type, rows, c.cols, 9);
      std::vector<float> a;
      {
        const Paths p(Path::Portable);
        a = dequantized(c.type, data, n);
      }
      for (kernels::Isa path : kernels::runnableIsas()) {
        const kernels::IsaScope scope(path);
        const auto b = dequantized(c.type, data, n);
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
            << name(c.type) << " " << n << " " << kernels::isaName(path);
      }
    }
  }
}

TEST(BlockFormats, TheAffineViewIsTheDequantization) {
  for (const Case& c : kCases) {
    const auto L = kernels::blockLayout(static_cast<std::uint32_t>(c.type));
    if (!L.quantized()) continue;
    const auto data = randomMatrix(c.type, 3, c.cols, 5);
    const auto w = dequantized(c.type, data, 3 * c.cols);
    for (std::int64_t gi = 0; gi < 3 * c.cols / 32; ++gi) {
      std::uint8_t q[32];
      float D[2], M[2];
      kernels::unpackGroup(c.type, data.data() + (gi * 32 / L.values) * L.bytes, static_cast<int>(gi % (L.values / 32)),
                           q, D, M);
      for (int l = 0; l < 32; ++l) {
        const float ref = w[static_cast<std::size_t>(gi * 32 + l)];
        const float got = D[l / 16] * static_cast<float>(q[l]) + M[l / 16];
        ASSERT_NEAR(got, ref, 1e-6f + 1e-5f * std::abs(ref)) << name(c.type) << " group " << gi << " value " << l;
      }
    }
  }
}

TEST(BlockMatmul, EveryTypeEveryTileBothPaths) {
  for (Path path : {Path::Avx512, Path::Avx2, Path::Portable}) {
    Paths p(path);
    const char* pathName = path == Path::Avx512 ? " avx512" : path == Path::Avx2 ? " avx2" : " portable";
    for (const Case& c : kCases) {
      const std::int64_t rows = 37;
      const auto data = randomMatrix(c.type, rows, c.cols, 7);
      const auto w = dequantized(c.type, data, rows * c.cols);
      const auto L = kernels::blockLayout(static_cast<std::uint32_t>(c.type));
      const kernels::BlockMatrix bm{static_cast<std::uint32_t>(c.type), rows, c.cols, data.data(),
                                    c.cols / L.values * L.bytes};
      for (std::int64_t m : {1, 2, 3, 4, 5, 7, 9}) {
        at::manual_seed(static_cast<std::uint64_t>(m));
        const at::Tensor x = at::randn({m, c.cols});
        std::vector<float> sums(static_cast<std::size_t>(m * (c.cols / 16 + 1)));
        if (L.quantized()) kernels::rowSums16(x.data_ptr<float>(), m, c.cols, c.cols, sums.data());
        std::vector<float> y(static_cast<std::size_t>(m * rows), -1.0f);
        // Two row ranges, as the threads split them.
        kernels::blockMatmul(bm, x.data_ptr<float>(), m, c.cols, sums.data(), y.data(), rows, 0, 11);
        kernels::blockMatmul(bm, x.data_ptr<float>(), m, c.cols, sums.data(), y.data(), rows, 11, rows);
        expectProduct(w, x.data_ptr<float>(), y.data(), m, rows, c.cols,
                      name(c.type) + pathName + " m=" + std::to_string(m));
      }
    }
  }
}

TEST(Weight, KernelAndGemmPathsAndEmbeddingAgree) {
  for (const Case& c : kCases) {
    const std::int64_t rows = 70;
    auto data = std::make_shared<std::vector<std::uint8_t>>(randomMatrix(c.type, rows, c.cols, 3));
    const model::Weight W(static_cast<std::uint32_t>(c.type), rows, c.cols, data->data(), data);
    const auto w = dequantized(c.type, *data, rows * c.cols);
    EXPECT_EQ(W.bytes(), data->size());
    EXPECT_EQ(W.firstNonFinite(), -1);
    for (std::int64_t m : {std::int64_t{1}, model::Weight::kKernelRows, model::Weight::kKernelRows + 1}) {
      const at::Tensor x = at::randn({1, m, c.cols});
      const at::Tensor y = W.linear(x).contiguous();
      ASSERT_EQ(y.sizes(), (std::vector<std::int64_t>{1, m, rows}));
      expectProduct(w, x.data_ptr<float>(), y.data_ptr<float>(), m, rows, c.cols,
                    name(c.type) + " linear m=" + std::to_string(m));
    }
    const at::Tensor bias = at::randn({rows});
    const at::Tensor xb = at::randn({2, c.cols}).to(at::kBFloat16);
    const at::Tensor yb = W.linear(xb, bias);
    EXPECT_EQ(yb.scalar_type(), at::kBFloat16);
    EXPECT_TRUE(at::allclose(yb.to(at::kFloat), at::linear(xb.to(at::kFloat), W.dense(), bias), 2e-2, 2e-2))
        << name(c.type);
    const at::Tensor rowsOf = W.gather(at::tensor(std::vector<std::int64_t>{5, 0, 69}, at::kLong).view({1, 3}));
    EXPECT_TRUE(
        at::equal(rowsOf[0], W.dense().index_select(0, at::tensor(std::vector<std::int64_t>{5, 0, 69}, at::kLong))))
        << name(c.type);
    // Permuted rows: row i of the copy is row order[i].
    std::vector<std::int64_t> order(static_cast<std::size_t>(rows));
    for (std::int64_t i = 0; i < rows; ++i) order[static_cast<std::size_t>(i)] = (i * 3) % rows;
    const model::Weight P = W.permuteRows(order);
    EXPECT_TRUE(at::equal(P.dense(), W.dense().index_select(0, at::tensor(order, at::kLong)))) << name(c.type);
  }
}

TEST(Weight, NonFiniteScalesAreFoundWithoutDequantizingEverything) {
  for (const Case& c : kCases) {
    if (c.type == GgmlType::MXFP4) continue;  // E8M0 scales and E2M1 codes: never NaN or infinite
    const std::int64_t rows = 4;
    auto data = std::make_shared<std::vector<std::uint8_t>>(randomMatrix(c.type, rows, c.cols, 9));
    const auto L = kernels::blockLayout(static_cast<std::uint32_t>(c.type));
    // The scale (or, for the float types, the value) of the third block becomes infinite.
    const std::int64_t at = c.type == GgmlType::Q6_K ? 208 : 0;
    std::uint8_t* b = data->data() + 2 * L.bytes + at;
    if (c.type == GgmlType::F32) {
      const float inf = INFINITY;
      std::memcpy(b, &inf, 4);
    } else if (c.type == GgmlType::BF16) {
      b[0] = 0x80, b[1] = 0x7F;
    } else {
      putHalf(b, INFINITY);
    }
    const model::Weight W(static_cast<std::uint32_t>(c.type), rows, c.cols, data->data(), data);
    const std::int64_t first = W.firstNonFinite();
    ASSERT_GE(first, 2 * L.values) << name(c.type);
    ASSERT_LT(first, 3 * L.values) << name(c.type);
    EXPECT_FALSE(std::isfinite(W.dense().flatten()[first].item<float>())) << name(c.type);
  }
}

// 8-bit activations (llama.cpp's arithmetic): the VNNI path equals the portable twin up to float rounding, and both
// equal the product of the weights with the quantized activations (codes times scale) computed in double.
TEST(BlockMatmul, EightBitActivationsEveryTypeEveryPath) {
  // MXFP4 also in an even number of blocks (the VNNI path takes two a step) and in an odd one (its last alone).
  std::vector<Case> cases(std::begin(kCases), std::end(kCases));
  cases.push_back({GgmlType::MXFP4, 64});
  cases.push_back({GgmlType::MXFP4, 352});
  for (const Case& c : cases) {
    const auto L = kernels::blockLayout(static_cast<std::uint32_t>(c.type));
    if (!L.quantized()) continue;
    const std::int64_t rows = 37;
    const auto data = randomMatrix(c.type, rows, c.cols, 13);
    const auto w = dequantized(c.type, data, rows * c.cols);
    const kernels::BlockMatrix bm{static_cast<std::uint32_t>(c.type), rows, c.cols, data.data(),
                                  c.cols / L.values * L.bytes};
    for (std::int64_t m : {1, 3, 6, 9}) {
      const at::Tensor x = at::randn({m, c.cols});
      kernels::Q8Rows q;
      kernels::quantizeRowsQ8(x.data_ptr<float>(), m, c.cols, c.cols, q);
      // The activations as the codes give them.
      std::vector<float> xq(static_cast<std::size_t>(m * c.cols));
      for (std::int64_t i = 0; i < m * c.cols; ++i)
        xq[static_cast<std::size_t>(i)] =
            q.codes[static_cast<std::size_t>(i)] * q.scales[static_cast<std::size_t>(i / 32)];
      for (Path path : {Path::Avx512, Path::Avx2, Path::Portable}) {
        Paths p(path);
        std::vector<float> y(static_cast<std::size_t>(m * rows));
        kernels::blockMatmulQ8(bm, q, y.data(), rows, 0, 20);
        kernels::blockMatmulQ8(bm, q, y.data(), rows, 20, rows);
        expectProduct(w, xq.data(), y.data(), m, rows, c.cols,
                      name(c.type) + " q8 " + kernels::isaName(kernels::isa()) + " m=" + std::to_string(m));
      }
      // And the rounding of the activations stays within half a code step of each group's scale.
      for (std::int64_t i = 0; i < m * c.cols; ++i)
        ASSERT_LE(std::abs(xq[static_cast<std::size_t>(i)] - x.data_ptr<float>()[i]),
                  0.5f * q.scales[static_cast<std::size_t>(i / 32)] * 1.0001f);
    }
  }
}

// 8-bit activations through Weight::linear: the product of the weights with the activations as their codes give
// them (codes times scale), to float rounding, not merely near the float32 product.
TEST(Weight, EightBitActivationsThroughLinear) {
  const Case c{GgmlType::Q4_1, 128};
  auto data = std::make_shared<std::vector<std::uint8_t>>(randomMatrix(c.type, 50, c.cols, 17));
  const model::Weight W(static_cast<std::uint32_t>(c.type), 50, c.cols, data->data(), data);
  at::manual_seed(17);
  const at::Tensor x = at::randn({2, c.cols});
  const at::Tensor exact = W.linear(x), q8 = W.linear(x, {}, model::Activations::Q8);
  EXPECT_TRUE(at::allclose(exact, at::linear(x, W.dense()), 1e-4, 1e-4));
  EXPECT_FALSE(at::equal(q8, exact));  // the activations were rounded
  EXPECT_TRUE(at::allclose(q8, at::linear(codesTimesScales(x), W.dense()), 1e-4, 1e-4));
  EXPECT_EQ(model::parseActivations("q8"), model::Activations::Q8);
  EXPECT_ERROR_CODE(model::parseActivations("q4"), ErrorCode::BadInput);
}

const GgmlType kPackable[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K};

kernels::BlockMatrix blockMatrix(GgmlType t, std::int64_t rows, std::int64_t cols, const std::vector<std::uint8_t>& d) {
  const auto L = kernels::blockLayout(static_cast<std::uint32_t>(t));
  return {static_cast<std::uint32_t>(t), rows, cols, d.data(), cols / L.values * L.bytes};
}

kernels::PackedMatrix packedOf(const kernels::BlockMatrix& bm) {
  kernels::PackedMatrix p;
  kernels::packPrepare(bm, p);
  kernels::packTiles(bm, p, 1, p.tiles());
  kernels::packTiles(bm, p, 0, 1);
  return p;
}

// The repacked form holds exactly the stored values: its dequantization is the stored one bit for bit, and the
// blocks come back byte for byte (37 rows: two full tiles and a padded one).
TEST(PackedMatmul, TheRepackedFormHoldsTheStoredValues) {
  for (GgmlType t : kPackable) {
    const std::int64_t rows = 37, cols = t == GgmlType::Q4_K ? 512 : 96;
    const auto data = randomMatrix(t, rows, cols, 23);
    const auto bm = blockMatrix(t, rows, cols, data);
    const kernels::PackedMatrix p = packedOf(bm);
    EXPECT_EQ(p.tiles(), 3);
    const auto ref = dequantized(t, data, rows * cols);
    std::vector<float> got(ref.size());
    kernels::packedDequantize(p, 0, 5, got.data());
    kernels::packedDequantize(p, 5, rows, got.data() + 5 * cols);
    EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)), 0) << name(t);
    std::vector<std::uint8_t> back(data.size());
    kernels::unpackRows(p, 0, 20, back.data(), bm.rowBytes);
    kernels::unpackRows(p, 20, rows, back.data() + 20 * bm.rowBytes, bm.rowBytes);
    EXPECT_EQ(back, data) << name(t);
    // The stored size (Q4_K: 148 bytes per 256 values against 144), padding rows aside.
    EXPECT_LE(static_cast<double>(p.tileBytes),
              (t == GgmlType::Q4_K ? 148.0 / 144 : 1.0) * static_cast<double>(bm.rowBytes) * 16)
        << name(t);
  }
}

// The packed kernels (AVX-512 VNNI, AVX2; on a CPU without VNNI the first runs the AVX2 path again) and their portable
// twin against the weights times the activations' codes in double: one
// activation row (a decode step), tiles of four and what is left, and a prefill-sized batch; a tile range split.
TEST(PackedMatmul, EightBitActivationsEveryPackedTypeBothPaths) {
  for (GgmlType t : kPackable) {
    const std::int64_t rows = 37, cols = t == GgmlType::Q4_K ? 512 : 128;
    const auto data = randomMatrix(t, rows, cols, 29);
    const auto w = dequantized(t, data, rows * cols);
    const kernels::PackedMatrix p = packedOf(blockMatrix(t, rows, cols, data));
    for (std::int64_t m : {1, 3, 6, 21}) {
      const at::Tensor x = at::randn({m, cols});
      kernels::Q8Rows q;
      kernels::quantizeRowsQ8(x.data_ptr<float>(), m, cols, cols, q);
      const at::Tensor xq = codesTimesScales(x);
      for (Path path : {Path::Avx512, Path::Avx2, Path::Portable}) {
        Paths on(path);
        std::vector<float> y(static_cast<std::size_t>(m * rows), std::nanf(""));
        kernels::packedMatmulQ8(p, q, y.data(), rows, 0, 1);
        kernels::packedMatmulQ8(p, q, y.data(), rows, 1, p.tiles());
        const char* pathName = path == Path::Avx512 ? " packed vnni"
                               : path == Path::Avx2 ? " packed avx2"
                                                    : " packed portable";
        expectProduct(w, xq.data_ptr<float>(), y.data(), m, rows, cols, name(t) + pathName + " m=" + std::to_string(m));
      }
    }
  }
}

// The VmFlags of the mapping that holds `p` (/proc/self/smaps), or "" where it is not found.
std::string vmFlagsAt(const void* p) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  while (std::getline(in, line)) {
    unsigned long long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &lo, &hi) == 2 && line.find(':') > line.find(' '))
      inside = lo <= at && at < hi;
    else if (inside && line.rfind("VmFlags:", 0) == 0)
      return line;
  }
  return "";
}

// A decode step streams every packed weight once, so a packed form past a huge page lives in 2 MiB pages
// (util::allocateStreamed): aligned to them and marked for them (VmFlags "hg") where the kernel does transparent huge
// pages at all; it holds the stored values as a small one does.
TEST(PackedMatmul, AMatrixPastAHugePageIsInHugePages) {
  const std::int64_t rows = 1024, cols = 4096;  // Q4_K packed: 2.3 MiB
  const auto data = randomMatrix(GgmlType::Q4_K, rows, cols, 37);
  const kernels::PackedMatrix p = packedOf(blockMatrix(GgmlType::Q4_K, rows, cols, data));
  ASSERT_GT(p.bytes(), std::int64_t{2} << 20);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p.data.get()) % (std::uintptr_t{2} << 20), 0u);
  std::ifstream mode("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  std::getline(mode, modes);
  if (!modes.empty() && modes.find("[never]") == std::string::npos) {
    const std::string flags = vmFlagsAt(p.data.get());
    EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;
  }
  const auto ref = dequantized(GgmlType::Q4_K, data, rows * cols);
  std::vector<float> got(ref.size());
  kernels::packedDequantize(p, 0, rows, got.data());
  EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)), 0);
  const util::StreamedBuffer small = util::allocateStreamed(100);
  ASSERT_NE(small.get(), nullptr);
  std::memset(small.get(), 1, 100);
}

// A weight packed for 8-bit activations: the same products as the stored form (decode and prefill batches), the
// same rows looked up, float32 activations still right (dequantized tiles), the stored bytes back when unpacked; a
// Q8_0 scale whose -128 d overflows fp16 keeps the stored form.
TEST(Weight, PackedForEightBitActivations) {
  for (GgmlType t : kPackable) {
    const std::int64_t rows = 40, cols = t == GgmlType::Q4_K ? 256 : 64;
    auto data = std::make_shared<std::vector<std::uint8_t>>(randomMatrix(t, rows, cols, 31));
    const model::Weight W(static_cast<std::uint32_t>(t), rows, cols, data->data(), data);
    const model::Weight P = W.packed();
    const auto w = dequantized(t, *data, rows * cols);
    at::manual_seed(31);
    ASSERT_TRUE(P.isPacked()) << name(t);
    EXPECT_FALSE(W.isPacked());
    // What the stored form takes for the padded rows (Q4_K: 148 bytes per 256 values against 144).
    const std::uint64_t rowBytes = W.bytes() / rows, packedRow = t == GgmlType::Q4_K ? rowBytes / 144 * 148 : rowBytes;
    EXPECT_EQ(P.bytes(), static_cast<std::uint64_t>((rows + 15) / 16 * 16) * packedRow) << name(t);
    for (std::int64_t n : {1, 5, 40}) {  // past Weight::kKernelRows the stored form runs a GEMM
      const at::Tensor x = at::randn({n, cols});
      const at::Tensor viaCodes = at::linear(codesTimesScales(x), W.dense());
      EXPECT_TRUE(at::allclose(P.linear(x, {}, model::Activations::Q8), viaCodes, 1e-4, 1e-4)) << name(t) << " " << n;
      // Float activations: the dequantized tiles and the stored form sum in different orders, so each is held to
      // the double product with a bound that scales with the terms (a fixed 1e-5 fails on a large output).
      for (const model::Weight* v : {&P, &W}) {
        const at::Tensor y = v->linear(x).contiguous();
        expectProduct(w, x.data_ptr<float>(), y.data_ptr<float>(), n, rows, cols,
                      name(t) + (v == &P ? " packed" : " stored") + " float n=" + std::to_string(n));
      }
    }
    const at::Tensor ids = at::tensor(std::vector<std::int64_t>{0, 17, 39});
    EXPECT_TRUE(at::equal(P.gather(ids), W.gather(ids))) << name(t);
    const model::Weight U = P.unpacked();
    EXPECT_FALSE(U.isPacked());
    EXPECT_TRUE(at::equal(U.dense(), W.dense())) << name(t);
    EXPECT_ERROR_CODE(P.requantized(static_cast<std::uint32_t>(GgmlType::Q8_0)), ErrorCode::Internal);
  }
  // Q8_0's M (-128 d) is not stored: a scale whose M is past fp16's range still packs, exactly.
  auto big = std::make_shared<std::vector<std::uint8_t>>(randomMatrix(GgmlType::Q8_0, 16, 32, 5));
  putHalf(big->data() + std::ptrdiff_t{5} * 34, 1000.0f);
  const model::Weight B(static_cast<std::uint32_t>(GgmlType::Q8_0), 16, 32, big->data(), big);
  ASSERT_TRUE(B.packed().isPacked());
  EXPECT_TRUE(at::equal(B.packed().dense(), B.dense()));
  // Types without a packed form stay as they are.
  auto q6 = std::make_shared<std::vector<std::uint8_t>>(randomMatrix(GgmlType::Q6_K, 16, 256, 5));
  EXPECT_FALSE(model::Weight(static_cast<std::uint32_t>(GgmlType::Q6_K), 16, 256, q6->data(), q6).packed().isPacked());
}

// --weights: float matrices quantized at load. Each value within half a code step (Q8_0: amax / 254, Q4_1: range /
// 30, Q5_1: range / 62; Q4_0: amax / 8 and Q5_0: amax / 16, their codes reaching one step short of amax on the other
// side), ggml's layout (the kernels read it), and refused for what kvscope does not write.
TEST(Weight, RequantizedAtLoadToTheFormatsKvscopeWrites) {
  at::manual_seed(4);
  const at::Tensor x = at::randn({24, 96}) * 0.5;
  const auto f32 = std::make_shared<at::Tensor>(x.contiguous());
  const model::Weight w(0, 24, 96, static_cast<const std::uint8_t*>(f32->data_ptr()), f32);
  for (auto [type, step] :
       {std::pair{GgmlType::Q8_0, 1.0 / 254}, std::pair{GgmlType::Q4_0, 1.0 / 8}, std::pair{GgmlType::Q4_1, 1.0 / 30},
        std::pair{GgmlType::Q5_0, 1.0 / 16}, std::pair{GgmlType::Q5_1, 1.0 / 62}}) {
    const model::Weight q = w.requantized(static_cast<std::uint32_t>(type));
    EXPECT_EQ(q.type(), static_cast<std::uint32_t>(type));
    EXPECT_EQ(q.bytes(), static_cast<std::uint64_t>(24 * 96 / 32 * kernels::blockLayout(type).bytes));
    const at::Tensor back = q.dense().view({-1, 32}), orig = x.view({-1, 32});
    const bool affine = type == GgmlType::Q4_1 || type == GgmlType::Q5_1;
    const at::Tensor span = affine ? std::get<0>(orig.max(1)) - std::get<0>(orig.min(1)) : orig.abs().amax(1);
    // fp16 scales add a relative 2^-11 of the block's magnitude.
    const at::Tensor tol = span.view({-1, 1}) * (step * 1.01) + orig.abs().amax(1).view({-1, 1}) * 1e-3;
    EXPECT_TRUE(((back - orig).abs() <= tol).all().item<bool>()) << static_cast<int>(type);
    const at::Tensor a = at::randn({3, 96});
    EXPECT_TRUE(at::allclose(q.linear(a), at::mm(a, q.dense().t()), 1e-4, 1e-4));
  }
  for (auto bad : {GgmlType::Q6_K, GgmlType::Q4_K, GgmlType::F16})
    EXPECT_ERROR_CODE(w.requantized(static_cast<std::uint32_t>(bad)), ErrorCode::Internal);
  const auto odd = std::make_shared<at::Tensor>(at::randn({4, 40}));
  EXPECT_ERROR_CODE(model::Weight(0, 4, 40, static_cast<const std::uint8_t*>(odd->data_ptr()), odd)
                        .requantized(static_cast<std::uint32_t>(GgmlType::Q8_0)),
                    ErrorCode::BadInput);
  EXPECT_EQ(model::parseWeightFormat("stored"), 0u);
  EXPECT_EQ(model::parseWeightFormat("q4_1"), static_cast<std::uint32_t>(GgmlType::Q4_1));
  EXPECT_EQ(model::parseWeightFormat("q5_0"), static_cast<std::uint32_t>(GgmlType::Q5_0));
  EXPECT_EQ(model::parseWeightFormat("q5_1"), static_cast<std::uint32_t>(GgmlType::Q5_1));
  EXPECT_ERROR_CODE(model::parseWeightFormat("q6_k"), ErrorCode::BadInput);
}

// A model's float matrices quantized at load: the card says so, the weights shrink, the output (a tied embedding
// here) stays as stored, and the next-token distribution stays close.
TEST(Weight, AModelQuantizedAtLoad) {
  const auto f32 = model::LlamaModel::load(testutil::randomModel());
  const auto q8 = model::LlamaModel::load(testutil::randomModel(), device::ExecutionContext(), {},
                                          static_cast<std::uint32_t>(GgmlType::Q8_0));
  ASSERT_FALSE(q8->config().weightTypes.empty());
  EXPECT_EQ(q8->config().weightTypes.back(), "Q8_0 x14 quantized at load");
  const std::uint64_t embed = std::uint64_t{96} * 64 * 4;  // tied: kept as stored
  const std::uint64_t norms = std::uint64_t{5} * 64 * 4;
  EXPECT_EQ(q8->weightBytes() - embed - norms, (f32->weightBytes() - embed - norms) / 4 * 34 / 32);
  const auto q4 = model::LlamaModel::load(testutil::randomModel(), device::ExecutionContext(), {},
                                          static_cast<std::uint32_t>(GgmlType::Q4_0));
  // Mean KL of the next-token distributions against the float model over a few greedy steps.
  const auto ref = testutil::stepLogits(*f32, cache::parseSpec("dynamic"), testutil::prompt(16), 6);
  auto meanKl = [&](const model::LlamaModel& m) {
    const auto got = testutil::stepLogits(m, cache::parseSpec("dynamic"), testutil::prompt(16), 6);
    double kl = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      const at::Tensor p = ref[i].log_softmax(0), q = got[i].log_softmax(0);
      kl += (p.exp() * (p - q)).sum().item<double>();
    }
    return kl / static_cast<double>(ref.size());
  };
  const double k8 = meanKl(*q8), k4 = meanKl(*q4);
  EXPECT_LT(k8, 1e-2);
  EXPECT_GT(k4, 2 * k8);  // 4 bits lose more than 8 (on this sharp random model, far more)
}

// A model switched to 8-bit activations packs its block matrices (the weights then take what they took), and
// switched back it computes exactly what it computed before; the 8-bit next-token distribution stays close.
TEST(Weight, AModelPackedForEightBitActivationsAndBack) {
  auto m = model::LlamaModel::load(testutil::randomModel(), device::ExecutionContext(), {},
                                   static_cast<std::uint32_t>(GgmlType::Q4_0));
  const std::uint64_t stored = m->weightBytes();
  const auto before = testutil::stepLogits(*m, cache::parseSpec("dynamic"), testutil::prompt(16), 4);
  m->setActivations(model::Activations::Q8);
  EXPECT_EQ(m->weightBytes(), stored);  // Q4_0's packed form takes what it takes stored (no padding rows here)
  const auto q8 = testutil::stepLogits(*m, cache::parseSpec("dynamic"), testutil::prompt(16), 4);
  m->setActivations(model::Activations::F32);
  EXPECT_EQ(m->weightBytes(), stored);
  const auto after = testutil::stepLogits(*m, cache::parseSpec("dynamic"), testutil::prompt(16), 4);
  ASSERT_EQ(before.size(), after.size());
  for (std::size_t i = 0; i < before.size(); ++i) {
    EXPECT_TRUE(at::equal(before[i], after[i])) << "step " << i;
    const at::Tensor p = before[i].log_softmax(0), q = q8[i].log_softmax(0);
    EXPECT_LT((p.exp() * (p - q)).sum().item<double>(), 5e-2) << "step " << i;
    EXPECT_FALSE(at::equal(before[i], q8[i]));
  }
}

TEST(Weight, AFloat32CopyGivesTheSameProducts) {
  // Every format, one tile; then a matrix of three tiles (the last one short), as the output matrix has.
  std::vector<std::pair<Case, std::int64_t>> cases;
  for (const Case& c : kCases) cases.push_back({c, 70});
  cases.push_back({{GgmlType::Q4_K, 4096}, 1100});
  ASSERT_EQ(model::Weight::gemmTileRows(4096), 512);
  for (const auto& [c, rows] : cases) {
    auto data = std::make_shared<std::vector<std::uint8_t>>(randomMatrix(c.type, rows, c.cols, 5));
    const model::Weight W(static_cast<std::uint32_t>(c.type), rows, c.cols, data->data(), data);
    const model::Weight F = W.withFloatCopy();
    ASSERT_TRUE(F.hasFloatCopy()) << name(c.type);
    EXPECT_FALSE(W.hasFloatCopy());
    EXPECT_EQ(F.floatCopyBytes(), static_cast<std::uint64_t>(rows * c.cols * 4)) << name(c.type);
    EXPECT_EQ(F.bytes(), W.bytes());  // the stored form is still what the model holds
    const at::Tensor bias = at::randn({rows});
    for (std::int64_t m : {std::int64_t{1}, model::Weight::kKernelRows, model::Weight::kKernelRows + 1,
                           std::int64_t{32}, std::int64_t{128}}) {
      const at::Tensor x = at::randn({1, m, c.cols});
      EXPECT_TRUE(at::equal(F.linear(x), W.linear(x))) << name(c.type) << " rows " << rows << " m=" << m;
      EXPECT_TRUE(at::equal(F.linear(x, bias), W.linear(x, bias))) << name(c.type) << " m=" << m << " with bias";
      // Several weights in one call (Q, K and V): one with a copy beside one without.
      const auto both = model::Weight::linear({&F, &W}, x);
      EXPECT_TRUE(at::equal(both[0], both[1])) << name(c.type) << " m=" << m;
    }
    EXPECT_FALSE(F.withoutFloatCopy().hasFloatCopy());
  }
}

TEST(Weight, AModelWithFloat32CopiesComputesTheSameLogits) {
  auto m = model::LlamaModel::load(testutil::randomModel(), device::ExecutionContext(), {},
                                   static_cast<std::uint32_t>(GgmlType::Q4_0));
  const std::uint64_t stored = m->weightBytes();
  const auto ids = model::idsTensor(testutil::prompt(40), 0, 40);  // more rows than the block kernels take
  auto logits = [&] {
    auto kv = m->makeCache(cache::parseSpec("dynamic"));
    return m->forward(ids, *kv);  // every position: the output matrix through the GEMM too
  };
  const at::Tensor before = logits();
  EXPECT_GT(m->floatCopyBytes(), stored);
  m->setFloatCopies(true);
  EXPECT_EQ(m->weightBytes(), stored);
  EXPECT_TRUE(at::equal(logits(), before));
  m->setFloatCopies(false);
  EXPECT_TRUE(at::equal(logits(), before));
}

// ggml's MXFP4 (gpt-oss's experts) as dequantize_row_mxfp4 reads it: the E8M0 byte first, halved
// (GGML_E8M0_TO_FP32_HALF, subnormal for the two smallest), then low nibbles as values 0-15 and high as 16-31, each
// an index into the doubled E2M1 values.
TEST(BlockFormats, Mxfp4DequantizesAsGgml) {
  std::uint8_t b[2 * 17] = {};
  b[0] = 127;    // 2^0 / 2
  b[1] = 0x7F;   // value 0: index 15 (-12) -> -6; value 16: index 7 (12) -> 6
  b[2] = 0x91;   // value 1: index 1 (1) -> 0.5; value 17: index 9 (-1) -> -0.5
  b[17] = 0;     // 2^-128, a float32 subnormal
  b[18] = 0x05;  // value 0: index 5 (6) -> 6 * 2^-128; value 16: index 0 -> 0
  float y[64];
  kernels::dequantize(static_cast<std::uint32_t>(GgmlType::MXFP4), b, 64, y);
  EXPECT_EQ(y[0], -6.0f);
  EXPECT_EQ(y[16], 6.0f);
  EXPECT_EQ(y[1], 0.5f);
  EXPECT_EQ(y[17], -0.5f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[32], std::ldexp(6.0f, -128));
  EXPECT_EQ(y[48], 0.0f);
  b[0] = 254;  // 2^126: value 1 (index 1) is 2^126, value 17 (index 9) its negative
  kernels::dequantize(static_cast<std::uint32_t>(GgmlType::MXFP4), b, 32, y);
  EXPECT_EQ(y[1], std::ldexp(1.0f, 126));
  EXPECT_EQ(y[17], -std::ldexp(1.0f, 126));
}
