// Weight benchmarks (Google Benchmark), reported as ratios measured in one run: one decode-step product x W^T
// (activation rows 1 and 4) on a [5632, 2048] weight (TinyLlama-1.1B's FFN shape), for each block format kvscope keeps
// in memory (model/weight.h), beside
//   matvec/f32_dense   the same product through at::linear on the dequantized float32 copy (what kvscope did before
//                      block formats; LibTorch's MKL GEMV), and
//   matvec/memcpy      copying the weight's stored bytes (the memory-bound floor for one read of the weight).
// Bytes processed are the weight's stored bytes, so the GB/s column compares the formats with the copy directly.
// On LibTorch's intra-op threads (the process default, or --threads N via OMP_NUM_THREADS).
#include <ATen/ATen.h>
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>

#include "kernels/cpu/blocks.h"
#include "model/weight.h"

using namespace kvscope;

namespace {

constexpr std::int64_t kRows = 5632, kCols = 2048;

std::shared_ptr<std::vector<std::uint8_t>> randomBlocks(std::uint32_t type) {
  const auto L = kernels::blockLayout(type);
  auto v = std::make_shared<std::vector<std::uint8_t>>(static_cast<std::size_t>(kRows * kCols / L.values * L.bytes));
  std::mt19937 rng(1);
  for (auto& b : *v) b = static_cast<std::uint8_t>(rng() & 0x3F);  // small bytes: finite fp16 scales everywhere
  return v;
}

void matvec(benchmark::State& st, std::uint32_t type) {
  const std::int64_t m = st.range(0);
  const auto bytes = randomBlocks(type);
  const model::Weight w(type, kRows, kCols, bytes->data(), bytes);
  const at::Tensor x = at::randn({m, kCols});
  for (auto _ : st) {
    at::Tensor y = w.linear(x);
    benchmark::DoNotOptimize(y.data_ptr<float>());
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations()) * static_cast<std::int64_t>(w.bytes()));
}

void denseF32(benchmark::State& st) {
  const at::Tensor w = at::randn({kRows, kCols}), x = at::randn({st.range(0), kCols});
  for (auto _ : st) {
    at::Tensor y = at::linear(x, w);
    benchmark::DoNotOptimize(y.data_ptr<float>());
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations()) * kRows * kCols * 4);
}

void copyBytes(benchmark::State& st) {  // Q4_0's stored size
  const auto src = randomBlocks(static_cast<std::uint32_t>(kernels::BlockType::Q4_0));
  std::vector<std::uint8_t> dst(src->size());
  for (auto _ : st) {
    std::memcpy(dst.data(), src->data(), src->size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations()) * static_cast<std::int64_t>(src->size()));
}

}  // namespace

int main(int argc, char** argv) {
  using kernels::BlockType;
  const std::pair<const char*, BlockType> types[] = {
      {"Q4_0", BlockType::Q4_0}, {"Q4_1", BlockType::Q4_1}, {"Q5_0", BlockType::Q5_0}, {"Q5_1", BlockType::Q5_1},
      {"Q8_0", BlockType::Q8_0}, {"Q4_K", BlockType::Q4_K}, {"Q5_K", BlockType::Q5_K}, {"Q6_K", BlockType::Q6_K},
      {"F16", BlockType::F16},   {"BF16", BlockType::BF16}, {"F32", BlockType::F32}};
  for (const auto& [name, t] : types)
    benchmark::RegisterBenchmark((std::string("matvec/") + name).c_str(),
                                 [t = static_cast<std::uint32_t>(t)](benchmark::State& st) { matvec(st, t); })
        ->Arg(1)
        ->Arg(4)
        ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("matvec/f32_dense", denseF32)->Arg(1)->Arg(4)->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("matvec/memcpy", copyBytes)->Unit(benchmark::kMicrosecond);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
