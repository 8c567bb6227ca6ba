// GPU benchmarks (Google Benchmark, CUDA-event timing). Exits 77 (ctest: skipped) without a CUDA device.
//   gpu_fp8_dequant/<MiB>       kvscope's fp8 -> bf16 dequantize kernel over <MiB> of codes; bytes = read + written
//   gpu_memcpy_d2d/<MiB>        cudaMemcpyAsync device to device moving the same bytes (read + written)
//                               -> the figure: dequant bytes/s / memcpy bytes/s
//   gpu_attn_fused/<shape>/<L>  fused fp8 decode attention (one token, all heads of one layer) at context L
//   gpu_attn_sdpa_bf16/...      LibTorch SDPA on bf16 K/V: kvscope's fp8 layer (it keeps a bf16 mirror) or a
//                               dynamic bf16 cache
//   gpu_attn_deq_sdpa/...       dequantize the whole fp8 cache to bf16, then SDPA: transformers' fp8 cache per step
// Shapes: 0 = SmolLM2-135M (9 query / 3 KV heads, head_dim 64), 1 = Llama-3-8B (32 / 8, head_dim 128); batch 1.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <functional>

#include "kernels/cuda/fp8_cuda.h"
#include "kernels/fp8_attention.h"
#include "kernels/fp8_tensor.h"

using namespace kvscope;

namespace {

const at::Device kDev(at::kCUDA, 0);

// Times fn on the device with CUDA events, one measurement per benchmark iteration.
void timeDevice(benchmark::State& st, const std::function<void()>& fn) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  fn();  // warm-up
  cudaDeviceSynchronize();
  for (auto _ : st) {
    cudaEventRecord(a);
    fn();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, a, b);
    st.SetIterationTime(ms / 1e3);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
}

void dequant(benchmark::State& st) {
  const std::int64_t n = st.range(0) << 20, D = 64, rows = 64;
  const at::Tensor codes = at::randint(0, 255, {n}, at::TensorOptions().dtype(at::kByte).device(kDev));
  at::Tensor out = at::empty({n}, at::TensorOptions().dtype(at::kBFloat16).device(kDev));
  const at::Tensor scale = at::rand({D}, at::TensorOptions().device(kDev)) + 0.5;
  timeDevice(st, [&] {
    kernels::cuda::fp8Decode(kernels::ElemType::BF16, codes.const_data_ptr<std::uint8_t>(), n / rows,
                             scale.const_data_ptr<float>(), 1, D, rows, n / rows, out.mutable_data_ptr(), n / rows,
                             kernels::Fp8Format::E4M3FN, nullptr);
  });
  st.SetBytesProcessed(st.iterations() * n * 3);  // 1 byte read + 2 written per value
}

void memcpyD2D(benchmark::State& st) {
  const std::int64_t n = st.range(0) << 20;  // same traffic as dequant: 3n bytes = 1.5n read + 1.5n written
  const std::int64_t bytes = n * 3 / 2;
  at::Tensor src = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(kDev)), dst = at::empty_like(src);
  src.fill_(1);
  timeDevice(st, [&] { cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), bytes, cudaMemcpyDeviceToDevice, nullptr); });
  st.SetBytesProcessed(st.iterations() * bytes * 2);
}

struct Shape {
  std::int64_t Hq, Hkv, D;
};
constexpr Shape kShapes[] = {{9, 3, 64}, {32, 8, 128}};

struct AttnSetup {
  at::Tensor q, kc, vc, ks, vs, kb, vb;
  AttnSetup(const Shape& s, std::int64_t L) {
    const auto o = at::TensorOptions().device(kDev);
    q = at::randn({1, s.Hq, 1, s.D}, o).to(at::kBFloat16);
    ks = (at::rand({s.Hkv, s.D}, o) + 0.5) * (8.0 / 448);
    vs = (at::rand({s.Hkv, s.D}, o) + 0.5) * (3.0 / 448);
    const at::Tensor k = at::randn({1, s.Hkv, L, s.D}, o).clamp(-3, 3),
                     v = at::randn({1, s.Hkv, L, s.D}, o).clamp(-3, 3) * 0.5;
    kc = (k / ks.view({1, s.Hkv, 1, s.D})).to(at::kFloat8_e4m3fn).view(at::kByte);
    vc = (v / vs.view({1, s.Hkv, 1, s.D})).to(at::kFloat8_e4m3fn).view(at::kByte);
    kb = at::empty({1, s.Hkv, L, s.D}, o.dtype(at::kBFloat16));
    vb = at::empty_like(kb);
    kernels::fp8DecodeOnDevice(kc, kb, ks, kernels::Fp8Format::E4M3FN);
    kernels::fp8DecodeOnDevice(vc, vb, vs, kernels::Fp8Format::E4M3FN);
  }
};

void attnFused(benchmark::State& st) {
  const Shape s = kShapes[st.range(0)];
  const AttnSetup a(s, st.range(1));
  timeDevice(st, [&] {
    benchmark::DoNotOptimize(kernels::fp8DecodeAttention(a.q, a.kc, a.vc, a.ks, a.vs, kernels::Fp8Format::E4M3FN));
  });
  st.SetBytesProcessed(st.iterations() * a.kc.numel() * 2);
}

void attnSdpaBf16(benchmark::State& st) {
  const Shape s = kShapes[st.range(0)];
  const AttnSetup a(s, st.range(1));
  timeDevice(st, [&] {
    benchmark::DoNotOptimize(
        at::scaled_dot_product_attention(a.q, a.kb, a.vb, std::nullopt, 0.0, false, std::nullopt, s.Hq != s.Hkv));
  });
  st.SetBytesProcessed(st.iterations() * a.kb.numel() * 4);
}

void attnDeqSdpa(benchmark::State& st) {
  const Shape s = kShapes[st.range(0)];
  AttnSetup a(s, st.range(1));
  timeDevice(st, [&] {
    kernels::fp8DecodeOnDevice(a.kc, a.kb, a.ks, kernels::Fp8Format::E4M3FN);
    kernels::fp8DecodeOnDevice(a.vc, a.vb, a.vs, kernels::Fp8Format::E4M3FN);
    benchmark::DoNotOptimize(
        at::scaled_dot_product_attention(a.q, a.kb, a.vb, std::nullopt, 0.0, false, std::nullopt, s.Hq != s.Hkv));
  });
  st.SetBytesProcessed(st.iterations() * a.kc.numel() * 2);
}

}  // namespace

BENCHMARK(dequant)->Name("gpu_fp8_dequant")->Arg(256)->Arg(1024)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(memcpyD2D)->Name("gpu_memcpy_d2d")->Arg(256)->Arg(1024)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(attnFused)
    ->Name("gpu_attn_fused")
    ->ArgsProduct({{0, 1}, {2048, 32768}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(attnSdpaBf16)
    ->Name("gpu_attn_sdpa_bf16")
    ->ArgsProduct({{0, 1}, {2048, 32768}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(attnDeqSdpa)
    ->Name("gpu_attn_deq_sdpa")
    ->ArgsProduct({{0, 1}, {2048, 32768}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

int main(int argc, char** argv) {
  if (!at::hasCUDA() || !kernels::cudaKernelsUsable()) {
    std::printf("kvscope_gpu_bench: no CUDA device, skipped\n");
    return 77;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
