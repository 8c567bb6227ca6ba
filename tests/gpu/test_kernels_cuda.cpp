// kvscope's CUDA kernels against their CPU twins, on a device (skipped without one):
//   int codecs (quanto, hqq): the GPU path (group min/max, quantize + pack, unpack + dequantize kernels) against the
//   codecs' LibTorch ops on the CPU. Stated tolerance: quanto and hqq without the optimizer give bit-identical scales,
//   zero-points and dequantized values, and identical codes except in zero-range groups (their codes are 0/0 and
//   decode to the group's minimum whatever they are); hqq's optimizer reduces (means) in another order on CUDA, so
//   there the dequantized values may move by at most one quantization step, on at most 1% of the values.
//   fused fp8 decode attention: against the CPU reference (same codes) and LibTorch's SDPA on the dequantized K/V on
//   the device, within fp32 accumulation tolerance (rtol 1e-4, atol 1e-5).
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <string>

#include "cache/detail/group_codec.h"
#include "cache/layer.h"
#include "kernels/fp8_attention.h"
#include "kernels/fp8_tensor.h"
#include "tensor_helpers.h"

using namespace kvscope;
using testutil::sameBits;

namespace {

const at::Device kDev(at::kCUDA, 0);

at::Tensor states(at::ScalarType dt, std::int64_t S = 64) {
  return testutil::codecStates(21, dt, S);
}

}  // namespace

TEST(IntCuda, QuantoAndHqqCodecsMatchTheCpu) {
  KVS_NEED_CUDA();
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16, at::kHalf}) {
    const at::Tensor x = states(dt);
    struct Case {
      std::string name;
      std::unique_ptr<cache::detail::GroupCodec> codec, device;  // the host path's, the device path's
      std::vector<int> axes;
      bool exact;
    };
    std::vector<Case> cases;
    constexpr auto kDevice = kernels::KernelPath::Device;
    for (int bits : {2, 4})
      for (int gs : {64, 32})
        cases.push_back({(gs == 64 ? "quanto" : "quanto-g32-") + std::to_string(bits),
                         cache::detail::makeQuantoCodec(bits, gs),
                         cache::detail::makeQuantoCodec(bits, gs, kDevice),
                         {0, -1},
                         true});
    for (int bits : {1, 2, 3, 4, 8})
      for (bool opt : {false, true})
        cases.push_back({(opt ? "hqq-opt" : "hqq") + std::to_string(bits),
                         cache::detail::makeHqqCodec(bits, 64, opt),
                         cache::detail::makeHqqCodec(bits, 64, opt, kDevice),
                         {0, 1},
                         !opt});
    for (const Case& c : cases)
      for (int axis : c.axes) {
        SCOPED_TRACE(c.name + " axis " + std::to_string(axis) + " " + c10::toString(dt));
        const auto qc = c.codec->quantize(x, axis);
        const auto qg = c.device->quantize(x.to(kDev), axis);
        ASSERT_TRUE(qg.packed.is_cuda());
        at::Tensor dc = at::empty(x.sizes(), x.options()), dg = at::empty(x.sizes(), x.options().device(kDev));
        c.codec->dequantizeInto(qc, dc);
        c.device->dequantizeInto(qg, dg);
        const at::Tensor g = dg.cpu();
        if (c.exact) {
          EXPECT_TRUE(sameBits(qc.scale, qg.scale.cpu()));
          EXPECT_TRUE(sameBits(qc.zero, qg.zero.cpu()));
          EXPECT_TRUE(sameBits(dc, g));
          EXPECT_EQ(qc.packed.numel(), qg.packed.numel());  // codes: through the values (zero-range groups aside)
        } else {
          const double step = qc.scale.to(at::kFloat).abs().max().item<double>();
          const at::Tensor diff = (dc.to(at::kFloat) - g.to(at::kFloat)).abs();
          EXPECT_LE(diff.max().item<double>(), step * 1.01 + 1e-6);
          EXPECT_LE((diff > 0).sum().item<double>() / static_cast<double>(diff.numel()), 0.01);
        }
      }
  }
}

TEST(IntCuda, ResidualLayersOnTheDeviceMatchTheCpu) {
  KVS_NEED_CUDA();
  for (const std::string spec : {"quanto:nbits=2,residual_length=8,q_group_size=32",
                                 "quanto:nbits=4,axis_key=-1,axis_value=-1,residual_length=8,q_group_size=32",
                                 "hqq:nbits=4,residual_length=8,optimize=false",
                                 "hqq:nbits=3,axis_key=1,axis_value=1,residual_length=8,optimize=false"}) {
    SCOPED_TRACE(spec);
    const auto cfg = cache::parseSpec(spec);
    auto cpu = cache::makeLayer(cfg), gpu = cache::makeLayer(cfg, {}, kernels::KernelPath::Device);
    at::manual_seed(5);
    for (int step = 0; step < 20; ++step) {
      const at::Tensor x = at::randn({1, 4, step == 0 ? 32 : 1, 64});  // 4 * 8k tokens: quanto axis -1 groups fit
      auto [kc, vc] = cpu->update(x, x * 2);
      auto [kg, vg] = gpu->update(x.to(kDev), (x * 2).to(kDev));
      EXPECT_TRUE(sameBits(kc, kg.cpu())) << "step " << step;
      EXPECT_TRUE(sameBits(vc, vg.cpu())) << "step " << step;
    }
  }
}

TEST(Fp8AttentionCuda, FusedKernelMatchesTheCpuReferenceAndSdpa) {
  KVS_NEED_CUDA();
  at::manual_seed(9);
  for (std::int64_t D : {64, 128, 48})
    for (std::int64_t L : {1, 255, 256, 257, 5000, 32768})
      for (auto f : {kernels::Fp8Format::E4M3FN, kernels::Fp8Format::E5M2}) {
        SCOPED_TRACE("D " + std::to_string(D) + " L " + std::to_string(L));
        const std::int64_t B = 2, Hq = 9, Hkv = 3;
        const auto dt = f == kernels::Fp8Format::E4M3FN ? at::kFloat8_e4m3fn : at::kFloat8_e5m2;
        const at::Tensor ks = (at::rand({Hkv, D}) + 0.5) * (10.0 / 448), vs = (at::rand({Hkv, D}) + 0.5) * (3.0 / 448);
        // Codes inside buffers with spare capacity, as the fp8 layer keeps them.
        at::Tensor kb = at::zeros({B, Hkv, L + 64, D}, at::kByte), vb = at::zeros_like(kb);
        at::Tensor kc = kb.narrow(2, 0, L), vc = vb.narrow(2, 0, L);
        kc.copy_((at::randn({B, Hkv, L, D}).clamp(-3, 3) * 1.5 / ks.view({1, Hkv, 1, D})).to(dt).view(at::kByte));
        vc.copy_((at::randn({B, Hkv, L, D}).clamp(-3, 3) * 0.5 / vs.view({1, Hkv, 1, D})).to(dt).view(at::kByte));
        const at::Tensor q = at::randn({B, Hq, 1, D});
        const at::Tensor ref = kernels::fp8DecodeAttention(q, kc, vc, ks, vs, f);
        const at::Tensor kbg = kb.to(kDev), vbg = vb.to(kDev);
        const at::Tensor kg = kbg.narrow(2, 0, L), vg = vbg.narrow(2, 0, L);
        const at::Tensor got = kernels::fp8DecodeAttention(q.to(kDev), kg, vg, ks.to(kDev), vs.to(kDev), f);
        ASSERT_TRUE(got.is_cuda());
        EXPECT_TRUE(at::allclose(got.cpu(), ref, 1e-4, 1e-5)) << (got.cpu() - ref).abs().max().item<float>();
        const at::Tensor kd = kg.view(dt).to(at::kFloat) * ks.to(kDev).view({1, Hkv, 1, D});
        const at::Tensor vd = vg.view(dt).to(at::kFloat) * vs.to(kDev).view({1, Hkv, 1, D});
        const at::Tensor sdpa =
            at::scaled_dot_product_attention(q.to(kDev), kd, vd, std::nullopt, 0.0, false, std::nullopt, true);
        EXPECT_TRUE(at::allclose(got, sdpa, 1e-4, 1e-5)) << (got - sdpa).abs().max().item<float>();
      }
}
