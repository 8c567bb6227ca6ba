// The model doctor (generate/doctor.h) on random Qwen2-shaped GGUFs written here: one without anything planted (no
// verdict), one with k_proj bias spikes at its first and last layer as Qwen2.5-7B has them (bias spikes and outlier
// channels there, 8-bit keys suggested at exactly those layers), one whose keys pass 448 (fp8 overflow at vLLM's
// default scale), one with a head size of 64 (key-fragile: q8_0 keys measured layer by layer); the model facts; bad
// options.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache/config.h"
#include "generate/doctor.h"
#include "gguf_writer.h"
#include "model/llama.h"
#include "test_helpers.h"

using namespace kvscope;

namespace {

constexpr int kLayers = 6, kHidden = 64, kHeads = 4, kKvHeads = 2, kHeadDim = 16, kFfn = 96, kVocab = 96;

// A random Qwen2 (q/k/v biases) in F32; `kBias[l]` plants that value on channel 5 of layer l's k_proj bias. With a
// head size of 64, one query and one KV head.
std::string qwen2Model(const std::string& name, const std::map<int, float>& kBias, int headDim = kHeadDim) {
  at::manual_seed(17);
  const int heads = kHidden / headDim, kvHeads = heads > 1 ? kKvHeads : 1;
  std::vector<std::pair<std::string, std::vector<std::uint64_t>>> plan = {{"token_embd.weight", {kHidden, kVocab}},
                                                                          {"output_norm.weight", {kHidden}}};
  const std::uint64_t kvDim = std::uint64_t(kvHeads) * std::uint64_t(headDim);
  for (int l = 0; l < kLayers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    for (auto& t :
         std::vector<std::pair<std::string, std::vector<std::uint64_t>>>{{b + "attn_norm.weight", {kHidden}},
                                                                         {b + "attn_q.weight", {kHidden, kHidden}},
                                                                         {b + "attn_q.bias", {kHidden}},
                                                                         {b + "attn_k.weight", {kHidden, kvDim}},
                                                                         {b + "attn_k.bias", {kvDim}},
                                                                         {b + "attn_v.weight", {kHidden, kvDim}},
                                                                         {b + "attn_v.bias", {kvDim}},
                                                                         {b + "attn_output.weight", {kHidden, kHidden}},
                                                                         {b + "ffn_norm.weight", {kHidden}},
                                                                         {b + "ffn_gate.weight", {kHidden, kFfn}},
                                                                         {b + "ffn_up.weight", {kHidden, kFfn}},
                                                                         {b + "ffn_down.weight", {kFfn, kHidden}}})
      plan.push_back(t);
  }
  const std::vector<std::pair<std::string, std::uint32_t>> ints = {{"block_count", kLayers},
                                                                   {"embedding_length", kHidden},
                                                                   {"attention.head_count", std::uint32_t(heads)},
                                                                   {"attention.head_count_kv", std::uint32_t(kvHeads)},
                                                                   {"feed_forward_length", kFfn},
                                                                   {"context_length", 512}};
  testutil::GgufWriter g;
  g.header(plan.size(), 1 + ints.size());
  g.kvStr("general.architecture", "qwen2");
  for (const auto& [k, v] : ints) g.kvU32("qwen2." + k, v);
  g.f32Infos(plan);
  g.f32Data(plan, [&](const std::string& n, std::int64_t count) {
    const bool bias = n.find(".bias") != std::string::npos;
    at::Tensor v = n.find("norm") != std::string::npos ? 1 + 0.1 * at::randn({count})
                   : bias                              ? 0.1 * at::randn({count})
                                                       : 0.25 * at::randn({count});
    if (n.find("attn_k.bias") != std::string::npos) {
      const int l = std::stoi(n.substr(4));
      if (auto it = kBias.find(l); it != kBias.end()) v[5] = it->second;
    }
    v = v.contiguous();
    return std::vector<float>(v.data_ptr<float>(), v.data_ptr<float>() + count);
  });
  return g.write("doctor_" + name + ".gguf");
}

std::vector<std::vector<std::int64_t>> windows() {
  std::vector<std::int64_t> ids;
  ids.reserve(96);
  for (int i = 0; i < 96; ++i) ids.push_back((i * 37 + 11) % kVocab);
  return {ids};
}

const generate::DoctorVerdict* find(const generate::DoctorReport& r, const std::string& kind, const std::string& side) {
  for (const auto& v : r.verdicts)
    if (v.kind == kind && v.side == side) return &v;
  return nullptr;
}

}  // namespace

TEST(Doctor, SaysNothingAlarmingAboutAModelWithoutSpikes) {
  const auto m = model::LlamaModel::load(qwen2Model("clean", {}));
  const generate::DoctorReport r = generate::diagnose(*m, windows());
  EXPECT_TRUE(r.verdicts.empty()) << generate::doctorText(r);
  EXPECT_EQ(r.arch, "qwen2");
  EXPECT_EQ(r.tokens, 96);
  EXPECT_EQ(r.heads / r.kvHeads, 2);
  EXPECT_FALSE(r.llamaCppRotation);  // head size 16
  EXPECT_FALSE(r.powerOfTwoHead);    // a power of two, but below MXFP4's block
  EXPECT_EQ(r.boundaryLayers, (std::vector<int>{0, 1, 4, 5}));
  ASSERT_EQ(r.sides.size(), std::size_t{kLayers});
  for (const auto& layer : r.sides)
    for (const auto& s : layer) {
      EXPECT_EQ(s.values, 96 * kKvHeads * kHeadDim);
      EXPECT_GT(s.amax, 0.0f);
      EXPECT_LT(s.outlierRatio, 10.0);
      EXPECT_TRUE(s.hasBias);
      EXPECT_EQ(s.overUnitScale, 0);
    }
  EXPECT_NE(generate::doctorText(r).find("nothing alarming"), std::string::npos);
  // fp8 runs: scored, finite, and calibration no reason to act (no fp8_calibration verdict above).
  EXPECT_EQ(r.fp8.positions, 96 - 24);
  EXPECT_TRUE(std::isfinite(r.fp8.unitKl) && std::isfinite(r.fp8.calibratedKl)) << generate::doctorText(r);
  EXPECT_EQ(r.fp8.unitNonFinite, 0);
  EXPECT_NE(generate::doctorText(r).find("with calibrated scales"), std::string::npos);
  generate::DoctorOptions quick;
  quick.fp8Kl = false;
  const generate::DoctorReport q = generate::diagnose(*m, windows(), quick);
  EXPECT_FALSE(q.fp8.measured());
  EXPECT_TRUE(nlohmann::json::parse(generate::doctorJson(q))["fp8"].is_null());
}

TEST(Doctor, FlagsQwenLikeBiasSpikesAtTheFirstAndLastLayer) {
  const auto m = model::LlamaModel::load(qwen2Model("spiky", {{0, 300.0f}, {kLayers - 1, -250.0f}}));
  const generate::DoctorReport r = generate::diagnose(*m, windows());
  const auto* spikes = find(r, "bias_spikes", "keys");
  ASSERT_NE(spikes, nullptr) << generate::doctorText(r);
  EXPECT_EQ(spikes->layers, (std::vector<int>{0, kLayers - 1}));
  EXPECT_NE(spikes->text.find("reaches 300 at layers 0 and 5"), std::string::npos) << spikes->text;
  EXPECT_EQ(r.sides[kLayers - 1][0].biasChannel, 5);
  const auto* outliers = find(r, "outlier_channels", "keys");
  ASSERT_NE(outliers, nullptr);
  EXPECT_EQ(outliers->layers, (std::vector<int>{0, kLayers - 1}));
  EXPECT_GT(r.sides[0][0].outlierRatio, 30.0);
  // The config to try first keeps 8-bit keys (llamacpp's default type) at exactly those layers, and parses.
  EXPECT_EQ(spikes->config, "layers=0:llamacpp:type_v=q4_0;5:llamacpp:type_v=q4_0;*:llamacpp:type_k=q4_0,type_v=q4_0");
  EXPECT_NO_THROW(cache::parseSpec(spikes->config));
  EXPECT_EQ(find(r, "fp8_overflow", "keys"), nullptr);  // |k| stays under 448
  EXPECT_EQ(find(r, "bias_spikes", "values"), nullptr);
  // --json carries the same.
  const auto j = nlohmann::json::parse(generate::doctorJson(r));
  EXPECT_EQ(j["model"]["gqa_ratio"], 2);
  EXPECT_EQ(j["layers"].size(), std::size_t{kLayers});
  EXPECT_GT(j["layers"][0]["keys"]["bias_max"].get<double>(), 299.0);
  EXPECT_EQ(j["verdicts"][0]["kind"], "outlier_channels");
}

TEST(Doctor, FlagsFp8OverflowWhereKeysPass448) {
  const auto m = model::LlamaModel::load(qwen2Model("overflow", {{2, 900.0f}}));
  generate::DoctorOptions o;
  o.text = "cal.txt";
  const generate::DoctorReport r = generate::diagnose(*m, windows(), o);
  const auto* over = find(r, "fp8_overflow", "keys");
  ASSERT_NE(over, nullptr) << generate::doctorText(r);
  EXPECT_EQ(over->layers, (std::vector<int>{2}));
  EXPECT_GT(r.sides[2][0].amax, 448.0f);
  EXPECT_GT(r.sides[2][0].overUnitScale, 0);
  EXPECT_LT(r.sides[2][0].overUnitScale, r.sides[2][0].values / 8);
  EXPECT_NE(over->text.find("calibrate"), std::string::npos);
  EXPECT_EQ(over->config, "kvscope-cli calibrate --cache fp8 --text cal.txt -o fp8.json");
  EXPECT_EQ(find(r, "fp8_overflow", "values"), nullptr);
  // The unit scale against scales calibrated on the text: both measured, and different (the scales were used).
  EXPECT_TRUE(r.fp8.measured());
  EXPECT_NE(r.fp8.unitKl, r.fp8.calibratedKl);
  const auto j = nlohmann::json::parse(generate::doctorJson(r));
  EXPECT_EQ(j["fp8"]["positions"], r.fp8.positions);
  EXPECT_EQ(j["fp8"]["unit_scale_non_finite"], r.fp8.unitNonFinite);
}

TEST(Doctor, CalibrationIsAVerdictWhereItPays) {
  generate::DoctorFp8 f;
  EXPECT_FALSE(generate::fp8CalibrationVerdict(f, 4, "t.txt"));  // not measured
  f.positions = 100;
  f.unitKl = 0.02, f.calibratedKl = 0.002;
  const auto v = generate::fp8CalibrationVerdict(f, 4, "t.txt");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->kind, "fp8_calibration");
  EXPECT_EQ(v->layers, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_NE(v->text.find("recovers 90% of the unit-scale KL"), std::string::npos) << v->text;
  EXPECT_EQ(v->config, "kvscope-cli calibrate --cache fp8 --text t.txt -o fp8.json");
  f.calibratedKl = 0.0114, f.unitKl = 0.0108;  // SmolLM2's: calibration does no better
  EXPECT_FALSE(generate::fp8CalibrationVerdict(f, 4, "t.txt"));
  f.unitKl = 0.0008, f.calibratedKl = 0.0001;  // too little to act on
  EXPECT_FALSE(generate::fp8CalibrationVerdict(f, 4, "t.txt"));
  f.unitKl = std::nan(""), f.unitNonFinite = 7, f.calibratedKl = 0.003;  // the unit scale breaks the logits
  const auto nan = generate::fp8CalibrationVerdict(f, 4, "t.txt");
  ASSERT_TRUE(nan);
  EXPECT_NE(nan->text.find("non-finite logits at 7 of the text's 100"), std::string::npos) << nan->text;
}

TEST(Doctor, BadOptionsAreOneLine) {
  const auto m = model::LlamaModel::load(qwen2Model("clean", {}));
  generate::DoctorOptions o;
  o.base = "fp8";
  EXPECT_TRUE(testutil::mentions(testutil::errorOf<Error>([&] { generate::diagnose(*m, windows(), o); }),
                                 {"base config", "llamacpp", "fp8"}));
  o = {};
  o.outlierRatio = 0.5;
  EXPECT_TRUE(testutil::mentions(testutil::errorOf<Error>([&] { generate::diagnose(*m, windows(), o); }), {"ratio"}));
  EXPECT_TRUE(
      testutil::mentions(testutil::errorOf<Error>([&] { generate::diagnose(*m, {}); }), {"no calibration tokens"}));
}

TEST(Doctor, FlagsHeadSize64KeysAsFragileWithEachLayersQ8Kl) {
  const auto m = model::LlamaModel::load(qwen2Model("head64", {}, 64));
  generate::DoctorOptions scan;
  scan.keyLayers = true;
  const generate::DoctorReport r = generate::diagnose(*m, windows(), scan);
  ASSERT_TRUE(r.keyQ8.measured()) << generate::doctorText(r);
  EXPECT_EQ(r.keyQ8.why, "head size 64");
  ASSERT_EQ(r.keyQ8.layerKl.size(), std::size_t{kLayers});
  for (double kl : r.keyQ8.layerKl) EXPECT_TRUE(std::isfinite(kl) && kl > 0) << kl;
  EXPECT_TRUE(std::isfinite(r.keyQ8.allKl) && r.keyQ8.allKl > 0);
  EXPECT_NE(generate::doctorText(r).find("key-fragile (head size 64): llama.cpp's q8_0 keys"), std::string::npos);
  // A verdict where q8_0 keys cost 0.001 or more (a head-size-64 model without sinks), naming the costliest layer.
  const auto* v = find(r, "key_fragile", "keys");
  ASSERT_EQ(v != nullptr, r.keyQ8.allKl >= 1e-3) << generate::doctorText(r);
  generate::DoctorKeyQ8 sunk = r.keyQ8;
  sunk.sinks = true;  // a sink model's verdict comes whatever the cost
  const auto verdict = generate::keyFragileVerdict(sunk, "llamacpp:type_k=q4_0,type_v=q4_0");
  ASSERT_TRUE(verdict.has_value());
  const int worst =
      static_cast<int>(std::max_element(r.keyQ8.layerKl.begin(), r.keyQ8.layerKl.end()) - r.keyQ8.layerKl.begin());
  EXPECT_NE(std::find(verdict->layers.begin(), verdict->layers.end(), worst), verdict->layers.end());
  EXPECT_NE(verdict->config.find(std::to_string(worst) + ":llamacpp:type_k=f16"), std::string::npos) << verdict->config;
  EXPECT_NO_THROW(cache::parseSpec(verdict->config));
  EXPECT_NE(verdict->text.find("head size 64"), std::string::npos);
  EXPECT_FALSE(nlohmann::json::parse(generate::doctorJson(r))["key_q8"].is_null());
  generate::DoctorOptions quick;
  quick.keyKl = false;
  const generate::DoctorReport q = generate::diagnose(*m, windows(), quick);
  EXPECT_FALSE(q.keyQ8.measured());
  // By default the layers are scanned only where q8_0 keys on every layer cost 0.001 or more (no sinks here).
  const generate::DoctorReport d = generate::diagnose(*m, windows());
  EXPECT_EQ(d.keyQ8.allKl, r.keyQ8.allKl);
  EXPECT_EQ(d.keyQ8.layerKl.empty(), d.keyQ8.allKl < 1e-3);
  EXPECT_EQ(find(q, "key_fragile", "keys"), nullptr);
  EXPECT_EQ(generate::doctorText(q).find("key-fragile"), std::string::npos);
  // The clean head-16 model is not key-fragile: nothing measured.
  EXPECT_FALSE(generate::diagnose(*model::LlamaModel::load(qwen2Model("clean", {})), windows()).keyQ8.measured());
}

TEST(Doctor, KeyFragileKeepsTheCostliestLayers) {
  generate::DoctorKeyQ8 k;
  k.why = "learned attention sinks on layers 0-7";
  k.sinks = true;
  k.layerKl = {1e-4, 1e-4, 5e-3, 1e-4, 2e-3, 1e-4, 1e-4, 3e-3};
  k.allKl = 0.011;
  k.positions = 100;
  const auto v = generate::keyFragileVerdict(k, "llamacpp:type_k=q4_0,type_v=q4_0");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->layers, (std::vector<int>{2, 7}));  // at most a quarter of the layers, the two costliest
  EXPECT_EQ(v->config,
            "layers=2:llamacpp:type_k=f16,type_v=q4_0;7:llamacpp:type_k=f16,type_v=q4_0;*:llamacpp:type_k=q4_0,"
            "type_v=q4_0");
  EXPECT_NE(v->text.find("keys are fragile here"), std::string::npos);
  // Cheap 8-bit keys: a sink model is still flagged, with what the figures say; a head-size-64 model is not.
  k.allKl = 2e-4;
  const auto cheap = generate::keyFragileVerdict(k, "llamacpp:type_k=q4_0,type_v=q4_0");
  ASSERT_TRUE(cheap.has_value());
  EXPECT_NE(cheap->text.find("may be fragile"), std::string::npos);
  EXPECT_NE(cheap->text.find("8-bit keys hold on this text"), std::string::npos);
  k.sinks = false;
  EXPECT_FALSE(generate::keyFragileVerdict(k, "llamacpp:type_k=q4_0,type_v=q4_0").has_value());
  k.positions = 0;
  k.sinks = true;
  EXPECT_FALSE(generate::keyFragileVerdict(k, "llamacpp:type_k=q4_0,type_v=q4_0").has_value());
}
