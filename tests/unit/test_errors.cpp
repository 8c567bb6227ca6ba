// One error type with a code: every error kvscope raises carries it, and the exceptions of LibTorch and the standard
// library are classified once (runtime::currentFailure), so that callers decide on the code.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <new>
#include <stdexcept>

#include "cache/config.h"
#include "cache/layer.h"
#include "generate/eval.h"
#include "model/llama.h"
#include "model/safetensors.h"
#include "runtime/errors.h"
#include "runtime/model_loader.h"
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
  for (const auto& f : {failureOf([] { throw model::LoadCancelled(); }), failureOf([] { throw generate::EvalCancelled(); })}) {
    EXPECT_EQ(f.code, ErrorCode::Cancelled);
    EXPECT_EQ(exitStatus(f.code), 130);
  }
  EXPECT_EQ(exitStatus(ErrorCode::BadFile), 2);
  EXPECT_EQ(exitStatus(ErrorCode::Internal), 1);
}

TEST(Errors, ForeignExceptionsAreClassifiedOnce) {
  EXPECT_EQ(failureOf([] { throw std::bad_alloc(); }).code, ErrorCode::OutOfMemory);
  EXPECT_EQ(failureOf([] { throw std::invalid_argument("two query tokens"); }).code, ErrorCode::BadInput);
  EXPECT_EQ(failureOf([] { throw std::runtime_error("oops"); }).code, ErrorCode::Internal);
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
