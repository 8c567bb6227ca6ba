// The `llamacpp` backend: llama.cpp's KV cache block types (kernels/cpu/kv_blocks.h: the legacy types are blocks.h's
// bytes, IQ4_NL decoded by hand and its nearest-level rule), the layer (each row rotated as llama.cpp rotates it,
// quantized, read back; fused and reference attention; memory; beams; crop; errors), its options and exports.
#include <ATen/ATen.h>
#include <c10/util/Half.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cache/config.h"
#include "cache/kv_cache.h"
#include "cache/layer.h"
#include "kernels/cpu/blocks.h"
#include "kernels/cpu/hadamard.h"
#include "kernels/cpu/kv_blocks.h"
#include "kernels/kv_block_codec.h"
#include "kernels/kv_blocks_tensor.h"
#include "tensor_helpers.h"
#include "test_helpers.h"

using namespace kvscope;
using namespace kvscope::cache;
using kvscope::testutil::randn;

namespace {

constexpr std::uint32_t kQ8_0 = 8, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kF16 = 1, kBF16 = 30;

std::vector<float> gaussian(std::size_t n, std::uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, sd);
  std::vector<float> x(n);
  for (auto& v : x) v = g(rng);
  return x;
}

std::uint16_t halfBits(float x) {
  return c10::Half(x).x;
}

// One row through a side of the cache as llama.cpp stores it: rotated (n > 0), quantized, decoded, rotated back.
std::vector<float> throughCache(std::uint32_t type, std::vector<float> row, int n) {
  const auto D = static_cast<std::int64_t>(row.size());
  if (n > 0) kernels::hadamardRotate(row.data(), D, n);
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(kernels::kvRowBytes(type, D)));
  kernels::quantizeKvRow(type, row.data(), D, bytes.data());
  std::vector<float> back(row.size());
  kernels::dequantizeKvRow(type, bytes.data(), D, back.data());
  if (n > 0) kernels::hadamardRotate(back.data(), D, n);
  return back;
}

// x [B, H, T, D] with every row through throughCache.
at::Tensor expectedStates(const at::Tensor& x, std::uint32_t type, int n) {
  const at::Tensor c = x.to(at::kFloat).contiguous();
  at::Tensor out = at::empty_like(c);
  const std::int64_t D = c.size(3), rows = c.numel() / D;
  for (std::int64_t r = 0; r < rows; ++r) {
    std::vector<float> row(c.const_data_ptr<float>() + r * D, c.const_data_ptr<float>() + (r + 1) * D);
    const auto back = throughCache(type, row, n);
    std::memcpy(out.mutable_data_ptr<float>() + r * D, back.data(), back.size() * 4);
  }
  return out;
}

double relError(const at::Tensor& got, const at::Tensor& want) {
  return ((got - want).norm() / want.norm()).item<double>();
}

}  // namespace

// --- block codecs ---

TEST(KvBlocks, RowBytesOfEveryType) {
  EXPECT_EQ(kernels::kvRowBytes(kQ8_0, 64), 68);
  EXPECT_EQ(kernels::kvRowBytes(kQ4_0, 64), 36);
  EXPECT_EQ(kernels::kvRowBytes(kQ4_1, 64), 40);
  EXPECT_EQ(kernels::kvRowBytes(kQ5_0, 64), 44);
  EXPECT_EQ(kernels::kvRowBytes(kQ5_1, 64), 48);
  EXPECT_EQ(kernels::kvRowBytes(kernels::kTypeIq4Nl, 64), 36);
  EXPECT_EQ(kernels::kvRowBytes(kF16, 40), 80);  // 16-bit rows take any head size
  EXPECT_EQ(kernels::kvRowBytes(kBF16, 40), 80);
  EXPECT_ERROR_CODE(kernels::kvRowBytes(kQ4_0, 40), ErrorCode::Internal);
  EXPECT_ERROR_CODE(kernels::kvRowScaleBytes(12, 64), ErrorCode::Internal);  // Q4_K is no KV cache type
  EXPECT_EQ(kernels::kvRowScaleBytes(kQ4_1, 64), 8);
  EXPECT_EQ(kernels::kvRowScaleBytes(kQ8_0, 64), 4);
  EXPECT_EQ(kernels::kvRowScaleBytes(kF16, 64), 0);
}

TEST(KvBlocks, LegacyTypesAreTheWeightQuantizersBytes) {
  const auto x = gaussian(256, 5, 3.0f);
  for (std::uint32_t t : {kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1}) {
    const std::size_t bytes = static_cast<std::size_t>(kernels::kvRowBytes(t, 256));
    std::vector<std::uint8_t> a(bytes), b(bytes);
    kernels::quantizeKvRow(t, x.data(), 256, a.data());
    kernels::quantizeRows(t, x.data(), 256, b.data());
    EXPECT_EQ(a, b) << "type " << t;
    std::vector<float> da(256), db(256);
    kernels::dequantizeKvRow(t, a.data(), 256, da.data());
    kernels::dequantize(t, b.data(), 256, db.data());
    EXPECT_EQ(da, db) << "type " << t;
  }
}

TEST(KvBlocks, SixteenBitRowsRoundToNearestEven) {
  const auto x = gaussian(96, 6, 100.0f);
  for (std::uint32_t t : {kF16, kBF16}) {
    std::vector<std::uint8_t> bytes(192);
    kernels::quantizeKvRow(t, x.data(), 96, bytes.data());
    const at::Tensor want = at::from_blob(const_cast<float*>(x.data()), {96}, at::kFloat)
                                .to(t == kF16 ? at::kHalf : at::kBFloat16)
                                .contiguous();
    EXPECT_EQ(std::memcmp(bytes.data(), want.const_data_ptr(), 192), 0);
    std::vector<float> back(96);
    kernels::dequantizeKvRow(t, bytes.data(), 96, back.data());
    const at::Tensor wantBack = want.to(at::kFloat);
    // Bit for bit (a float comparison would let -0 pass for +0): the bytes.
    EXPECT_EQ(
        std::memcmp(reinterpret_cast<const unsigned char*>(back.data()), wantBack.const_data_ptr(), 96 * sizeof(float)),
        0);
  }
}

// ggml's best_index_int8: the nearest of the 16 levels, ties to the upper one, the end levels beyond the ends.
TEST(Iq4Nl, NearestLevelRule) {
  std::int8_t v[16];
  for (int i = 0; i < 16; ++i) v[i] = static_cast<std::int8_t>(kernels::kvcodec::iq4NlLevel(i));
  EXPECT_EQ(kernels::iq4NlNearestLevel(-1000.0f), 0);
  EXPECT_EQ(kernels::iq4NlNearestLevel(-127.0f), 0);
  EXPECT_EQ(kernels::iq4NlNearestLevel(113.0f), 15);
  EXPECT_EQ(kernels::iq4NlNearestLevel(1e9f), 15);
  for (int i = 0; i < 15; ++i) {
    const float mid = (static_cast<float>(v[i]) + static_cast<float>(v[i + 1])) / 2.0f;
    EXPECT_EQ(kernels::iq4NlNearestLevel(static_cast<float>(v[i])), i);
    EXPECT_EQ(kernels::iq4NlNearestLevel(std::nextafter(mid, -1e9f)), i) << "just below the midpoint " << mid;
    EXPECT_EQ(kernels::iq4NlNearestLevel(mid), i + 1) << "a tie goes up: " << mid;
    EXPECT_EQ(kernels::iq4NlNearestLevel(std::nextafter(mid, 1e9f)), i + 1);
  }
  // Against a brute-force search over a fine grid (the first nearest, ties upwards).
  for (float x = -130.0f; x <= 116.0f; x += 0.37f) {
    int best = 0;
    for (int i = 1; i < 16; ++i)
      if (std::fabs(x - v[i]) <= std::fabs(x - v[best])) best = i;
    EXPECT_EQ(kernels::iq4NlNearestLevel(x), best) << x;
  }
}

TEST(Iq4Nl, DecodesScaleTimesLevel) {
  std::uint8_t b[18];
  const std::uint16_t d = halfBits(0.25f);
  std::memcpy(b, &d, 2);
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<std::uint8_t>(j | ((15 - j) << 4));
  float y[32];
  kernels::dequantizeKvRow(kernels::kTypeIq4Nl, b, 32, y);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.25f * kernels::kvcodec::iq4NlLevel(j));            // low nibbles: values 0..15
    EXPECT_EQ(y[j + 16], 0.25f * kernels::kvcodec::iq4NlLevel(15 - j));  // high nibbles: values 16..31
  }
}

TEST(Iq4Nl, QuantizerSearchesTheScale) {
  // An all-zero block: scale 0 and every index the level nearest 0 (ggml writes 0x88).
  std::vector<float> zeros(32, 0.0f);
  std::uint8_t b[18];
  kernels::quantizeKvRow(kernels::kTypeIq4Nl, zeros.data(), 32, b);
  EXPECT_EQ(b[0] | (b[1] << 8), 0);
  for (int j = 2; j < 18; ++j) EXPECT_EQ(b[j], 0x88);
  // Each stored index is the level nearest x / d, and the weighted (x²) error is no worse than that of the plain
  // scale (the largest magnitude onto the end level) that the search starts from.
  const auto x = gaussian(std::size_t{32} * 64, 9, 2.0f);
  double searched = 0.0, plain = 0.0;
  for (std::size_t blk = 0; blk < 64; ++blk) {
    const float* xb = x.data() + blk * 32;
    kernels::quantizeKvRow(kernels::kTypeIq4Nl, xb, 32, b);
    float y[32];
    kernels::dequantizeKvRow(kernels::kTypeIq4Nl, b, 32, y);
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; ++j)
      if (std::fabs(xb[j]) > amax) amax = std::fabs(xb[j]), max = xb[j];
    const float d0 = -max / kernels::kvcodec::iq4NlLevel(0);
    for (int j = 0; j < 32; ++j) {
      const float w = xb[j] * xb[j];
      searched += w * (y[j] - xb[j]) * (y[j] - xb[j]);
      const float q = d0 * kernels::kvcodec::iq4NlLevel(kernels::iq4NlNearestLevel(xb[j] / d0));
      plain += w * (q - xb[j]) * (q - xb[j]);
    }
  }
  EXPECT_LT(searched, plain);
}

// --- the layer ---

TEST(LlamaCppLayer, StoresEachRowAsLlamaCppDoes) {
  at::manual_seed(1);
  const at::Tensor k1 = randn(2, 2, 5, 128), v1 = randn(2, 2, 5, 128);
  const at::Tensor k2 = randn(2, 2, 1, 128), v2 = randn(2, 2, 1, 128);
  for (const char* rot : {"auto", "off"}) {
    auto layer = makeLayer(parseSpec(std::string("llamacpp:type_k=q4_0,type_v=q5_1,rot=") + rot));
    layer->update(k1, v1);
    auto [k, v] = layer->update(k2, v2);
    const bool r = std::string(rot) == "auto";
    // Keys: one rotation of the whole 128-value row; values: chunks of 64 (llama.cpp's sizes).
    EXPECT_TRUE(at::equal(k, expectedStates(at::cat({k1, k2}, 2), kQ4_0, r ? 128 : 0))) << rot;
    EXPECT_TRUE(at::equal(v, expectedStates(at::cat({v1, v2}, 2), kQ5_1, r ? 64 : 0))) << rot;
    EXPECT_EQ(layer->seqLength(), 6);
    EXPECT_EQ(layer->backend(), Backend::LlamaCpp);
    EXPECT_TRUE(layer->stats().keys.quantized);
    EXPECT_EQ(layer->stats().keys.quantizedTokens, 1);
  }
  // f16 sides are not rotated under auto; rot=on rotates them too.
  auto f16 = makeLayer(parseSpec("llamacpp:type_k=f16,type_v=q8_0"));
  auto [k, v] = f16->update(k1, v1);
  EXPECT_TRUE(at::equal(k, expectedStates(k1, kF16, 0)));
  EXPECT_TRUE(at::equal(v, expectedStates(v1, kQ8_0, 64)));
  auto on = makeLayer(parseSpec("llamacpp:type_k=f16,rot=on"));
  EXPECT_TRUE(at::equal(on->update(k1, v1).first, expectedStates(k1, kF16, 128)));
}

TEST(LlamaCppLayer, RotationSpreadsOutliers) {
  // Keys with a few outlier channels (what rotation is for): q4_0 with rotation loses less than without.
  at::manual_seed(2);
  at::Tensor k = randn(1, 2, 64, 64);
  k.select(3, 3).mul_(30.0);
  k.select(3, 40).mul_(-20.0);
  auto rotated = makeLayer(parseSpec("llamacpp:type_k=q4_0,type_v=q4_0"));
  auto plain = makeLayer(parseSpec("llamacpp:type_k=q4_0,type_v=q4_0,rot=off"));
  const double er = relError(rotated->update(k, k).first, k), ep = relError(plain->update(k, k).first, k);
  EXPECT_LT(er, ep * 0.8) << "rotated " << er << ", unrotated " << ep;
}

TEST(LlamaCppLayer, FusedAttentionReadsTheStoredRows) {
  at::manual_seed(3);
  const std::string spec = "llamacpp:type_k=iq4_nl,type_v=q4_1";
  auto fused = makeLayer(parseSpec(spec));
  auto reference = makeLayer(parseSpec(spec + ",attention=reference"));
  EXPECT_EQ(fused->attentionMode(), AttentionMode::Fused);
  for (std::int64_t T : {24, 1, 1, 3}) {
    const at::Tensor q = randn(1, 6, T, 64), k = randn(1, 2, T, 64), v = randn(1, 2, T, 64);
    const at::Tensor a = fused->attend(q, k, v), b = reference->attend(q, k, v);
    EXPECT_LT((a - b).abs().max().item<double>(), 2e-5) << "T " << T;
  }
  // Fused holds no full-precision copy; reference keeps one beside the rows.
  EXPECT_EQ(fused->memory().keys.transient, 0);
  EXPECT_EQ(reference->memory().keys.transient, 29 * 2 * 64 * 4);
}

TEST(LlamaCppLayer, QueriesRoundAsLlamaCppsAttentionRoundsThem) {
  // llama.cpp converts Q to the keys' dot type before Q·K: q8 blocks of 32 (rotated where the keys are) for quantized
  // keys, f16 for f16 keys. Attention is LibTorch's over the stored values with those queries.
  at::manual_seed(4);
  const at::Tensor q = randn(1, 4, 3, 128), k = randn(1, 2, 3, 128), v = randn(1, 2, 3, 128);
  q.select(3, 5).mul_(25.0);  // an outlier channel: its block's scale coarsens the others
  auto sdpa = [](const at::Tensor& qq, const at::Tensor& kk, const at::Tensor& vv) {
    const at::Tensor mask = at::ones({3, 3}, at::kBool).tril().view({1, 1, 3, 3});
    return at::scaled_dot_product_attention(qq, kk, vv, mask, 0.0, false, std::nullopt, /*enable_gqa=*/true);
  };
  for (const char* rot : {"auto", "off"}) {
    const int n = std::string(rot) == "auto" ? 128 : 0;
    for (const char* mode : {"fused", "reference"}) {
      auto layer =
          makeLayer(parseSpec(std::string("llamacpp:type_k=q4_0,type_v=q8_0,rot=") + rot + ",attention=" + mode));
      const at::Tensor got = layer->attend(q, k, v);
      const at::Tensor kk = expectedStates(k, kQ4_0, n), vv = expectedStates(v, kQ8_0, n ? 64 : 0);
      const at::Tensor want = sdpa(expectedStates(q, kQ8_0, n), kk, vv);
      EXPECT_LT((got - want).abs().max().item<double>(), 2e-5) << rot << " " << mode;
      EXPECT_GT((got - sdpa(q, kk, vv)).abs().max().item<double>(), 1e-4) << rot << " " << mode;  // not Q as it came
    }
  }
  auto f16 = makeLayer(parseSpec("llamacpp:type_k=f16,type_v=q8_0,attention=reference"));
  const at::Tensor want =
      sdpa(q.to(at::kHalf).to(at::kFloat), expectedStates(k, kF16, 0), expectedStates(v, kQ8_0, 64));
  EXPECT_LT((f16->attend(q, k, v) - want).abs().max().item<double>(), 2e-5);
  // Split configs round with their keys' layer; other backends leave Q as it is.
  KvCache split(parseSpec("layers=*:K=llamacpp:type_k=q4_0,rot=off,V=dynamic"), 1);
  EXPECT_TRUE(at::equal(split.layer(0).roundQueries(q), expectedStates(q, kQ8_0, 0)));
  KvCache other(parseSpec("layers=*:K=dynamic,V=llamacpp:type_v=q4_0"), 1);
  EXPECT_TRUE(at::equal(other.layer(0).roundQueries(q), q));
  EXPECT_TRUE(at::equal(makeLayer(parseSpec("quanto:nbits=4"))->roundQueries(q), q));
}

TEST(LlamaCppLayer, MemoryIsTheBlocks) {
  auto layer = makeLayer(parseSpec("llamacpp:type_k=q4_0,type_v=q4_1"));
  layer->update(randn(1, 2, 10, 64), randn(1, 2, 10, 64));
  const LayerMemory m = layer->memory();
  // keys: 10 tokens x 2 heads x 2 blocks of 18 bytes (2 of them the fp16 scale)
  EXPECT_EQ(m.keys.payload, 10 * 2 * 2 * 16);
  EXPECT_EQ(m.keys.metadata, 10 * 2 * 2 * 2);
  // values: blocks of 20 bytes (scale and minimum)
  EXPECT_EQ(m.values.payload, 10 * 2 * 2 * 16);
  EXPECT_EQ(m.values.metadata, 10 * 2 * 2 * 4);
  EXPECT_EQ(m.keys.unquantized, 10 * 2 * 64 * 4);
  EXPECT_EQ(m.keys.residual, 0);
  EXPECT_NEAR(m.keys.compressionRatio(), 128.0 / 18.0, 1e-12);
}

TEST(LlamaCppLayer, BeamsAndCrop) {
  at::manual_seed(4);
  auto layer = makeLayer(parseSpec("llamacpp:type_k=q8_0,type_v=q8_0,attention=reference"));
  const at::Tensor k = randn(2, 1, 4, 64), v = randn(2, 1, 4, 64);
  auto [k0, v0] = layer->update(k, v);
  const at::Tensor before = k0.clone();
  layer->reorder(at::tensor({1, 1}, at::kLong));
  auto [k1, v1] = layer->update(randn(2, 1, 1, 64), randn(2, 1, 1, 64));
  EXPECT_TRUE(at::equal(k1.narrow(2, 0, 4).select(0, 0), before.select(0, 1)));
  EXPECT_TRUE(at::equal(k1.narrow(2, 0, 4).select(0, 1), before.select(0, 1)));
  layer->crop(2);
  EXPECT_EQ(layer->seqLength(), 2);
  auto [k2, v2] = layer->update(randn(2, 1, 1, 64), randn(2, 1, 1, 64));
  EXPECT_EQ(k2.size(2), 3);
  EXPECT_TRUE(at::equal(k2.narrow(2, 0, 2).select(0, 0), before.select(0, 1).narrow(1, 0, 2)));
  EXPECT_THROW(layer->reorder(at::tensor({0, 5}, at::kLong)), CacheError);
  layer->crop(-100);
  EXPECT_EQ(layer->seqLength(), 0);
  EXPECT_EQ(layer->memory().keys.payload, 0);
}

TEST(LlamaCppLayer, RefusesWhatLlamaCppCannotStore) {
  auto q4 = makeLayer(parseSpec("llamacpp:type_k=q4_0,type_v=f16"));
  try {
    q4->update(randn(1, 1, 2, 48), randn(1, 1, 2, 48));
    FAIL() << "head size 48 in blocks of 32";
  } catch (const CacheError& e) {
    EXPECT_NE(std::string(e.what()).find("not a multiple of 32"), std::string::npos) << e.what();
  }
  // 16-bit types take any head size; auto does not rotate a head size that is not a multiple of 64, on refuses it.
  EXPECT_NO_THROW(
      makeLayer(parseSpec("llamacpp:type_k=f16,type_v=bf16"))->update(randn(1, 1, 2, 48), randn(1, 1, 2, 48)));
  auto autoRot = makeLayer(parseSpec("llamacpp:type_k=q8_0,type_v=q8_0"));
  const at::Tensor k96 = randn(1, 1, 2, 96);
  EXPECT_TRUE(at::equal(autoRot->update(k96, k96).first, expectedStates(k96, kQ8_0, 0)));
  try {
    makeLayer(parseSpec("llamacpp:rot=on"))->update(k96, k96);
    FAIL() << "rot=on with head size 96";
  } catch (const CacheError& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 64"), std::string::npos) << e.what();
  }
  auto layer = makeLayer(parseSpec("llamacpp"));
  layer->update(randn(1, 2, 2, 64), randn(1, 2, 2, 64));
  EXPECT_THROW(layer->update(randn(1, 3, 1, 64), randn(1, 3, 1, 64)), CacheError);
  EXPECT_EQ(layer->seqLength(), 2);  // the bad update changed nothing
}

// --- options and exports ---

TEST(LlamaCppConfig, OptionsParseAndRoundTrip) {
  const CacheConfig c = parseSpec("llamacpp:type_k=iq4_nl,type_v=q5_0,rot=off");
  EXPECT_EQ(c.backend, Backend::LlamaCpp);
  EXPECT_EQ(c.typeK, LlamaCppType::IQ4_NL);
  EXPECT_EQ(c.typeV, LlamaCppType::Q5_0);
  EXPECT_EQ(c.rotation, Rotation::Off);
  EXPECT_EQ(parseSpec(toSpec(c)), c);
  EXPECT_EQ(configFromJson(toKvscopeJson(c)), c);
  EXPECT_EQ(toSpec(parseSpec("llamacpp")), "llamacpp");
  EXPECT_EQ(optionValue(parseSpec("llamacpp"), "type_v"), "q8_0");
  for (const char* bad : {"llamacpp:type_k=q3_0", "llamacpp:rot=maybe", "llamacpp:nbits=4", "llamacpp:format=e5m2"})
    EXPECT_THROW(parseSpec(bad), ConfigError) << bad;
  try {
    parseSpec("llamacpp:type_v=q2_k");
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "type_v");
    EXPECT_NE(std::string(e.what()).find("iq4_nl"), std::string::npos) << e.what();
  }
  try {
    parseSpec("llama");
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("llamacpp"), std::string::npos) << e.what();
  }
}

TEST(LlamaCppConfig, LlamaCppExportIsExact) {
  const FlagExport e = toLlamaCppFlags(parseSpec("llamacpp:type_k=q4_0,type_v=q8_0"));
  EXPECT_EQ(e.flags, "-ctk q4_0 -ctv q8_0 -fa on");
  EXPECT_EQ(e.env, "");
  // Exact: nothing the target does not express (the -fa on it needs is in the flags, no note).
  EXPECT_TRUE(e.notes.empty()) << e.notes.front();
  const FlagExport off = toLlamaCppFlags(parseSpec("llamacpp:type_k=q5_1,type_v=iq4_nl,rot=off"));
  EXPECT_EQ(off.flags, "-ctk q5_1 -ctv iq4_nl -fa on");
  EXPECT_EQ(off.env, "LLAMA_ATTN_ROT_DISABLE=1");
  EXPECT_EQ(toLlamaCppFlags(parseSpec("llamacpp:type_k=q8_0,type_v=f16")).flags, "-ctk q8_0 -ctv f16");
  EXPECT_EQ(toLlamaCppFlags(parseSpec("llamacpp:type_k=f16,type_v=f16,rot=off")).env, "");  // nothing to rotate
  // Other backends stay nearest equivalents.
  EXPECT_NE(toLlamaCppFlags(parseSpec("fp8")).notes.front().find("nearest"), std::string::npos);
  // vLLM and transformers: nearest, said so.
  EXPECT_NE(toVllmFlags(parseSpec("llamacpp")).notes.front().find("nearest"), std::string::npos);
  EXPECT_EQ(toVllmFlags(parseSpec("llamacpp:type_k=bf16,type_v=f16")).flags, "--kv-cache-dtype auto");
  const HfExport hf = toHfCacheConfig(parseSpec("llamacpp:type_k=q4_0,type_v=q4_0"));
  EXPECT_NE(hf.json.find("\"hqq\""), std::string::npos);
  EXPECT_NE(hf.notes.front().find("nearest"), std::string::npos);
  EXPECT_THROW(toHfCacheConfig(parseSpec("llamacpp:type_k=f16,type_v=f16")), ConfigError);
}

// The tensor entry points the layer and the device path use (kernels/kv_blocks_tensor.h): rows written in place into
// a strided view (a buffer with room for more tokens), the bytes and values the row functions give, read back the
// same; bad arguments named.
TEST(KvBlocksTensor, StoreAndReadRowsAsTheRowFunctions) {
  at::manual_seed(11);
  const at::Tensor x = randn(2, 3, 5, 128);
  for (std::uint32_t t : {kF16, kBF16, kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1, kernels::kTypeIq4Nl}) {
    for (int n : {0, 64, 128}) {
      SCOPED_TRACE(std::to_string(t) + " rotation " + std::to_string(n));
      const std::int64_t rb = kernels::kvRowBytes(t, 128);
      at::Tensor buf = at::full({2, 3, 9, rb}, 0xAB, at::kByte);
      const at::Tensor rows = buf.narrow(2, 2, 5);  // strided: written where it lies
      const at::Tensor back = kernels::storeKvRows(x, t, n, rows, /*decode=*/true);
      EXPECT_TRUE(at::equal(back, expectedStates(x, t, n)));
      for (std::int64_t r = 0; r < std::int64_t{2} * 3 * 5; ++r) {
        std::vector<float> row(x.const_data_ptr<float>() + r * 128, x.const_data_ptr<float>() + (r + 1) * 128);
        if (n > 0) kernels::hadamardRotate(row.data(), 128, n);
        std::vector<std::uint8_t> want(static_cast<std::size_t>(rb));
        kernels::quantizeKvRow(t, row.data(), 128, want.data());
        const at::Tensor got = rows.select(0, r / 15).select(0, r / 5 % 3).select(0, r % 5).contiguous();
        ASSERT_EQ(std::memcmp(got.const_data_ptr(), want.data(), want.size()), 0) << "row " << r;
      }
      EXPECT_TRUE(at::equal(buf.narrow(2, 0, 2), at::full({2, 3, 2, rb}, 0xAB, at::kByte)));  // untouched around it
      EXPECT_TRUE(at::equal(buf.narrow(2, 7, 2), at::full({2, 3, 2, rb}, 0xAB, at::kByte)));
      EXPECT_TRUE(at::equal(kernels::readKvRows(rows, t, 128, n), back));
      EXPECT_TRUE(at::equal(kernels::roundThroughKvRows(x, t, n), back));
      EXPECT_FALSE(kernels::storeKvRows(x.to(at::kBFloat16), t, n, rows, /*decode=*/false).defined());
    }
  }
  const at::Tensor rows = at::empty({2, 3, 5, 34}, at::kByte);
  EXPECT_ERROR_CODE(kernels::storeKvRows(x, kQ8_0, 0, at::empty({2, 3, 5, 33}, at::kByte), false), ErrorCode::Internal);
  EXPECT_ERROR_CODE(kernels::storeKvRows(x.narrow(3, 0, 48), kQ8_0, 0, rows, false),
                    ErrorCode::Internal);  // not blocks
  EXPECT_ERROR_CODE(kernels::storeKvRows(x, kQ8_0, 48, rows.narrow(3, 0, 34), false), ErrorCode::Internal);  // rotation
  EXPECT_ERROR_CODE(kernels::readKvRows(rows, 99, 32, 0), ErrorCode::Internal);  // not a cache type
  EXPECT_ERROR_CODE(kernels::storeKvRows(randn(1, 1, 1, 1024), kF16, 0, at::empty({1, 1, 1, 2048}, at::kByte), false),
                    ErrorCode::BadInput);  // above the row codecs' head size
}

// llama.cpp holds a Llama-family model's keys with each head's rotary halves interleaved (its converter permutes Q/K
// for adjacent-pair RoPE): with setInterleavedRopePairs the keys are blocked, rotated and read in that order, and the
// queries rounded in it; values, f16 keys without rotation, and caches without the setting keep the model's order.
TEST(LlamaCppLayer, KeysAreBlockedInLlamaCppsChannelOrder) {
  at::manual_seed(5);
  const at::Tensor k = randn(1, 2, 4, 64), v = randn(1, 2, 4, 64), q = randn(1, 4, 1, 64);
  k.select(3, 40).mul_(30.0);  // an outlier channel: which 32 others share its block decides their error
  q.select(3, 40).mul_(30.0);
  // Channel j * 32 + i of the model's order is 2i + j of llama.cpp's.
  const at::Tensor order = at::arange(64).view({2, 32}).t().reshape({64});
  auto llamaOrder = [&](const at::Tensor& x) { return x.index_select(3, order); };
  auto modelOrder = [&](const at::Tensor& x) { return at::empty_like(x).index_copy_(3, order, x); };
  EXPECT_TRUE(at::equal(kernels::interleaveHalves(k), llamaOrder(k)));
  EXPECT_TRUE(at::equal(kernels::deinterleaveHalves(llamaOrder(k)), k));
  auto sdpa = [](const at::Tensor& qq, const at::Tensor& kk, const at::Tensor& vv) {
    return at::scaled_dot_product_attention(qq, kk, vv, {}, 0.0, false, std::nullopt, /*enable_gqa=*/true);
  };
  for (const char* rot : {"off", "auto"}) {
    const int n = std::string(rot) == "auto" ? 64 : 0;
    for (const char* mode : {"fused", "reference"}) {
      SCOPED_TRACE(std::string(rot) + " " + mode);
      KvCache cache(parseSpec(std::string("llamacpp:type_k=q4_0,type_v=q4_0,rot=") + rot + ",attention=" + mode), 1);
      cache.setInterleavedRopePairs(true);
      auto [kk, vv] = cache.update(0, k, v);
      const at::Tensor wantK = modelOrder(expectedStates(llamaOrder(k), kQ4_0, n));
      EXPECT_TRUE(at::equal(kk, wantK));
      EXPECT_FALSE(at::equal(kk, expectedStates(k, kQ4_0, n)));  // the order changes what is stored
      EXPECT_TRUE(at::equal(vv, expectedStates(v, kQ4_0, n)));   // values are not permuted
      const at::Tensor wantQ = modelOrder(expectedStates(llamaOrder(q), kQ8_0, n));
      EXPECT_TRUE(at::equal(cache.layer(0).roundQueries(q), wantQ));
      KvCache plain(parseSpec(std::string("llamacpp:type_k=q4_0,type_v=q4_0,rot=") + rot + ",attention=" + mode), 1);
      const at::Tensor k1 = randn(1, 2, 1, 64), v1 = randn(1, 2, 1, 64);
      plain.update(0, k, v);
      const at::Tensor qa = q / 40.0;  // logits that do not pick one key whatever the keys' error
      const at::Tensor got = cache.layer(0).attend(qa, k1, v1);
      const at::Tensor want = sdpa(modelOrder(expectedStates(llamaOrder(qa), kQ8_0, n)),
                                   at::cat({wantK, modelOrder(expectedStates(llamaOrder(k1), kQ4_0, n))}, 2),
                                   at::cat({expectedStates(v, kQ4_0, n), expectedStates(v1, kQ4_0, n)}, 2));
      EXPECT_LT((got - want).abs().max().item<double>(), 2e-5);
      EXPECT_GT((got - plain.layer(0).attend(qa, k1, v1)).abs().max().item<double>(), 1e-4);
    }
  }
  KvCache f16(parseSpec("layers=*:K=llamacpp:type_k=f16,V=llamacpp:type_v=q8_0"), 1);  // a split layer passes it on
  f16.setInterleavedRopePairs(true);
  EXPECT_TRUE(at::equal(f16.update(0, k, v).first, expectedStates(k, kF16, 0)));
  EXPECT_TRUE(at::equal(f16.layer(0).roundQueries(q), expectedStates(q, kF16, 0)));
}
