// The bad-input catalogue: files and configs that lie, each refused with one error that names the file, the tensor
// or key, and the problem (the messages are asserted, not just the exception type). The files are built here, byte
// by byte, from a small valid model (GGUF and Hugging Face directory) and then broken one way at a time.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cache/config.h"
#include "gguf_writer.h"
#include "model/gguf.h"
#include "model/hf_config.h"
#include "model/llama.h"
#include "model/safetensors.h"
#include "test_helpers.h"
#include "tokenizer/tokenizer.h"
#include "util/json.h"

using namespace kvscope;
using model::FormatError;
using testutil::GgufWriter;
using testutil::safetensorsBytes;
using testutil::writeFile;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) {
  fs::path d = testutil::tempPath("bad_inputs") / name;
  fs::create_directories(d.parent_path());
  return d;
}

// The message of what `f` throws (FormatError or TokenizerError or ConfigError); "" when it does not throw. Any other
// exception type fails the test: bad input must be classified.
std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const FormatError& e) {
    return e.what();
  } catch (const tokenizer::TokenizerError& e) {
    return e.what();
  } catch (const cache::ConfigError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "unclassified exception: " << e.what();
    return e.what();
  }
  return "";
}

#define EXPECT_MENTIONS(msg, ...)                                                         \
  do {                                                                                    \
    const std::string& m_ = (msg);                                                        \
    EXPECT_FALSE(m_.empty()) << "accepted";                                               \
    for (const std::string& part_ : std::vector<std::string>{__VA_ARGS__})                \
      EXPECT_NE(m_.find(part_), std::string::npos) << "`" << part_ << "` not in: " << m_; \
  } while (0)

// ---- GGUF ----------------------------------------------------------------------------------------------------------

// A valid 1-layer llama (hidden 8, 2 heads of 4, 1 KV head, ffn 16, vocab 8), all F32. `edit` may change the
// metadata, the tensor list or a tensor's values before the file is laid out.
struct TinyModel {
  std::string arch = "llama";
  std::map<std::string, std::uint32_t> ints = {{"block_count", 1},          {"embedding_length", 8},
                                               {"attention.head_count", 2}, {"attention.head_count_kv", 1},
                                               {"feed_forward_length", 16}, {"context_length", 64}};
  struct T {
    std::string name;
    std::vector<std::uint64_t> dims;  // ggml order
    std::vector<float> values;
    std::uint32_t type = 0;  // F32; another type writes `values.size() * 4` bytes of zeros under that type's name
  };
  std::vector<T> tensors;
  TinyModel() {
    auto add = [&](const std::string& n, std::vector<std::uint64_t> dims) {
      std::uint64_t numel = 1;
      for (auto d : dims) numel *= d;
      std::vector<float> v(numel);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.01f * static_cast<float>((i % 7) + 1);
      tensors.push_back({n, std::move(dims), std::move(v)});
    };
    add("token_embd.weight", {8, 8});
    add("output_norm.weight", {8});
    add("blk.0.attn_norm.weight", {8});
    add("blk.0.attn_q.weight", {8, 8});
    add("blk.0.attn_k.weight", {8, 4});
    add("blk.0.attn_v.weight", {8, 4});
    add("blk.0.attn_output.weight", {8, 8});
    add("blk.0.ffn_norm.weight", {8});
    add("blk.0.ffn_gate.weight", {8, 16});
    add("blk.0.ffn_up.weight", {8, 16});
    add("blk.0.ffn_down.weight", {16, 8});
  }
  T* find(const std::string& n) {
    for (auto& t : tensors)
      if (t.name == n) return &t;
    return nullptr;
  }
  GgufWriter build() const {
    GgufWriter g;
    g.header(tensors.size(), 1 + ints.size());
    g.kvStr("general.architecture", arch);
    for (const auto& [k, v] : ints) g.kvU32(arch + "." + k, v);
    std::uint64_t off = 0;
    for (const auto& t : tensors) {
      g.tensorInfo(t.name, t.dims, t.type, off);
      off += (t.values.size() * 4 + 31) / 32 * 32;
    }
    g.align();
    for (const auto& t : tensors) {
      for (float v : t.values) g.put(v);
      g.align();
    }
    return g;
  }
  std::string write(const std::string& name) const {
    const fs::path p = scratch(name);
    writeFile(p, build().bytes);
    return p.string();
  }
};

std::string loadError(const std::string& path) {
  return errorOf([&] { (void)model::LlamaModel::load(path); });
}

}  // namespace

TEST(BadInputs, TheTinyGgufModelLoads) {
  const auto m = model::LlamaModel::load(TinyModel().write("ok.gguf"));
  EXPECT_EQ(m->config().layers, 1);
  EXPECT_EQ(m->config().headDim, 4);
  EXPECT_EQ(m->config().vocab, 8);
}

TEST(BadInputs, GgufFromMemoryMatchesTheFile) {
  const GgufWriter g = TinyModel().build();
  const auto path = scratch("mem.gguf");
  writeFile(path, g.bytes);
  const model::GgufFile a(path.string());
  const model::GgufFile b(reinterpret_cast<const std::uint8_t*>(g.bytes.data()), g.bytes.size(), "in-memory.gguf");
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (std::size_t i = 0; i < a.tensors().size(); ++i) {
    EXPECT_EQ(a.tensors()[i].name, b.tensors()[i].name);
    EXPECT_EQ(a.tensors()[i].bytes, b.tensors()[i].bytes);
    EXPECT_EQ(std::memcmp(a.tensors()[i].data, b.tensors()[i].data, a.tensors()[i].bytes), 0);
  }
  EXPECT_MENTIONS(
      errorOf([&] { model::GgufFile(reinterpret_cast<const std::uint8_t*>(g.bytes.data()), 10, "short.gguf"); }),
      "short.gguf", "too short");
}

TEST(BadInputs, GgufTruncatedAtEverySectionBoundary) {
  const GgufWriter g = TinyModel().build();
  ASSERT_GT(g.boundaries.size(), 60u);
  const auto path = scratch("cut.gguf").string();
  for (const std::size_t cut : g.boundaries) {
    if (cut >= g.bytes.size()) continue;
    for (const std::size_t at : {cut, cut + 1}) {  // on the boundary and one byte into the next section
      writeFile(path, g.bytes.substr(0, at));
      const std::string err = loadError(path);
      EXPECT_MENTIONS(err, path);
      const bool explained = err.find("truncated while reading") != std::string::npos ||
                             err.find("too short") != std::string::npos ||
                             err.find("past the end") != std::string::npos ||
                             err.find("no room for the tensor data") != std::string::npos ||
                             err.find("(truncated or corrupted)") != std::string::npos;
      EXPECT_TRUE(explained) << "cut at " << at << ": " << err;
    }
  }
}

TEST(BadInputs, GgufHeadersThatLie) {
  auto oneTensor = [](const std::vector<std::uint64_t>& dims, std::uint32_t type, std::uint64_t off, std::size_t data) {
    GgufWriter g;
    g.header(1, 0);
    g.tensorInfo("blk.0.attn_q.weight", dims, type, off);
    g.align();
    g.bytes += std::string(data, '\0');
    const auto p = scratch("lie.gguf").string();
    writeFile(p, g.bytes);
    return errorOf([&] { model::GgufFile f(p); });
  };
  const std::string p = scratch("lie.gguf").string();
  constexpr std::uint64_t k2p63 = std::uint64_t{1} << 63;
  EXPECT_MENTIONS(oneTensor({4}, 0, 64, 64), p, "blk.0.attn_q.weight", "past the end");     // past EOF
  EXPECT_MENTIONS(oneTensor({4}, 0, k2p63, 64), p, "blk.0.attn_q.weight", "past the end");  // offset 2^63
  EXPECT_MENTIONS(oneTensor({4}, 0, ~std::uint64_t{0} - 31, 64), p, "blk.0.attn_q.weight", "past the end");
  EXPECT_MENTIONS(oneTensor({k2p63}, 0, 0, 64), p, "blk.0.attn_q.weight", "impossible");              // dim 2^63
  EXPECT_MENTIONS(oneTensor({~std::uint64_t{0}}, 0, 0, 64), p, "blk.0.attn_q.weight", "impossible");  // dim -1
  EXPECT_MENTIONS(oneTensor({1u << 30, 1u << 30, 1u << 30}, 0, 0, 64), p, "blk.0.attn_q.weight", "impossible");
  EXPECT_MENTIONS(oneTensor({4, 4, 4, 4, 4}, 0, 0, 64), p, "blk.0.attn_q.weight", "5 dimensions");
  EXPECT_MENTIONS(oneTensor({4}, 1234, 0, 64), p, "blk.0.attn_q.weight", "unknown tensor type 1234");
  EXPECT_MENTIONS(oneTensor({4}, 0, 4, 64), p, "blk.0.attn_q.weight", "not aligned");
  {
    GgufWriter g;
    g.header(2, 0);
    g.tensorInfo("a", {16}, 0, 0);
    g.tensorInfo("b", {16}, 0, 32);  // a's bytes [0, 64) and b's [32, 96) overlap
    g.align();
    g.bytes += std::string(128, '\0');
    writeFile(p, g.bytes);
    EXPECT_MENTIONS(errorOf([&] { model::GgufFile f(p); }), p, "`a`", "`b`", "overlap");
  }
  {  // counts: 2^63 tensors, 2^63 metadata entries
    for (const auto& [t, k] : {std::pair{k2p63, std::uint64_t{0}}, std::pair{std::uint64_t{0}, k2p63}}) {
      GgufWriter g;
      g.header(t, k);
      g.bytes += std::string(64, '\0');
      writeFile(p, g.bytes);
      EXPECT_MENTIONS(errorOf([&] { model::GgufFile f(p); }), p, "header claims");
    }
  }
  {  // a string of 2^63 bytes, an array of 2^63 elements, an unknown value type
    GgufWriter g;
    g.header(0, 1);
    g.str("general.name");
    g.put<std::uint32_t>(8);
    g.put<std::uint64_t>(k2p63);
    writeFile(p, g.bytes);
    EXPECT_MENTIONS(errorOf([&] { model::GgufFile f(p); }), p, "general.name", "-byte string");
    g.header(0, 1);
    g.str("tokenizer.ggml.scores");
    g.put<std::uint32_t>(9);
    g.put<std::uint32_t>(6);
    g.put<std::uint64_t>(k2p63);
    writeFile(p, g.bytes);
    EXPECT_MENTIONS(errorOf([&] { model::GgufFile f(p); }), p, "tokenizer.ggml.scores", "array claims");
    g.header(0, 1);
    g.str("x");
    g.put<std::uint32_t>(77);
    g.bytes += std::string(16, '\0');
    writeFile(p, g.bytes);
    EXPECT_MENTIONS(errorOf([&] { model::GgufFile f(p); }), p, "`x`", "unknown value type 77");
  }
  {  // alignment that is not a power of two
    GgufWriter g;
    g.header(0, 1);
    g.kvU32("general.alignment", 24);
    writeFile(p, g.bytes);
    EXPECT_MENTIONS(errorOf([&] { model::GgufFile f(p); }), p, "general.alignment", "power of two");
  }
}

TEST(BadInputs, GgufModelsThatDoNotFitTheirArchitecture) {
  {  // a tensor type the reader does not know at all
    TinyModel m;
    m.find("blk.0.attn_q.weight")->type = 99;
    const auto p = m.write("type99.gguf");
    EXPECT_MENTIONS(loadError(p), p, "tensor `blk.0.attn_q.weight`", "unknown tensor type 99");
  }
  {  // a known type kvscope does not dequantize (I32 has the size of F32)
    TinyModel m;
    m.find("blk.0.ffn_up.weight")->type = 26;
    const auto p = m.write("typei32.gguf");
    EXPECT_MENTIONS(loadError(p), p, "blk.0.ffn_up.weight", "I32");
  }
  {
    TinyModel m;
    m.tensors.erase(m.tensors.begin() + 4);  // blk.0.attn_k.weight
    const auto p = m.write("missing.gguf");
    EXPECT_MENTIONS(loadError(p), p, "missing tensor `blk.0.attn_k.weight`");
  }
  {
    TinyModel m;
    m.find("blk.0.ffn_down.weight")->dims = {8, 16};  // transposed: 16x8 -> 8x16 wanted as [8, 16] torch
    const auto p = m.write("shape.gguf");
    EXPECT_MENTIONS(loadError(p), p, "tensor `blk.0.ffn_down.weight` has shape 16x8", "llama architecture needs 8x16");
  }
  {
    TinyModel m;
    m.find("blk.0.attn_v.weight")->values[3] = std::numeric_limits<float>::quiet_NaN();
    const auto p = m.write("nan.gguf");
    EXPECT_MENTIONS(loadError(p), p, "tensor `blk.0.attn_v.weight`",
                    "NaN or infinite values (1 of 32; the first, nan, at flat index 3)");
  }
  {
    TinyModel m;
    m.find("output_norm.weight")->values[0] = std::numeric_limits<float>::infinity();
    const auto p = m.write("inf.gguf");
    EXPECT_MENTIONS(loadError(p), p, "tensor `output_norm.weight`", "NaN or infinite");
  }
  {
    TinyModel m;
    m.arch = "gptneox";
    const auto p = m.write("arch.gguf");
    EXPECT_MENTIONS(loadError(p), p, "architecture `gptneox` is not supported");
  }
  {
    TinyModel m;
    m.ints.erase("feed_forward_length");
    const auto p = m.write("nokey.gguf");
    EXPECT_MENTIONS(loadError(p), p, "llama.feed_forward_length");
  }
  {
    TinyModel m;
    m.ints["attention.head_count_kv"] = 3;
    const auto p = m.write("kvheads.gguf");
    EXPECT_MENTIONS(loadError(p), p, "2 attention heads are not a multiple of 3 KV heads");
  }
  {
    TinyModel m;
    m.ints["embedding_length"] = 0;
    const auto p = m.write("zero.gguf");
    EXPECT_MENTIONS(loadError(p), p, "llama.embedding_length");
  }
  {  // a metadata key of the wrong type
    GgufWriter h;
    h.header(0, 2);
    h.kvStr("general.architecture", "llama");
    h.kvStr("llama.block_count", "one");
    const auto p = scratch("type.gguf").string();
    writeFile(p, h.bytes);
    EXPECT_MENTIONS(loadError(p), p, "llama.block_count", "not an integer");
  }
  {  // odd head dimension: hidden 9 over 3 heads
    TinyModel m;
    m.ints["attention.head_count"] = 3;
    m.ints["attention.head_count_kv"] = 3;
    m.ints["embedding_length"] = 9;
    const auto p = m.write("odd.gguf");
    EXPECT_MENTIONS(loadError(p), p, "head dimension 3 must be even");
  }
}

// ---- safetensors and Hugging Face directories -----------------------------------------------------------------------

namespace {

std::string stError(const std::string& bytes, const std::string& name = "bad.safetensors") {
  const auto p = scratch(name);
  writeFile(p, bytes);
  return errorOf([&] { model::SafetensorsFile f(p.string()); });
}

// A Hugging Face directory for the same tiny llama: config.json + model.safetensors (F32, tied embeddings).
struct TinyHf {
  nlohmann::json config = {{"model_type", "llama"},
                           {"hidden_size", 8},
                           {"intermediate_size", 16},
                           {"num_attention_heads", 2},
                           {"num_key_value_heads", 1},
                           {"num_hidden_layers", 1},
                           {"vocab_size", 8},
                           {"rms_norm_eps", 1e-5},
                           {"rope_theta", 10000.0},
                           {"max_position_embeddings", 64},
                           {"tie_word_embeddings", true}};
  struct T {
    std::string dtype = "F32";
    std::vector<std::int64_t> shape;
    std::vector<float> values;
  };
  std::map<std::string, T> tensors;
  TinyHf() {
    auto add = [&](const std::string& n, std::vector<std::int64_t> shape) {
      std::int64_t numel = 1;
      for (auto d : shape) numel *= d;
      std::vector<float> v(static_cast<std::size_t>(numel));
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.01f * static_cast<float>((i % 5) + 1);
      tensors[n] = {"F32", std::move(shape), std::move(v)};
    };
    const std::string l = "model.layers.0.";
    add("model.embed_tokens.weight", {8, 8});
    add("model.norm.weight", {8});
    add(l + "input_layernorm.weight", {8});
    add(l + "self_attn.q_proj.weight", {8, 8});
    add(l + "self_attn.k_proj.weight", {4, 8});
    add(l + "self_attn.v_proj.weight", {4, 8});
    add(l + "self_attn.o_proj.weight", {8, 8});
    add(l + "post_attention_layernorm.weight", {8});
    add(l + "mlp.gate_proj.weight", {16, 8});
    add(l + "mlp.up_proj.weight", {16, 8});
    add(l + "mlp.down_proj.weight", {8, 16});
  }
  std::string safetensors() const {
    nlohmann::json h = nlohmann::json::object();
    std::string data;
    for (const auto& [name, t] : tensors) {
      const std::size_t begin = data.size();
      if (t.dtype == "F32") {
        data.append(reinterpret_cast<const char*>(t.values.data()), t.values.size() * 4);
      } else {  // I64 (a wrong dtype for a weight)
        for (float v : t.values) {
          const auto i = static_cast<std::int64_t>(v);
          data.append(reinterpret_cast<const char*>(&i), 8);
        }
      }
      h[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
    }
    return safetensorsBytes(h.dump(), data);
  }
  std::string write(const std::string& name) const {
    const fs::path d = scratch(name);
    fs::remove_all(d);
    writeFile(d / "config.json", config.dump(2));
    writeFile(d / "model.safetensors", safetensors());
    return d.string();
  }
};

std::string configError(const nlohmann::json& j) {
  return errorOf([&] { (void)model::hfConfigFromJson(j.dump(), "dir/config.json"); });
}

}  // namespace

TEST(BadInputs, TheTinyHfModelLoads) {
  const auto m = model::LlamaModel::load(TinyHf().write("hf_ok"));
  EXPECT_EQ(m->config().layers, 1);
  EXPECT_TRUE(m->config().tiedEmbeddings);
}

TEST(BadInputs, SafetensorsFromMemoryMatchesTheFile) {
  const std::string bytes = TinyHf().safetensors();
  const model::SafetensorsFile f(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size(), "mem.safetensors");
  EXPECT_EQ(f.entries().size(), 11u);
  EXPECT_EQ(f.at("model.norm.weight").bytes, 32u);
  EXPECT_MENTIONS(errorOf([&] { (void)f.at("lm_head.weight"); }), "mem.safetensors", "no tensor `lm_head.weight`");
}

TEST(BadInputs, SafetensorsTruncatedAtEverySectionBoundary) {
  const std::string full = TinyHf().safetensors();
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<std::uint8_t>(full[i]);
  // Inside the length, at the end of the length, inside and at the end of the header, inside and before the end
  // of the data.
  const std::string p = scratch("cut.safetensors").string();
  for (const std::size_t cut :
       {std::size_t{0}, std::size_t{4}, std::size_t{8}, std::size_t{9}, std::size_t(8 + n / 2), std::size_t(8 + n - 1),
        std::size_t(8 + n), std::size_t(8 + n + 1), full.size() - 4, full.size() - 1}) {
    const std::string err = stError(full.substr(0, cut), "cut.safetensors");
    EXPECT_MENTIONS(err, p);
    const bool explained = err.find("too short") != std::string::npos ||
                           err.find("header claims") != std::string::npos ||
                           err.find("lie outside") != std::string::npos;
    EXPECT_TRUE(explained) << "cut at " << cut << ": " << err;
  }
}

TEST(BadInputs, SafetensorsHeadersThatLie) {
  const std::string d(64, '\0');
  const std::string p = scratch("bad.safetensors").string();
  auto one = [&](const std::string& info) { return stError(safetensorsBytes(R"({"w":)" + info + "}", d)); };
  EXPECT_MENTIONS(one(R"({"dtype":"F32","shape":[4],"data_offsets":[0,128]})"), p, "`w`", "lie outside the 64");
  EXPECT_MENTIONS(one(R"({"dtype":"F32","shape":[4],"data_offsets":[9223372036854775808,9223372036854775824]})"), p,
                  "`w`", "lie outside");
  EXPECT_MENTIONS(one(R"({"dtype":"F32","shape":[4],"data_offsets":[32,16]})"), p, "`w`", "lie outside");
  EXPECT_MENTIONS(one(R"({"dtype":"F32","shape":[4],"data_offsets":[-16,0]})"), p, "`w`", "non-negative");
  EXPECT_MENTIONS(one(R"({"dtype":"F32","shape":[-4],"data_offsets":[0,16]})"), p, "`w`", "non-negative");
  EXPECT_MENTIONS(one(R"({"dtype":"F32","shape":[2.5],"data_offsets":[0,16]})"), p, "`w`", "non-negative integers");
  EXPECT_MENTIONS(one(R"({"dtype":"F32","shape":[9223372036854775808,2],"data_offsets":[0,16]})"), p, "`w`",
                  "shape overflows");
  EXPECT_MENTIONS(one(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]})"), p, "`w`",
                  "shape overflows");
  EXPECT_MENTIONS(one(R"({"dtype":"F32","shape":[5],"data_offsets":[0,16]})"), p, "`w`",
                  "16 bytes stored for 5 x 4 expected");
  EXPECT_MENTIONS(one(R"({"dtype":"Q4_K","shape":[4],"data_offsets":[0,16]})"), p, "`w`", "unknown dtype `Q4_K`");
  EXPECT_MENTIONS(one(R"({"dtype":"F32","shape":[4]})"), p, "`w`", "needs dtype, shape and two data_offsets");
  EXPECT_MENTIONS(one(R"("F32")"), p, "`w`", "needs dtype, shape and two data_offsets");
  EXPECT_MENTIONS(stError(safetensorsBytes("{}", d, std::int64_t{1} << 62)), p, "header claims");
  EXPECT_MENTIONS(stError(safetensorsBytes("[1, 2]", d)), p, "not a JSON object");
  EXPECT_MENTIONS(stError(safetensorsBytes(R"({"__metadata__":{"k":1}})", d)), p, "__metadata__[k] is not a string");
  // Two tensors sharing bytes.
  EXPECT_MENTIONS(stError(safetensorsBytes(R"({"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]},)"
                                           R"("b":{"dtype":"F32","shape":[8],"data_offsets":[16,48]}})",
                                           d)),
                  p, "`a`", "`b`", "overlap");
}

TEST(BadInputs, SafetensorsIndexThatLies) {
  const std::string w = "dir/model.safetensors.index.json";
  auto err = [&](const std::string& text) { return errorOf([&] { (void)model::readSafetensorsIndex(text, w); }); };
  EXPECT_MENTIONS(err("{"), w, "not valid JSON");
  EXPECT_MENTIONS(err("[]"), w, "no weight_map");
  EXPECT_MENTIONS(err(R"({"weight_map": []})"), w, "no weight_map");
  EXPECT_MENTIONS(err(R"({"weight_map": {}})"), w, "weight_map is empty");
  EXPECT_MENTIONS(err(R"({"weight_map": {"a.weight": 3}})"), w, "weight_map[`a.weight`]", "not a file name");
  EXPECT_MENTIONS(err(R"({"weight_map": {"a.weight": "../x.safetensors"}})"), w, "a.weight",
                  "not a file in the directory");
  EXPECT_MENTIONS(err(R"({"weight_map": {"a.weight": ".."}})"), w, "a.weight", "not a file in the directory");
  EXPECT_MENTIONS(err(R"({"weight_map": {"a.weight": ""}})"), w, "a.weight", "not a file in the directory");
  const auto ok = model::readSafetensorsIndex(R"({"metadata": {}, "weight_map": {"a": "s1", "b": "s2"}})", w);
  EXPECT_EQ(ok.at("b"), "s2");
}

TEST(BadInputs, HfModelsThatDoNotFitTheirConfig) {
  {
    TinyHf m;
    m.tensors.erase("model.layers.0.self_attn.v_proj.weight");
    const auto d = m.write("hf_missing");
    EXPECT_MENTIONS(loadError(d), d, "missing tensor `model.layers.0.self_attn.v_proj.weight`");
  }
  {
    TinyHf m;
    m.tensors["model.layers.0.mlp.up_proj.weight"].shape = {8, 16};
    const auto d = m.write("hf_shape");
    EXPECT_MENTIONS(loadError(d), (fs::path(d) / "model.safetensors").string(),
                    "tensor `model.layers.0.mlp.up_proj.weight` has shape 8x16", "llama config needs 16x8");
  }
  {
    TinyHf m;
    m.tensors["model.norm.weight"].values[2] = -std::numeric_limits<float>::infinity();
    const auto d = m.write("hf_inf");
    EXPECT_MENTIONS(loadError(d), "model.safetensors", "tensor `model.norm.weight`", "NaN or infinite");
  }
  {
    TinyHf m;
    m.tensors["model.norm.weight"].dtype = "I64";
    const auto d = m.write("hf_dtype");
    EXPECT_MENTIONS(loadError(d), "model.safetensors", "tensor `model.norm.weight`", "dtype I64");
  }
  {
    TinyHf m;
    m.config["model_type"] = "gpt2";
    const auto d = m.write("hf_arch");
    EXPECT_MENTIONS(loadError(d), (fs::path(d) / "config.json").string(), "model_type", "`gpt2` is not supported");
  }
  {
    TinyHf m;
    const auto d = m.write("hf_noweights");
    fs::remove(fs::path(d) / "model.safetensors");
    EXPECT_MENTIONS(loadError(d), d, "neither model.safetensors nor model.safetensors.index.json");
  }
  {
    TinyHf m;
    const auto d = m.write("hf_badindex");
    fs::remove(fs::path(d) / "model.safetensors");
    writeFile(fs::path(d) / "model.safetensors.index.json", R"({"weight_map": {"model.norm.weight": "/etc/passwd"}})");
    EXPECT_MENTIONS(loadError(d), "model.safetensors.index.json", "model.norm.weight", "not a file in the directory");
  }
  {
    TinyHf m;
    const auto d = m.write("hf_badjson");
    writeFile(fs::path(d) / "config.json", "{\"hidden_size\": ");
    EXPECT_MENTIONS(loadError(d), "config.json", "not valid JSON");
  }
}

TEST(BadInputs, ConfigJsonKeysOfTheWrongType) {
  const TinyHf base;
  const std::string w = "dir/config.json";
  auto with = [&](const std::string& key, const nlohmann::json& v) {
    nlohmann::json j = base.config;
    j[key] = v;
    return configError(j);
  };
  EXPECT_MENTIONS(with("hidden_size", "8"), w, "`hidden_size`", "must be a number, found string");
  EXPECT_MENTIONS(with("hidden_size", 8.5), w, "`hidden_size`", "not a positive integer");
  EXPECT_MENTIONS(with("num_hidden_layers", -1), w, "`num_hidden_layers`", "not a positive integer");
  EXPECT_MENTIONS(with("num_hidden_layers", 0), w, "`num_hidden_layers`", "not a positive integer");
  EXPECT_MENTIONS(with("vocab_size", 9.3e18), w, "`vocab_size`", "not a positive integer");
  EXPECT_MENTIONS(with("num_attention_heads", nlohmann::json::array()), w, "`num_attention_heads`",
                  "must be a number, found array");
  EXPECT_MENTIONS(with("num_key_value_heads", 3), w, "`num_key_value_heads` = 3 does not divide");
  EXPECT_MENTIONS(with("head_dim", 3), w, "`head_dim` = 3 must be even");
  EXPECT_MENTIONS(with("rms_norm_eps", "1e-5"), w, "`rms_norm_eps`", "must be a number");
  EXPECT_MENTIONS(with("rms_norm_eps", -1), w, "`rms_norm_eps`", "must be positive");
  EXPECT_MENTIONS(with("rope_theta", "1e4"), w, "`rope_theta`", "must be a number");
  EXPECT_MENTIONS(with("rope_theta", 0), w, "`rope_theta`", "must be positive");
  EXPECT_MENTIONS(with("model_type", 7), w, "`model_type`", "must be a string, found number");
  EXPECT_MENTIONS(with("model_type", "bert"), w, "`model_type`", "`bert` is not supported");
  EXPECT_MENTIONS(with("tie_word_embeddings", "yes"), w, "`tie_word_embeddings`", "must be true or false");
  {  // Qwen2/Qwen3 read layer_types: one known type per layer.
    nlohmann::json j = base.config;
    j["model_type"] = "qwen3";
    j["layer_types"] = "full_attention";
    EXPECT_MENTIONS(configError(j), w, "`layer_types`", "must be a list of");
    j["layer_types"] = nlohmann::json::array();
    for (int l = 0; l < j["num_hidden_layers"].get<int>(); ++l) j["layer_types"].push_back("full_attention");
    j["layer_types"][0] = "linear_attention";
    EXPECT_MENTIONS(configError(j), w, "`layer_types`", "\"linear_attention\"");
  }
  EXPECT_MENTIONS(with("rope_scaling", {1, 2}), w, "`rope_scaling`", "must be an object");
  EXPECT_MENTIONS(with("rope_scaling", {{"rope_type", "longrope"}, {"factor", 4}}), w, "`rope_scaling.rope_type`",
                  "`longrope` is not supported (default, linear, llama3, yarn, proportional)");
  EXPECT_MENTIONS(with("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4}}), w,
                  "`rope_scaling.original_max_position_embeddings` is missing");
  EXPECT_MENTIONS(with("rope_scaling", {{"rope_type", "yarn"},
                                        {"factor", 4},
                                        {"original_max_position_embeddings", 64},
                                        {"partial_rotary_factor", 0.5}}),
                  w, "`rope_scaling.partial_rotary_factor` is not 1");
  EXPECT_MENTIONS(with("rope_scaling", {{"rope_type", 3}}), w, "`rope_scaling.rope_type`", "must be a string");
  EXPECT_MENTIONS(with("rope_scaling", {{"rope_type", "llama3"}, {"factor", "8"}}), w, "`rope_scaling.factor`",
                  "must be a number");
  EXPECT_MENTIONS(with("rope_scaling", {{"rope_type", "llama3"}, {"low_freq_factor", 4}, {"high_freq_factor", 4}}), w,
                  "`rope_scaling.high_freq_factor`", "must exceed low_freq_factor");
  EXPECT_MENTIONS(with("rope_parameters", {{"rope_theta", "big"}}), w, "`rope_parameters.rope_theta`",
                  "must be a number");
  EXPECT_MENTIONS(with("text_config", 1), w, "`text_config` must be an object");
  EXPECT_MENTIONS(configError(nlohmann::json::array()), w, "expected a JSON object, found array");
  {
    nlohmann::json j = base.config;
    j.erase("vocab_size");
    EXPECT_MENTIONS(configError(j), w, "`vocab_size` is missing");
  }
  {
    nlohmann::json j = {{"model_type", "llava"}, {"text_config", base.config}};
    j["text_config"]["hidden_size"] = "x";
    EXPECT_MENTIONS(configError(j), w, "`text_config.hidden_size`", "must be a number");
  }
  {
    nlohmann::json j = base.config;
    j["model_type"] = "mistral";
    j["sliding_window"] = "4k";
    EXPECT_MENTIONS(configError(j), w, "`sliding_window`", "must be a number, found string");
  }
  {
    nlohmann::json j = base.config;
    j["hidden_size"] = 9;
    j["num_attention_heads"] = 2;
    EXPECT_MENTIONS(configError(j), w, "`hidden_size` = 9 is not a multiple of num_attention_heads = 2");
  }
  // The accepted forms still read: v5 rope_parameters, llama3 scaling, qwen3 with head_dim.
  {
    nlohmann::json j = base.config;
    j.erase("rope_theta");
    j["rope_parameters"] = {{"rope_theta", 5e5}, {"rope_type", "llama3"}, {"factor", 8.0}};
    const auto c = model::hfConfigFromJson(j.dump(), w);
    EXPECT_EQ(c.ropeTheta, 5e5);
    EXPECT_EQ(c.ropeFactor, 8.0);
  }
}

// Gemma 3 as transformers 5.23 reads it: a published multimodal config.json (Gemma-3-4B's text_config names only what
// differs from Gemma3TextConfig's defaults), v5's per-layer-type rope_parameters, and the keys refused with a reason.
TEST(BadInputs, Gemma3ConfigsReadAsTransformersReadsThem) {
  const std::string w = "dir/config.json";
  const nlohmann::json text = {{"hidden_size", 2560},
                               {"intermediate_size", 10240},
                               {"model_type", "gemma3_text"},
                               {"num_hidden_layers", 34},
                               {"rope_scaling", {{"factor", 8.0}, {"rope_type", "linear"}}},
                               {"sliding_window", 1024}};
  const auto c = model::hfConfigFromJson(nlohmann::json{{"model_type", "gemma3"}, {"text_config", text}}.dump(), w);
  EXPECT_EQ(c.arch, "gemma3");
  EXPECT_EQ(c.heads, 8);
  EXPECT_EQ(c.kvHeads, 4);
  EXPECT_EQ(c.headDim, 256);
  EXPECT_EQ(c.vocab, 262208);
  EXPECT_TRUE(c.tiedEmbeddings);
  EXPECT_TRUE(c.gemmaBlocks);
  EXPECT_EQ(c.act, model::FfnAct::GeluTanh);
  EXPECT_DOUBLE_EQ(c.attnScale, 1.0 / 16);  // query_pre_attn_scalar 256
  EXPECT_EQ(c.ropeTheta, 1e6);
  EXPECT_EQ(c.ropeLinear, 8.0);
  EXPECT_EQ(c.ropeLocalTheta, 10000.0);
  ASSERT_EQ(c.layerSpecs.size(), 34u);
  for (std::size_t l = 0; l < 34; ++l) {
    const bool global = (l + 1) % 6 == 0;
    EXPECT_EQ(c.layerSpecs[l].window, global ? 0 : 1024) << l;
    EXPECT_EQ(c.layerSpecs[l].localRope, !global) << l;
  }
  nlohmann::json v5 = text;
  v5.erase("rope_scaling");
  v5["rope_parameters"] = {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 20000.0}}},
                           {"full_attention", {{"rope_type", "linear"}, {"factor", 4.0}, {"rope_theta", 5e5}}}};
  v5["query_pre_attn_scalar"] = 168;
  v5["final_logit_softcapping"] = 30.0;
  const auto c5 = model::hfConfigFromJson(v5.dump(), w);
  EXPECT_EQ(c5.ropeLocalTheta, 20000.0);
  EXPECT_EQ(c5.ropeTheta, 5e5);
  EXPECT_EQ(c5.ropeLinear, 4.0);
  EXPECT_DOUBLE_EQ(c5.attnScale, 1.0 / std::sqrt(168.0));
  EXPECT_EQ(c5.finalSoftcap, 30.0);
  auto with = [&](const char* key, const nlohmann::json& v) {
    nlohmann::json j = text;
    j[key] = v;
    return configError(j);
  };
  EXPECT_MENTIONS(with("attn_logit_softcapping", 50.0), w, "`attn_logit_softcapping`", "not supported");
  EXPECT_MENTIONS(with("hidden_activation", "relu"), w, "`hidden_activation`", "`relu` is not supported");
  EXPECT_MENTIONS(with("use_bidirectional_attention", true), w, "`use_bidirectional_attention`");
  EXPECT_MENTIONS(with("rope_parameters", {{"sliding_attention", {{"rope_type", "linear"}, {"factor", 2.0}}}}), w,
                  "`rope_parameters.sliding_attention.rope_type`", "not supported on sliding layers");
  EXPECT_MENTIONS(with("layer_types", {"full_attention"}), w, "`layer_types`", "must be a list of 34 layer types");
}

// Gemma 4 as transformers 5.23 reads it: gemma-4-31B's text_config (global_head_dim and num_global_key_value_heads, as
// published; hf-mem PR #61 quotes its shape) and the same shape as transformers writes it back (per_layer_config); an
// E2B-like config's shared KV (the last 20 of 35 layers read layer 13's or 14's, as the capacity planner's test), PLE
// and double-wide MLPs; Gemma4TextConfig's proportional RoPE; the keys refused with a reason.
TEST(BadInputs, Gemma4ConfigsReadAsTransformersReadsThem) {
  const std::string w = "dir/config.json";
  nlohmann::json types = nlohmann::json::array();
  for (int i = 0; i < 60; ++i) types.push_back((i + 1) % 6 ? "sliding_attention" : "full_attention");
  const nlohmann::json text = {{"model_type", "gemma4_text"},
                               {"hidden_size", 5376},
                               {"num_hidden_layers", 60},
                               {"num_attention_heads", 32},
                               {"num_key_value_heads", 16},
                               {"num_global_key_value_heads", 4},
                               {"head_dim", 256},
                               {"global_head_dim", 512},
                               {"attention_k_eq_v", true},
                               {"sliding_window", 1024},
                               {"hidden_size_per_layer_input", 0},
                               {"final_logit_softcapping", 30.0},
                               {"intermediate_size", 21504},
                               {"layer_types", types}};
  const auto c = model::hfConfigFromJson(nlohmann::json{{"model_type", "gemma4"}, {"text_config", text}}.dump(), w);
  EXPECT_EQ(c.arch, "gemma4");
  EXPECT_TRUE(c.gemma4Blocks);
  EXPECT_EQ(c.attnScale, 1.0);
  EXPECT_EQ(c.vocab, 262144);
  EXPECT_EQ(c.pleDim, 0);
  EXPECT_FALSE(c.sharesKv());
  EXPECT_DOUBLE_EQ(c.ropePartial, 0.25);  // Gemma4TextConfig's default rope_parameters
  EXPECT_EQ(c.ropeTheta, 1e6);
  EXPECT_EQ(c.ropeLocalTheta, 10000.0);
  for (int l = 0; l < 60; ++l) {
    const bool full = (l + 1) % 6 == 0;
    EXPECT_EQ(c.headDimOf(l), full ? 512 : 256) << l;
    EXPECT_EQ(c.kvHeadsOf(l), full ? 4 : 16) << l;
    EXPECT_EQ(c.layerSpecs[static_cast<std::size_t>(l)].kEqV, full) << l;
    EXPECT_EQ(c.layerSpecs[static_cast<std::size_t>(l)].window, full ? 0 : 1024) << l;
  }
  // transformers' own save: per_layer_config instead of the global_* keys, the same layers.
  nlohmann::json saved = text;
  saved.erase("global_head_dim");
  saved.erase("num_global_key_value_heads");
  saved["per_layer_config"] = nlohmann::json::object();
  for (int l = 5; l < 60; l += 6)
    saved["per_layer_config"][std::to_string(l)] = {{"head_dim", 512}, {"num_key_value_heads", 4}};
  const auto cs = model::hfConfigFromJson(saved.dump(), w);
  for (int l = 0; l < 60; ++l) {
    EXPECT_EQ(cs.headDimOf(l), c.headDimOf(l)) << l;
    EXPECT_EQ(cs.kvHeadsOf(l), c.kvHeadsOf(l)) << l;
  }
  EXPECT_EQ(model::describeAttention(c),
            "sliding window 1024 on layers 0-4,6-10,12-16,18-22,24-28,30-34,36-40,42-46,48-52,54-58; full attention "
            "on layers 5,11,17,23,29,35,41,47,53,59; head size 512 (4 KV heads, K = V) on layers "
            "5,11,17,23,29,35,41,47,53,59, 256 elsewhere");

  nlohmann::json e2b = {{"model_type", "gemma4_text"}, {"hidden_size", 1536},        {"num_hidden_layers", 35},
                        {"num_attention_heads", 8},    {"num_key_value_heads", 1},   {"head_dim", 256},
                        {"global_head_dim", 512},      {"num_kv_shared_layers", 20}, {"use_double_wide_mlp", true},
                        {"intermediate_size", 6144},   {"sliding_window", 512}};
  e2b["layer_types"] = nlohmann::json::array();
  for (int i = 0; i < 35; ++i) e2b["layer_types"].push_back((i + 1) % 5 ? "sliding_attention" : "full_attention");
  const auto ce = model::hfConfigFromJson(e2b.dump(), w);
  EXPECT_EQ(ce.pleDim, 256);  // Gemma4TextConfig's default
  EXPECT_EQ(ce.pleVocab, 262144);
  EXPECT_EQ(ce.layerSpecs[15].kvFrom, 13);
  EXPECT_EQ(ce.layerSpecs[19].kvFrom, 14);
  EXPECT_EQ(ce.layerSpecs[14].kvFrom, -1);
  EXPECT_EQ(ce.intermediateOf(14), 6144);
  EXPECT_EQ(ce.intermediateOf(15), 12288);
  EXPECT_EQ(ce.kvHeadsOf(4), 1);  // no K = V: the full layers keep num_key_value_heads
  EXPECT_NE(model::describeAttention(ce).find("layers 15-34 store no KV: they read the KV of layers 13-14"),
            std::string::npos)
      << model::describeAttention(ce);

  auto with = [&](const char* key, const nlohmann::json& v) {
    nlohmann::json j = text;
    j[key] = v;
    return configError(j);
  };
  EXPECT_MENTIONS(with("use_bidirectional_attention", "all"), w, "`use_bidirectional_attention`", "causal");
  EXPECT_MENTIONS(with("num_kv_shared_layers", 60), w, "`num_kv_shared_layers`", "leaves no layer");
  {
    nlohmann::json t = types;
    for (int i = 0; i < 54; ++i) t[static_cast<std::size_t>(i)] = "full_attention";
    nlohmann::json j = text;
    j["layer_types"] = t;
    j["num_kv_shared_layers"] = 6;  // the shared sliding layers find no sliding layer before them
    EXPECT_MENTIONS(configError(j), w, "`num_kv_shared_layers`", "no earlier layer of its type");
  }
  EXPECT_MENTIONS(with("per_layer_config", {{"5", {{"sliding_window", 8}}}}), w, "`per_layer_config.5.sliding_window`",
                  "not supported per layer");
  EXPECT_MENTIONS(with("per_layer_config", {{"x", {{"head_dim", 8}}}}), w, "`per_layer_config`", "not a layer index");
  EXPECT_MENTIONS(
      with("rope_parameters", {{"full_attention", {{"rope_type", "proportional"}, {"partial_rotary_factor", 1.5}}}}), w,
      "`rope_parameters.full_attention.partial_rotary_factor`", "(0, 1]");
  EXPECT_MENTIONS(with("rope_parameters", {{"rope_type", "default"}}), w, "per layer type");
  EXPECT_MENTIONS(with("enable_moe_block", true), w, "`num_experts` is missing");
}

// ---- tokenizer.json
// ---------------------------------------------------------------------------------------------------

TEST(BadInputs, TokenizerJsonKeysOfTheWrongType) {
  const std::string src = "dir/tokenizer.json";
  const nlohmann::json base = {
      {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}}, {"merges", {"a b"}}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}}};
  auto err = [&](const nlohmann::json& j, std::optional<std::string> cfg = std::nullopt) {
    return errorOf([&] {
      (void)tokenizer::fromTokenizerJsonText(j.dump(), src, cfg ? std::optional<std::string_view>(*cfg) : std::nullopt,
                                             "dir/tokenizer_config.json");
    });
  };
  EXPECT_EQ(err(base), "");
  auto with = [&](const nlohmann::json::json_pointer& ptr, const nlohmann::json& v) {
    nlohmann::json j = base;
    j[ptr] = v;
    return err(j);
  };
  using P = nlohmann::json::json_pointer;
  EXPECT_MENTIONS(err(nlohmann::json::array()), src, "expected an object");
  EXPECT_MENTIONS(errorOf([&] { (void)tokenizer::fromTokenizerJsonText("{\"model\": ", src); }), src, "not valid JSON");
  EXPECT_MENTIONS(with(P("/model/vocab/a"), "0"), src, "model.vocab['a']", "expected a token id");
  EXPECT_MENTIONS(with(P("/model/vocab/a"), -1), src, "model.vocab['a']", "expected a token id");
  EXPECT_MENTIONS(with(P("/model/vocab/a"), 1), src, "model.vocab", "id 1 is given to two tokens");
  EXPECT_MENTIONS(with(P("/model/vocab"), nlohmann::json::array()), src, "model.vocab", "expected an object");
  EXPECT_MENTIONS(with(P("/model/merges"), "a b"), src, "model.merges", "expected a list");
  EXPECT_MENTIONS(with(P("/model/merges/0"), 5), src, "model.merges[0]", "expected \"a b\" or [\"a\", \"b\"]");
  EXPECT_MENTIONS(with(P("/model/merges/0"), "a  b"), src, "model.merges[0]", "not two tokens");
  EXPECT_MENTIONS(with(P("/model/type"), "WordPiece"), src, "model.type", "'WordPiece' is not supported");
  EXPECT_MENTIONS(with(P("/model/byte_fallback"), "yes"), src, "model.byte_fallback", "expected true or false");
  EXPECT_MENTIONS(with(P("/added_tokens"), {{{"id", "x"}, {"content", "<s>"}}}), src, "added_tokens[0].id",
                  "expected a token id");
  EXPECT_MENTIONS(with(P("/added_tokens"), {{{"id", 3}, {"content", 3}}}), src, "added_tokens[0].content",
                  "expected a string");
  EXPECT_MENTIONS(with(P("/pre_tokenizer/use_regex"), 1), src, "pre_tokenizer.ByteLevel.use_regex",
                  "expected true or false");
  EXPECT_MENTIONS(with(P("/decoder"), {{"type", "WordPiece"}}), src, "decoder", "'WordPiece' is not supported");
  EXPECT_MENTIONS(with(P("/post_processor"), {{"type", "TemplateProcessing"}, {"single", 1}}), src,
                  "post_processor.single", "expected a list");
  // tokenizer_config.json beside it
  EXPECT_MENTIONS(err(base, std::string("[1]")), "dir/tokenizer_config.json", "expected an object");
  EXPECT_MENTIONS(err(base, std::string(R"({"bos_token": 5})")), "dir/tokenizer_config.json", "bos_token",
                  "expected a string");
  EXPECT_MENTIONS(err(base, std::string(R"({"eos_token": "<|none|>"})")), "dir/tokenizer_config.json", "eos_token",
                  "'<|none|>' is not a token of dir/tokenizer.json");
}

// ---- found by the fuzzers (tests/fuzz)
// --------------------------------------------------------------------------------

TEST(BadInputs, DeeplyNestedJsonIsRefusedNotAStackOverflow) {
  // Error messages dump the offending value: 30000 nested arrays overflowed the stack (ASan: stack-overflow in
  // nlohmann's serializer) in the tokenizer.json and config.json readers.
  const std::string deep = std::string(30000, '[') + std::string(30000, ']');
  const std::string tok = R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[)" + deep +
                          R"(]},"pre_tokenizer":{"type":"ByteLevel"},"decoder":{"type":"ByteLevel"}})";
  EXPECT_MENTIONS(errorOf([&] { (void)tokenizer::fromTokenizerJsonText(tok, "t.json"); }), "t.json",
                  "nested deeper than 128 levels");
  EXPECT_MENTIONS(errorOf([&] {
                    (void)tokenizer::fromTokenizerJsonText(R"({"model":{}})", "t.json", std::string_view(deep),
                                                           "tc.json");
                  }),
                  "t.json");
  const std::string cfg = R"({"model_type":"llama","layer_types":[)" + deep + "]}";
  EXPECT_MENTIONS(errorOf([&] { (void)model::hfConfigFromJson(cfg, "c.json"); }), "c.json",
                  "nested deeper than 128 levels");
  EXPECT_MENTIONS(errorOf([&] { (void)model::readSafetensorsIndex(R"({"weight_map":)" + deep + "}", "i.json"); }),
                  "i.json", "nested deeper than 128 levels");
  EXPECT_MENTIONS(stError(safetensorsBytes(R"({"w":)" + deep + "}", "")), "nested deeper than 128 levels");
  EXPECT_MENTIONS(errorOf([&] { (void)cache::configFromJson(R"({"cache_config":)" + deep + "}", "k.json"); }), "k.json",
                  "nested deeper than 128 levels");
  // Brackets inside strings do not count; 128 levels are fine.
  EXPECT_EQ(jsonNestingDepth(R"({"a": "[[[[[[", "b": ["\"[", {}]})"), 3u);
  EXPECT_EQ(jsonNestingDepth(std::string(128, '[') + std::string(128, ']')), 128u);
}

TEST(BadInputs, TokenizerJsonPostProcessorItemThatIsNotAnObject) {
  // {"SpecialToken": 5} was an nlohmann type_error (an internal error, exit 1) instead of a TokenizerError.
  const std::string j = R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]},)"
                        R"("pre_tokenizer":{"type":"ByteLevel","use_regex":true},"decoder":{"type":"ByteLevel"},)"
                        R"("post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":5}]}})";
  EXPECT_MENTIONS(errorOf([&] { (void)tokenizer::fromTokenizerJsonText(j, "t.json"); }), "t.json",
                  "post_processor.single", "unexpected item {\"SpecialToken\":5}");
}

TEST(BadInputs, TokenizerJsonIdFarBeyondTheVocabulary) {
  // One token with id 2^24 - 1 built a 16-million-entry vocabulary (13 s under ASan: a fuzzer timeout).
  const std::string j = R"({"model":{"type":"BPE","vocab":{"a":16777215},"merges":[]},)"
                        R"("pre_tokenizer":{"type":"ByteLevel"},"decoder":{"type":"ByteLevel"},)"
                        R"("added_tokens":[{"id":3,"content":"<s>"}]})";
  EXPECT_MENTIONS(errorOf([&] { (void)tokenizer::fromTokenizerJsonText(j, "t.json"); }), "t.json", "model.vocab['a']",
                  "id 16777215 is beyond the 2 tokens");
  const std::string k = R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},)"
                        R"("pre_tokenizer":{"type":"ByteLevel"},"decoder":{"type":"ByteLevel"},)"
                        R"("added_tokens":[{"id":9000000,"content":"<s>"}]})";
  EXPECT_MENTIONS(errorOf([&] { (void)tokenizer::fromTokenizerJsonText(k, "t.json"); }), "t.json", "added_tokens[0].id",
                  "beyond the 2 tokens");
}

TEST(BadInputs, JsonNumberThatOverflowsADouble) {
  // `2222222222e222222` throws nlohmann's out_of_range (not parse_error): the cache config reader let it escape.
  const std::string n = "2222222222e222222";
  EXPECT_MENTIONS(errorOf([&] { (void)cache::configFromJson(n, "k.json"); }), "k.json", "not valid JSON",
                  "number overflow");
  EXPECT_MENTIONS(errorOf([&] { (void)model::hfConfigFromJson(n, "c.json"); }), "c.json", "not valid JSON");
  EXPECT_MENTIONS(errorOf([&] { (void)model::readSafetensorsIndex(n, "i.json"); }), "i.json", "not valid JSON");
  EXPECT_MENTIONS(errorOf([&] { (void)tokenizer::fromTokenizerJsonText(n, "t.json"); }), "t.json", "not valid JSON");
  EXPECT_MENTIONS(stError(safetensorsBytes(n, "")), "not valid JSON");
}
