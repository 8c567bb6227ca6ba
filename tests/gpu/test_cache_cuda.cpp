// The cache layers on CUDA tensors against the same layers on the CPU (their CPU twins): the fp8 layer through
// kvscope's CUDA kernels bit for bit (NaN compared as NaN), counters and scales equal. Skipped without a CUDA device.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cache/layer.h"
#include "kernels/fp8_tensor.h"
#include "tensor_helpers.h"

using namespace kvscope;
using testutil::sameBits;

namespace {

// A prompt, then decode steps; step 3 carries values far beyond the calibrated scale (overflow, NaN or saturation).
std::vector<at::Tensor> steps(std::int64_t B, std::int64_t H, std::int64_t D, at::ScalarType dt) {
  at::manual_seed(7);
  std::vector<at::Tensor> s;
  at::Tensor p = at::randn({B, H, 37, D});
  p.select(1, H - 1).mul_(30);  // one loud head
  s.push_back(p.to(dt));
  for (int i = 0; i < 6; ++i) {
    at::Tensor n = at::randn({B, H, i == 2 ? 3 : 1, D});
    if (i == 3) n.mul_(500);
    s.push_back(n.to(dt));
  }
  return s;
}

}  // namespace

TEST(CacheCuda, Fp8LayerMatchesTheCpuLayer) {
  KVS_NEED_CUDA();
  const at::Device dev(at::kCUDA, 0);
  for (const std::string spec :
       {"fp8", "fp8:granularity=head", "fp8:granularity=channel", "fp8:format=e5m2", "fp8:overflow=saturate",
        "fp8:overflow=recalibrate,granularity=head", "fp8:headroom=1.5,granularity=channel,format=e5m2"}) {
    for (at::ScalarType dt : {at::kFloat, at::kBFloat16, at::kHalf}) {
      SCOPED_TRACE(spec + " " + std::string(c10::toString(dt)));
      const auto cfg = cache::parseSpec(spec);
      auto cpu = cache::makeLayer(cfg), gpu = cache::makeLayer(cfg, {}, kernels::KernelPath::Device);
      int step = 0;
      for (const at::Tensor& x : steps(2, 3, 64, dt)) {
        const at::Tensor v = x.flip(3);
        auto [kc, vc] = cpu->update(x, v);
        auto [kg, vg] = gpu->update(x.to(dev), v.to(dev));
        ASSERT_TRUE(kg.is_cuda());
        EXPECT_TRUE(sameBits(kc, kg.cpu())) << "keys, step " << step;
        EXPECT_TRUE(sameBits(vc, vg.cpu())) << "values, step " << step;
        const auto &sc = cpu->stats(), &sg = gpu->stats();
        for (auto [a, b] : {std::pair{&sc.keys, &sg.keys}, std::pair{&sc.values, &sg.values}}) {
          EXPECT_EQ(a->overflow, b->overflow) << "step " << step;
          EXPECT_EQ(a->nonFinite, b->nonFinite) << "step " << step;
          EXPECT_EQ(a->recalibrations, b->recalibrations);
          EXPECT_EQ(a->scales, b->scales);
        }
        ++step;
      }
      EXPECT_GT(cpu->stats().keys.overflowTotal, 0);  // the loud step did overflow
      // A beam reorder moves the codes on the device as on the CPU.
      const at::Tensor idx = at::tensor(std::vector<std::int64_t>{1, 1});
      cpu->reorder(idx);
      gpu->reorder(idx.to(dev));
      const at::Tensor n = at::randn({2, 3, 1, 64}).to(dt);
      auto [kc, vc] = cpu->update(n, n);
      auto [kg, vg] = gpu->update(n.to(dev), n.to(dev));
      EXPECT_TRUE(sameBits(kc, kg.cpu()));
    }
  }
}

// llama.cpp's cache types, vLLM's FP4, per-token-head and TurboQuant caches and MXFP4 on CUDA states: the rows are
// written by the CUDA twin of the CPU codecs (the same scalar code), so what update() returns is the CPU layer's bit
// for bit; attention (fused: one layer dequantized on the device, then LibTorch's) agrees within float rounding, and so
// do the rounded queries (bit for bit but UltraQuant's, rotated by a matmul on each device).
TEST(CacheCuda, KvRowLayersMatchTheCpuLayer) {
  KVS_NEED_CUDA();
  const at::Device dev(at::kCUDA, 0);
  for (const std::string spec :
       {"llamacpp", "llamacpp:type_k=q4_0,type_v=q4_0", "llamacpp:type_k=q4_1,type_v=q5_0",
        "llamacpp:type_k=q5_1,type_v=iq4_nl,rot=off", "llamacpp:type_k=f16,type_v=bf16,rot=on",
        "llamacpp:type_k=iq4_nl,type_v=q8_0,attention=reference", "vllm", "vllm:kv=nvfp4_4over6,scale=unit",
        "vllm:kv=ultraquant_4bit", "mxfp4:rot=on", "vllm:kv=int8_per_token_head",
        "vllm:kv=fp8_per_token_head,attention=reference", "vllm:kv=int4_per_token_head", "vllm:kv=turboquant_k8v4",
        "vllm:kv=turboquant_4bit_nc", "vllm:kv=turboquant_3bit_nc,attention=reference"}) {
    for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
      SCOPED_TRACE(spec + " " + std::string(c10::toString(dt)));
      const auto cfg = cache::parseSpec(spec);
      auto cpu = cache::makeLayer(cfg), gpu = cache::makeLayer(cfg, {}, kernels::KernelPath::Device);
      int step = 0;
      for (const at::Tensor& x : steps(2, 3, 128, dt)) {
        const at::Tensor v = x.flip(3).clamp(-1e4, 1e4);
        const at::Tensor k = x.clamp(-1e4, 1e4);
        auto [kc, vc] = cpu->update(k, v);
        auto [kg, vg] = gpu->update(k.to(dev), v.to(dev));
        ASSERT_TRUE(kg.is_cuda());
        EXPECT_TRUE(sameBits(kc, kg.cpu())) << "keys, step " << step;
        EXPECT_TRUE(sameBits(vc, vg.cpu())) << "values, step " << step;
        ++step;
      }
      const at::Tensor q = at::randn({2, 6, 1, 128}).to(dt);
      if (spec.find("ultraquant") == std::string::npos)
        EXPECT_TRUE(sameBits(cpu->roundQueries(q), gpu->roundQueries(q.to(dev)).cpu()));
      else
        EXPECT_TRUE(at::allclose(cpu->roundQueries(q).to(at::kFloat), gpu->roundQueries(q.to(dev)).cpu().to(at::kFloat),
                                 0.13, 1e-3));  // a tie of E4M3 (3 mantissa bits) may round either way
      const at::Tensor n = at::randn({2, 3, 1, 128}).to(dt);
      const at::Tensor oc = cpu->attend(q, n, n).to(at::kFloat),
                       og = gpu->attend(q.to(dev), n.to(dev), n.to(dev)).cpu().to(at::kFloat);
      EXPECT_LT((oc - og).abs().max().item<double>(), dt == at::kFloat ? 1e-4 : 2e-2);
      EXPECT_EQ(cpu->memory().keys.payload, gpu->memory().keys.payload);
    }
  }
}
