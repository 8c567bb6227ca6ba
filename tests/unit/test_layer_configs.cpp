// Per-layer and asymmetric (K vs V) configs: SPEC and JSON forms, errors, exports, and the cache they build.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "cache/engine_layers.h"
#include "cache/kv_cache.h"
#include "cache/layer.h"
#include "tensor_helpers.h"
#include "test_helpers.h"

using namespace kvscope::cache;
using kvscope::testutil::sameBits;

namespace {
std::string errorOf(const std::string& spec) {
  return kvscope::testutil::errorOf<ConfigError>([&] { parseSpec(spec); });
}
const char* kMixed = "layers=0-1:dynamic;*:K=fp8:granularity=head,V=quanto:nbits=4,q_group_size=16";
}  // namespace

TEST(LayerConfigs, ParseAndRoundTrip) {
  const CacheConfig c = parseSpec(kMixed);
  ASSERT_TRUE(c.mixed());
  ASSERT_EQ(c.layers.size(), 2u);
  EXPECT_EQ(c.layers[0].first, 0);
  EXPECT_EQ(c.layers[0].last, 1);
  EXPECT_EQ(c.layers[0].keys.backend, Backend::Dynamic);
  EXPECT_TRUE(c.layers[1].wildcard());
  EXPECT_EQ(c.layers[1].keys.granularity, Fp8Granularity::Head);
  EXPECT_EQ(c.layers[1].values.backend, Backend::Quanto);
  EXPECT_EQ(c.backend, Backend::Fp8);  // the mirror: the `*` rule's keys
  EXPECT_EQ(toSpec(c), kMixed);
  EXPECT_EQ(parseSpec(toSpec(c)), c);
  // (the file writes quanto's keys resolved)
  EXPECT_EQ(toKvscopeJson(configFromJson(toKvscopeJson(c))), toKvscopeJson(c));
  EXPECT_EQ(configFromJson(toKvscopeJson(c)).layers[1].values.resolvedGroupSize(), 16);
  // V= first, spaces, single layers.
  const CacheConfig d = parseSpec("layers= 3 : hqq:nbits=2 ; *:V=quanto,K=fp8");
  EXPECT_EQ(d.layers[0].first, 3);
  EXPECT_EQ(d.layers[0].last, 3);
  EXPECT_EQ(d.layers[1].keys.backend, Backend::Fp8);
  EXPECT_EQ(d.layers[1].values.backend, Backend::Quanto);
  EXPECT_EQ(toSpec(d), "layers=3:hqq:nbits=2;*:K=fp8,V=quanto");
  // The mirror skips dynamic sides, so views that drop `dynamic` baselines keep a per-layer config.
  EXPECT_EQ(parseSpec("layers=*:dynamic;4-5:kivi").backend, Backend::Kivi);
  const auto j = nlohmann::json::parse(toKvscopeJson(c));
  EXPECT_EQ(j["layers"][0]["layers"], "0-1");
  EXPECT_EQ(j["layers"][0]["cache"]["cache_config"]["backend"], "dynamic");
  EXPECT_EQ(j["layers"][1]["keys"]["kvscope"]["granularity"], "head");
  EXPECT_EQ(j["layers"][1]["values"]["cache_config"]["nbits"], 4);
}

TEST(LayerConfigs, ClearErrors) {
  EXPECT_EQ(errorOf("layers=0-3:fp8;2-5:quanto"), "layers 0-3 and 2-5 overlap: each layer takes one rule");
  EXPECT_EQ(errorOf("layers=*:fp8;*:quanto"), "more than one `*` rule in a per-layer config");
  EXPECT_EQ(errorOf("layers=5-2:fp8"), "layer range `5-2` in `layers=5-2:fp8` runs backwards");
  EXPECT_EQ(errorOf("layers=a:fp8"), "bad layer range `a` in `layers=a:fp8` (write `*`, `N` or `N-M`)");
  EXPECT_EQ(errorOf("layers=*:K=fp8"), "rule `*:K=fp8`: give both sides, `K=SPEC,V=SPEC`");
  EXPECT_EQ(errorOf("layers=*"), "rule `*` in `layers=*` needs RANGE:CONFIG (e.g. `0-1:dynamic`)");
  EXPECT_EQ(errorOf("layers="), "`layers=` has no rules");
  EXPECT_EQ(errorOf("layers=*:quanto:nbits=3"), "`nbits` for `quanto` backend has to be one of [`2`, `4`] but got 3");
  EXPECT_NE(errorOf("layers=*:layers=*:fp8").find("cannot have rules of its own"), std::string::npos);
  // Ranges are checked against the model when the cache is built.
  EXPECT_THROW(KvCache(parseSpec("layers=0-1:fp8"), 4), ConfigError);  // layers 2, 3 have no rule
  try {
    const KvCache cache(parseSpec("layers=0-9:fp8;*:dynamic"), 4);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "layers 0-9 reach past the model's 4 layers (0-3)");
  }
  EXPECT_THROW(makeLayer(parseSpec(kMixed)), ConfigError);
  EXPECT_THROW(configFromJson(R"({"layers":[{"layers":"*","keys":{"backend":"fp8"}}]})"), ConfigError);
  EXPECT_THROW(configFromJson(R"({"layers":[{"layers":"*","cache":{"backend":"fp8"}}],"kvscope":{}})"), ConfigError);
  EXPECT_EQ(configFromJson(R"({"layers":[{"layers":"*","cache":{"backend":"quanto","nbits":2}}]})").layers[0].keys,
            parseSpec("quanto:nbits=2"));
}

TEST(LayerConfigs, ExportsSayWhatDoesNotMap) {
  // transformers: one config for every layer and both sides.
  const HfExport hf = toHfCacheConfig(parseSpec("layers=0-1:dynamic;*:quanto:nbits=2"));
  EXPECT_EQ(nlohmann::json::parse(hf.json)["nbits"], 2);
  ASSERT_EQ(hf.notes.size(), 1u);
  EXPECT_EQ(hf.notes[0],
            "not exported: layers 0-1 use keys `dynamic` and values `dynamic`; transformers applies "
            "this cache_config to every layer");
  try {
    toHfCacheConfig(parseSpec(kMixed));
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("quantizes keys and values with one config"), std::string::npos);
  }
  // Sides that differ only in their own axis merge into one quanto config.
  const HfExport axes = toHfCacheConfig(parseSpec("layers=*:K=quanto:axis_key=-1,V=quanto:axis_value=-1"));
  EXPECT_EQ(nlohmann::json::parse(axes.json)["axis_key"], -1);
  EXPECT_EQ(nlohmann::json::parse(axes.json)["axis_value"], -1);
  EXPECT_THROW(toHfCacheConfig(parseSpec("layers=0:fp8")), ConfigError);
  // vLLM: unquantized layers become --kv-cache-dtype-skip-layers.
  const FlagExport vl = toVllmFlags(parseSpec("layers=0-1:dynamic;29:dynamic;*:fp8"));
  EXPECT_EQ(vl.flags, "--kv-cache-dtype fp8_e4m3 --kv-cache-dtype-skip-layers 0 1 29");
  const FlagExport vm = toVllmFlags(parseSpec(kMixed));
  EXPECT_NE(vm.flags.find("--kv-cache-dtype-skip-layers 0 1"), std::string::npos);
  bool saidOneDtype = false;
  for (const auto& n : vm.notes)
    saidOneDtype |= n.find("one --kv-cache-dtype for keys and values") != std::string::npos;
  EXPECT_TRUE(saidOneDtype);
  // llama.cpp: K and V types of the `*` rule; per-layer rules stated as not exported.
  const FlagExport ll = toLlamaCppFlags(parseSpec(kMixed));
  EXPECT_EQ(ll.flags, "-ctk q8_0 -ctv q4_1 -fa on");
  EXPECT_NE(ll.notes.back().find("not exported: layers 0-1"), std::string::npos);
  EXPECT_EQ(toLlamaCppFlags(parseSpec("layers=*:K=quanto:nbits=4,V=dynamic")).flags, "-ctk q4_1 -ctv f16");
}

// The engines' rules per layer kind, on a Gemma-3-like pattern (layers 0-4 and 6-7 slide over 512, 5 is global).
TEST(LayerConfigs, ExportsApplyEachEnginesRuleToSlidingLayers) {
  const LayerWindows windows{512, 512, 512, 512, 512, 0, 512, 512};
  auto said = [](const FlagExport& e, const std::string& what) {
    return std::any_of(e.notes.begin(), e.notes.end(),
                       [&](const std::string& n) { return n.find(what) != std::string::npos; });
  };
  // vLLM: every sliding layer left unquantized is its `sliding_window` skip word (with any other skipped layer).
  const FlagExport skipped = toVllmFlags(parseSpec("layers=0-4:dynamic;6-7:dynamic;*:fp8"), windows);
  EXPECT_EQ(skipped.flags, "--kv-cache-dtype fp8_e4m3 --kv-cache-dtype-skip-layers sliding_window");
  EXPECT_TRUE(said(skipped, "sliding-window layers (0-4,6-7) keep the model's dtype"));
  EXPECT_EQ(toVllmFlags(parseSpec("layers=0-7:dynamic;*:fp8"), windows).flags,
            "--kv-cache-dtype fp8_e4m3 --kv-cache-dtype-skip-layers sliding_window 5");
  // Not every sliding layer skipped: indices, as without the model.
  EXPECT_EQ(toVllmFlags(parseSpec("layers=0-1:dynamic;*:fp8"), windows).flags,
            "--kv-cache-dtype fp8_e4m3 --kv-cache-dtype-skip-layers 0 1");
  // A uniform config quantizes them, in vLLM as in kvscope: said, with the flag that would keep them.
  const FlagExport uniform = toVllmFlags(parseSpec("fp8"), windows);
  EXPECT_EQ(uniform.flags, "--kv-cache-dtype fp8_e4m3");
  EXPECT_TRUE(said(uniform, "quantizes the sliding-window layers (0-4,6-7) too"));
  EXPECT_FALSE(said(toVllmFlags(parseSpec("fp8")), "sliding"));  // no model: nothing of layer kinds
  // TurboQuant's prefill ignores the window in vLLM 0.33.
  EXPECT_TRUE(said(toVllmFlags(parseSpec("vllm:kv=turboquant_4bit_nc"), windows), "without a window"));
  EXPECT_FALSE(said(toVllmFlags(parseSpec("vllm:kv=turboquant_4bit_nc"), {0, 0, 0}), "without a window"));
  // llama.cpp: the same -ctk/-ctv on the SWA cache, no --swa-full.
  const FlagExport ll = toLlamaCppFlags(parseSpec("llamacpp:type_k=q8_0,type_v=q8_0"), windows);
  EXPECT_EQ(ll.flags, "-ctk q8_0 -ctv q8_0 -fa on");
  EXPECT_TRUE(said(ll, "sliding-window layers (0-4,6-7) with the same -ctk/-ctv"));
  EXPECT_TRUE(said(ll, "--swa-full (not exported)"));
  EXPECT_FALSE(said(toLlamaCppFlags(parseSpec("llamacpp:type_k=q8_0,type_v=q8_0"), {0, 0}), "sliding"));
}

// Which layers each engine quantizes when it runs the config as exported: per layer kind, per engine rule.
TEST(LayerConfigs, EachEngineSaysWhichLayersItQuantizes) {
  const std::vector<std::int64_t> windows{512, 512, 512, 512, 512, 0, 512, 512};
  const std::vector<int> own;
  using E = EngineLayer;
  const auto rows = [&](const std::string& spec, const std::vector<int>& sources = {}) {
    return engineLayers(parseSpec(spec), windows, sources);
  };
  // The sliding layers kept `dynamic`: vLLM skips them (sliding_window), llama.cpp's one type reaches them anyway.
  auto r = rows("layers=0-4:dynamic;6-7:dynamic;*:fp8");
  ASSERT_EQ(r.size(), 2u);  // no transformers row for a per-layer config
  EXPECT_EQ(r[0].engine, "vLLM 0.33");
  EXPECT_EQ(r[0].layers, (std::vector<E>{E::Unquantized, E::Unquantized, E::Unquantized, E::Unquantized, E::Unquantized,
                                         E::Quantized, E::Unquantized, E::Unquantized}));
  EXPECT_EQ(describeEngineLayers(r[0]), "quantizes 5, keeps 0-4,6-7 unquantized");
  EXPECT_EQ(briefEngineLayers(r[0]), "5");
  EXPECT_EQ(r[1].engine, "llama.cpp");
  EXPECT_EQ(r[1].how, "-ctk q8_0 -ctv q8_0 -fa on");
  EXPECT_TRUE(r[1].nearest);  // llama.cpp has no fp8 cache
  EXPECT_EQ(describeEngineLayers(r[1]), "quantizes all 8");
  // Keys only in llama.cpp; TurboQuant's boundary layers in vLLM.
  r = rows("llamacpp:type_k=q8_0,type_v=f16");
  EXPECT_EQ(r[1].layers, std::vector<E>(8, E::KeysOnly));
  EXPECT_EQ(briefEngineLayers(r[1]), "keys of all 8");
  EXPECT_FALSE(r[1].nearest);
  EXPECT_EQ(r[0].how, "--kv-cache-dtype fp8_e4m3");
  EXPECT_EQ(describeEngineLayers(rows("vllm:kv=turboquant_4bit_nc")[0]), "quantizes 2-5, keeps 0-1,6-7 unquantized");
  EXPECT_EQ(describeEngineLayers(rows("dynamic")[0]), "keeps all 8 unquantized");
  EXPECT_EQ(briefEngineLayers(rows("dynamic")[0]), "none");
  // transformers' QuantizedCache: only full-attention models; a shared-KV layer stores nothing anywhere.
  r = rows("quanto:nbits=4");
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[2].how, "QuantizedCache(\"quanto\", nbits=4)");
  EXPECT_EQ(r[2].layers, std::vector<E>(8, E::Refused));
  EXPECT_EQ(briefEngineLayers(r[2]), "refuses");
  EXPECT_NE(describeEngineLayers(r[2]).find("refuses all 8 (QuantizedCache takes models with full-attention layers "
                                            "only)"),
            std::string::npos);
  const auto full = engineLayers(parseSpec("hqq:nbits=2"), {0, 0, 0, 0}, {-1, -1, 1, 1});
  EXPECT_EQ(full[2].layers, (std::vector<E>{E::Quantized, E::Quantized, E::Shared, E::Shared}));
  EXPECT_EQ(describeEngineLayers(full[2]), "quantizes all 2; 2-3 store nothing");
  EXPECT_EQ(describeEngineLayers(full[1]), "quantizes all 2; 2-3 store nothing");
  EXPECT_TRUE(rows("vllm:kv=int8_per_token_head").size() == 2u);
  EXPECT_THROW(rows("layers=0-1:fp8"), ConfigError);  // no `*`: neither engine takes it
}

TEST(LayerConfigs, CacheBuildsEachLayerFromItsRule) {
  at::manual_seed(31);
  const CacheConfig cfg = parseSpec(kMixed);
  KvCache cache(cfg, 3);
  auto fp8 = makeLayer(parseSpec("fp8:granularity=head"));
  auto quanto = makeLayer(parseSpec("quanto:nbits=4,q_group_size=16"));
  for (int step = 0; step < 6; ++step) {
    const std::int64_t T = step == 0 ? 9 : 1;
    const at::Tensor k = at::randn({1, 2, T, 16}), v = at::randn({1, 2, T, 16});
    for (int l = 0; l < 3; ++l) {
      auto [ck, cv] = cache.update(l, k, v);
      if (l < 2) {
        EXPECT_TRUE(at::equal(ck.narrow(2, ck.size(2) - T, T), k));  // dynamic: stored as given
        EXPECT_TRUE(at::equal(cv.narrow(2, cv.size(2) - T, T), v));
      } else {
        EXPECT_TRUE(sameBits(ck, fp8->update(k, v).first)) << step;       // keys: the fp8 layer alone
        EXPECT_TRUE(at::equal(cv, quanto->update(k, v).second)) << step;  // values: the quanto layer alone
      }
    }
  }
  EXPECT_EQ(cache.seqLength(), 14);
  EXPECT_EQ(cache.layer(0).backend(), Backend::Dynamic);
  EXPECT_EQ(cache.layer(2).backend(), Backend::Fp8);
  const LayerMemory m = cache.layer(2).memory();
  EXPECT_EQ(m.keys.payload, fp8->memory().keys.payload);
  EXPECT_EQ(m.values.payload, quanto->memory().values.payload);
  EXPECT_EQ(m.values.residual, quanto->memory().values.residual);
  EXPECT_FALSE(cache.layer(2).stats().keys.scales.empty());  // keys' statistics from the fp8 side
  cache.reorder(at::tensor({0}, at::kLong));
  cache.crop(10);
  EXPECT_EQ(cache.seqLength(), 10);
  cache.reset();
  EXPECT_EQ(cache.seqLength(), 0);
}
