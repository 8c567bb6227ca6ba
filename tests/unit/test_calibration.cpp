// FP8 calibration: scales from states (amax, percentile, headroom), overflow counts, and the fp8 layer using
// calibrated scales from the first token.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cfloat>
#include <nlohmann/json.hpp>

#include "cache/calibration.h"
#include "cache/kv_cache.h"
#include "cache/layer.h"

using namespace kvscope::cache;

TEST(Fp8Calibration, AmaxPercentileAndHeadroom) {
  at::manual_seed(41);
  const at::Tensor a = at::randn({2, 3, 10, 4}), b = at::randn({2, 3, 6, 4}) * 3;
  CalibrationOptions o;
  o.granularity = Fp8Granularity::Head;
  Fp8Calibrator cal(1, o);
  cal.add(0, true, a);
  cal.add(0, true, b);
  cal.add(0, false, a);
  const auto s = cal.scales(true);
  ASSERT_EQ(s.size(), 1u);
  ASSERT_EQ(s[0].size(), 3u);
  for (int h = 0; h < 3; ++h) {
    const float amax = std::max(a.select(1, h).abs().max().item<float>(), b.select(1, h).abs().max().item<float>());
    EXPECT_FLOAT_EQ(s[0][h], amax / 448.0f);
  }
  // Percentile (nearest rank) of |x| = 1..1000: the 99th is 990; headroom 2, e5m2's max 57344.
  CalibrationOptions p;
  p.percentile = true;
  p.percentileValue = 99.0;
  p.headroom = 2.0;
  p.format = Fp8Format::E5M2;
  Fp8Calibrator pc(1, p);
  const at::Tensor ramp =
      at::arange(1, 1001, at::kFloat).view({1, 1, 250, 4}) * ((at::arange(0, 1000) % 2) * 2 - 1).view({1, 1, 250, 4});
  pc.add(0, true, ramp);
  pc.add(0, false, ramp);
  EXPECT_FLOAT_EQ(pc.scales(true)[0][0], 990.0f * 2.0f / 57344.0f);
  EXPECT_EQ(pc.valuesSeen(), 2000);
  // Channel granularity: one scale per (head, channel).
  CalibrationOptions c;
  c.granularity = Fp8Granularity::Channel;
  Fp8Calibrator cc(1, c);
  cc.add(0, true, a);
  cc.add(0, false, a);
  EXPECT_EQ(cc.scales(true)[0].size(), 12u);
  EXPECT_FLOAT_EQ(cc.scales(true)[0][1 * 4 + 2], a.select(1, 1).select(2, 2).abs().max().item<float>() / 448.0f);
  // Errors.
  EXPECT_THROW(cal.add(0, true, at::randn({2, 2, 1, 4})), CacheError);
  EXPECT_THROW(Fp8Calibrator(2, o).scales(true), CacheError);  // layers that saw nothing
  CalibrationOptions bad = p;
  bad.percentileValue = 0;
  EXPECT_THROW(Fp8Calibrator(1, bad), ConfigError);
}

TEST(Fp8Calibration, OverflowCountsFollowPyTorchsCast) {
  const at::Tensor x = at::tensor({1.0f, 448.0f, 449.0f, 479.0f, 480.0f, -1000.0f}).view({1, 1, 6, 1});
  const OverflowCount c = countOverflow(x, {1.0f}, Fp8Granularity::Tensor, Fp8Format::E4M3FN);
  EXPECT_EQ(c.values, 6);
  EXPECT_EQ(c.beyondMax, 4);  // 449, 479, 480, -1000
  EXPECT_EQ(c.nonFinite, 3);  // above 464 PyTorch's cast gives NaN (0x7F); 449 rounds to 448
  EXPECT_EQ(countOverflow(x, {10.0f}, Fp8Granularity::Tensor, Fp8Format::E4M3FN).nonFinite, 0);
  EXPECT_FLOAT_EQ(seedScale(x), 1000.0f / 448.0f);
  EXPECT_EQ(seedScale(at::zeros({1, 1, 2, 2})), FLT_MIN);
  EXPECT_THROW(countOverflow(x, {1.0f, 2.0f}, Fp8Granularity::Tensor, Fp8Format::E4M3FN), CacheError);
}

TEST(Fp8Calibration, LayerUsesCalibratedScalesFromTheFirstToken) {
  at::manual_seed(42);
  CacheConfig cfg = parseSpec("fp8:granularity=head");
  cfg.keyScales = {{0.01f, 0.02f}, {0.5f, 0.25f}};
  cfg.valueScales = {{0.03f, 0.04f}, {1.0f, 1.0f}};
  validate(cfg);
  KvCache cache(cfg, 2);
  const at::Tensor p = at::randn({1, 2, 5, 8}) * 4;  // the prompt's amax would give other scales
  cache.update(0, p, p);
  cache.update(1, p, p);
  EXPECT_EQ(cache.layer(0).stats().keys.scales, (std::vector<float>{0.01f, 0.02f}));
  EXPECT_EQ(cache.layer(1).stats().keys.scales, (std::vector<float>{0.5f, 0.25f}));
  EXPECT_EQ(cache.layer(1).stats().values.scales, (std::vector<float>{1.0f, 1.0f}));
  // The prompt is stored with them: what the next step reads is the prompt encoded with the calibrated scales.
  const at::Tensor n = at::randn({1, 2, 1, 8});
  auto [k, v] = cache.update(1, n, n);
  const at::Tensor s = at::tensor({0.5f, 0.25f}).view({1, 2, 1, 1});
  const at::Tensor expected = (p / s).to(at::kFloat8_e4m3fn).to(at::kFloat) * s;
  EXPECT_TRUE(at::equal(k.narrow(2, 0, 5), expected));
  // Wrong size for the model: a clear error before anything is stored; a reset keeps the calibration.
  CacheConfig three = cfg;
  three.keyScales = {{1.0f, 1.0f, 1.0f}};
  three.valueScales = {{1.0f, 1.0f, 1.0f}};
  auto layer = makeLayer(three);
  EXPECT_THROW(layer->update(p, p), CacheError);
  EXPECT_EQ(layer->seqLength(), 0);
  cache.reset();
  cache.update(0, p, p);
  EXPECT_EQ(cache.layer(0).stats().keys.scales, (std::vector<float>{0.01f, 0.02f}));
  EXPECT_THROW(KvCache(cfg, 3), ConfigError);  // scales for 2 layers, model of 3
  EXPECT_THROW(makeLayer(cfg), ConfigError);   // per-layer scales need the whole cache
}

TEST(Fp8Calibration, ConfigFilesCarryTheScales) {
  CacheConfig cfg = parseSpec("fp8");
  cfg.keyScales = {{0.5f}, {0.25f}};
  cfg.valueScales = {{0.125f}, {2.0f}};
  const std::string text = toKvscopeJson(cfg);
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["kvscope"]["key_scales"][1][0], 0.25);
  EXPECT_EQ(configFromJson(text), cfg);
  auto withCalibration = j;
  withCalibration["calibration"] = {{"text", "t.txt"}};  // provenance, ignored when read
  EXPECT_EQ(configFromJson(withCalibration.dump()), cfg);
  EXPECT_EQ(toSpec(cfg), "fp8 [calibrated]");
  EXPECT_NE(toHfCacheConfig(cfg).notes.back().find("calibrated scales"), std::string::npos);
  CacheConfig q = parseSpec("quanto");
  q.keyScales = q.valueScales = {{1.0f}};
  EXPECT_THROW(validate(q), ConfigError);
  CacheConfig two = cfg;
  two.keyScales = {{0.5f, 0.5f}, {0.5f, 0.5f}};  // granularity=tensor takes one
  EXPECT_THROW(validate(two), ConfigError);
  CacheConfig neg = cfg;
  neg.valueScales = {{-1.0f}, {1.0f}};
  EXPECT_THROW(validate(neg), ConfigError);
  auto broken = j;
  broken["kvscope"]["key_scales"] = {1, 2};
  EXPECT_THROW(configFromJson(broken.dump()), ConfigError);
}

// scale=unit: vLLM's FP8 cache without checkpoint scales: every value cast to FP8 as it is (scale 1.0), whatever the
// granularity; the export says it is vLLM's own setting.
TEST(Fp8Calibration, UnitScaleIsVllmsDefault) {
  at::manual_seed(43);
  const at::Tensor k = at::randn({1, 2, 6, 8}) * 50, v = at::randn({1, 2, 6, 8}) * 0.01;
  for (const char* g : {"tensor", "head", "channel"}) {
    auto layer = makeLayer(parseSpec(std::string("fp8:scale=unit,attention=reference,granularity=") + g));
    layer->update(k, v);  // the prompt attends over itself as given (transformers); the next step reads it stored
    auto [kk, vv] = layer->update(k.narrow(2, 0, 1), v.narrow(2, 0, 1));
    EXPECT_TRUE(at::equal(kk.narrow(2, 0, 6), k.to(at::kFloat8_e4m3fn).to(at::kFloat))) << g;
    EXPECT_TRUE(at::equal(vv.narrow(2, 0, 6), v.to(at::kFloat8_e4m3fn).to(at::kFloat))) << g;
    for (float s : layer->stats().keys.scales) EXPECT_EQ(s, 1.0f) << g;
  }
  // The first-update scale (transformers) keeps small values that 1.0 flushes toward FP8's subnormals.
  auto amax = makeLayer(parseSpec("fp8:attention=reference"));
  auto unit = makeLayer(parseSpec("fp8:scale=unit,attention=reference"));
  amax->update(v, v);
  unit->update(v, v);
  const at::Tensor one = v.narrow(2, 0, 1);
  const double eAmax = (amax->update(one, one).first.narrow(2, 0, 6) - v).norm().item<double>();
  const double eUnit = (unit->update(one, one).first.narrow(2, 0, 6) - v).norm().item<double>();
  EXPECT_LT(eAmax, eUnit);
  EXPECT_NE(toVllmFlags(parseSpec("fp8:scale=unit")).notes.front().find("without k/v scales"), std::string::npos);
  EXPECT_EQ(parseSpec(toSpec(parseSpec("fp8:scale=unit"))).fp8Scale, Fp8Scale::Unit);
  EXPECT_THROW(parseSpec("fp8:scale=unit,headroom=2"), ConfigError);
  EXPECT_THROW(parseSpec("fp8:scale=one"), ConfigError);
  EXPECT_THROW(parseSpec("quanto:scale=unit"), ConfigError);
}

// Calibrated scales in vLLM's checkpoint form: one tensor per layer and side, scalar per tensor or [heads] per head
// (strategy attn_head, with the backend restriction said), and clear errors for what vLLM cannot load.
TEST(Fp8Calibration, VllmScalesAreCheckpointTensors) {
  CacheConfig t = parseSpec("fp8");
  t.keyScales = {{0.5f}, {0.25f}};
  t.valueScales = {{0.125f}, {2.f}};
  const VllmScales vt = toVllmScales(t);
  ASSERT_EQ(vt.tensors.size(), 4u);
  EXPECT_EQ(vt.tensors[0].name, "model.layers.0.self_attn.k_scale");
  EXPECT_EQ(vt.tensors[3].name, "model.layers.1.self_attn.v_scale");
  EXPECT_TRUE(vt.tensors[1].shape.empty());
  EXPECT_EQ(vt.tensors[3].values, std::vector<float>{2.f});
  const auto qc = nlohmann::json::parse(vt.quantizationConfig);
  EXPECT_EQ(qc["quant_method"], "compressed-tensors");
  EXPECT_EQ(qc["kv_cache_scheme"]["strategy"], "tensor");
  EXPECT_TRUE(qc["config_groups"].empty());

  CacheConfig h = parseSpec("fp8:granularity=head");
  h.keyScales = {{1.f, 2.f, 3.f}};
  h.valueScales = {{4.f, 5.f, 6.f}};
  const VllmScales vh = toVllmScales(h);
  EXPECT_EQ(vh.tensors[1].shape, std::vector<std::int64_t>{3});
  EXPECT_EQ(vh.tensors[1].values, (std::vector<float>{4.f, 5.f, 6.f}));
  EXPECT_EQ(nlohmann::json::parse(vh.quantizationConfig)["kv_cache_scheme"]["strategy"], "attn_head");
  EXPECT_NE(vh.notes.front().find("Flash-Attention 3 backend only"), std::string::npos);

  auto errorOf = [](const CacheConfig& c) {
    try {
      toVllmScales(c);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(errorOf(parseSpec("fp8")).find("from a calibrated fp8 config"), std::string::npos);
  CacheConfig c = parseSpec("fp8:granularity=channel");
  c.keyScales = c.valueScales = {std::vector<float>(6, 1.f)};
  EXPECT_NE(errorOf(c).find("granularity=channel has no vLLM form"), std::string::npos);
  CacheConfig e5 = parseSpec("fp8:format=e5m2");
  e5.keyScales = e5.valueScales = {{1.f}};
  EXPECT_NE(errorOf(e5).find("fp8_e4m3 cache"), std::string::npos);
}
