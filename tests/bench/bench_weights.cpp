// Weight benchmarks (Google Benchmark), reported as ratios measured in one run: one decode-step product x W^T
// (activation rows 1 and 4) on a [5632, 2048] weight (TinyLlama-1.1B's FFN shape), for each block format kvscope keeps
// in memory (model/weight.h), with float32 activations (matvec/), 8-bit ones on the stored form (matvec_q8/) and on
// the packed form (matvec_q8_packed/: Q4_0, Q4_1, Q8_0, Q4_K), beside
//   matvec/f32_dense   the same product through at::linear on the dequantized float32 copy (what kvscope did before
//                      block formats; LibTorch's MKL GEMV), and
//   matvec/memcpy      copying the weight's stored bytes (the memory-bound floor for one read of the weight).
// Bytes processed are the weight's stored bytes, so the GB/s column compares the formats with the copy directly.
//   decode_stream/Q4_K/huge_pages and /small_pages: one activation row through 24 packed [14336, 4096] Q4_K matrices
//                      (Llama-3-8B's FFN shape, 800 MB: far past the L3, as a decode step of a 7-8B model), their
//                      packed form in 2 MiB pages (as Weight::packed allocates it) or in 4 KiB pages (a copy).
// On LibTorch's intra-op threads (the process default, or --threads N via OMP_NUM_THREADS).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <random>

#include "kernels/cpu/blocks.h"
#include "kernels/cpu/packed_matmul.h"
#include "model/weight.h"

using namespace kvscope;

namespace {

constexpr std::int64_t kRows = 5632, kCols = 2048;

std::shared_ptr<std::vector<std::uint8_t>> randomBlocks(std::uint32_t type, std::int64_t rows = kRows,
                                                        std::int64_t cols = kCols) {
  const auto L = kernels::blockLayout(type);
  auto v = std::make_shared<std::vector<std::uint8_t>>(static_cast<std::size_t>(rows * cols / L.values * L.bytes));
  std::mt19937 rng(1);
  for (auto& b : *v) b = static_cast<std::uint8_t>(rng() & 0x3F);    // small bytes: finite fp16 scales everywhere
  if (type == static_cast<std::uint32_t>(kernels::GgmlType::MXFP4))  // E8M0 scales of 2^-9 .. 2^-2, as real experts'
    for (std::size_t b = 0; b < v->size(); b += L.bytes) (*v)[b] = static_cast<std::uint8_t>(119 + rng() % 8);
  return v;
}

// How the product runs: float32 activations on the stored form, 8-bit activations on it, or on the packed form.
enum class Form { F32, Q8, Q8Packed };

void matvec(benchmark::State& st, std::uint32_t type, Form form) {
  const std::int64_t m = st.range(0);
  const auto bytes = randomBlocks(type);
  const model::Weight stored(type, kRows, kCols, bytes->data(), bytes);
  const model::Weight w = form == Form::Q8Packed ? stored.packed() : stored;
  const auto a = form == Form::F32 ? model::Activations::F32 : model::Activations::Q8;
  const at::Tensor x = at::randn({m, kCols});
  for (auto _ : st) {
    at::Tensor y = w.linear(x, {}, a);
    benchmark::DoNotOptimize(y.data_ptr<float>());
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations()) * static_cast<std::int64_t>(stored.bytes()));
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()) * m * kRows * kCols);  // multiply-adds
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
  const auto src = randomBlocks(static_cast<std::uint32_t>(kernels::GgmlType::Q4_0));
  std::vector<std::uint8_t> dst(src->size());
  for (auto _ : st) {
    std::memcpy(dst.data(), src->data(), src->size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations()) * static_cast<std::int64_t>(src->size()));
}

// A decode step's weight stream: what each matrix's pages cost when the weights are far larger than the caches.
void decodeStream(benchmark::State& st, bool hugePages) {
  constexpr std::int64_t rows = 14336, cols = 4096, count = 24;
  const auto type = static_cast<std::uint32_t>(kernels::GgmlType::Q4_K);
  const auto bytes = randomBlocks(type, rows, cols);
  const kernels::BlockMatrix stored{type, rows, cols, bytes->data(),
                                    cols / kernels::blockLayout(type).values * kernels::blockLayout(type).bytes};
  std::vector<kernels::PackedMatrix> ws(count);
  for (auto& p : ws) {
    kernels::packPrepare(stored, p);
    kernels::packTiles(stored, p, 0, p.tiles());
    if (hugePages) continue;
    const auto n = static_cast<std::size_t>(p.bytes());
    util::StreamedBuffer small(static_cast<std::uint8_t*>(std::malloc(n)));
    const auto offset = static_cast<std::size_t>(reinterpret_cast<std::uintptr_t>(small.get()) % 4096);
    madvise(small.get() - offset, n + offset, MADV_NOHUGEPAGE);  // madvise takes whole pages
    std::memcpy(small.get(), p.data.get(), n);
    p.data = std::move(small);
  }
  const at::Tensor x = at::randn({1, cols});
  kernels::Q8Rows xq;
  kernels::quantizeRowsQ8(x.data_ptr<float>(), 1, cols, cols, xq);
  std::vector<float> y(static_cast<std::size_t>(rows));
  for (auto _ : st)
    for (const auto& p : ws) {
      at::parallel_for(0, p.tiles(), 1, [&](std::int64_t t0, std::int64_t t1) {
        kernels::packedMatmulQ8(p, xq, y.data(), rows, t0, t1);
      });
      benchmark::DoNotOptimize(y.data());
    }
  std::int64_t streamed = 0;
  for (const auto& p : ws) streamed += p.bytes();
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations()) * streamed);
}

}  // namespace

int main(int argc, char** argv) {
  using kernels::GgmlType;
  const std::pair<const char*, GgmlType> types[] = {
      {"Q4_0", GgmlType::Q4_0},   {"Q4_1", GgmlType::Q4_1}, {"Q5_0", GgmlType::Q5_0}, {"Q5_1", GgmlType::Q5_1},
      {"Q8_0", GgmlType::Q8_0},   {"Q4_K", GgmlType::Q4_K}, {"Q5_K", GgmlType::Q5_K}, {"Q6_K", GgmlType::Q6_K},
      {"MXFP4", GgmlType::MXFP4}, {"F16", GgmlType::F16},   {"BF16", GgmlType::BF16}, {"F32", GgmlType::F32}};
  for (const auto& [prefix, form] : {std::pair{"matvec/", Form::F32}, std::pair{"matvec_q8/", Form::Q8},
                                     std::pair{"matvec_q8_packed/", Form::Q8Packed}})
    for (const auto& [name, t] : types) {
      const auto type = static_cast<std::uint32_t>(t);
      if (form != Form::F32 && !kernels::blockLayout(type).quantized()) continue;  // float weights: f32 only
      if (form == Form::Q8Packed && !kernels::packableType(type)) continue;
      auto* b = benchmark::RegisterBenchmark((std::string(prefix) + name).c_str(),
                                             [type, form = form](benchmark::State& st) { matvec(st, type, form); });
      b->Arg(1)->Arg(4)->Unit(benchmark::kMicrosecond);
      if (form != Form::F32 || kernels::blockLayout(type).quantized())
        b->Arg(32)->Arg(128);  // a MoE expert's share of a prefill chunk, and a scan step's rows
    }
  benchmark::RegisterBenchmark("matvec/f32_dense", denseF32)->Arg(1)->Arg(4)->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("matvec/memcpy", copyBytes)->Unit(benchmark::kMicrosecond);
  for (const bool huge : {true, false})
    benchmark::RegisterBenchmark(huge ? "decode_stream/Q4_K/huge_pages" : "decode_stream/Q4_K/small_pages",
                                 [huge](benchmark::State& st) { decodeStream(st, huge); })
        ->Unit(benchmark::kMillisecond);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
