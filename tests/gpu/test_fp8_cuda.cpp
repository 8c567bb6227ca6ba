// CUDA fp8 kernels against their CPU twins, bit for bit. Skipped where no CUDA device is present.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/fp8_cpu.h"
#include "kernels/cuda/fp8_cuda.h"

using namespace kvscope::kernels;

TEST(Fp8Cuda, EncodeDecodeMatchCpuBitForBit) {
  if (!cuda::deviceAvailable()) GTEST_SKIP() << "no CUDA device";
  const std::int64_t rows = 12, n = 64 * 257, period = 64;
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 200.0f);
  std::vector<float> x(rows * n), scale(3 * period);
  for (auto& v : x) v = dist(rng);
  for (auto& s : scale) s = 0.1f + std::abs(dist(rng)) / 1000.0f;
  for (Fp8Format f : {Fp8Format::E4M3FN, Fp8Format::E5M2}) {
    for (bool sat : {false, true}) {
      std::vector<std::uint8_t> cpu(rows * n), gpu(rows * n);
      Fp8Counts cc;
      for (std::int64_t r = 0; r < rows; ++r)
        cc += fp8EncodeRun(ElemType::F32, x.data() + r * n, scale.data() + (r % 3) * period, period, n,
                           cpu.data() + r * n, f, sat);
      float *dx, *ds, *dout;
      std::uint8_t* dq;
      unsigned long long* dc;
      ASSERT_EQ(cudaMalloc(&dx, x.size() * 4), cudaSuccess);
      cudaMalloc(&ds, scale.size() * 4);
      cudaMalloc(&dq, gpu.size());
      cudaMalloc(&dc, 16);
      cudaMalloc(&dout, x.size() * 4);
      cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(ds, scale.data(), scale.size() * 4, cudaMemcpyHostToDevice);
      cudaMemset(dc, 0, 16);
      cuda::fp8Encode(ElemType::F32, dx, n, ds, 3, period, rows, n, dq, n, f, sat, dc, nullptr);
      cudaMemcpy(gpu.data(), dq, gpu.size(), cudaMemcpyDeviceToHost);
      unsigned long long counts[2];
      cudaMemcpy(counts, dc, 16, cudaMemcpyDeviceToHost);
      EXPECT_EQ(cpu, gpu);
      EXPECT_EQ(static_cast<std::int64_t>(counts[0]), cc.overflow);
      EXPECT_EQ(static_cast<std::int64_t>(counts[1]), cc.nonFinite);
      std::vector<float> dcpu(x.size()), dgpu(x.size());
      for (std::int64_t r = 0; r < rows; ++r)
        fp8DecodeRun(ElemType::F32, cpu.data() + r * n, scale.data() + (r % 3) * period, period, n, dcpu.data() + r * n,
                     f);
      cuda::fp8Decode(ElemType::F32, dq, n, ds, 3, period, rows, n, dout, n, f, nullptr);
      cudaMemcpy(dgpu.data(), dout, x.size() * 4, cudaMemcpyDeviceToHost);
      std::int64_t differ = 0;
      for (std::size_t i = 0; i < dcpu.size(); ++i)
        differ += !(std::isnan(dcpu[i]) ? std::isnan(dgpu[i]) : std::memcmp(&dcpu[i], &dgpu[i], 4) == 0);
      EXPECT_EQ(differ, 0);
      cudaFree(dx), cudaFree(ds), cudaFree(dq), cudaFree(dc), cudaFree(dout);
    }
  }
}
