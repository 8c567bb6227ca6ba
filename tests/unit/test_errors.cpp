// One error type with a code: every error kvscope raises carries it, and the exceptions of LibTorch and the standard
// library are classified once (runtime::currentFailure), so that callers decide on the code.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <new>
#include <stdexcept>

#include "cache/config.h"
#include "cache/kv_cache.h"
#include "cache/layer.h"
#include "generate/eval.h"
#include "generate/generate.h"
#include "kernels/kv_blocks_tensor.h"
#include "model/llama.h"
#include "model/safetensors.h"
#include "model/weight.h"
#include "random_model.h"
#include "runtime/errors.h"
#include "runtime/model_loader.h"
#include "tensor_helpers.h"
#include "test_helpers.h"
#include "tokenizer/tokenizer.h"

using namespace kvscope;

namespace {
template <typename F>
runtime::Failure failureOf(F&& f) {
  try {
    f();
  } catch (...) {
    return runtime::currentFailure();
  }
  return {ErrorCode::Internal, "(nothing thrown)"};
}
}  // namespace

TEST(Errors, EveryKvscopeErrorCarriesItsCode) {
  const auto config = failureOf([] { cache::parseSpec("quanto:nbits=3"); });
  EXPECT_EQ(config.code, ErrorCode::BadInput);
  EXPECT_NE(config.message.find("`nbits` for `quanto`"), std::string::npos) << config.message;
  EXPECT_EQ(failureOf([] { throw cache::CacheError("bad beam index"); }).code, ErrorCode::BadInput);
  EXPECT_EQ(failureOf([] { throw model::FormatError("m.gguf: truncated"); }).code, ErrorCode::BadFile);
  EXPECT_EQ(failureOf([] { throw tokenizer::TokenizerError("tokenizer.json: no model"); }).code, ErrorCode::BadFile);
  // A model that is not there is a file the user names (or fetches), not a bad option: BadFile, still exit 2.
  const auto missing = failureOf([] { runtime::loadModel("/no/such/model.gguf", "fp32"); });
  EXPECT_EQ(missing.code, ErrorCode::BadFile);
  EXPECT_EQ(exitStatus(missing.code), 2);
  EXPECT_EQ(failureOf([] { throw runtime::ModelNotFound("no model found"); }).code, ErrorCode::BadFile);
  // Every cancel is one kvscope::Cancelled, whoever throws it.
  for (const auto& f :
       {failureOf([] { throw model::LoadCancelled(); }), failureOf([] { throw generate::EvalCancelled(); })}) {
    EXPECT_EQ(f.code, ErrorCode::Cancelled);
    EXPECT_EQ(exitStatus(f.code), 130);
  }
  EXPECT_EQ(exitStatus(ErrorCode::BadFile), 2);
  EXPECT_EQ(exitStatus(ErrorCode::Internal), 1);
}

TEST(Errors, ForeignExceptionsAreClassifiedOnce) {
  EXPECT_EQ(failureOf([] { throw std::bad_alloc(); }).code, ErrorCode::OutOfMemory);
  // kvscope raises whatever the user can fix as a kvscope::Error: a bare std:: exception is a broken invariant.
  const auto bare = failureOf([] { throw std::invalid_argument("two query tokens"); });
  EXPECT_EQ(bare.code, ErrorCode::Internal);
  EXPECT_EQ(bare.message, "two query tokens");
  EXPECT_EQ(exitStatus(bare.code), 1);
  EXPECT_EQ(failureOf([] { throw std::logic_error("unreachable"); }).code, ErrorCode::Internal);
  EXPECT_EQ(failureOf([] { throw std::runtime_error("oops"); }).code, ErrorCode::Internal);
  EXPECT_EQ(failureOf([] { throw 42; }).code, ErrorCode::Internal);
  // An Error keeps its code, whichever it is.
  for (ErrorCode c : {ErrorCode::BadInput, ErrorCode::BadFile, ErrorCode::Unavailable, ErrorCode::Internal})
    EXPECT_EQ(failureOf([c] { throw Error(c, "x"); }).code, c);
  // LibTorch's own checks: the message without its C++ backtrace, one line.
  const auto torch = failureOf([] { TORCH_CHECK(false, "shapes do not match"); });
  EXPECT_EQ(torch.code, ErrorCode::Internal);
  EXPECT_EQ(torch.message.find('\n'), std::string::npos) << torch.message;
  EXPECT_NE(torch.message.find("shapes do not match"), std::string::npos) << torch.message;
  EXPECT_EQ(failureOf([] { TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory"); }).code,
            ErrorCode::OutOfMemory);
}

TEST(Errors, AFailedCpuAllocationIsOutOfMemoryByType) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizers' allocators abort on an impossible allocation instead of failing it";
#endif
  runtime::installOutOfMemoryType();
  const auto f = failureOf([] { at::empty({std::int64_t{1} << 56}, at::kByte); });  // 64 PiB: always refused
  EXPECT_EQ(f.code, ErrorCode::OutOfMemory) << f.message;
  // Tensors still allocate through it as before.
  EXPECT_EQ(at::ones({3}).sum().item<float>(), 3.0f);
}

// The checks in core: what a user's option, text or model can reach is BadInput (exit 2); a check of what kvscope's
// own code passes (a kernel's shapes, a fresh cache) is Internal (exit 1, "please report").
TEST(Errors, UserReachableChecksAreBadInputInvariantsAreInternal) {
  EXPECT_ERROR_CODE(generate::textWindows({1, 2, 3}, 1), ErrorCode::BadInput);  // --ctx 1
  EXPECT_ERROR_CODE(model::parseWeightFormat("q6_k"), ErrorCode::BadInput);
  EXPECT_ERROR_CODE(model::parseActivations("q4"), ErrorCode::BadInput);
  // A model's head size the llama.cpp row codecs do not take reaches the kernel through the cache: BadInput.
  auto layer = cache::makeLayer(cache::parseSpec("llamacpp:type_k=f16,type_v=f16"));
  const at::Tensor wide = testutil::randn(1, 1, 1, 1024);
  const auto tooWide = failureOf([&] { layer->update(wide, wide); });
  EXPECT_EQ(tooWide.code, ErrorCode::BadInput) << tooWide.message;
  EXPECT_TRUE(testutil::mentions(tooWide.message, {"head size 1024", "512"}));
  // The same kernel given rows that do not fit its states: only kvscope's own code calls it so.
  EXPECT_ERROR_CODE(kernels::storeKvRows(at::zeros({1, 1, 2, 32}), 8, 0, at::empty({1, 1, 3, 34}, at::kByte), false),
                    ErrorCode::Internal);
  // Segmented attention over mismatched sides: SegmentedAttention.RejectsMismatchedSides (Internal).
  // generate(): a sampling option is the user's; a cache that does not start empty is the caller's (kvscope's) bug.
  const auto m = model::LlamaModel::load(testutil::randomModel());
  generate::GenerateOptions hot;
  hot.maxNew = 1;
  hot.sampling.greedy = false;
  hot.sampling.temperature = 0;
  auto fresh = m->makeCache(cache::parseSpec("dynamic"));
  EXPECT_ERROR_CODE(generate::generate(*m, *fresh, {1, 2, 3}, hot), ErrorCode::BadInput);
  generate::GenerateOptions greedy;
  greedy.maxNew = 1;
  auto used = m->makeCache(cache::parseSpec("dynamic"));
  m->forward(at::tensor(std::vector<std::int64_t>{1, 2}).view({1, 2}), *used);
  EXPECT_ERROR_CODE(generate::generate(*m, *used, {1, 2, 3}, greedy), ErrorCode::Internal);
}

TEST(Errors, AnInternalFailureAsksForAReport) {
  EXPECT_NE(std::string(runtime::kReportHint).find("please report"), std::string::npos);
  EXPECT_EQ(std::string(runtime::kReportHint).find('\n'), std::string::npos);
}
