// vLLM's TurboQuant presets and its int4 per-token-head cache: the row codecs (kernels/kv_block_codec.h: the
// Lloyd-Max tables rebuilt from vLLM's solver, the RHT signs from torch.bernoulli, row sizes, codes), the `vllm` layer
// with these kv= values (rows, boundary skip, fused attention, refusals), options, exports and bits per value. Parity
// with vLLM's own code: tests/parity/test_turboquant_parity.cpp.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "cache/config.h"
#include "cache/kv_cache.h"
#include "cache/layer.h"
#include "kernels/cpu/kv_blocks.h"
#include "kernels/kv_block_codec.h"
#include "tensor_helpers.h"

using namespace kvscope;
using namespace kvscope::cache;
using kvscope::testutil::randn;
namespace kvc = kvscope::kernels::kvcodec;

namespace {

// vLLM 0.33.0's solve_lloyd_max (model_executor/layers/quantization/turboquant/centroids.py), operation for operation
// in double: 200 iterations at most, trapezoids of 200 panels, stopping before it takes the iterate that moved less
// than 1e-10; float32 at the end.
std::vector<float> lloydMax(int d, int bits) {
  const int n = 1 << bits;
  const double sigma2 = 1.0 / d, sigma = std::sqrt(sigma2);
  const auto pdf = [&](double x) { return (1.0 / std::sqrt(2 * M_PI * sigma2)) * std::exp(-x * x / (2 * sigma2)); };
  const auto trapz = [](auto f, double a, double b) {
    const double h = (b - a) / 200;
    double r = 0.5 * (f(a) + f(b));
    for (int i = 1; i < 200; ++i) r += f(a + i * h);
    return r * h;
  };
  const double lo = -3.5 * sigma, hi = 3.5 * sigma;
  std::vector<double> c(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) c[static_cast<std::size_t>(i)] = lo + (hi - lo) * (i + 0.5) / n;
  for (int it = 0; it < 200; ++it) {
    std::vector<double> edges{lo * 3};
    for (int i = 0; i + 1 < n; ++i)
      edges.push_back((c[static_cast<std::size_t>(i)] + c[static_cast<std::size_t>(i) + 1]) / 2.0);
    edges.push_back(hi * 3);
    std::vector<double> next(static_cast<std::size_t>(n));
    double moved = 0.0;
    for (std::size_t i = 0; i < next.size(); ++i) {
      const double num = trapz([&](double x) { return x * pdf(x); }, edges[i], edges[i + 1]);
      const double den = trapz(pdf, edges[i], edges[i + 1]);
      next[i] = den > 1e-15 ? num / den : c[i];
      moved = std::max(moved, std::abs(next[i] - c[i]));
    }
    if (moved < 1e-10) break;
    c = next;
  }
  return {c.begin(), c.end()};
}

std::uint32_t bitsOf(float f) {
  std::uint32_t u = 0;
  std::memcpy(&u, &f, 4);
  return u;
}

// x [B, H, T, D] through a row type and back (the codec's rows, decoded).
at::Tensor throughRows(const at::Tensor& x, std::uint32_t type) {
  const at::Tensor c = x.to(at::kFloat).contiguous();
  at::Tensor out = at::empty_like(c);
  const std::int64_t D = c.size(3), rows = c.numel() / D;
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(kernels::kvRowBytes(type, D)));
  for (std::int64_t r = 0; r < rows; ++r) {
    kernels::quantizeKvRow(type, c.const_data_ptr<float>() + r * D, D, bytes.data());
    kernels::dequantizeKvRow(type, bytes.data(), D, out.mutable_data_ptr<float>() + r * D);
  }
  return out;
}

double relError(const at::Tensor& a, const at::Tensor& b) {
  return ((a - b).norm() / b.norm()).item<double>();
}

std::string layerError(const std::string& spec, std::int64_t D) {
  try {
    makeLayer(parseSpec(spec))->update(randn(1, 1, 2, D), randn(1, 1, 2, D));
  } catch (const CacheError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// --- codecs ---

TEST(TurboQuantCodec, CentroidTablesAreVllmsLloydMaxSolution) {
  for (int d = 8; d <= 512; d *= 2)
    for (int bits : {3, 4}) {
      const std::vector<float> want = lloydMax(d, bits);
      for (int i = 0; i < (1 << bits); ++i)
        EXPECT_EQ(bitsOf(kvc::tqCentroid(d, bits, i)), bitsOf(want[static_cast<std::size_t>(i)]))
            << "d " << d << " bits " << bits << " index " << i;
    }
  // Two anchors from vLLM's own solver (d = 64: the outermost 3-bit and the innermost 4-bit centroid).
  EXPECT_EQ(bitsOf(kvc::tqCentroid(64, 3, 0)), 0xbe899f54u);
  EXPECT_EQ(bitsOf(kvc::tqCentroid(64, 4, 8)), 0x3c83828au);
}

TEST(TurboQuantCodec, RhtSignsAreTorchsBernoulliFromVllmsSeed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(0x9E3779B9ull);
  const at::Tensor signs = at::bernoulli(at::full({512}, 0.5), gen) * 2.0 - 1.0;
  for (int i = 0; i < 512; ++i) EXPECT_EQ(kvc::rhtSign(i), signs[i].item<float>()) << i;
}

TEST(TurboQuantCodec, RowsHaveVllmsSlotSizes) {
  // vLLM's TurboQuantConfig: key_packed_size + value_packed_size, per token and KV head.
  const auto slot = [](std::uint32_t k, std::uint32_t v, std::int64_t D) {
    return kernels::kvRowBytes(k, D) + kernels::kvRowBytes(v, D);
  };
  EXPECT_EQ(slot(kernels::kTypeTqKeyFp8, kernels::kTypeTqValue4, 64), 100);
  EXPECT_EQ(slot(kernels::kTypeTqKey4, kernels::kTypeTqValue4, 64), 70);
  EXPECT_EQ(slot(kernels::kTypeTqKey3, kernels::kTypeTqValue4, 64), 62);
  EXPECT_EQ(slot(kernels::kTypeTqKey3, kernels::kTypeTqValue3, 64), 54);
  EXPECT_EQ(slot(kernels::kTypeTqKeyFp8, kernels::kTypeTqValue4, 128), 196);
  EXPECT_EQ(slot(kernels::kTypeTqKey4, kernels::kTypeTqValue4, 128), 134);
  EXPECT_EQ(slot(kernels::kTypeTqKey3, kernels::kTypeTqValue4, 128), 118);
  EXPECT_EQ(slot(kernels::kTypeTqKey3, kernels::kTypeTqValue3, 128), 102);
  EXPECT_EQ(kernels::kvRowScaleBytes(kernels::kTypeTqKey3, 64), 2);
  EXPECT_EQ(kernels::kvRowScaleBytes(kernels::kTypeTqValue3, 64), 4);
  EXPECT_EQ(kernels::kvRowScaleBytes(kernels::kTypeTqKeyFp8, 64), 0);
  EXPECT_EQ(kernels::kvRowBytes(kernels::kTypeInt4PerTokenHead, 128), 64 + 4);
  EXPECT_THROW(kernels::kvRowBytes(kernels::kTypeTqKey3, 60), Error);  // 3-bit codes pack in groups of 8
}

TEST(TurboQuantCodec, KeysAreNormTimesRenormalisedCentroidsOfTheRotatedUnitVector) {
  at::manual_seed(31);
  const at::Tensor x = randn(1, 1, 1, 64).reshape({64}) * 5.0;
  std::vector<std::uint8_t> row(static_cast<std::size_t>(kernels::kvRowBytes(kernels::kTypeTqKey4, 64)));
  kernels::quantizeKvRow(kernels::kTypeTqKey4, x.const_data_ptr<float>(), 64, row.data());
  // The fp16 norm follows the 32 bytes of codes.
  std::uint16_t h = 0;
  std::memcpy(&h, row.data() + 32, 2);
  EXPECT_EQ(h, c10::Half(x.norm().item<float>()).x);
  // Each code is the centroid nearest the rotated unit vector's coordinate.
  std::vector<float> y(x.const_data_ptr<float>(), x.const_data_ptr<float>() + 64);
  const float n = x.norm().item<float>();
  for (float& v : y) v /= n + 1e-8f;
  kvc::hadamardChunks(y.data(), 64, 64);
  for (int i = 0; i < 64; ++i) {
    const int code = kvc::unpackBits(row.data(), i, 4);
    for (int j = 0; j < 16; ++j)
      EXPECT_LE(std::abs(y[static_cast<std::size_t>(i)] - kvc::tqCentroid(64, 4, code)),
                std::abs(y[static_cast<std::size_t>(i)] - kvc::tqCentroid(64, 4, j)) + 1e-7f)
          << i;
  }
  std::vector<float> back(64);
  kernels::dequantizeKvRow(kernels::kTypeTqKey4, row.data(), 64, back.data());
  const at::Tensor b = at::from_blob(back.data(), {64}, at::kFloat);
  // Norm correction: the read-back key has the stored norm.
  EXPECT_NEAR(b.norm().item<float>(), static_cast<float>(c10::Half(h, c10::Half::from_bits())), 1e-4);
  EXPECT_LT(relError(b, x), 0.15);
  EXPECT_GT(at::cosine_similarity(b, x, 0).item<double>(), 0.99);
}

TEST(TurboQuantCodec, ValuesAreUniformCodesWithFp16ScaleAndZero) {
  // 0 .. 15 in steps of 0.5 over 32 values: 4-bit codes are exact halves of the range.
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[static_cast<std::size_t>(i)] = -3.0f + 0.25f * static_cast<float>(i % 16);
  std::vector<std::uint8_t> row(static_cast<std::size_t>(kernels::kvRowBytes(kernels::kTypeTqValue4, 32)));
  ASSERT_EQ(row.size(), 16u + 4u);
  kernels::quantizeKvRow(kernels::kTypeTqValue4, x.data(), 32, row.data());
  EXPECT_EQ(row[0], 0x10);  // codes 0 and 1, the even value in the low nibble
  std::uint16_t s = 0, z = 0;
  std::memcpy(&s, row.data() + 16, 2);
  std::memcpy(&z, row.data() + 18, 2);
  EXPECT_EQ(s, c10::Half(0.25f).x);
  EXPECT_EQ(z, c10::Half(-3.0f).x);
  std::vector<float> y(32);
  kernels::dequantizeKvRow(kernels::kTypeTqValue4, row.data(), 32, y.data());
  EXPECT_EQ(y, x);
  // 3 bits: the stream crosses bytes (code 1 at bits 3..5, code 2 at bits 6..8).
  std::vector<float> t{0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<std::uint8_t> r3(static_cast<std::size_t>(kernels::kvRowBytes(kernels::kTypeTqValue3, 8)));
  kernels::quantizeKvRow(kernels::kTypeTqValue3, t.data(), 8, r3.data());
  EXPECT_EQ(r3[0], static_cast<std::uint8_t>(0 | (1 << 3) | ((2 & 3) << 6)));
  EXPECT_EQ(r3[1], static_cast<std::uint8_t>((2 >> 2) | (3 << 1) | (4 << 4) | ((5 & 1) << 7)));
  // A constant row: scale 1e-8 (fp16: 0), every code 0, read back as the constant.
  std::vector<float> k(8, 2.5f), back(8);
  kernels::quantizeKvRow(kernels::kTypeTqValue3, k.data(), 8, r3.data());
  kernels::dequantizeKvRow(kernels::kTypeTqValue3, r3.data(), 8, back.data());
  EXPECT_EQ(back, k);
}

TEST(TurboQuantCodec, Fp8KeysSaturateWithoutAScale) {
  std::vector<float> x{1.0f, -0.3f, 1000.0f, -1000.0f, 0.0f, 3e-4f, 448.0f, 17.0f};
  std::vector<std::uint8_t> row(8);
  kernels::quantizeKvRow(kernels::kTypeTqKeyFp8, x.data(), 8, row.data());
  std::vector<float> y(8);
  kernels::dequantizeKvRow(kernels::kTypeTqKeyFp8, row.data(), 8, y.data());
  EXPECT_EQ(y[2], 448.0f);
  EXPECT_EQ(y[3], -448.0f);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[7], 16.0f);  // e4m3 has 3 mantissa bits: 17 rounds to 16 (even)
}

TEST(TurboQuantCodec, Int4PerTokenHeadHidesTheZeroPointInTheScale) {
  at::manual_seed(32);
  for (std::int64_t D : {32, 64, 96, 128}) {  // 96: blocks of 32
    SCOPED_TRACE(D);
    const at::Tensor x = randn(1, 1, 1, D).reshape({D});
    std::vector<std::uint8_t> row(static_cast<std::size_t>(D / 2 + 4));
    kernels::quantizeKvRow(kernels::kTypeInt4PerTokenHead, x.const_data_ptr<float>(), D, row.data());
    // The transformed row (signs, then the unnormalised transform per block of D & -D).
    const std::int64_t blk = D & -D;
    std::vector<float> t(x.const_data_ptr<float>(), x.const_data_ptr<float>() + D);
    for (std::int64_t i = 0; i < D; ++i) t[static_cast<std::size_t>(i)] *= kvc::rhtSign(static_cast<int>(i % blk));
    for (std::int64_t c = 0; c < D; c += blk) kvc::fwht(t.data() + c, static_cast<int>(blk));
    const float mn = *std::min_element(t.begin(), t.end()), mx = *std::max_element(t.begin(), t.end());
    std::uint32_t word = 0;
    std::memcpy(&word, row.data() + D / 2, 4);
    const float scale = (mx - mn) / 15.0f;
    EXPECT_EQ(word & ~0xFu, bitsOf(scale) & ~0xFu);
    EXPECT_EQ(static_cast<int>(word & 0xFu), static_cast<int>(std::trunc(-mn / scale + 0.5f)));
    std::vector<float> y(static_cast<std::size_t>(D));
    kernels::dequantizeKvRow(kernels::kTypeInt4PerTokenHead, row.data(), D, y.data());
    EXPECT_LT(relError(at::from_blob(y.data(), {D}, at::kFloat), x), 0.2);
  }
}

// --- the layer ---

TEST(TurboQuantLayer, StoresVllmsRowsAndLeavesTheBoundaryLayersUnquantized) {
  at::manual_seed(33);
  const at::Tensor k = randn(1, 2, 9, 64) * 2.0, v = randn(1, 2, 9, 64);
  struct Preset {
    const char* kv;
    std::uint32_t keys, values;
    int slot;
  };
  for (const Preset& p : {Preset{"turboquant_k8v4", kernels::kTypeTqKeyFp8, kernels::kTypeTqValue4, 100},
                          Preset{"turboquant_4bit_nc", kernels::kTypeTqKey4, kernels::kTypeTqValue4, 70},
                          Preset{"turboquant_k3v4_nc", kernels::kTypeTqKey3, kernels::kTypeTqValue4, 62},
                          Preset{"turboquant_3bit_nc", kernels::kTypeTqKey3, kernels::kTypeTqValue3, 54}}) {
    SCOPED_TRACE(p.kv);
    const std::string spec = std::string("vllm:kv=") + p.kv;
    auto layer = makeLayer(parseSpec(spec));
    const auto [ks, vs] = layer->update(k, v);
    EXPECT_TRUE(at::equal(ks, throughRows(k, p.keys)));
    EXPECT_TRUE(at::equal(vs, throughRows(v, p.values)));
    EXPECT_TRUE(at::equal(layer->roundQueries(k), k));  // vLLM rotates the float32 query: no rounding
    const LayerMemory m = layer->memory();
    EXPECT_EQ(m.keys.payload + m.keys.metadata + m.values.payload + m.values.metadata, 9 * 2 * p.slot);
    EXPECT_EQ(toVllmFlags(parseSpec(spec)).flags, std::string("--kv-cache-dtype ") + p.kv);
    EXPECT_DOUBLE_EQ(bitsPerValue(parseSpec(spec), 64), p.slot * 8.0 / 128.0);
    EXPECT_THROW(toModelOptConfig(parseSpec(spec)), ConfigError);
    EXPECT_THROW(toHfCacheConfig(parseSpec(spec)), ConfigError);
    // vLLM's boundary skip: layers 0, 1, L-2, L-1 of a dense model stay unquantized.
    KvCache cache(parseSpec(spec), 6);
    for (int l = 0; l < 6; ++l)
      EXPECT_EQ(cache.layer(l).backend(), l >= 2 && l < 4 ? Backend::Vllm : Backend::Dynamic) << "layer " << l;
  }
  // The ordering vLLM documents holds for the keys on Gaussian rows: 8-bit FP8 < 4-bit < 3-bit error.
  const double e8 = relError(throughRows(k, kernels::kTypeTqKeyFp8), k);
  const double e4 = relError(throughRows(k, kernels::kTypeTqKey4), k);
  const double e3 = relError(throughRows(k, kernels::kTypeTqKey3), k);
  EXPECT_LT(e8, e4);
  EXPECT_LT(e4, e3);
  EXPECT_EQ(toLlamaCppFlags(parseSpec("vllm:kv=turboquant_k8v4")).flags, "-ctk q8_0 -ctv q4_1 -fa on");
}

TEST(TurboQuantLayer, FusedAttentionReadsTheStoredRows) {
  at::manual_seed(34);
  for (const char* kv : {"turboquant_k8v4", "turboquant_4bit_nc", "turboquant_3bit_nc", "int4_per_token_head"}) {
    SCOPED_TRACE(kv);
    auto fused = makeLayer(parseSpec(std::string("vllm:kv=") + kv));
    auto reference = makeLayer(parseSpec(std::string("vllm:kv=") + kv + ",attention=reference"));
    for (std::int64_t T : {20, 1, 1, 3}) {
      const at::Tensor q = randn(1, 4, T, 64), k = randn(1, 2, T, 64), v = randn(1, 2, T, 64);
      EXPECT_LT((fused->attend(q, k, v) - reference->attend(q, k, v)).abs().max().item<double>(), 2e-5) << T;
    }
    EXPECT_EQ(fused->memory().keys.transient, 0);
  }
}

TEST(TurboQuantLayer, RefusesWhatVllmCannotRun) {
  EXPECT_NE(layerError("vllm:kv=turboquant_4bit_nc", 96).find("power-of-two head size"), std::string::npos)
      << layerError("vllm:kv=turboquant_4bit_nc", 96);
  EXPECT_NE(layerError("vllm:kv=turboquant_3bit_nc", 12).find("blocks of 8"), std::string::npos)
      << layerError("vllm:kv=turboquant_3bit_nc", 12);
  EXPECT_EQ(layerError("vllm:kv=turboquant_k8v4", 96), "");  // FP8 keys are not rotated; values take any 8k
  EXPECT_NE(layerError("vllm:kv=int4_per_token_head", 16).find("32 or more"), std::string::npos);
  EXPECT_EQ(layerError("vllm:kv=int4_per_token_head", 96), "");  // blocks of 32 for the transform
  try {
    parseSpec("vllm:kv=turboquant_2bit");
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("turboquant_3bit_nc"), std::string::npos) << e.what();
  }
}

TEST(TurboQuantLayer, Int4PerTokenHeadStoresTransformedRows) {
  at::manual_seed(35);
  const at::Tensor k = randn(1, 2, 5, 64), v = randn(1, 2, 5, 64);
  auto layer = makeLayer(parseSpec("vllm:kv=int4_per_token_head"));
  const auto [ks, vs] = layer->update(k, v);
  EXPECT_TRUE(at::equal(ks, throughRows(k, kernels::kTypeInt4PerTokenHead)));
  EXPECT_TRUE(at::equal(vs, throughRows(v, kernels::kTypeInt4PerTokenHead)));
  EXPECT_EQ(layer->memory().keys.metadata, 5 * 2 * 4);
  EXPECT_EQ(layer->memory().keys.payload, 5 * 2 * 32);
  EXPECT_EQ(toVllmFlags(parseSpec("vllm:kv=int4_per_token_head")).flags, "--kv-cache-dtype int4_per_token_head");
  EXPECT_DOUBLE_EQ(bitsPerValue(parseSpec("vllm:kv=int4_per_token_head"), 64), 4.5);
  // An fp16 model: the transform is rounded to fp16 before the codes, as vLLM's writer casts it.
  auto half = makeLayer(parseSpec("vllm:kv=int4_per_token_head"));
  const at::Tensor kh = k.to(at::kHalf);
  EXPECT_TRUE(at::equal(half->update(kh, kh).first, throughRows(kh, kernels::kTypeInt4PerTokenHeadF16).to(at::kHalf)));
  EXPECT_FALSE(
      at::equal(throughRows(kh, kernels::kTypeInt4PerTokenHeadF16), throughRows(kh, kernels::kTypeInt4PerTokenHead)));
  KvCache cache(parseSpec("vllm:kv=int4_per_token_head"), 6);  // no boundary skip
  EXPECT_EQ(cache.layer(0).backend(), Backend::Vllm);
}

TEST(TurboQuantLayer, StatisticsCountTheStoredScalesAndCodesWhenRead) {
  at::manual_seed(36);
  const auto total = [](const std::vector<std::int64_t>& h) { return std::accumulate(h.begin(), h.end(), 0LL); };
  auto layer = makeLayer(parseSpec("vllm:kv=turboquant_4bit_nc"));
  layer->update(randn(1, 2, 7, 64), randn(1, 2, 7, 64));
  layer->update(randn(1, 2, 1, 64), randn(1, 2, 1, 64));
  const LayerStats& st = layer->stats();
  EXPECT_EQ(st.keys.scaleKind, "fp16 key norms");
  EXPECT_EQ(st.values.scaleKind, "fp16 value scales");
  EXPECT_EQ(total(st.keys.scaleHistogram), 8 * 2);  // one norm per token and head
  EXPECT_EQ(total(st.keys.codeHistogram), 8 * 2 * 64);
  EXPECT_EQ(total(st.values.codeHistogram), 8 * 2 * 64);
  EXPECT_EQ(total(layer->stats().keys.scaleHistogram), 8 * 2);  // a second read counts nothing again
  // Since the last reset: a crop keeps what was counted, the next tokens add theirs.
  layer->crop(3);
  layer->update(randn(1, 2, 1, 64), randn(1, 2, 1, 64));
  EXPECT_EQ(total(layer->stats().keys.scaleHistogram), 9 * 2);
  layer->reset();
  layer->update(randn(1, 2, 1, 64), randn(1, 2, 1, 64));
  EXPECT_EQ(total(layer->stats().keys.scaleHistogram), 2);
  // Statistics off, or a 16-bit side: nothing counted.
  auto quiet = makeLayer(parseSpec("vllm:kv=turboquant_4bit_nc"), StatsOptions{.enabled = false});
  quiet->update(randn(1, 2, 3, 64), randn(1, 2, 3, 64));
  EXPECT_TRUE(quiet->stats().keys.scaleHistogram.empty());
  auto half = makeLayer(parseSpec("llamacpp:type_k=f16,type_v=q8_0"));
  half->update(randn(1, 2, 3, 64), randn(1, 2, 3, 64));
  EXPECT_TRUE(half->stats().keys.scaleHistogram.empty());
  EXPECT_EQ(half->stats().values.scaleKind, "fp16 block scales");
  EXPECT_EQ(total(half->stats().values.scaleHistogram), 3 * 2 * 2);  // two blocks of 32 per row
}
