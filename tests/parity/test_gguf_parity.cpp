// kvscope's GGUF reader, dequantization and block-format matmul against the `gguf` package (make_gguf_fixtures.py).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <bit>
#include <cstring>

#include "kernels/cpu/blocks.h"
#include "kernels/cpu/kv_blocks.h"
#include "model/dequant.h"
#include "model/gguf.h"
#include "model/weight.h"

using namespace kvscope::model;

TEST(GgufParity, MetadataOfEveryType) {
  GgufFile f(KVSCOPE_GGUF_FIXTURE_DIR "/types.gguf");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.getString("general.architecture"), "llama");
  EXPECT_EQ(f.getString("test.string"), "héllo ✓");
  EXPECT_EQ(f.getInt("test.u32"), 4000000000LL);
  EXPECT_EQ(f.getInt("test.i32"), -7);
  EXPECT_EQ(f.getFloat("test.f32"), 0.25);
  EXPECT_EQ(f.getBool("test.bool"), true);
  EXPECT_EQ(f.getStringArray("test.strings"), (std::vector<std::string>{"a", "bc", ""}));
  EXPECT_EQ(f.getIntArray("test.ints"), (std::vector<std::int64_t>{1, -2, 3}));
  EXPECT_EQ(f.getFloatArray("test.floats"), (std::vector<double>{0.5, 1.5}));
  EXPECT_THROW(f.getInt("test.string"), FormatError);
  EXPECT_FALSE(f.getString("absent").has_value());
}

// kvscope's quantizers (Weight::requantized, --weights) write the bytes the package writes.
TEST(GgufParity, QuantizationToTheTypesKvscopeWrites) {
  SafetensorsFile ref(KVSCOPE_GGUF_FIXTURE_DIR "/quantize_ref.safetensors");
  const auto& x = ref.at("x");
  ASSERT_EQ(x.dtype, "F32");
  const std::int64_t n = x.shape[0] * x.shape[1];
  for (const auto& [name, type] : {std::pair{"Q8_0", 8u}, std::pair{"Q4_0", 2u}, std::pair{"Q4_1", 3u},
                                   std::pair{"Q5_0", 6u}, std::pair{"Q5_1", 7u}}) {
    const auto& want = ref.at(name);
    std::vector<std::uint8_t> got(want.bytes);
    ASSERT_EQ(static_cast<std::int64_t>(got.size()), n / 32 * kvscope::kernels::blockLayout(type).bytes) << name;
    kvscope::kernels::quantizeRows(type, reinterpret_cast<const float*>(x.data), n, got.data());
    std::int64_t differ = 0;
    for (std::size_t i = 0; i < got.size(); ++i) differ += got[i] != want.data[i];
    EXPECT_EQ(differ, 0) << name << ": " << differ << " of " << got.size() << " bytes differ";
  }
}

// llama.cpp's IQ4_NL cache blocks (kv_blocks.h) decode as the package's dequantizer does, bit for bit; the legacy
// types as cache rows are the bytes quantizeRows writes (above).
TEST(GgufParity, Iq4NlCacheBlocksDecodeAsThePackage) {
  SafetensorsFile ref(KVSCOPE_GGUF_FIXTURE_DIR "/quantize_ref.safetensors");
  const auto& blocks = ref.at("IQ4_NL_blocks");
  const auto& want = ref.at("IQ4_NL_dequantized");
  const std::int64_t n = static_cast<std::int64_t>(blocks.bytes) / 18 * 32;
  ASSERT_EQ(static_cast<std::int64_t>(want.bytes), n * 4);
  std::vector<float> got(static_cast<std::size_t>(n));
  kvscope::kernels::dequantizeKvRow(kvscope::kernels::kTypeIq4Nl, blocks.data, n, got.data());
  const auto* w = reinterpret_cast<const float*>(want.data);
  std::int64_t differ = 0;
  for (std::int64_t i = 0; i < n; ++i)
    differ += std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(w[i]);
  EXPECT_EQ(differ, 0) << differ << " of " << n << " values differ";
  // The same bytes through the cache's rows of other types: Q8_0 as quantizeRows writes it.
  const auto& x = ref.at("x");
  const std::int64_t m = x.shape[1];
  std::vector<std::uint8_t> row(static_cast<std::size_t>(kvscope::kernels::kvRowBytes(8u, m)));
  kvscope::kernels::quantizeKvRow(8u, reinterpret_cast<const float*>(x.data), m, row.data());
  EXPECT_EQ(std::memcmp(row.data(), ref.at("Q8_0").data, row.size()), 0);
}

TEST(GgufParity, DequantizationOfEveryType) {
  GgufFile f(KVSCOPE_GGUF_FIXTURE_DIR "/types.gguf");
  SafetensorsFile ref(KVSCOPE_GGUF_FIXTURE_DIR "/types_ref.safetensors");
  int checked = 0;
  for (const auto& e : ref.entries()) {
    const at::Tensor want = at::from_blob(const_cast<std::uint8_t*>(e.data), e.shape, at::kFloat).clone();
    const at::Tensor got = toTensor(f.at(e.name));
    ASSERT_EQ(got.sizes(), want.sizes()) << e.name;
    const double diff = (got - want).abs().max().item<double>();
    const double scale = want.abs().max().item<double>();
    std::printf("[gguf-parity] %-8s max |diff| %.3g (max |x| %.3g)\n", e.name.c_str(), diff, scale);
    EXPECT_LE(diff, 1e-6 * scale) << e.name;
    // The weight in its stored form, multiplied through the block kernels (2 rows) and the GEMM path (20 rows),
    // against the package's dequantization multiplied in double.
    const GgufFile::Tensor& t = f.at(e.name);
    const Weight w(t.type, t.dims[1], t.dims[0], t.data, std::shared_ptr<const void>(&f, [](const void*) {}));
    for (std::int64_t n : {2, 20}) {
      const at::Tensor x = at::randn({n, t.dims[0]});
      const at::Tensor y = w.linear(x).to(at::kDouble), yr = at::mm(x.to(at::kDouble), want.to(at::kDouble).t());
      const double tol = 1e-5 * x.abs().sum(1).max().item<double>() * scale;
      EXPECT_LE((y - yr).abs().max().item<double>(), tol) << e.name << " rows " << n;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 12);
}
