// runtime::loadModel / defaultModelPath and the model session's options, what the CLI and the GUI share: where a model
// is found when none is named, the messages when none is, and how the session's options are checked and resolved.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "model/weight.h"
#include "random_model.h"
#include "runtime/model_loader.h"
#include "runtime/session.h"
#include "test_helpers.h"

using namespace kvscope;
namespace fs = std::filesystem;

namespace {
// Sets (or unsets, with nullopt) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      setenv(name, value->c_str(), 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};
}  // namespace

TEST(ModelLoader, LooksInTheEnvironmentThenTheCacheThenTheShippedFolder) {
  const fs::path home = testutil::freshDir("loader_home");
  const ScopedEnv noModel("KVSCOPE_MODEL", std::nullopt), noCache("KVSCOPE_CACHE", std::nullopt),
      h("HOME", home.string());
  const auto places = runtime::modelSearchPlaces();
  ASSERT_GE(places.size(), 2u);
  EXPECT_EQ(places[0], (home / ".cache/kvscope/model/SmolLM2-135M-Instruct.Q4_1.gguf").string());
  EXPECT_NE(places.back().find("share/kvscope/models"), std::string::npos) << places.back();
  EXPECT_EQ(runtime::defaultModelPath(), "");  // nothing fetched, nothing shipped beside the test program
  // The fetched model, once there.
  testutil::writeFile(home / ".cache/kvscope/model/SmolLM2-135M-Instruct.Q4_1.gguf", "x");
  EXPECT_EQ(runtime::defaultModelPath(), places[0]);
  {
    // KVSCOPE_CACHE moves the cache; KVSCOPE_MODEL wins over both, taken as given.
    const ScopedEnv c("KVSCOPE_CACHE", (home / "elsewhere").string());
    EXPECT_EQ(runtime::defaultModelPath(), "");
    const ScopedEnv m("KVSCOPE_MODEL", "/no/such/model.gguf");
    EXPECT_EQ(runtime::defaultModelPath(), "/no/such/model.gguf");
    EXPECT_EQ(runtime::modelSearchPlaces().front(), "/no/such/model.gguf");
  }
  fs::remove_all(home);
}

TEST(ModelLoader, NoModelSaysWhereItLooked) {
  const fs::path home = testutil::freshDir("loader_empty");
  const ScopedEnv noModel("KVSCOPE_MODEL", std::nullopt), noCache("KVSCOPE_CACHE", std::nullopt),
      h("HOME", home.string());
  try {
    runtime::loadModel("", "fp32");
    FAIL() << "loaded a model from nowhere";
  } catch (const runtime::ModelNotFound& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no model found (looked in " + home.string() + "/.cache/kvscope/model/"), std::string::npos)
        << what;
    EXPECT_NE(what.find("share/kvscope/models"), std::string::npos) << what;
  }
  try {
    runtime::loadModel((home / "missing.gguf").string(), "fp32");
    FAIL() << "loaded a missing file";
  } catch (const runtime::ModelNotFound& e) {
    EXPECT_NE(std::string(e.what()).find("missing.gguf` not found"), std::string::npos) << e.what();
  }
  // A Hugging Face directory without its tokenizer.
  fs::create_directories(home / "hf");
  try {
    runtime::loadModel((home / "hf").string(), "bf16");
    FAIL() << "loaded a directory without tokenizer.json";
  } catch (const runtime::ModelNotFound& e) {
    EXPECT_NE(std::string(e.what()).find("no tokenizer.json"), std::string::npos) << e.what();
  }
  fs::remove_all(home);
}

TEST(ModelLoader, DtypesAreNamedOrRefused) {
  EXPECT_EQ(runtime::parseDtype("fp32"), at::kFloat);
  EXPECT_EQ(runtime::parseDtype("bf16"), at::kBFloat16);
  EXPECT_EQ(runtime::parseDtype("fp16"), at::kHalf);
  try {
    runtime::parseDtype("fp64");
    FAIL();
  } catch (const kvscope::Error& e) {
    EXPECT_EQ(e.code(), kvscope::ErrorCode::BadInput);
    EXPECT_NE(std::string(e.what()).find("unknown dtype `fp64`"), std::string::npos) << e.what();
  }
  // The dtype is checked before the file is looked for.
  try {
    runtime::loadModel("/no/such/model.gguf", "int8");
    FAIL();
  } catch (const kvscope::Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown dtype `int8`"), std::string::npos) << e.what();
  }
}

// The model session's options: every bad value is one line naming the option and the choices, before the device is
// probed or the file looked for.
TEST(ModelSession, BadLoadOptionsAreRefusedBeforeAnythingIsRead) {
  const std::vector<std::pair<runtime::LoadOptions, const char*>> bad = {
      {{"/no/such/model.gguf", "cpu", "fp64", "auto", "stored"}, "unknown dtype `fp64` (fp32, bf16, fp16)"},
      {{"/no/such/model.gguf", "cpu", "fp32", "int4", "stored"}, "unknown activations `int4` (auto, f32, q8)"},
      {{"/no/such/model.gguf", "cuda:9", "fp32", "auto", "q3_k"},
       "unknown weights `q3_k` (stored, q8_0, q5_1, q5_0, q4_1, q4_0)"},
  };
  for (const auto& [o, msg] : bad) {
    try {
      (void)runtime::Session::open(o);
      FAIL() << msg;
    } catch (const kvscope::Error& e) {
      EXPECT_EQ(e.code(), kvscope::ErrorCode::BadInput);
      EXPECT_EQ(std::string(e.what()), msg);
    }
  }
  runtime::checkLoadOptions({});  // the defaults are among the choices
  EXPECT_EQ(runtime::LoadOptions{}.activations, runtime::activationsNames().front());
}

// auto: 8-bit activations where the weights are llama.cpp block formats (llama.cpp's arithmetic), float32 where they
// are float tensors (transformers'); f32 and q8 as named.
TEST(ModelSession, AutoActivationsFollowTheWeightsFormat) {
  const auto f32 = model::LlamaModel::load(testutil::randomModel());
  EXPECT_FALSE(f32->blockWeights());
  EXPECT_EQ(runtime::resolveActivations("auto", *f32), model::Activations::F32);
  EXPECT_EQ(runtime::resolveActivations("q8", *f32), model::Activations::Q8);
  const auto q4 = model::LlamaModel::load(testutil::randomModel(), device::ExecutionContext(), {},
                                          model::parseWeightFormat("q4_0"));
  EXPECT_TRUE(q4->blockWeights());
  EXPECT_EQ(runtime::resolveActivations("auto", *q4), model::Activations::Q8);
  EXPECT_EQ(runtime::resolveActivations("f32", *q4), model::Activations::F32);
  // The device path holds dense matrices: no block weights, float arithmetic.
  const auto dense =
      model::LlamaModel::load(testutil::randomModel(), device::ExecutionContext(c10::kCPU, at::kFloat, true), {},
                              model::parseWeightFormat("q4_0"));
  EXPECT_FALSE(dense->blockWeights());
  EXPECT_EQ(runtime::resolveActivations("auto", *dense), model::Activations::F32);
}
