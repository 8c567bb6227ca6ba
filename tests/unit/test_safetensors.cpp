#include <gtest/gtest.h>

#include <cstring>

#include "model/safetensors.h"
#include "test_helpers.h"

using kvscope::model::FormatError;
using kvscope::model::SafetensorsFile;
namespace testutil = kvscope::testutil;

namespace {

std::string writeFile(const std::string& name, const std::string& header, const std::string& data,
                      std::int64_t claimed = -1) {
  return testutil::writeFile(testutil::tempPath(name), testutil::safetensorsBytes(header, data, claimed));
}

std::string errorOf(const std::string& path) {
  return testutil::errorOf<FormatError>([&] { SafetensorsFile f(path); });
}

}  // namespace

TEST(Safetensors, ReadsTensorsAndMetadata) {
  std::string data(24, '\0');
  const float vals[4] = {1.f, 2.f, 3.f, 4.f};
  std::memcpy(data.data(), vals, 16);
  const auto path = writeFile("kv_ok.safetensors",
                              R"({"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                              R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[16,24]}})",
                              data);
  SafetensorsFile f(path);
  EXPECT_EQ(f.metadata().at("k"), "v");
  ASSERT_EQ(f.entries().size(), 2u);
  EXPECT_TRUE(f.contains("a"));
  EXPECT_FALSE(f.contains("c"));
  const auto& a = f.at("a");
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(a.bytes, 16u);
  float back[4];
  std::memcpy(back, a.data, 16);
  EXPECT_EQ(back[3], 4.f);
  EXPECT_THROW(f.at("c"), FormatError);
}

TEST(Safetensors, LyingHeadersAreErrorsNeverWildReads) {
  const std::string d(16, '\0');
  EXPECT_NE(errorOf(writeFile("kv_b1.safetensors", "{}", "", 1000)).find("header claims 1000 bytes"),
            std::string::npos);
  EXPECT_NE(errorOf(writeFile("kv_b2.safetensors", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,32]}})", d))
                .find("lie outside the 16 data bytes"),
            std::string::npos);
  EXPECT_NE(errorOf(writeFile("kv_b3.safetensors", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", d))
                .find("16 bytes stored for 3 x 4 expected"),
            std::string::npos);
  EXPECT_NE(errorOf(writeFile("kv_b4.safetensors", R"({"a":{"dtype":"Q9","shape":[4],"data_offsets":[0,16]}})", d))
                .find("unknown dtype `Q9`"),
            std::string::npos);
  EXPECT_NE(errorOf(writeFile("kv_b5.safetensors", "{not json", d)).find("not valid JSON"), std::string::npos);
  EXPECT_NE(errorOf(writeFile("kv_b6.safetensors",
                              R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})", d))
                .find("shape overflows"),
            std::string::npos);
  EXPECT_NE(errorOf(writeFile("kv_b7.safetensors", R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,16]}})", d))
                .find("non-negative"),
            std::string::npos);
  EXPECT_NE(errorOf("/nonexistent/x.safetensors").find("cannot open"), std::string::npos);
  const auto tiny = testutil::writeFile(testutil::tempPath("kv_tiny.safetensors"), "abc");
  EXPECT_NE(errorOf(tiny).find("too short"), std::string::npos);
}

// The writer's image reads back through the reader (names, dtypes, shapes incl. a scalar, bytes, metadata), its header
// padded to 8 bytes as the safetensors package writes it; bad tensors are errors naming the tensor.
TEST(Safetensors, WrittenImagesReadBack) {
  using kvscope::model::SafetensorsTensor;
  const float one = 0.25f, three[3] = {1.5f, -2.f, 3e-3f};
  std::vector<SafetensorsTensor> ts{{"a.k_scale", "F32", {}, std::string(reinterpret_cast<const char*>(&one), 4)},
                                    {"a.v_scale", "F32", {3}, std::string(reinterpret_cast<const char*>(three), 12)}};
  const std::string img = kvscope::model::safetensorsImage(ts, {{"format", "pt"}});
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(img[static_cast<std::size_t>(i)]);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(img.size(), 8 + n + 16);
  SafetensorsFile f(reinterpret_cast<const std::uint8_t*>(img.data()), img.size(), "written");
  ASSERT_EQ(f.entries().size(), 2u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const auto& k = f.at("a.k_scale");
  EXPECT_TRUE(k.shape.empty());
  EXPECT_EQ(k.dtype, "F32");
  float got = 0;
  std::memcpy(&got, k.data, 4);
  EXPECT_EQ(got, one);
  const auto& v = f.at("a.v_scale");
  EXPECT_EQ(v.shape, std::vector<std::int64_t>{3});
  EXPECT_EQ(std::memcmp(v.data, three, 12), 0);
  auto bad = [&](std::vector<SafetensorsTensor> t) {
    return testutil::errorOf<FormatError>([&] { kvscope::model::safetensorsImage(t); });
  };
  EXPECT_NE(bad({ts[0], ts[0]}).find("`a.k_scale` is empty, reserved or given twice"), std::string::npos);
  EXPECT_NE(bad({{"x", "F33", {}, "abcd"}}).find("unknown dtype `F33`"), std::string::npos);
  EXPECT_NE(bad({{"x", "F32", {2}, "abcd"}}).find("tensor `x`: 4 bytes for 2 F32 values"), std::string::npos);
}
