// kvscope's FP4 row codecs (kernels/fp4_codec.h through kernels/cpu/kv_blocks.h) against the engines' own Python
// code, on the fixtures of tests/parity/make_fp4_fixtures.py: vLLM 0.33.0's NVFP4 reference (values and E4M3 scale
// bytes bit for bit, dequantized values bit for bit), its 4over6 choice as read from the kernel, its UltraQuant
// reference (packed bytes and UE8M0 scales bit for bit), and Model-Optimizer 0.47.0's MXFP4 (likewise).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/hadamard.h"
#include "kernels/cpu/kv_blocks.h"
#include "kernels/fp4_codec.h"
#include "model/safetensors.h"
#include "tensor_helpers.h"

using namespace kvscope;
using testutil::loadTensor;

namespace {

std::string fixture(const std::string& name) {
  return std::string(KVSCOPE_FP4_FIXTURE_DIR) + "/" + name + ".safetensors";
}

bool sameBits(float a, float b) {
  std::uint32_t x = 0, y = 0;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

// Every row of x through the row codec of `type`: the stored rows [R, rowBytes] and their decoded values [R, D].
struct Encoded {
  std::vector<std::uint8_t> rows;
  std::vector<float> values;
  std::int64_t rowBytes = 0;
};
Encoded encodeRows(const at::Tensor& x, std::uint32_t type, float scale) {
  const std::int64_t R = x.size(0), D = x.size(1);
  Encoded e;
  e.rowBytes = kernels::kvRowBytes(type, D);
  e.rows.resize(static_cast<std::size_t>(R * e.rowBytes));
  e.values.resize(static_cast<std::size_t>(R * D));
  const float* src = x.const_data_ptr<float>();
  for (std::int64_t r = 0; r < R; ++r) {
    kernels::quantizeKvRow(type, src + r * D, D, e.rows.data() + r * e.rowBytes, scale);
    kernels::dequantizeKvRow(type, e.rows.data() + r * e.rowBytes, D, e.values.data() + r * D, scale);
  }
  return e;
}

// NVFP4 (plain or 4over6) against vLLM: each code's E2M1 value equals the reference's (±0 alike: vLLM's reference
// returns values, not codes), each scale byte and each dequantized value bit for bit.
void checkNvfp4(const std::string& name, bool fourOverSix) {
  const model::SafetensorsFile f(fixture(name));
  const at::Tensor x = loadTensor(f, "x");
  const float k = loadTensor(f, "k_scale").item<float>();
  const std::string suffix = fourOverSix ? "_4over6" : "";
  const at::Tensor values = loadTensor(f, "values" + suffix), scales = loadTensor(f, "scale_bytes" + suffix),
                   deq = loadTensor(f, "dequant" + suffix);
  const std::int64_t R = x.size(0), D = x.size(1);
  const Encoded e = encodeRows(x, fourOverSix ? kernels::kTypeNvfp4FourOverSix : kernels::kTypeNvfp4, k);
  ASSERT_EQ(e.rowBytes, D / 2 + D / 16);
  int bad = 0;
  for (std::int64_t r = 0; r < R && bad < 5; ++r) {
    const std::uint8_t* row = e.rows.data() + r * e.rowBytes;
    for (std::int64_t b = 0; b < D / 16; ++b)
      if (row[D / 2 + b] != scales[r][b].item<std::uint8_t>())
        ++bad, ADD_FAILURE() << name << suffix << " row " << r << " block " << b << ": scale byte "
                             << int(row[D / 2 + b]) << ", vLLM " << int(scales[r][b].item<std::uint8_t>());
    for (std::int64_t i = 0; i < D; ++i) {
      const std::uint8_t code = (row[i / 2] >> (4 * (i % 2))) & 0x0F;
      const float want = values[r][i].item<float>();
      if (kernels::fp4::e2m1Value(code) != want)
        ++bad, ADD_FAILURE() << name << suffix << " row " << r << " value " << i << ": code " << int(code) << " = "
                             << kernels::fp4::e2m1Value(code) << ", vLLM " << want << " (x = " << x[r][i].item<float>()
                             << ")";
      if (!sameBits(e.values[r * D + i], deq[r][i].item<float>()) && e.values[r * D + i] != deq[r][i].item<float>())
        ++bad, ADD_FAILURE() << name << suffix << " row " << r << " value " << i << ": dequantized "
                             << e.values[r * D + i] << ", vLLM " << deq[r][i].item<float>();
    }
  }
}

}  // namespace

TEST(Fp4Parity, Nvfp4MatchesVllmWithAUnitGlobalScale) {
  checkNvfp4("nvfp4_unit", false);
}
TEST(Fp4Parity, Nvfp4MatchesVllmWithAnAmaxGlobalScale) {
  checkNvfp4("nvfp4_amax", false);
}
TEST(Fp4Parity, Nvfp4MatchesVllmWithAnyGlobalScale) {
  checkNvfp4("nvfp4_odd", false);
}
TEST(Fp4Parity, Nvfp4FourOverSixMatchesTheKernelsChoice) {
  for (const char* name : {"nvfp4_unit", "nvfp4_amax", "nvfp4_odd"}) checkNvfp4(name, true);
}

// The fixtures hold blocks where 4over6 picks either scale: a test that could not tell the two variants apart would
// prove nothing about the choice.
TEST(Fp4Parity, FourOverSixChangesSomeBlocksAndKeepsOthers) {
  const model::SafetensorsFile f(fixture("nvfp4_unit"));
  const at::Tensor six = loadTensor(f, "scale_bytes"), four = loadTensor(f, "scale_bytes_4over6");
  const std::int64_t changed = six.ne(four).sum().item<std::int64_t>();
  EXPECT_GT(changed, 0);
  EXPECT_LT(changed, six.numel());
}

namespace {

// Rows of a 32-value-block format against the reference's packed codes, scale bytes and (when given) dequantized
// values, bit for bit.
void checkBlocks32(const char* who, std::uint32_t type, const at::Tensor& x, const at::Tensor& codes,
                   const at::Tensor& scales, const at::Tensor& deq) {
  const std::int64_t R = x.size(0), D = x.size(1);
  const Encoded e = encodeRows(x, type, 1.0f);
  ASSERT_EQ(e.rowBytes, D / 2 + D / 32);
  int bad = 0;
  for (std::int64_t r = 0; r < R && bad < 5; ++r) {
    const std::uint8_t* row = e.rows.data() + r * e.rowBytes;
    for (std::int64_t i = 0; i < D / 2; ++i)
      if (row[i] != codes[r][i].item<std::uint8_t>())
        ++bad, ADD_FAILURE() << "row " << r << " byte " << i << ": " << int(row[i]) << ", " << who << " "
                             << int(codes[r][i].item<std::uint8_t>());
    for (std::int64_t b = 0; b < D / 32; ++b)
      if (row[D / 2 + b] != scales[r][b].item<std::uint8_t>())
        ++bad, ADD_FAILURE() << "row " << r << " block " << b << ": E8M0 " << int(row[D / 2 + b]) << ", " << who << " "
                             << int(scales[r][b].item<std::uint8_t>());
    for (std::int64_t i = 0; deq.defined() && i < D; ++i)
      if (!sameBits(e.values[r * D + i], deq[r][i].item<float>()) && e.values[r * D + i] != deq[r][i].item<float>())
        ++bad, ADD_FAILURE() << "row " << r << " value " << i << ": dequantized " << e.values[r * D + i] << ", " << who
                             << " " << deq[r][i].item<float>();
  }
}

}  // namespace

TEST(Fp4Parity, Mxfp4MatchesModelOptimizerBitForBit) {
  const model::SafetensorsFile f(fixture("mxfp4"));
  checkBlocks32("Model-Optimizer", kernels::kTypeMxfp4, loadTensor(f, "x"), loadTensor(f, "codes"),
                loadTensor(f, "scale_bytes"), loadTensor(f, "dequant"));
}

TEST(Fp4Parity, UltraquantMatchesVllmBitForBit) {
  const model::SafetensorsFile f(fixture("ultraquant"));
  checkBlocks32("vLLM", kernels::kTypeUltraquant, loadTensor(f, "x"), loadTensor(f, "codes"),
                loadTensor(f, "scale_bytes"), loadTensor(f, "dequant"));
  // vLLM's rotated keys: the codes of x @ H.T are kvscope's codes of the same rotated rows.
  checkBlocks32("vLLM (rotated)", kernels::kTypeUltraquant, loadTensor(f, "x_rot"), loadTensor(f, "codes_rot"),
                loadTensor(f, "scale_bytes_rot"), at::Tensor());
}

// kvscope rotates with the fast Walsh-Hadamard transform, vLLM with a float32 matmul by the same matrix: the rotated
// rows agree to float rounding (which can move a value sitting on a rounding midpoint, never more).
TEST(Fp4Parity, TheHadamardRotationIsVllmsMatrix) {
  const model::SafetensorsFile f(fixture("ultraquant"));
  const at::Tensor x = loadTensor(f, "x").contiguous(), want = loadTensor(f, "x_rot");
  at::Tensor got = x.clone();
  const std::int64_t D = x.size(1);
  for (std::int64_t r = 0; r < x.size(0); ++r) kernels::hadamardRotate(got.mutable_data_ptr<float>() + r * D, D, D);
  const at::Tensor rel = (got - want).abs() / want.abs().amax(1, true).clamp_min(1e-30);
  EXPECT_LT(rel.max().item<float>(), 1e-6);
}
