// The execution context (device/context.h) and the device path it selects: dense weights and LibTorch's operators,
// caches read whole for attention, the codecs' device kernels, fp8 decode steps through the fused kernel, one host
// copy a step. A CUDA device always runs this path; here the CPU runs it in portable mode, against the host kernels,
// so that every line of it is tested on a machine without a GPU.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cache/config.h"
#include "cache/detail/group_codec.h"
#include "cache/kv_cache.h"
#include "device/context.h"
#include "device/host_copy.h"
#include "generate/generate.h"
#include "model/llama.h"
#include "random_model.h"
#include "tensor_helpers.h"
#include "util/error.h"

namespace kvscope {
namespace {

// Layer 0 unquantized, the others fp8 keys and quanto values.
constexpr const char* kMixedSpec =
    "layers=0:dynamic;*:K=fp8:granularity=head,V=quanto:nbits=4,q_group_size=16,residual_length=8";

using device::ExecutionContext;
using kernels::KernelPath;
using testutil::prompt;
using testutil::randomModel;
using testutil::stepLogits;

const ExecutionContext kPortable(c10::kCPU, at::kFloat, /*portable=*/true);

// Statistics equal within `rtol` (relative to 1 + |x|), NaN and infinite values alike on both sides.
bool near(const std::vector<float>& x, const std::vector<float>& y, double rtol) {
  if (x.size() != y.size()) return false;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || std::isnan(y[i]) || std::isinf(x[i]) || std::isinf(y[i])) {
      if (!(std::isnan(x[i]) && std::isnan(y[i])) && x[i] != y[i]) return false;
    } else if (std::fabs(x[i] - y[i]) > rtol * (1 + std::fabs(x[i]))) {
      return false;
    }
  }
  return true;
}

TEST(ExecutionContext, NamesDevicesAndRefusesWhatIsNotHere) {
  const ExecutionContext cpu = device::makeContext("cpu", at::kBFloat16);
  EXPECT_TRUE(cpu.device().is_cpu());
  EXPECT_EQ(cpu.dtype(), at::kBFloat16);
  EXPECT_TRUE(cpu.hostKernels());
  EXPECT_EQ(cpu.kernelPath(), KernelPath::Host);
  EXPECT_EQ(cpu.name(), "cpu");
  EXPECT_FALSE(device::makeContext("cpu", at::kFloat, true).hostKernels());
  EXPECT_EQ(kPortable.kernelPath(), KernelPath::Device);
  EXPECT_EQ(kPortable.name(), "cpu (portable)");
  const auto devices = device::availableDevices();
  ASSERT_FALSE(devices.empty());
  EXPECT_EQ(devices.front(), "cpu");
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "CPU", ""}) {
    try {
      (void)device::makeContext(bad, at::kFloat);
      ADD_FAILURE() << "`" << bad << "` was taken";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::BadInput) << bad;
      EXPECT_TRUE(testutil::mentions(e.what(), {"unknown device", "cpu, cuda or cuda:N"}));
    }
  }
  if (devices.size() > 1) GTEST_SKIP() << "a CUDA device is present: its absence cannot be tested here";
  for (const char* absent : {"cuda", "cuda:0", "cuda:3"}) {
    try {
      (void)device::makeContext(absent, at::kFloat);
      ADD_FAILURE() << "`" << absent << "` was taken without a device";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Unavailable);
      EXPECT_TRUE(testutil::mentions(e.what(), {absent, "is not available", "--device cpu"}));
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line";
    }
  }
}

TEST(ExecutionContext, GeneratorsRepeatForASeedAndMemoryIsReported) {
  const at::Tensor p = at::full({50}, 0.02);
  at::Generator a = kPortable.generator(5), b = kPortable.generator(5), c = kPortable.generator(6);
  const at::Tensor x = at::multinomial(p, 20, true, a), y = at::multinomial(p, 20, true, b);
  EXPECT_TRUE(at::equal(x, y));
  EXPECT_FALSE(at::equal(x, at::multinomial(p, 20, true, c)));
  kPortable.resetPeak();
  const device::DeviceMemory m = kPortable.memory();
  EXPECT_GT(m.used, 0);
  EXPECT_GE(m.peak, 0);
  kPortable.synchronize();  // a no-op on the CPU
}

TEST(DevicePath, WeightsAreDenseAndLogitsMatchTheHostKernels) {
  const auto host = model::LlamaModel::load(randomModel());
  const auto dev = model::LlamaModel::load(randomModel(), kPortable);
  EXPECT_TRUE(host->context().hostKernels());
  EXPECT_FALSE(dev->context().hostKernels());
  EXPECT_EQ(dev->weightBytes(), host->weightBytes());  // F32 either way
  const auto ids = prompt(24);
  const auto a = stepLogits(*host, cache::parseSpec("dynamic"), ids, 12);
  const auto b = stepLogits(*dev, cache::parseSpec("dynamic"), ids, 12);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(at::allclose(a[i], b[i], 1e-4, 1e-5))
        << "step " << i << ": max |diff| " << (a[i] - b[i]).abs().max().item<float>();
    EXPECT_EQ(a[i].argmax().item<std::int64_t>(), b[i].argmax().item<std::int64_t>()) << "step " << i;
  }
  // bf16 on the device path: the weights themselves in bf16 (half the bytes).
  const auto bf = model::LlamaModel::load(randomModel(), ExecutionContext(c10::kCPU, at::kBFloat16, true));
  EXPECT_LT(bf->weightBytes(), host->weightBytes() * 6 / 10);
  EXPECT_EQ(stepLogits(*bf, cache::parseSpec("dynamic"), ids, 2).back().scalar_type(), at::kFloat);
}

TEST(DevicePath, GreedyAndBeamTokensMatchTheHostKernels) {
  const auto host = model::LlamaModel::load(randomModel());
  const auto dev = model::LlamaModel::load(randomModel(), kPortable);
  generate::GenerateOptions o;
  o.maxNew = 24;
  o.shadow = true;
  auto k1 = host->makeCache(cache::parseSpec("dynamic")), k2 = dev->makeCache(cache::parseSpec("dynamic"));
  EXPECT_EQ(k1->kernelPath(), KernelPath::Host);
  EXPECT_EQ(k2->kernelPath(), KernelPath::Device);
  EXPECT_EQ(k2->layer(0).kernelPath(), KernelPath::Device);
  std::vector<generate::StepEvent> e1, e2;
  const auto r1 = generate::generate(*host, *k1, prompt(16), o, [&](const auto& e) { return e1.push_back(e), true; });
  const auto r2 = generate::generate(*dev, *k2, prompt(16), o, [&](const auto& e) { return e2.push_back(e), true; });
  EXPECT_EQ(r1.tokens, r2.tokens);
  ASSERT_EQ(e1.size(), e2.size());
  for (std::size_t i = 0; i < e1.size(); ++i) {  // what the one host copy a step carries
    EXPECT_NEAR(e1[i].logprob, e2[i].logprob, 1e-4);
    ASSERT_EQ(e1[i].top.size(), 5u);
    ASSERT_EQ(e2[i].top.size(), 5u);
    EXPECT_EQ(e1[i].top[0].first, e2[i].top[0].first);
    EXPECT_EQ(e2[i].top[0].first, e2[i].token);
    EXPECT_EQ(e2[i].refToken, e2[i].token);  // the shadow is the same dynamic cache
    EXPECT_NEAR(e2[i].kl, 0.0, 1e-6);
    EXPECT_EQ(e2[i].refTop.size(), 5u);
  }
  generate::BeamOptions bo;
  bo.numBeams = 3;
  auto b1 = host->makeCache(cache::parseSpec("fp8:attention=reference"));
  auto b2 = dev->makeCache(cache::parseSpec("fp8"));
  const auto s1 = generate::beamSearch(*host, *b1, prompt(12), 10, bo);
  const auto s2 = generate::beamSearch(*dev, *b2, prompt(12), 10, bo);
  EXPECT_EQ(s1.sequences, s2.sequences);
}

// What a decode step copies to the host: the step's results, with every layer's statistics riding along in the same
// copy (KvCache::collectStats), so that a view reading all of them after each step, as the GUI's engine does, makes no
// copy of its own. A per-layer read put back (a statistic copied when it is computed) shows here as more than one.
TEST(DevicePath, ADecodeStepMakesOneHostCopyWithTheStatisticsOn) {
  const auto dev = model::LlamaModel::load(randomModel(), kPortable);
  for (const char* spec : {"dynamic", "fp8", "fp8:granularity=channel,overflow=saturate,attention=reference",
                           "quanto:nbits=4,q_group_size=16,residual_length=8",
                           "hqq:nbits=4,q_group_size=16,residual_length=8",  // its optimizer waits for nothing
                           "kivi:nbits=2,q_group_size=16,residual_length=8", "fp8:sink=4", kMixedSpec}) {
    SCOPED_TRACE(spec);
    cache::StatsOptions so;
    so.tokenBin = 1;  // the GUI's setting: every token's own error
    auto kv = dev->makeCache(cache::parseSpec(spec), so);
    generate::GenerateOptions o;
    o.maxNew = 12;
    o.snapshots = true;
    std::vector<std::int64_t> copies;
    std::int64_t quantizedUpdates = 0;
    generate::generate(*dev, *kv, prompt(16), o, [&](const generate::StepEvent& ev) {
      copies.push_back(device::hostCopies());
      for (int l = 0; l < kv->numLayers(); ++l) {  // the engine's read of every layer, every step
        const cache::LayerStats& st = kv->layer(l).stats();
        for (const cache::TensorStats* t : {&st.keys, &st.values}) {
          EXPECT_EQ(t->amaxPerHead.size(), 2u);
          if (t->quantized && !t->error.empty()) {
            ++quantizedUpdates;
            EXPECT_EQ(t->error.relL2.size(), static_cast<std::size_t>(t->error.heads * t->error.ranges * 16));
            EXPECT_EQ(t->error.headRelL2.size(), 2u);
          }
        }
      }
      EXPECT_EQ(ev.snapshot->stats.size(), static_cast<std::size_t>(kv->numLayers()));
      return true;
    });
    ASSERT_EQ(copies.size(), 12u);
    for (std::size_t i = 1; i < copies.size(); ++i) EXPECT_EQ(copies[i] - copies[i - 1], 1) << "step " << i;
    if (std::string(spec) != "dynamic") EXPECT_GT(quantizedUpdates, 0);
    // Nothing is left to copy: a read after the run costs nothing either.
    const std::int64_t before = device::hostCopies();
    kv->settleStats();
    (void)kv->snapshot();
    EXPECT_EQ(device::hostCopies(), before);
    // A beam step likewise: the candidates and the statistics in one copy; the reorder's index comes from the host.
    auto beams = dev->makeCache(cache::parseSpec(spec), so);
    generate::BeamOptions bo;
    bo.numBeams = 3;
    std::vector<std::int64_t> beamCopies;
    generate::beamSearch(*dev, *beams, prompt(12), 8, bo, {}, [&](const generate::BeamStepEvent& ev) {
      beamCopies.push_back(device::hostCopies());
      for (const cache::LayerStats& st : ev.snapshot->stats) EXPECT_EQ(st.keys.amaxPerHead.size(), 2u);
      return true;
    });
    ASSERT_GE(beamCopies.size(), 2u);
    for (std::size_t i = 1; i < beamCopies.size(); ++i)
      EXPECT_EQ(beamCopies[i] - beamCopies[i - 1], 1) << "beam step " << i;
  }
}

// The statistics the device path defers are the host path's for the same states, and survive updates that drop them
// unread: fp8's overflow and NaN totals keep counting.
TEST(DevicePath, DeferredStatisticsMatchTheHostPath) {
  at::manual_seed(11);
  for (const char* spec : {"fp8:attention=reference", "fp8:granularity=channel", "fp8:sink=2",
                           "layers=*:K=fp8:granularity=head,V=quanto:nbits=4,q_group_size=8,residual_length=4"}) {
    SCOPED_TRACE(spec);
    const cache::CacheConfig cfg = cache::parseSpec(spec);
    cache::KvCache host(cfg, 2), dev(cfg, 2, {}, KernelPath::Device);
    // No stats() read between the updates; later states overflow the scale; the 5th flushes quanto's residual.
    for (int step = 0; step < 5; ++step) {
      const std::int64_t T = step == 0 ? 6 : 1;
      for (int l = 0; l < 2; ++l) {
        const at::Tensor k = at::randn({1, 2, T, 8}) * (step == 0 ? 1.0 : 600.0), v = at::randn({1, 2, T, 8});
        host.update(l, k, v);
        dev.update(l, k, v);
      }
    }
    std::int64_t overflow = 0;
    for (int l = 0; l < 2; ++l) {
      const cache::LayerStats &a = host.layer(l).stats(), &b = dev.layer(l).stats();
      EXPECT_EQ(a.updates, b.updates);
      overflow += a.overflowTotal();
      for (auto [x, y] : {std::pair{&a.keys, &b.keys}, std::pair{&a.values, &b.values}}) {
        EXPECT_EQ(x->overflowTotal, y->overflowTotal);
        EXPECT_EQ(x->nonFiniteTotal, y->nonFiniteTotal);
        EXPECT_EQ(x->overflow, y->overflow);
        EXPECT_EQ(x->nonFinite, y->nonFinite);
        EXPECT_EQ(x->scales, y->scales);
        EXPECT_TRUE(near(x->amaxPerHead, y->amaxPerHead, 0));
        EXPECT_EQ(x->quantized, y->quantized);
        EXPECT_EQ(x->error.tokenStart, y->error.tokenStart);
        EXPECT_TRUE(near(x->error.maxAbs, y->error.maxAbs, 0));
        EXPECT_TRUE(near(x->error.relL2, y->error.relL2, 1e-5));
        EXPECT_TRUE(near(x->error.headRelL2, y->error.headRelL2, 1e-5));
        EXPECT_EQ(x->drift.tokens, y->drift.tokens);
        EXPECT_TRUE(near(x->drift.maxAbs, y->drift.maxAbs, 0));
        EXPECT_TRUE(near(x->drift.headRelL2, y->drift.headRelL2, 1e-5));
      }
    }
    EXPECT_GT(overflow, 0);  // the counters were exercised: four updates' worth, three of them never read
    if (cfg.mixed()) EXPECT_EQ(host.layer(0).stats().values.drift.tokens, 6);  // and a flush's drift map
  }
}

TEST(DevicePath, SamplingRepeatsForASeed) {
  const auto dev = model::LlamaModel::load(randomModel(), kPortable);
  generate::GenerateOptions o;
  o.maxNew = 16;
  o.sampling.greedy = false;
  o.sampling.temperature = 1.5;
  o.sampling.topP = 0.9;
  o.sampling.topK = 20;
  o.sampling.seed = 11;
  auto run = [&](std::uint64_t seed) {
    o.sampling.seed = seed;
    auto kv = dev->makeCache(cache::parseSpec("dynamic"));
    return generate::generate(*dev, *kv, prompt(8), o).tokens;
  };
  EXPECT_EQ(run(11), run(11));
  EXPECT_NE(run(11), run(12));
}

// Each backend in fused mode on the device path against the same backend in reference mode (what transformers
// computes), and against fused mode with the host kernels: the values attention sees are the same, only the order
// of the sums differs.
TEST(DevicePath, EveryBackendFusedMatchesReference) {
  const auto host = model::LlamaModel::load(randomModel());
  const auto dev = model::LlamaModel::load(randomModel(), kPortable);
  const auto ids = prompt(20);
  for (const char* spec :
       {"fp8", "fp8:granularity=head,overflow=saturate", "fp8:format=e5m2,granularity=channel,overflow=saturate",
        "quanto:nbits=4,q_group_size=16,residual_length=8",
        "quanto:nbits=2,q_group_size=8,residual_length=8,axis_key=-1",
        "hqq:nbits=4,q_group_size=16,residual_length=8,optimize=false",
        "kivi:nbits=2,q_group_size=16,residual_length=8", "fp8:sink=4", "vllm:kv=nvfp4_4over6", kMixedSpec}) {
    SCOPED_TRACE(spec);
    cache::CacheConfig fused = cache::parseSpec(spec), ref = fused;
    ref.attention = cache::AttentionMode::Reference;
    for (auto& r : ref.layers) {
      r.keys.attention = cache::AttentionMode::Reference;
      r.values.attention = cache::AttentionMode::Reference;
    }
    const auto want = stepLogits(*dev, ref, ids, 16);
    const auto got = stepLogits(*dev, fused, ids, 16);
    const auto hostFused = stepLogits(*host, fused, ids, 16);
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(at::allclose(got[i], want[i], 1e-3, 1e-4))
          << "step " << i << ": max |diff| " << (got[i] - want[i]).abs().max().item<float>();
      EXPECT_TRUE(at::allclose(got[i], hostFused[i], 1e-3, 1e-4))
          << "step " << i << ": max |diff| " << (got[i] - hostFused[i]).abs().max().item<float>();
    }
  }
}

// What a fused layer hands back from update() is built from its stored form: on the device path by LibTorch's
// operators (StoredSource::dense), bit for bit the values the host kernels decode.
TEST(DevicePath, StoredFormsDecodeBitForBitAsOnTheHost) {
  for (const char* spec :
       {"fp8", "fp8:granularity=channel,format=e5m2", "quanto:nbits=2,q_group_size=16,residual_length=4",
        "quanto:nbits=4,q_group_size=32,residual_length=4,attention=reference",
        "hqq:nbits=3,q_group_size=16,residual_length=4,optimize=false", "hqq:nbits=4,q_group_size=16,residual_length=4",
        "kivi:nbits=2,q_group_size=8,residual_length=4", "kivi:nbits=4,q_group_size=8,residual_length=4", "fp8:sink=3",
        "hqq:nbits=2,q_group_size=16,residual_length=4,sink=2"}) {
    SCOPED_TRACE(spec);
    cache::KvCache a(cache::parseSpec(spec), 1), b(cache::parseSpec(spec), 1, {}, KernelPath::Device);
    at::manual_seed(3);
    const at::Tensor k0 = at::randn({2, 2, 12, 16}), v0 = at::randn({2, 2, 12, 16});
    (void)a.update(0, k0, v0);
    (void)b.update(0, k0, v0);
    for (int s = 0; s < 14; ++s) {
      const at::Tensor k = at::randn({2, 2, 1, 16}) * 3, v = at::randn({2, 2, 1, 16});
      const auto [ka, va] = a.update(0, k, v);
      const auto [kb, vb] = b.update(0, k, v);
      ASSERT_TRUE(testutil::sameBits(ka.contiguous(), kb.contiguous())) << "step " << s;
      ASSERT_TRUE(testutil::sameBits(va.contiguous(), vb.contiguous())) << "step " << s;
      // The counters (fp8: kept on the device until read) say the same.
      for (auto side : {&cache::LayerStats::keys, &cache::LayerStats::values}) {
        const cache::TensorStats &sa = a.layer(0).stats().*side, &sb = b.layer(0).stats().*side;
        EXPECT_EQ(sa.overflow, sb.overflow) << "step " << s;
        EXPECT_EQ(sa.nonFinite, sb.nonFinite) << "step " << s;
        EXPECT_EQ(sa.overflowTotal, sb.overflowTotal) << "step " << s;
        EXPECT_EQ(sa.nonFiniteTotal, sb.nonFiniteTotal) << "step " << s;
        // The statistics: the host's loops and the device's operators, the same maxima, sums in another order (NaN
        // and infinite values where fp8 overflowed, alike).
        EXPECT_TRUE(near(sa.amaxPerHead, sb.amaxPerHead, 0)) << "step " << s;
        EXPECT_TRUE(near(sa.error.maxAbs, sb.error.maxAbs, 0)) << "step " << s;
        EXPECT_TRUE(near(sa.error.relL2, sb.error.relL2, 1e-5)) << "step " << s;
        EXPECT_TRUE(near(sa.error.headRelL2, sb.error.headRelL2, 1e-5)) << "step " << s;
      }
      if (s % 4 == 3) {  // steps whose counters nobody read in between are summed when read
        const auto [k2, v2] = std::pair{at::randn({2, 2, 1, 16}) * 5, at::randn({2, 2, 1, 16})};
        (void)a.update(0, k2, v2);
        (void)b.update(0, k2, v2);
      }
      if (s == 6) {  // beams: rows swap, on both paths alike
        a.reorder(at::tensor(std::vector<std::int64_t>{1, 0}, at::kLong));
        b.reorder(at::tensor(std::vector<std::int64_t>{1, 0}, at::kLong));
      }
    }
    a.crop(15);
    b.crop(15);
    const at::Tensor k = at::randn({2, 2, 1, 16}), v = at::randn({2, 2, 1, 16});
    const auto [ka, va] = a.update(0, k, v);
    const auto [kb, vb] = b.update(0, k, v);
    EXPECT_TRUE(testutil::sameBits(ka.contiguous(), kb.contiguous()));
    EXPECT_TRUE(testutil::sameBits(va.contiguous(), vb.contiguous()));
  }
}

// The quanto and hqq codecs on the device path (kvscope's int kernels, here their CPU loops; hqq's optimizer running
// all its iterations with the updates after its stop masked out) against the host path (LibTorch's CPU operators, as
// the Python packages; the optimizer stopping early): the same scales, zero-points and dequantized values bit for bit,
// and the same codes (quanto's zero-range groups aside: their codes are 0/0 and decode to the minimum whatever they
// are).
TEST(DevicePath, CodecsMatchTheHostPathBitForBit) {
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16, at::kHalf}) {
    const at::Tensor x = testutil::codecStates(17, dt);
    struct Case {
      std::string name;
      std::unique_ptr<cache::detail::GroupCodec> host, dev;
      std::vector<int> axes;
      bool sameCodes;
    };
    std::vector<Case> cases;
    for (int bits : {2, 4})
      for (int gs : {32, 64})
        cases.push_back({"quanto" + std::to_string(bits) + "-g" + std::to_string(gs),
                         cache::detail::makeQuantoCodec(bits, gs, KernelPath::Host),
                         cache::detail::makeQuantoCodec(bits, gs, KernelPath::Device),
                         {0, -1},
                         false});
    for (int bits : {1, 2, 3, 4, 8})
      for (bool optimize : {false, true})
        cases.push_back({"hqq" + std::to_string(bits) + (optimize ? "-opt" : ""),
                         cache::detail::makeHqqCodec(bits, 64, optimize, KernelPath::Host),
                         cache::detail::makeHqqCodec(bits, 64, optimize, KernelPath::Device),
                         {0, 1},
                         true});
    for (const Case& c : cases)
      for (int axis : c.axes) {
        SCOPED_TRACE(c.name + " axis " + std::to_string(axis) + " " + c10::toString(dt));
        const auto qh = c.host->quantize(x, axis);
        const auto qd = c.dev->quantize(x, axis);
        EXPECT_TRUE(testutil::sameBits(qh.scale, qd.scale));
        EXPECT_TRUE(testutil::sameBits(qh.zero, qd.zero));
        EXPECT_EQ(qh.grouped, qd.grouped);
        ASSERT_EQ(qh.packed.numel(), qd.packed.numel());
        if (c.sameCodes) EXPECT_TRUE(at::equal(qh.packed, qd.packed));
        at::Tensor dh = at::empty(x.sizes(), x.options()), dd = at::empty(x.sizes(), x.options());
        c.host->dequantizeInto(qh, dh);
        c.dev->dequantizeInto(qd, dd);
        EXPECT_TRUE(testutil::sameBits(dh, dd));
      }
  }
}

// A decode step of a pure fp8 layer on the device path goes through the fused kernel (kernels::fp8DecodeAttention)
// and agrees with LibTorch's attention over the decoded states.
TEST(DevicePath, Fp8DecodeStepsReadTheCodes) {
  cache::KvCache dev(cache::parseSpec("fp8:granularity=head,overflow=saturate"), 1, {}, KernelPath::Device);
  cache::KvCache ref(cache::parseSpec("fp8:granularity=head,overflow=saturate,attention=reference"), 1);
  at::manual_seed(9);
  const at::Tensor k0 = at::randn({1, 2, 30, 16}), v0 = at::randn({1, 2, 30, 16}), q0 = at::randn({1, 4, 30, 16});
  (void)dev.layer(0).attend(q0, k0, v0);
  (void)ref.layer(0).attend(q0, k0, v0);
  for (int s = 0; s < 5; ++s) {
    const at::Tensor k = at::randn({1, 2, 1, 16}), v = at::randn({1, 2, 1, 16}), q = at::randn({1, 4, 1, 16});
    const at::Tensor a = dev.layer(0).attend(q, k, v), b = ref.layer(0).attend(q, k, v);
    EXPECT_TRUE(at::allclose(a, b, 1e-4, 1e-5)) << (a - b).abs().max().item<float>();
  }
}

}  // namespace
}  // namespace kvscope
