// GGUF files that lie: every one is a FormatError naming the problem, never a crash or a wild read.
#include <gtest/gtest.h>

#include <cstring>

#include "gguf_writer.h"
#include "kernels/cpu/blocks.h"
#include "model/dequant.h"
#include "model/gguf.h"
#include "test_helpers.h"

using namespace kvscope::model;

namespace {

using kvscope::testutil::GgufWriter;

std::string errorOf(const std::string& path) {
  return kvscope::testutil::errorOf<FormatError>([&] { GgufFile f(path); });
}

// A valid file: one F32 tensor [4] = {1, 2, 3, 4} and one string key.
GgufWriter valid() {
  GgufWriter b;
  b.header(1, 1);
  b.kvStr("general.architecture", "llama");
  b.tensorInfo("w", {4}, 0, 0);
  b.align();
  for (float v : {1.f, 2.f, 3.f, 4.f}) b.put(v);
  return b;
}

}  // namespace

TEST(Gguf, ReadsAValidFile) {
  GgufFile f(valid().write("kv_ok.gguf"));
  EXPECT_EQ(f.getString("general.architecture"), "llama");
  ASSERT_EQ(f.tensors().size(), 1u);
  const auto t = toTensor(f.at("w"));
  EXPECT_EQ(t[3].item<float>(), 4.f);
  EXPECT_THROW(f.at("missing"), FormatError);
}

TEST(Gguf, TruncatedAtEverySectionBoundaryIsAnError) {
  const std::string full = valid().bytes;
  for (std::size_t cut = 0; cut < full.size(); ++cut) {
    GgufWriter b;
    b.bytes = full.substr(0, cut);
    const std::string err = errorOf(b.write("kv_trunc.gguf"));
    EXPECT_FALSE(err.empty()) << "truncated at " << cut << " was accepted";
  }
}

TEST(Gguf, LyingHeaders) {
  {
    GgufWriter b = valid();
    b.bytes[0] = 'X';
    EXPECT_NE(errorOf(b.write("kv_magic.gguf")).find("not a GGUF file"), std::string::npos);
  }
  {
    GgufWriter b;
    b.header(1, 1, 7);
    b.bytes += std::string(64, '\0');
    EXPECT_NE(errorOf(b.write("kv_ver.gguf")).find("version 7"), std::string::npos);
  }
  {
    GgufWriter b;
    b.header(std::uint64_t{1} << 62, 1);
    b.bytes += std::string(64, '\0');
    EXPECT_NE(errorOf(b.write("kv_count.gguf")).find("header claims"), std::string::npos);
  }
  {
    GgufWriter b;
    b.header(0, 1);
    b.str("k");
    b.put<std::uint32_t>(8);
    b.put<std::uint64_t>(std::uint64_t{1} << 63);  // a string 2^63 bytes long
    EXPECT_NE(errorOf(b.write("kv_str.gguf")).find("-byte string"), std::string::npos);
  }
  {
    GgufWriter b;
    b.header(0, 1);
    b.str("k");
    b.put<std::uint32_t>(9);  // array
    b.put<std::uint32_t>(6);  // of float32
    b.put<std::uint64_t>(std::uint64_t{1} << 61);
    EXPECT_NE(errorOf(b.write("kv_arr.gguf")).find("array claims"), std::string::npos);
  }
  auto oneTensor = [](const std::vector<std::uint64_t>& dims, std::uint32_t type, std::uint64_t off,
                      std::size_t dataBytes) {
    GgufWriter b;
    b.header(1, 0);
    b.tensorInfo("w", dims, type, off);
    b.align();
    b.bytes += std::string(dataBytes, '\0');
    return b;
  };
  EXPECT_NE(errorOf(oneTensor({4}, 0, 0, 8).write("kv_past.gguf")).find("past the end"), std::string::npos);
  EXPECT_NE(errorOf(oneTensor({4}, 0, 3, 64).write("kv_align.gguf")).find("not aligned"), std::string::npos);
  EXPECT_NE(errorOf(oneTensor({4}, 99, 0, 64).write("kv_type.gguf")).find("unknown tensor type 99"), std::string::npos);
  EXPECT_NE(errorOf(oneTensor({33}, 2, 0, 64).write("kv_blocks.gguf")).find("whole number of Q4_0 blocks"),
            std::string::npos);
  EXPECT_NE(errorOf(oneTensor({1u << 31, 1u << 31}, 0, 0, 64).write("kv_huge.gguf")).find("impossible"),
            std::string::npos);
  EXPECT_NE(errorOf(oneTensor({0}, 0, 0, 64).write("kv_zero.gguf")).find("impossible"), std::string::npos);
  {
    GgufWriter b;
    b.header(2, 0);
    b.tensorInfo("a", {16}, 0, 0);
    b.tensorInfo("b", {16}, 0, 32);  // overlaps a's last 32 bytes
    b.align();
    b.bytes += std::string(128, '\0');
    EXPECT_NE(errorOf(b.write("kv_overlap.gguf")).find("overlap"), std::string::npos);
  }
  {
    GgufWriter b;
    b.header(2, 0);
    b.tensorInfo("a", {4}, 0, 0);
    b.tensorInfo("a", {4}, 0, 32);
    b.align();
    b.bytes += std::string(64, '\0');
    EXPECT_NE(errorOf(b.write("kv_dup.gguf")).find("appears twice"), std::string::npos);
  }
  EXPECT_NE(errorOf("/nonexistent/model.gguf").find("cannot open"), std::string::npos);
}

TEST(Gguf, UnsupportedTensorTypeNamesTheTensor) {
  GgufWriter b;
  b.header(1, 0);
  b.tensorInfo("blk.0.attn_q.weight", {256}, 11, 0);  // Q3_K: known size, not read by kvscope
  b.align();
  b.bytes += std::string(110, '\0');
  GgufFile f(b.write("kv_q3k.gguf"));
  try {
    toTensor(f.at("blk.0.attn_q.weight"));
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.attn_q.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Q3_K"), std::string::npos) << e.what();
  }
}

// One table of ggml's types: the reader's sizes and the kernels' layouts are the same numbers.
TEST(Gguf, OneTableOfGgmlTypes) {
  using namespace kvscope::kernels;
  for (const GgmlTypeInfo& t : kGgmlTypes) {
    const auto n = static_cast<std::uint32_t>(t.type);
    EXPECT_EQ(ggmlTypeInfo(n), &t) << t.name << " appears twice";
    EXPECT_EQ(ggmlTypeName(n), t.name);
    const BlockLayout L = blockLayout(n);
    if (L.values > 0) {
      EXPECT_EQ(L.values, t.blockValues) << t.name;
      EXPECT_EQ(L.bytes, t.blockBytes) << t.name;
    }
  }
  EXPECT_EQ(ggmlTypeInfo(99), nullptr);
  EXPECT_EQ(ggmlTypeName(99), "type 99");
  EXPECT_EQ(blockLayout(GgmlType::Q3_K).values, 0);  // sized by the reader, not kept as stored
  EXPECT_EQ(blockLayout(GgmlType::Q4_K).bytes, 144);
  EXPECT_EQ(GgufFile::tensorBytes(12, 512, "t"), 288u);
}
