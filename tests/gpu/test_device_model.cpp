// The model, its caches and the generation on a CUDA device through the execution context, against the CPU: greedy
// tokens identical with an fp32 dynamic cache, every backend's fused attention against its reference mode, bf16.
// Skipped without a CUDA device. (tests/unit/test_device_path.cpp runs the same device path on the CPU.)
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "cache/config.h"
#include "device/context.h"
#include "generate/generate.h"
#include "model/llama.h"
#include "random_model.h"
#include "tensor_helpers.h"

namespace kvscope {
namespace {

using testutil::prompt;
using testutil::randomModel;
using testutil::stepLogits;

device::ExecutionContext cuda(at::ScalarType dtype = at::kFloat) {
  return device::makeContext("cuda", dtype);
}

TEST(DeviceModel, TheContextSeesTheDevice) {
  KVS_NEED_CUDA();
  const auto devices = device::availableDevices();
  ASSERT_GE(devices.size(), 2u);
  EXPECT_EQ(devices[1], "cuda:0");
  const auto ctx = cuda();
  EXPECT_TRUE(ctx.device().is_cuda());
  EXPECT_FALSE(ctx.hostKernels());
  EXPECT_GT(ctx.memory().total, 0);
  EXPECT_NE(device::describeDevice("cuda:0"), "cuda:0");  // names the device and its memory
}

TEST(DeviceModel, GreedyTokensAreTheCpusWithAnFp32DynamicCache) {
  KVS_NEED_CUDA();
  const auto cpu = model::LlamaModel::load(randomModel());
  const auto gpu = model::LlamaModel::load(randomModel(), cuda());
  generate::GenerateOptions o;
  o.maxNew = 32;
  o.shadow = true;
  auto k1 = cpu->makeCache(cache::parseSpec("dynamic")), k2 = gpu->makeCache(cache::parseSpec("dynamic"));
  const auto r1 = generate::generate(*cpu, *k1, prompt(24), o);
  const auto r2 = generate::generate(*gpu, *k2, prompt(24), o);
  EXPECT_EQ(r1.tokens, r2.tokens);
  EXPECT_NEAR(r2.meanKl, 0.0, 1e-6);
  const auto a = stepLogits(*cpu, cache::parseSpec("dynamic"), prompt(24), 8);
  const auto b = stepLogits(*gpu, cache::parseSpec("dynamic"), prompt(24), 8);
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(b[i].is_cuda());
    EXPECT_TRUE(at::allclose(a[i], b[i].cpu(), 1e-4, 1e-5)) << "step " << i;
  }
}

TEST(DeviceModel, EveryBackendFusedMatchesReferenceOnTheDevice) {
  KVS_NEED_CUDA();
  const auto cpu = model::LlamaModel::load(randomModel());
  const auto gpu = model::LlamaModel::load(randomModel(), cuda());
  for (const char* spec :
       {"fp8", "fp8:granularity=head,overflow=saturate", "fp8:format=e5m2,granularity=channel,overflow=saturate",
        "quanto:nbits=4,q_group_size=16,residual_length=8",
        "hqq:nbits=4,q_group_size=16,residual_length=8,optimize=false",
        "hqq:nbits=4,q_group_size=16,residual_length=8",  // the optimizer's masked loop
        "kivi:nbits=2,q_group_size=16,residual_length=8", "fp8:sink=4"}) {
    SCOPED_TRACE(spec);
    cache::CacheConfig fused = cache::parseSpec(spec), ref = fused;
    ref.attention = cache::AttentionMode::Reference;
    const auto want = stepLogits(*gpu, ref, prompt(20), 16);
    const auto got = stepLogits(*gpu, fused, prompt(20), 16);
    const auto host = stepLogits(*cpu, fused, prompt(20), 16);
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(at::allclose(got[i], want[i], 1e-3, 1e-4)) << "step " << i;
      EXPECT_TRUE(at::allclose(got[i].cpu(), host[i], 1e-3, 1e-4)) << "step " << i;
    }
  }
}

TEST(DeviceModel, Bf16WeightsAndCachesStayFinite) {
  KVS_NEED_CUDA();
  const auto gpu = model::LlamaModel::load(randomModel(), cuda(at::kBFloat16));
  for (const char* spec : {"dynamic", "fp8", "quanto:nbits=4,q_group_size=16,residual_length=8"}) {
    const auto l = stepLogits(*gpu, cache::parseSpec(spec), prompt(20), 8);
    for (const auto& x : l) EXPECT_TRUE(x.isfinite().all().item<bool>()) << spec;
  }
}

}  // namespace
}  // namespace kvscope
