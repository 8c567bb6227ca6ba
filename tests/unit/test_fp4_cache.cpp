// The engines' FP4 caches, and vLLM's per-token-head caches beside them: the row codecs (kernels/fp4_codec.h: E2M1
// roundings, block scales, row layout), the `vllm` (NVFP4, 4over6) and `mxfp4` layers (rows stored as their engine
// stores them, global scales, rotation of the keys, fused and reference attention, refusals), their options, exports
// and bits per value. Parity with vLLM's and Model-Optimizer's own code: tests/parity/test_fp4_parity.cpp.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache/config.h"
#include "cache/kv_cache.h"
#include "cache/layer.h"
#include "kernels/cpu/hadamard.h"
#include "kernels/cpu/kv_blocks.h"
#include "kernels/fp4_codec.h"
#include "tensor_helpers.h"
#include "test_helpers.h"

using namespace kvscope;
using namespace kvscope::cache;
using kvscope::testutil::randn;

namespace {

// x [B, H, T, D] with every row rotated (chunks of n; 0: none), encoded as `type` with global scale `scale`, decoded
// and rotated back: what the layer must hand back.
at::Tensor throughRows(const at::Tensor& x, std::uint32_t type, float scale, int n = 0) {
  const at::Tensor c = x.to(at::kFloat).contiguous();
  at::Tensor out = at::empty_like(c);
  const std::int64_t D = c.size(3), rows = c.numel() / D;
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(kernels::kvRowBytes(type, D)));
  std::vector<float> row(static_cast<std::size_t>(D));
  for (std::int64_t r = 0; r < rows; ++r) {
    std::memcpy(row.data(), c.const_data_ptr<float>() + r * D, static_cast<std::size_t>(D) * 4);
    if (n > 0) kernels::hadamardRotate(row.data(), D, n);
    kernels::quantizeKvRow(type, row.data(), D, bytes.data(), scale);
    float* y = out.mutable_data_ptr<float>() + r * D;
    kernels::dequantizeKvRow(type, bytes.data(), D, y, scale);
    if (n > 0) kernels::hadamardRotate(y, D, n);
  }
  return out;
}

std::string errorOf(const std::string& spec) {
  return testutil::errorOf<ConfigError>([&] { parseSpec(spec); });
}

}  // namespace

// --- codecs ---

TEST(Fp4Codec, RowsAreCodesThenOneScaleBytePerBlock) {
  EXPECT_EQ(kernels::kvRowBytes(kernels::kTypeNvfp4, 128), 64 + 8);  // 4.5 bits per value
  EXPECT_EQ(kernels::kvRowBytes(kernels::kTypeNvfp4FourOverSix, 64), 32 + 4);
  EXPECT_EQ(kernels::kvRowBytes(kernels::kTypeMxfp4, 128), 64 + 4);  // 4.25 bits per value
  EXPECT_EQ(kernels::kvRowScaleBytes(kernels::kTypeNvfp4, 128), 8);
  EXPECT_EQ(kernels::kvRowScaleBytes(kernels::kTypeMxfp4, 128), 4);
  EXPECT_EQ(kernels::kvRowBytes(kernels::kTypeInt8PerTokenHead, 96), 96 + 4);
  EXPECT_EQ(kernels::kvRowScaleBytes(kernels::kTypeFp8PerTokenHead, 96), 4);
  EXPECT_THROW(kernels::kvRowBytes(kernels::kTypeNvfp4, 40), Error);  // not whole blocks of 16
  EXPECT_THROW(kernels::kvRowBytes(kernels::kTypeMxfp4, 48), Error);  // not whole blocks of 32
}

TEST(Fp4Codec, E2M1RoundsTiesToEvenForNvfp4AndDownForMxfp4) {
  using kernels::fp4::e2m1IndexDown;
  using kernels::fp4::e2m1IndexEven;
  const float ties[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  const int even[] = {0, 2, 2, 4, 4, 6, 6}, down[] = {0, 1, 2, 3, 4, 5, 6};
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(e2m1IndexEven(ties[i]), even[i]) << ties[i];
    EXPECT_EQ(e2m1IndexDown(ties[i]), down[i]) << ties[i];
  }
  EXPECT_EQ(e2m1IndexEven(100.0f), 7);  // saturating
  EXPECT_EQ(e2m1IndexDown(5.01f), 7);
  EXPECT_EQ(kernels::fp4::e2m1Value(0x0F), -6.0f);
  EXPECT_EQ(kernels::fp4::e2m1Value(0x03), 1.5f);
}

TEST(Fp4Codec, Nvfp4BlockScaleIsAmaxOverSixInE4M3TimesTheGlobalScale) {
  // A block of amax 3 with global decode scale 0.5: block scale e4m3(3 / 6 / 0.5) = 1, values x / 0.5 on the grid.
  std::vector<float> x(16, 0.0f);
  x[0] = 3.0f, x[1] = -1.5f, x[2] = 0.125f, x[3] = 1.0f;
  std::vector<std::uint8_t> row(9);
  kernels::quantizeKvRow(kernels::kTypeNvfp4, x.data(), 16, row.data(), 0.5f);
  EXPECT_EQ(row[8], 0x38);  // E4M3 1.0
  std::vector<float> y(16);
  kernels::dequantizeKvRow(kernels::kTypeNvfp4, row.data(), 16, y.data(), 0.5f);
  EXPECT_EQ(y[0], 3.0f);
  EXPECT_EQ(y[1], -1.5f);
  EXPECT_EQ(y[2], 0.0f);  // 0.25 on the grid is a tie between 0 and 0.5: to even, 0
  EXPECT_EQ(y[3], 1.0f);
  // A zero block stores scale 0 and zeros.
  std::vector<float> z(16, 0.0f);
  kernels::quantizeKvRow(kernels::kTypeNvfp4, z.data(), 16, row.data(), 1.0f);
  EXPECT_EQ(row[8], 0);
}

TEST(Fp4Codec, FourOverSixTakesTheQuarterScaleOnlyWhereItFitsBetter) {
  // Values 4, 4, ... with amax 4: /6 gives scale 2/3 -> e4m3 0.6875, 4 / 0.6875 = 5.8 -> 6 (4.125); /4 gives scale 1,
  // 4 exactly: 4over6 picks /4.
  std::vector<float> x(16, 4.0f);
  std::vector<std::uint8_t> six(9), four(9);
  kernels::quantizeKvRow(kernels::kTypeNvfp4, x.data(), 16, six.data(), 1.0f);
  kernels::quantizeKvRow(kernels::kTypeNvfp4FourOverSix, x.data(), 16, four.data(), 1.0f);
  EXPECT_NE(six[8], four[8]);
  EXPECT_EQ(four[8], 0x38);
  std::vector<float> y(16);
  kernels::dequantizeKvRow(kernels::kTypeNvfp4FourOverSix, four.data(), 16, y.data(), 1.0f);
  EXPECT_EQ(y[5], 4.0f);
  // A block the /6 scale represents exactly (amax 6 with a unit scale) keeps it: ties go to /6.
  std::vector<float> g = {6, 4, 3, 2, 1.5f, 1, 0.5f, 0, -6, -4, -3, -2, -1.5f, -1, -0.5f, 0};
  kernels::quantizeKvRow(kernels::kTypeNvfp4, g.data(), 16, six.data(), 1.0f);
  kernels::quantizeKvRow(kernels::kTypeNvfp4FourOverSix, g.data(), 16, four.data(), 1.0f);
  EXPECT_EQ(std::vector<std::uint8_t>(six.begin(), six.end()), std::vector<std::uint8_t>(four.begin(), four.end()));
}

TEST(PerTokenHeadCodec, Int8AndFp8RowsAreVllmsFormula) {
  // amax 2.54: int8 scale 2.54 / 127 = 0.02, each value x * (1 / 0.02) rounded half away from zero; the float32 scale
  // after the codes.
  std::vector<float> x(32, 0.0f);
  x[0] = 2.54f, x[1] = -0.05f, x[2] = 0.03f, x[3] = -1.0f;
  std::vector<std::uint8_t> row(36);
  kernels::quantizeKvRow(kernels::kTypeInt8PerTokenHead, x.data(), 32, row.data());
  const float scale = 2.54f / 127.0f, inv = 1.0f / scale;
  float stored = 0.0f;
  std::memcpy(&stored, row.data() + 32, 4);
  EXPECT_EQ(stored, scale);
  EXPECT_EQ(static_cast<std::int8_t>(row[0]), 127);
  EXPECT_EQ(static_cast<std::int8_t>(row[1]), static_cast<int>(-0.05f * inv - 0.5f));  // -2.5 -> -3, away from zero
  EXPECT_EQ(static_cast<std::int8_t>(row[1]), -3);
  EXPECT_EQ(static_cast<std::int8_t>(row[2]), 2);  // 1.5 -> 2
  std::vector<float> y(32);
  kernels::dequantizeKvRow(kernels::kTypeInt8PerTokenHead, row.data(), 32, y.data());
  EXPECT_EQ(y[3], static_cast<float>(static_cast<std::int8_t>(row[3])) * scale);
  // e4m3: scale amax / 448, codes by the cast (to nearest even).
  kernels::quantizeKvRow(kernels::kTypeFp8PerTokenHead, x.data(), 32, row.data());
  std::memcpy(&stored, row.data() + 32, 4);
  EXPECT_EQ(stored, 2.54f / 448.0f);
  EXPECT_EQ(row[0], 0x7E);  // 448
  // An all-zero row keeps vLLM's floor of 1e-6 for its scale.
  std::vector<float> z(32, 0.0f);
  kernels::quantizeKvRow(kernels::kTypeInt8PerTokenHead, z.data(), 32, row.data());
  std::memcpy(&stored, row.data() + 32, 4);
  EXPECT_EQ(stored, 1e-6f);
}

TEST(PerTokenHeadLayer, StoresEachRowWithItsScaleAndRefusesSmallHeads) {
  at::manual_seed(25);
  const at::Tensor k = randn(1, 2, 7, 64), v = randn(1, 2, 7, 64);
  for (const char* kv : {"int8_per_token_head", "fp8_per_token_head"}) {
    SCOPED_TRACE(kv);
    const std::uint32_t type =
        std::string(kv).rfind("int8", 0) == 0 ? kernels::kTypeInt8PerTokenHead : kernels::kTypeFp8PerTokenHead;
    auto layer = makeLayer(parseSpec(std::string("vllm:kv=") + kv));
    const auto [ks, vs] = layer->update(k, v);
    EXPECT_TRUE(at::equal(ks, throughRows(k, type, 1.0f)));
    EXPECT_TRUE(at::equal(vs, throughRows(v, type, 1.0f)));
    EXPECT_EQ(layer->memory().keys.metadata, 7 * 2 * 4);
    EXPECT_EQ(layer->memory().keys.payload, 7 * 2 * 64);
    EXPECT_EQ(toVllmFlags(parseSpec(std::string("vllm:kv=") + kv)).flags, std::string("--kv-cache-dtype ") + kv);
    EXPECT_DOUBLE_EQ(bitsPerValue(parseSpec(std::string("vllm:kv=") + kv), 64), 8.5);
    EXPECT_THROW(toModelOptConfig(parseSpec(std::string("vllm:kv=") + kv)), ConfigError);
    try {
      makeLayer(parseSpec(std::string("vllm:kv=") + kv))->update(randn(1, 1, 2, 16), randn(1, 1, 2, 16));
      ADD_FAILURE() << "head size 16";
    } catch (const CacheError& e) {
      EXPECT_NE(std::string(e.what()).find("32 or more"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(toLlamaCppFlags(parseSpec("vllm:kv=int8_per_token_head")).flags, "-ctk q8_0 -ctv q8_0 -fa on");
}

// --- layers ---

TEST(Fp4Layer, VllmStoresNvfp4RowsWithTheFirstUpdatesGlobalScale) {
  at::manual_seed(21);
  const at::Tensor k1 = randn(1, 2, 6, 64) * 3.0, v1 = randn(1, 2, 6, 64);
  const at::Tensor k2 = randn(1, 2, 1, 64) * 9.0, v2 = randn(1, 2, 1, 64);  // beyond the first amax
  for (const char* kv : {"nvfp4", "nvfp4_4over6"}) {
    SCOPED_TRACE(kv);
    const std::uint32_t type = std::string(kv) == "nvfp4" ? kernels::kTypeNvfp4 : kernels::kTypeNvfp4FourOverSix;
    auto layer = makeLayer(parseSpec(std::string("vllm:kv=") + kv));
    layer->update(k1, v1);
    auto [k, v] = layer->update(k2, v2);
    // Model-Optimizer's k_scale / v_scale: amax / 448 of the first update, kept for the later ones.
    const float ks = k1.abs().max().item<float>() / 448.0f, vs = v1.abs().max().item<float>() / 448.0f;
    EXPECT_TRUE(at::equal(k, throughRows(at::cat({k1, k2}, 2), type, ks)));
    EXPECT_TRUE(at::equal(v, throughRows(at::cat({v1, v2}, 2), type, vs)));
    EXPECT_EQ(layer->backend(), Backend::Vllm);
    EXPECT_TRUE(layer->stats().keys.quantized);
    const LayerMemory m = layer->memory();
    EXPECT_EQ(m.keys.payload + m.keys.metadata, 7 * 2 * (32 + 4));
    EXPECT_EQ(m.keys.metadata, 7 * 2 * 4);
  }
  // scale=unit: vLLM without checkpoint scales, every global scale 1.0.
  auto unit = makeLayer(parseSpec("vllm:scale=unit"));
  EXPECT_TRUE(at::equal(unit->update(k1, v1).first, throughRows(k1, kernels::kTypeNvfp4, 1.0f)));
}

TEST(Fp4Layer, Mxfp4RotatesTheKeysOverTheWholeHeadWhenAsked) {
  at::manual_seed(22);
  const at::Tensor k = randn(1, 2, 5, 128), v = randn(1, 2, 5, 128);
  k.select(3, 9).mul_(40.0);  // an outlier channel: what the rotation is for
  auto plain = makeLayer(parseSpec("mxfp4"));
  auto rotated = makeLayer(parseSpec("mxfp4:rot=on"));
  const auto [kp, vp] = plain->update(k, v);
  const auto [kr, vr] = rotated->update(k, v);
  EXPECT_TRUE(at::equal(kp, throughRows(k, kernels::kTypeMxfp4, 1.0f)));
  EXPECT_TRUE(at::allclose(kr, throughRows(k, kernels::kTypeMxfp4, 1.0f, 128), 0.0, 1e-6));
  EXPECT_TRUE(at::equal(vr, vp));  // values are never rotated
  const double ep = ((kp - k).norm() / k.norm()).item<double>(), er = ((kr - k).norm() / k.norm()).item<double>();
  EXPECT_LT(er, ep) << "rotated " << er << ", plain " << ep;
  EXPECT_EQ(plain->backend(), Backend::Mxfp4);
}

TEST(Fp4Layer, UltraquantRotatesKeysAndQueriesAndLeavesTheBoundaryLayersUnquantized) {
  at::manual_seed(24);
  const at::Tensor k = randn(1, 2, 5, 64), v = randn(1, 2, 5, 64);
  auto layer = makeLayer(parseSpec("vllm:kv=ultraquant_4bit"));
  const auto [ks, vs] = layer->update(k, v);
  EXPECT_TRUE(at::allclose(ks, throughRows(k, kernels::kTypeUltraquant, 1.0f, 64), 0.0, 1e-6));
  EXPECT_TRUE(at::equal(vs, throughRows(v, kernels::kTypeUltraquant, 1.0f)));
  // Queries: rotated, cast to E4M3 as vLLM's decode reads them, rotated back.
  const at::Tensor q = randn(1, 4, 2, 64);
  const at::Tensor rq = layer->roundQueries(q);
  EXPECT_FALSE(at::equal(rq, q));
  EXPECT_LT(((rq - q).norm() / q.norm()).item<double>(), 0.05);
  // vLLM's boundary skip: layers 0, 1, L-2, L-1 of a dense model stay unquantized (n = min(2, L / 2)).
  KvCache cache(parseSpec("vllm:kv=ultraquant_4bit"), 6);
  for (int l = 0; l < 6; ++l)
    EXPECT_EQ(cache.layer(l).backend(), l >= 2 && l < 4 ? Backend::Vllm : Backend::Dynamic) << "layer " << l;
  KvCache two(parseSpec("vllm:kv=ultraquant_4bit"), 2);
  EXPECT_EQ(two.layer(0).backend(), Backend::Dynamic);
  KvCache nvfp4(parseSpec("vllm"), 6);  // NVFP4 has no boundary skip
  EXPECT_EQ(nvfp4.layer(0).backend(), Backend::Vllm);
  EXPECT_EQ(toVllmFlags(parseSpec("vllm:kv=ultraquant_4bit")).flags, "--kv-cache-dtype ultraquant_4bit");
  EXPECT_DOUBLE_EQ(bitsPerValue(parseSpec("vllm:kv=ultraquant_4bit")), 4.25);
}

TEST(Fp4Layer, FusedAttentionReadsTheStoredRows) {
  at::manual_seed(23);
  for (const char* spec :
       {"vllm", "vllm:kv=nvfp4_4over6,scale=unit", "vllm:kv=ultraquant_4bit", "mxfp4", "mxfp4:rot=on"}) {
    SCOPED_TRACE(spec);
    auto fused = makeLayer(parseSpec(spec));
    auto reference = makeLayer(
        parseSpec(std::string(spec) + (std::string(spec).find(':') == std::string::npos ? ":attention=reference"
                                                                                        : ",attention=reference")));
    for (std::int64_t T : {20, 1, 1, 3}) {
      const at::Tensor q = randn(1, 4, T, 64), k = randn(1, 2, T, 64), v = randn(1, 2, T, 64);
      const at::Tensor a = fused->attend(q, k, v), b = reference->attend(q, k, v);
      EXPECT_LT((a - b).abs().max().item<double>(), 2e-5) << "T " << T;
    }
    EXPECT_EQ(fused->memory().keys.transient, 0);
  }
}

TEST(Fp4Layer, RefusesHeadSizesItsFormatCannotStore) {
  const auto message = [](const std::string& spec, std::int64_t D) {
    try {
      makeLayer(parseSpec(spec))->update(randn(1, 1, 2, D), randn(1, 1, 2, D));
    } catch (const CacheError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message("vllm", 40).find("blocks of 16"), std::string::npos) << message("vllm", 40);
  EXPECT_NE(message("mxfp4", 48).find("blocks of 32"), std::string::npos) << message("mxfp4", 48);
  EXPECT_NE(message("mxfp4:rot=on", 96).find("power of two"), std::string::npos) << message("mxfp4:rot=on", 96);
  EXPECT_EQ(message("mxfp4", 96), "");  // unrotated, 96 is three blocks
  EXPECT_NE(message("vllm:kv=ultraquant_4bit", 96).find("power-of-two"), std::string::npos);
}

// --- options, exports, bits ---

TEST(Fp4Config, OptionsParseRoundTripAndComposeWithLayers) {
  const CacheConfig c = parseSpec("vllm:kv=nvfp4_4over6,scale=unit");
  EXPECT_EQ(c.backend, Backend::Vllm);
  EXPECT_EQ(c.vllmKv, VllmKv::Nvfp4FourOverSix);
  EXPECT_EQ(c.fp8Scale, Fp8Scale::Unit);
  EXPECT_EQ(parseSpec(toSpec(c)), c);
  EXPECT_EQ(configFromJson(toKvscopeJson(c)), c);
  EXPECT_EQ(toSpec(parseSpec("vllm")), "vllm");
  const CacheConfig m = parseSpec("mxfp4:rot=on");
  EXPECT_EQ(m.rotation, Rotation::On);
  EXPECT_EQ(parseSpec(toSpec(m)), m);
  const CacheConfig mixed = parseSpec("layers=0:dynamic;*:K=vllm,V=mxfp4:rot=on");
  EXPECT_TRUE(mixed.mixed());
  EXPECT_EQ(parseSpec("vllm:sink=4").sink, 4);
  EXPECT_EQ(errorOf("vllm:kv=nvfp5"),
            "option `kv` takes one of nvfp4, nvfp4_4over6, ultraquant_4bit, int8_per_token_head, fp8_per_token_head, "
            "int4_per_token_head, turboquant_k8v4, turboquant_4bit_nc, turboquant_k3v4_nc, turboquant_3bit_nc, got "
            "`nvfp5`");
  EXPECT_EQ(errorOf("vllm:nbits=4"),
            "unknown option `nbits` for the `vllm` backend (allowed: kv, scale, sink, attention)");
  EXPECT_EQ(errorOf("mxfp4:rot=maybe"), "option `rot` takes one of auto, on, off, got `maybe`");
  EXPECT_EQ(errorOf("mxfp4:q_group_size=16"),
            "unknown option `q_group_size` for the `mxfp4` backend (allowed: rot, sink, attention)");
}

TEST(Fp4Config, ExportsNameTheEnginesFlagOrSayWhatIsNearest) {
  EXPECT_EQ(toVllmFlags(parseSpec("vllm")).flags, "--kv-cache-dtype nvfp4");
  EXPECT_EQ(toVllmFlags(parseSpec("vllm:kv=nvfp4_4over6")).flags, "--kv-cache-dtype nvfp4_4over6");
  EXPECT_NE(toVllmFlags(parseSpec("vllm:scale=unit")).notes.front().find("1.0"), std::string::npos);
  EXPECT_EQ(toVllmFlags(parseSpec("layers=0:dynamic;*:vllm")).flags,
            "--kv-cache-dtype nvfp4 --kv-cache-dtype-skip-layers 0");
  const FlagExport mx = toVllmFlags(parseSpec("mxfp4:rot=on"));
  EXPECT_EQ(mx.flags, "--kv-cache-dtype nvfp4");
  EXPECT_NE(mx.notes.front().find("nearest"), std::string::npos);
  const FlagExport ll = toLlamaCppFlags(parseSpec("vllm"));
  EXPECT_EQ(ll.flags, "-ctk iq4_nl -ctv iq4_nl -fa on");
  EXPECT_NE(ll.notes.front().find("nearest"), std::string::npos);
  EXPECT_THROW(toHfCacheConfig(parseSpec("vllm")), ConfigError);
  EXPECT_THROW(toHfCacheConfig(parseSpec("mxfp4")), ConfigError);
}

TEST(Fp4Config, ModelOptimizerExportIsItsCheckpointMetadata) {
  const ModelOptExport nv = toModelOptConfig(parseSpec("vllm"));
  EXPECT_EQ(nv.kvCacheQuantAlgo, "NVFP4");
  const auto hf = nlohmann::json::parse(nv.hfQuantConfig);
  EXPECT_EQ(hf["producer"]["name"], "modelopt");
  EXPECT_EQ(hf["producer"]["version"], "0.47.0");
  EXPECT_EQ(hf["quantization"]["kv_cache_quant_algo"], "NVFP4");
  EXPECT_TRUE(hf["quantization"]["quant_algo"].is_null());
  const auto qc = nlohmann::json::parse(nv.quantizationConfig);
  EXPECT_EQ(qc["kv_cache_scheme"], "NVFP4");  // 0.47.0 writes other KV formats as a plain string
  EXPECT_EQ(qc["quant_method"], "modelopt");
  const ModelOptExport f8 = toModelOptConfig(parseSpec("fp8"));
  EXPECT_EQ(nlohmann::json::parse(f8.quantizationConfig)["kv_cache_scheme"],
            nlohmann::json::parse(R"({"dynamic": false, "num_bits": 8, "type": "float"})"));
  // One format for every layer; unquantized layers are vLLM's skip flag.
  const ModelOptExport mixed = toModelOptConfig(parseSpec("layers=0-1:dynamic;*:vllm:kv=nvfp4_4over6"));
  EXPECT_EQ(mixed.kvCacheQuantAlgo, "NVFP4");
  bool skipSaid = false;
  for (const auto& n : mixed.notes)
    skipSaid = skipSaid || n.find("--kv-cache-dtype-skip-layers 0 1") != std::string::npos;
  EXPECT_TRUE(skipSaid);
  for (const char* bad :
       {"layers=0:fp8;*:vllm", "mxfp4", "quanto:nbits=4", "dynamic", "fp8:format=e5m2", "vllm:kv=ultraquant_4bit"})
    EXPECT_THROW(toModelOptConfig(parseSpec(bad)), ConfigError) << bad;
}

TEST(Fp4Config, BitsPerValueCountTheScales) {
  EXPECT_DOUBLE_EQ(bitsPerValue(parseSpec("vllm")), 4.5);
  EXPECT_DOUBLE_EQ(bitsPerValue(parseSpec("mxfp4")), 4.25);
  EXPECT_DOUBLE_EQ(bitsPerValue(parseSpec("fp8")), 8.0);
  EXPECT_DOUBLE_EQ(bitsPerValue(parseSpec("dynamic")), 16.0);
  EXPECT_DOUBLE_EQ(bitsPerValue(parseSpec("llamacpp:type_k=q8_0,type_v=q4_0")), (8.5 + 4.5) / 2);
  EXPECT_DOUBLE_EQ(bitsPerValue(parseSpec("quanto:nbits=2,q_group_size=32")), 3.0);
  EXPECT_DOUBLE_EQ(bitsPerValue(parseSpec("layers=0:dynamic;*:K=vllm,V=mxfp4")), (4.5 + 4.25) / 2);
}
