#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cache/config.h"
#include "cache/sweep.h"
#include "test_helpers.h"

using namespace kvscope::cache;

namespace {
std::string errorOf(const std::string& spec) {
  return kvscope::testutil::errorOf<ConfigError>([&] { parseSpec(spec); });
}
std::string keyOf(const std::string& spec) {
  try {
    parseSpec(spec);
  } catch (const ConfigError& e) {
    return e.key();
  }
  return "<none>";
}
}  // namespace

TEST(Config, ParsesSpecs) {
  EXPECT_EQ(parseSpec("fp8").backend, Backend::Fp8);
  EXPECT_EQ(parseSpec("dynamic").backend, Backend::Dynamic);
  const CacheConfig q = parseSpec("quanto:nbits=2,q_group_size=32,residual_length=64");
  EXPECT_EQ(q.backend, Backend::Quanto);
  EXPECT_EQ(q.nbits, 2);
  EXPECT_EQ(q.qGroupSize, 32);
  EXPECT_EQ(q.residualLength, 64);
  EXPECT_FALSE(q.axisKey.has_value());
  EXPECT_EQ(q.resolvedAxisKey(), 0);
  const CacheConfig h = parseSpec(" hqq : nbits=3, axis_key=1 ");
  EXPECT_EQ(h.nbits, 3);
  EXPECT_EQ(h.axisKey, 1);
  EXPECT_TRUE(h.hqqOptimize);
  const CacheConfig f = parseSpec("fp8:granularity=head,overflow=saturate,format=e5m2,headroom=1.25");
  EXPECT_EQ(f.granularity, Fp8Granularity::Head);
  EXPECT_EQ(f.overflow, OverflowPolicy::Saturate);
  EXPECT_EQ(f.fp8Format, Fp8Format::E5M2);
  EXPECT_DOUBLE_EQ(f.headroom, 1.25);
}

TEST(Config, Fp8RejectsGroupWiseOptionsWithTransformersMessage) {
  EXPECT_EQ(errorOf("fp8:nbits=4"),
            "The `fp8` backend quantizes per-tensor and does not support ['nbits']. Use the `quanto` or `hqq` backend "
            "to quantize group-wise.");
  CacheConfig c;
  c.backend = Backend::Fp8;
  c.qGroupSize = 32;
  c.nbits = 4;
  c.residualLength = 8;
  try {
    validate(c);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "The `fp8` backend quantizes per-tensor and does not support ['nbits', 'q_group_size', "
                 "'residual_length']. Use the `quanto` or `hqq` backend to quantize group-wise.");
    EXPECT_EQ(e.key(), "nbits");
  }
}

TEST(Config, ReferenceLimitsAndMessages) {
  EXPECT_EQ(errorOf("quanto:nbits=3"), "`nbits` for `quanto` backend has to be one of [`2`, `4`] but got 3");
  EXPECT_EQ(errorOf("quanto:axis_key=1"), "`axis_key` for `quanto` backend has to be one of [`0`, `-1`] but got 1");
  EXPECT_EQ(errorOf("hqq:nbits=5"), "`nbits` for `HQQ` backend has to be one of [`1`, `2`, `3`, `4`, `8`] but got 5");
  EXPECT_EQ(errorOf("hqq:axis_value=-1"), "`axis_value` for `HQQ` backend has to be one of [`0`, `1`] but got -1");
  EXPECT_EQ(keyOf("hqq:axis_value=-1"), "axis_value");
  EXPECT_EQ(errorOf("quanto:q_group_size=0"), "`q_group_size` must be a positive integer, got 0");
  EXPECT_EQ(errorOf("quanto:residual_length=-1"), "`residual_length` must be 0 or more, got -1");
  EXPECT_EQ(errorOf("fp8:headroom=0"), "`headroom` must be a positive number, got 0");
}

TEST(Config, ClearErrorsForBadSpecs) {
  EXPECT_EQ(errorOf("fp4"),
            "unknown cache backend `fp4` (allowed: dynamic, fp8, quanto, hqq, kivi, llamacpp, vllm, mxfp4)");
  EXPECT_EQ(errorOf("quanto:nbit=2"),
            "unknown option `nbit` for the `quanto` backend (allowed: nbits, axis_key, axis_value, q_group_size, "
            "residual_length, sink, attention)");
  EXPECT_EQ(errorOf("quanto:nbits=two"), "option `nbits` takes an integer, got `two`");
  EXPECT_EQ(errorOf("quanto:nbits"), "bad option `nbits` in cache spec `quanto:nbits` (write key=value)");
  EXPECT_EQ(errorOf("quanto:nbits=2,nbits=4"), "option `nbits` is given twice in cache spec `quanto:nbits=2,nbits=4`");
  EXPECT_EQ(errorOf("fp8:granularity=row"), "option `granularity` takes one of tensor, head, channel, got `row`");
  EXPECT_EQ(errorOf("dynamic:nbits=2"), "unknown option `nbits` for the `dynamic` backend (allowed: attention)");
  EXPECT_EQ(errorOf("fp8:optimize=true"),
            "unknown option `optimize` for the `fp8` backend (allowed: format, granularity, headroom, scale, overflow, "
            "sink, attention)");
  EXPECT_EQ(errorOf(""), "empty cache spec (try `fp8`, `quanto:nbits=2` or a JSON file)");
  EXPECT_EQ(errorOf("/nonexistent/cfg.json"), "cannot read cache config file `/nonexistent/cfg.json`");
}

TEST(Config, HfExportHoldsOnlyTransformersKeys) {
  const auto e = toHfCacheConfig(parseSpec("quanto:nbits=2,q_group_size=32"));
  const auto j = nlohmann::json::parse(e.json);
  EXPECT_EQ(j, nlohmann::json::parse(R"({"backend":"quanto","nbits":2,"axis_key":0,"axis_value":0,
                                        "q_group_size":32,"residual_length":128})"));
  EXPECT_TRUE(e.notes.empty());
  const auto f = toHfCacheConfig(parseSpec("fp8:granularity=head"));
  EXPECT_EQ(nlohmann::json::parse(f.json), nlohmann::json::parse(R"({"backend":"fp8"})"));
  ASSERT_EQ(f.notes.size(), 1u);
  EXPECT_NE(f.notes[0].find("granularity=head"), std::string::npos);
  EXPECT_THROW(toHfCacheConfig(parseSpec("dynamic")), ConfigError);
}

TEST(Config, KvscopeJsonRoundTrips) {
  for (const char* spec : {"fp8", "fp8:granularity=channel,overflow=recalibrate,headroom=2,format=e5m2",
                           "quanto:nbits=2,axis_key=-1,q_group_size=32,residual_length=16",
                           "hqq:nbits=3,optimize=false", "hqq", "dynamic"}) {
    CacheConfig c = parseSpec(spec);
    const CacheConfig back = configFromJson(toKvscopeJson(c));
    // The file writes group-wise keys resolved; compare resolved values and kvscope options.
    EXPECT_EQ(back.backend, c.backend) << spec;
    EXPECT_EQ(back.resolvedNbits(), c.resolvedNbits()) << spec;
    EXPECT_EQ(back.resolvedAxisKey(), c.resolvedAxisKey()) << spec;
    EXPECT_EQ(back.resolvedGroupSize(), c.resolvedGroupSize()) << spec;
    EXPECT_EQ(back.resolvedResidualLength(), c.resolvedResidualLength()) << spec;
    EXPECT_EQ(back.granularity, c.granularity) << spec;
    EXPECT_EQ(back.overflow, c.overflow) << spec;
    EXPECT_EQ(back.fp8Format, c.fp8Format) << spec;
    EXPECT_EQ(back.headroom, c.headroom) << spec;
    EXPECT_EQ(back.hqqOptimize, c.hqqOptimize) << spec;
    EXPECT_EQ(toKvscopeJson(back), toKvscopeJson(c)) << spec;
    if (c.backend != Backend::Dynamic) {
      const CacheConfig fromHf = configFromJson(toHfCacheConfig(c).json);
      EXPECT_EQ(fromHf.backend, c.backend);
      EXPECT_EQ(fromHf.resolvedNbits(), c.resolvedNbits());
    }
  }
}

TEST(Config, JsonFilesAndTheirErrors) {
  const auto dir = kvscope::testutil::tempPath("kvscope_test_config");
  const auto write = [&](const char* name, const char* text) { return kvscope::testutil::writeFile(dir / name, text); };
  EXPECT_EQ(parseSpec(write("a.json", R"({"backend":"hqq","nbits":2,"axis_key":null})")).nbits, 2);
  // transformers' default backend when cache_config has none.
  EXPECT_EQ(configFromJson(R"({"nbits":2})").backend, Backend::Quanto);
  const auto bad = write("b.json", R"({"backend":"quanto","nbits":"x"})");
  try {
    parseSpec(bad);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), bad + ": option `nbits` takes an integer, got `x`");
    EXPECT_EQ(e.key(), "nbits");
  }
  EXPECT_THROW(parseSpec(write("c.json", "{not json")), ConfigError);
  EXPECT_THROW(parseSpec(write("d.json", "[1,2]")), ConfigError);
  EXPECT_THROW(configFromJson(R"({"cache_config":{"backend":"fp8"},"kvscope":{"nbits":2}})"), ConfigError);
  EXPECT_THROW(configFromJson(R"({"cache_config":{"backend":"fp8","granularity":"head"}})"), ConfigError);
  EXPECT_THROW(configFromJson(R"({"cache_config":{"backend":"fp8"},"extra":1})"), ConfigError);
  std::filesystem::remove_all(dir);
}

TEST(Config, CanonicalSpec) {
  EXPECT_EQ(toSpec(parseSpec("quanto:q_group_size=32,nbits=2")), "quanto:nbits=2,q_group_size=32");
  EXPECT_EQ(toSpec(parseSpec("fp8:overflow=saturate")), "fp8:overflow=saturate");
  EXPECT_EQ(toSpec(parseSpec("fp8")), "fp8");
  EXPECT_EQ(parseSpec(toSpec(parseSpec("hqq:nbits=8,optimize=false"))), parseSpec("hqq:nbits=8,optimize=false"));
}

TEST(Config, GridsExpandToEveryCombination) {
  EXPECT_EQ(expandGrid("quanto:nbits=2,4;q_group_size=32,64"),
            (std::vector<std::string>{"quanto:nbits=2,q_group_size=32", "quanto:nbits=2,q_group_size=64",
                                      "quanto:nbits=4,q_group_size=32", "quanto:nbits=4,q_group_size=64"}));
  EXPECT_EQ(expandGrid("fp8"), (std::vector<std::string>{"fp8"}));
  EXPECT_EQ(expandGrid(" hqq : nbits = 2 , 3 "), (std::vector<std::string>{"hqq:nbits=2", "hqq:nbits=3"}));
  EXPECT_THROW(expandGrid("quanto:nbits"), ConfigError);
  EXPECT_THROW(expandGrid("quanto:nbits="), ConfigError);
  EXPECT_THROW(expandGrid(":nbits=2"), ConfigError);
}

TEST(Config, KiviOptions) {
  const CacheConfig k = parseSpec("kivi");
  EXPECT_EQ(k.backend, Backend::Kivi);
  EXPECT_EQ(k.resolvedNbits(), 2);  // KIVI's defaults
  EXPECT_EQ(k.resolvedGroupSize(), 32);
  EXPECT_EQ(k.resolvedResidualLength(), 128);
  EXPECT_EQ(toSpec(parseSpec("kivi:nbits=4,residual_length=16")), "kivi:nbits=4,residual_length=16");
  EXPECT_EQ(errorOf("kivi:nbits=8"), "`nbits` for `kivi` has to be 2 or 4, got 8");
  EXPECT_NE(errorOf("kivi:axis_value=0").find("unknown option `axis_value` for the `kivi` backend"), std::string::npos);
  CacheConfig axes = k;
  axes.axisKey = 0;  // built in code rather than parsed
  EXPECT_THROW(validate(axes), ConfigError);
  // kivi is kvscope's: its options live in the file's kvscope section, and transformers gets the nearest quanto.
  const auto j = nlohmann::json::parse(toKvscopeJson(parseSpec("kivi:nbits=4")));
  EXPECT_EQ(j["cache_config"], nlohmann::json::parse(R"({"backend":"kivi"})"));
  EXPECT_EQ(j["kvscope"]["nbits"], 4);
  EXPECT_EQ(configFromJson(j.dump()).resolvedNbits(), 4);
  const auto hf = toHfCacheConfig(parseSpec("kivi"));
  EXPECT_EQ(nlohmann::json::parse(hf.json), nlohmann::json::parse(R"({"backend":"quanto","nbits":2,"axis_key":-1,
      "axis_value":0,"q_group_size":32,"residual_length":128})"));
  ASSERT_EQ(hf.notes.size(), 1u);
  EXPECT_NE(hf.notes[0].find("nearest equivalent only"), std::string::npos);
  EXPECT_NE(toLlamaCppFlags(parseSpec("kivi")).flags.find("-ctk q4_0"), std::string::npos);
}

TEST(Config, SinkOption) {
  EXPECT_EQ(toSpec(parseSpec("kivi:nbits=4,sink=4")), "kivi:nbits=4,sink=4");
  EXPECT_EQ(errorOf("fp8:sink=-2"), "`sink` must be 0 or more tokens, got -2");
  EXPECT_NE(errorOf("dynamic:sink=2").find("unknown option `sink`"), std::string::npos);
  CacheConfig dyn;
  dyn.sink = 2;
  EXPECT_THROW(validate(dyn), ConfigError);
  for (const char* b : {"fp8", "quanto", "hqq", "kivi"}) EXPECT_EQ(parseSpec(std::string(b) + ":sink=3").sink, 3);
  const auto j = nlohmann::json::parse(toKvscopeJson(parseSpec("quanto:sink=2")));
  EXPECT_EQ(j["kvscope"]["sink"], 2);
  EXPECT_EQ(configFromJson(j.dump()).sink, 2);
  const auto hf = toHfCacheConfig(parseSpec("kivi:sink=2"));
  ASSERT_EQ(hf.notes.size(), 2u);
  EXPECT_NE(hf.notes[1].find("sink=2 has no transformers equivalent"), std::string::npos);
  EXPECT_NE(toVllmFlags(parseSpec("fp8:sink=1")).notes.back().find("sink=1"), std::string::npos);
  const auto ll = toLlamaCppFlags(parseSpec("hqq:sink=1")).notes;
  EXPECT_EQ(std::count_if(ll.begin(), ll.end(), [](const std::string& n) { return n.find("sink=1") == 0; }), 1);
}

TEST(Sweep, PlanValidatesEveryPointAndBudgetPicksTheBest) {
  const auto plan = kvscope::cache::planSweep({"quanto:nbits=2,4", "fp8"});
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(toSpec(plan[0]), "quanto:nbits=2");
  EXPECT_EQ(plan[2].backend, Backend::Fp8);
  EXPECT_THROW(kvscope::cache::planSweep({"quanto:nbits=2,3"}), ConfigError);  // nbits=3: not quanto's
  using kvscope::cache::SweepBudget;
  const std::vector<kvscope::cache::SweepOutcome> runs{
      {1000, 0.02}, {500, 0.04}, {250, 0.30}, {100, 0.01, /*hasKl=*/false}, {50, 0.001, true, /*finished=*/false}};
  EXPECT_EQ(bestUnderBudget(runs, {SweepBudget::Kind::MaxMeanKl, 0.05}), 1u);  // smallest within KL 0.05
  EXPECT_EQ(bestUnderBudget(runs, {SweepBudget::Kind::MaxMeanKl, 0.5}), 2u);
  EXPECT_EQ(bestUnderBudget(runs, {SweepBudget::Kind::MaxStoredBytes, 600}), 1u);  // lowest KL within 600 bytes
  EXPECT_EQ(bestUnderBudget(runs, {SweepBudget::Kind::MaxStoredBytes, 1000}), 0u);
  EXPECT_FALSE(bestUnderBudget(runs, {SweepBudget::Kind::MaxMeanKl, 0.001}).has_value());
  // A run that stored NaN/inf, or whose KL is NaN or inf, never ranks best, first in the list or not.
  for (const double bad : {std::nan(""), double(INFINITY)}) {
    const std::vector<kvscope::cache::SweepOutcome> broken{{100, bad}, {500, 0.04}};
    EXPECT_EQ(bestUnderBudget(broken, {SweepBudget::Kind::MaxStoredBytes, 1000}), 1u);
    EXPECT_EQ(bestUnderBudget(broken, {SweepBudget::Kind::MaxMeanKl, 0.5}), 1u);
  }
  const std::vector<kvscope::cache::SweepOutcome> storedNan{{100, 0.001, true, true, /*finite=*/false}, {500, 0.04}};
  EXPECT_EQ(bestUnderBudget(storedNan, {SweepBudget::Kind::MaxStoredBytes, 1000}), 1u);
  EXPECT_EQ(bestUnderBudget(storedNan, {SweepBudget::Kind::MaxMeanKl, 0.5}), 1u);
}

TEST(Config, OptionValueIsTheResolvedValue) {
  EXPECT_EQ(optionValue(parseSpec("quanto"), "nbits"), "4");
  EXPECT_EQ(optionValue(parseSpec("kivi"), "nbits"), "2");
  EXPECT_EQ(optionValue(parseSpec("fp8:headroom=1.25"), "headroom"), "1.25");
  EXPECT_EQ(optionValue(parseSpec("hqq"), "optimize"), "true");
  EXPECT_THROW(optionValue(parseSpec("fp8"), "nbits"), ConfigError);
}

TEST(Config, OptionTableHoldsEveryChoiceAndDefaultOnce) {
  // Each option's default is what a config with nothing set holds, and every choice the table offers is one the
  // option parses and writes back as itself: the table, the parser and the SPEC writer agree.
  for (Backend b : allBackends()) {
    CacheConfig unset;
    unset.backend = b;
    for (const OptionInfo& o : backendOptions(b)) {
      SCOPED_TRACE(std::string(backendName(b)) + ":" + o.name);
      EXPECT_FALSE(o.defaultValue.empty());
      EXPECT_EQ(o.defaultValue, optionValue(unset, o.name));
      for (const std::string& choice : o.choices) {
        CacheConfig c = unset;
        setOption(c, o.name, choice);
        EXPECT_EQ(optionValue(c, o.name), choice);
        EXPECT_NO_THROW(validate(c));  // int choices are the reference's limits, which validate() checks
        EXPECT_EQ(parseSpec(toSpec(c)), c);
      }
      if (o.kind == "int" && !o.choices.empty()) {
        CacheConfig c = unset;
        setOption(c, o.name, "7");  // in no int option's set
        try {
          validate(c);
          ADD_FAILURE() << "7 accepted";
        } catch (const ConfigError& e) {
          EXPECT_EQ(e.key(), o.name);
        }
      }
      if (o.kind == "choice") {
        CacheConfig c = unset;
        try {
          setOption(c, o.name, "bogus");
          ADD_FAILURE() << "bogus accepted";
        } catch (const ConfigError& e) {
          std::string listed;
          for (const auto& ch : o.choices) listed += (listed.empty() ? "" : ", ") + ch;
          EXPECT_NE(std::string(e.what()).find(listed), std::string::npos) << e.what();
        }
      }
    }
  }
  EXPECT_EQ(errorOf("kivi:nbits=3"), "`nbits` for `kivi` has to be 2 or 4, got 3");
}

TEST(Config, Fp8FormatsNamesAndMaxima) {
  EXPECT_EQ(fp8FormatName(Fp8Format::E4M3FN), "e4m3fn");
  EXPECT_EQ(fp8FormatName(Fp8Format::E5M2), "e5m2");
  static_assert(fp8Max(Fp8Format::E4M3FN) == 448.0f && fp8Max(Fp8Format::E5M2) == 57344.0f);
  EXPECT_EQ(parseSpec("fp8:format=e5m2").fp8Format, Fp8Format::E5M2);
  EXPECT_EQ(overflowName(OverflowPolicy::Saturate), "saturate");
  EXPECT_EQ(optionValue(parseSpec("fp8:overflow=recalibrate"), "overflow"), overflowName(OverflowPolicy::Recalibrate));
}
