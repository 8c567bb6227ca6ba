// Cache benchmarks (Google Benchmark), reported as ratios measured in one run:
//   codec/*     fp8 encode and decode throughput against memcpy of the same float32 bytes (one thread);
//   append/*    one decode step (append one token, get the keys/values attention reads) at context 256..16k, for
//               each backend, kvscope's layer beside the same done the transformers way in LibTorch (torch.cat of
//               the history each step, whole-cache dequantization each step);
//   dequant_all/* dequantizing the whole cache once (transformers does it every step; kvscope's layers do not);
//   stats/*     fp8 append with the per-update statistics on and off;
//   attend/*    one decode step of attention (append one token, attend 9 query heads over the whole layer) at context
//               1k..16k, every backend in fused mode against the unquantized layer (LibTorch's attention), on the
//               machine's intra-op threads; attend/*/portable with the AVX2 paths switched off.
// Shapes are SmolLM2-135M's KV: 1 batch row, 3 KV heads, head_dim 64, fp32; one layer.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>

#include <cfloat>
#include <cstring>
#include <functional>
#include <memory>

#include "cache/detail/group_codec.h"
#include "cache/layer.h"
#include "kernels/cpu/fp8_cpu.h"
#include "kernels/cpu/simd.h"

using namespace kvscope;

namespace {

constexpr std::int64_t kH = 3, kD = 64;
constexpr int kStepsPerRound = 128;  // one residual window of quanto/hqq's default: flushes are inside the figure

// ---- codec -----------------------------------------------------------------------------------------------------
void codecMemcpy(benchmark::State& st) {
  const std::int64_t n = st.range(0);
  std::vector<float> src(n, 1.0f), dst(n);
  for (auto _ : st) {
    std::memcpy(dst.data(), src.data(), n * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(st.iterations() * n * 4);
}

void codecEncode(benchmark::State& st) {
  const std::int64_t n = st.range(0);
  const at::Tensor x = at::randn({n}) * 2;
  const at::Tensor scale = at::full({kD}, 2.0f / 448.0f);
  std::vector<std::uint8_t> out(n);
  for (auto _ : st) {
    auto c = kernels::fp8EncodeRun(kernels::ElemType::F32, x.data_ptr<float>(), scale.data_ptr<float>(), kD, n,
                                   out.data(), kernels::Fp8Format::E4M3FN, false);
    benchmark::DoNotOptimize(c);
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(st.iterations() * n * 4);
}

void codecDecode(benchmark::State& st) {
  const std::int64_t n = st.range(0);
  std::vector<std::uint8_t> q(n);
  for (std::int64_t i = 0; i < n; ++i) q[i] = static_cast<std::uint8_t>(i * 37 % 126);
  const at::Tensor scale = at::full({kD}, 2.0f / 448.0f);
  std::vector<float> out(n);
  for (auto _ : st) {
    kernels::fp8DecodeRun(kernels::ElemType::F32, q.data(), scale.data_ptr<float>(), kD, n, out.data(),
                          kernels::Fp8Format::E4M3FN);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(st.iterations() * n * 4);
}

// ---- append: the transformers way, in LibTorch ---------------------------------------------------------------------
struct Stepper {
  virtual ~Stepper() = default;
  virtual void prompt(const at::Tensor& k, const at::Tensor& v) = 0;
  virtual std::pair<at::Tensor, at::Tensor> step(const at::Tensor& k, const at::Tensor& v) = 0;
};

struct OursStepper : Stepper {
  std::unique_ptr<cache::CacheLayer> layer;
  explicit OursStepper(const std::string& spec, bool stats = true) {
    cache::StatsOptions so;
    so.enabled = stats;
    layer = cache::makeLayer(cache::parseSpec(spec), so);
  }
  void prompt(const at::Tensor& k, const at::Tensor& v) override {
    layer->reset();
    layer->update(k, v);
  }
  std::pair<at::Tensor, at::Tensor> step(const at::Tensor& k, const at::Tensor& v) override {
    return layer->update(k, v);
  }
};

struct CatDynamic : Stepper {  // DynamicLayer: torch.cat every step
  at::Tensor k_, v_;
  void prompt(const at::Tensor& k, const at::Tensor& v) override { k_ = k, v_ = v; }
  std::pair<at::Tensor, at::Tensor> step(const at::Tensor& k, const at::Tensor& v) override {
    k_ = at::cat({k_, k}, 2);
    v_ = at::cat({v_, v}, 2);
    return {k_, v_};
  }
};

struct CatFp8 : Stepper {  // Fp8QuantizedLayer: cat the codes, dequantize the whole cache every step
  at::Tensor qk_, qv_, sk_, sv_;
  static at::Tensor scaleOf(const at::Tensor& x) { return (x.abs().amax().to(at::kFloat) / 448.0).clamp_min(FLT_MIN); }
  void prompt(const at::Tensor& k, const at::Tensor& v) override {
    sk_ = scaleOf(k), sv_ = scaleOf(v);
    qk_ = (k.to(at::kFloat) / sk_).to(at::kFloat8_e4m3fn);
    qv_ = (v.to(at::kFloat) / sv_).to(at::kFloat8_e4m3fn);
  }
  std::pair<at::Tensor, at::Tensor> step(const at::Tensor& k, const at::Tensor& v) override {
    qk_ = at::cat({qk_, (k.to(at::kFloat) / sk_).to(at::kFloat8_e4m3fn)}, 2);
    qv_ = at::cat({qv_, (v.to(at::kFloat) / sv_).to(at::kFloat8_e4m3fn)}, 2);
    return {(qk_.to(at::kFloat) * sk_).to(k.scalar_type()), (qv_.to(at::kFloat) * sv_).to(v.scalar_type())};
  }
};

struct CatResidual : Stepper {  // QuantizedLayer: dequantize all + cat every step, re-quantize every R steps
  std::unique_ptr<cache::detail::GroupCodec> codec;
  cache::detail::QuantizedBlock qk_, qv_;
  at::Tensor rk_, rv_;
  std::int64_t residualLength = 128;
  explicit CatResidual(std::unique_ptr<cache::detail::GroupCodec> c) : codec(std::move(c)) {}
  at::Tensor deq(const cache::detail::QuantizedBlock& q, const at::Tensor& like) {
    at::Tensor out = at::empty(q.shape, like.options());
    codec->dequantizeInto(q, out);
    return out;
  }
  void prompt(const at::Tensor& k, const at::Tensor& v) override {
    qk_ = codec->quantize(k.contiguous(), 0);
    qv_ = codec->quantize(v.contiguous(), 0);
    rk_ = at::Tensor();
    rv_ = at::Tensor();
  }
  std::pair<at::Tensor, at::Tensor> step(const at::Tensor& k, const at::Tensor& v) override {
    const std::int64_t r = rk_.defined() ? rk_.size(2) : 0;
    std::vector<at::Tensor> pk{deq(qk_, k)}, pv{deq(qv_, v)};
    if (r > 0) pk.push_back(rk_), pv.push_back(rv_);
    pk.push_back(k), pv.push_back(v);
    at::Tensor ok = at::cat(pk, 2), ov = at::cat(pv, 2);
    if (r + 1 >= residualLength) {
      qk_ = codec->quantize(ok.contiguous(), 0);
      qv_ = codec->quantize(ov.contiguous(), 0);
      rk_ = at::Tensor();
      rv_ = at::Tensor();
    } else {
      rk_ = r > 0 ? at::cat({rk_, k}, 2) : k;
      rv_ = r > 0 ? at::cat({rv_, v}, 2) : v;
    }
    return {ok, ov};
  }
};

void appendBench(benchmark::State& st, const std::function<std::unique_ptr<Stepper>()>& make) {
  at::set_num_threads(1);
  const std::int64_t ctx = st.range(0);
  auto s = make();
  const at::Tensor pk = at::randn({1, kH, ctx, kD}), pv = at::randn({1, kH, ctx, kD});
  std::vector<at::Tensor> nk, nv;
  for (int i = 0; i < kStepsPerRound; ++i)
    nk.push_back(at::randn({1, kH, 1, kD})), nv.push_back(at::randn({1, kH, 1, kD}));
  for (auto _ : st) {
    st.PauseTiming();
    s->prompt(pk, pv);
    st.ResumeTiming();
    for (int i = 0; i < kStepsPerRound; ++i) {
      auto out = s->step(nk[i], nv[i]);
      benchmark::DoNotOptimize(out.first.data_ptr());
    }
  }
  st.SetItemsProcessed(st.iterations() * kStepsPerRound);  // items/s = decode steps per second
}

// ---- dequantize the whole cache once (what transformers does every step)
// ----------------------------------------------
void dequantFp8Ours(benchmark::State& st) {
  const std::int64_t ctx = st.range(0), n = kH * ctx * kD;
  const at::Tensor x = at::randn({n});
  const at::Tensor scale = (x.abs().amax() / 448.0).expand({kD}).contiguous();
  std::vector<std::uint8_t> q(n);
  kernels::fp8EncodeRun(kernels::ElemType::F32, x.data_ptr<float>(), scale.data_ptr<float>(), kD, n, q.data(),
                        kernels::Fp8Format::E4M3FN, false);
  at::Tensor out = at::empty({n});
  for (auto _ : st) {
    kernels::fp8DecodeRun(kernels::ElemType::F32, q.data(), scale.data_ptr<float>(), kD, n, out.data_ptr<float>(),
                          kernels::Fp8Format::E4M3FN);
    benchmark::ClobberMemory();
  }
  st.SetItemsProcessed(st.iterations() * ctx);  // tokens per second
}

void dequantFp8Torch(benchmark::State& st) {
  at::set_num_threads(1);
  const std::int64_t ctx = st.range(0);
  const at::Tensor x = at::randn({1, kH, ctx, kD});
  const at::Tensor scale = x.abs().amax() / 448.0;
  const at::Tensor q = (x / scale).to(at::kFloat8_e4m3fn);
  for (auto _ : st) {
    at::Tensor out = (q.to(at::kFloat) * scale).to(at::kFloat);
    benchmark::DoNotOptimize(out.data_ptr());
  }
  st.SetItemsProcessed(st.iterations() * ctx);
}

void dequantGroup(benchmark::State& st, bool hqq) {
  at::set_num_threads(1);
  const std::int64_t ctx = st.range(0);
  auto codec = hqq ? cache::detail::makeHqqCodec(4, 64, true) : cache::detail::makeQuantoCodec(4, 64);
  const at::Tensor x = at::randn({1, kH, ctx, kD});
  const auto q = codec->quantize(x, 0);
  at::Tensor out = at::empty_like(x);
  for (auto _ : st) {
    codec->dequantizeInto(q, out);
    benchmark::ClobberMemory();
  }
  st.SetItemsProcessed(st.iterations() * ctx);
}

// ---- attend: one decode step of attention over a layer -----------------------------------------------------------
void attendBench(benchmark::State& st, const std::string& spec, bool simd) {
  const std::int64_t ctx = st.range(0);
  constexpr std::int64_t kHq = 9;
  const kernels::IsaScope path(simd ? kernels::isa() : kernels::Isa::Scalar);
  cache::StatsOptions so;
  so.enabled = false;
  auto layer = cache::makeLayer(cache::parseSpec(spec), so);
  // The prompt in chunks of 512, as generation fills a fused cache.
  for (std::int64_t t = 0; t < ctx; t += 512) {
    const std::int64_t n = std::min<std::int64_t>(512, ctx - t);
    layer->attend(at::randn({1, kHq, n, kD}), at::randn({1, kH, n, kD}), at::randn({1, kH, n, kD}));
  }
  std::vector<at::Tensor> q, k, v;
  for (int i = 0; i < kStepsPerRound; ++i)
    q.push_back(at::randn({1, kHq, 1, kD})), k.push_back(at::randn({1, kH, 1, kD})),
        v.push_back(at::randn({1, kH, 1, kD}));
  std::int64_t steps = 0;
  for (auto _ : st) {
    const int i = static_cast<int>(steps++ % kStepsPerRound);
    benchmark::DoNotOptimize(layer->attend(q[i], k[i], v[i]).data_ptr());
  }
  st.SetItemsProcessed(st.iterations());  // decode steps per second
}

}  // namespace

int main(int argc, char** argv) {
  using Fn = void (*)(benchmark::State&);
  for (auto [name, fn] : {std::pair<const char*, Fn>{"dequant_all/fp8/kvscope", dequantFp8Ours},
                          std::pair<const char*, Fn>{"dequant_all/fp8/torch_cast", dequantFp8Torch}}) {
    auto* b = benchmark::RegisterBenchmark(name, fn);
    for (std::int64_t ctx : {256, 1024, 4096, 16384}) b->Arg(ctx);
  }
  for (bool hqq : {false, true}) {
    auto* b = benchmark::RegisterBenchmark(hqq ? "dequant_all/hqq_int4" : "dequant_all/quanto_int4",
                                           [hqq](benchmark::State& st) { dequantGroup(st, hqq); });
    for (std::int64_t ctx : {256, 1024, 4096, 16384}) b->Arg(ctx);
  }
  for (std::int64_t n : {std::int64_t{1} << 20, std::int64_t{1} << 25}) {
    benchmark::RegisterBenchmark("codec/memcpy_f32", codecMemcpy)->Arg(n);
    benchmark::RegisterBenchmark("codec/fp8_encode_f32", codecEncode)->Arg(n);
    benchmark::RegisterBenchmark("codec/fp8_decode_f32", codecDecode)->Arg(n);
  }
  struct Variant {
    std::string name;
    std::function<std::unique_ptr<Stepper>()> make;
  };
  const std::vector<Variant> variants = {
      {"dynamic/kvscope", [] { return std::make_unique<OursStepper>("dynamic"); }},
      {"dynamic/transformers_way", [] { return std::make_unique<CatDynamic>(); }},
      {"fp8/kvscope", [] { return std::make_unique<OursStepper>("fp8"); }},
      {"fp8/transformers_way", [] { return std::make_unique<CatFp8>(); }},
      {"quanto_int4/kvscope", [] { return std::make_unique<OursStepper>("quanto:nbits=4"); }},
      {"quanto_int4/transformers_way",
       [] { return std::make_unique<CatResidual>(cache::detail::makeQuantoCodec(4, 64)); }},
      {"hqq_int4/kvscope", [] { return std::make_unique<OursStepper>("hqq:nbits=4"); }},
      {"hqq_int4/transformers_way",
       [] { return std::make_unique<CatResidual>(cache::detail::makeHqqCodec(4, 64, true)); }},
      {"stats/fp8_stats_on", [] { return std::make_unique<OursStepper>("fp8", true); }},
      {"stats/fp8_stats_off", [] { return std::make_unique<OursStepper>("fp8", false); }},
  };
  for (const auto& v : variants) {
    auto* b = benchmark::RegisterBenchmark(("append/" + v.name).c_str(),
                                           [make = v.make](benchmark::State& st) { appendBench(st, make); });
    for (std::int64_t ctx : {256, 1024, 4096, 16384}) b->Arg(ctx);
    b->Unit(benchmark::kMillisecond);
  }
  for (const char* spec :
       {"dynamic", "fp8:overflow=saturate", "quanto:nbits=4", "hqq:nbits=4", "kivi", "llamacpp:type_k=q4_0,type_v=q4_0",
        "vllm", "vllm:kv=ultraquant_4bit", "mxfp4", "vllm:kv=int4_per_token_head", "vllm:kv=turboquant_k8v4",
        "vllm:kv=turboquant_4bit_nc", "vllm:kv=turboquant_3bit_nc"})
    for (bool simd : {true, false}) {
      // The block-row formats (llamacpp, vllm, mxfp4) have no AVX2 path of their own to switch off.
      const std::string s(spec);
      if (!simd && (s == "dynamic" || s.find("llamacpp") == 0 || s.find("vllm") == 0 || s.find("mxfp4") == 0)) continue;
      const std::string name = std::string("attend/") + spec + (simd ? "" : "/portable");
      auto* b = benchmark::RegisterBenchmark(name.c_str(),
                                             [spec, simd](benchmark::State& st) { attendBench(st, spec, simd); });
      for (std::int64_t ctx : {1024, 8192, 16384}) b->Arg(ctx);
      b->Unit(benchmark::kMicrosecond);
    }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
