// kvscope's tokenizer against Hugging Face tokenizers, on the fixtures make_tokenizer_fixtures.py records at test
// time: identical ids (with and without special tokens, with special tokens parsed and left as text) and identical
// decodes (full, skipping special tokens, and of the first half of the ids, which cuts UTF-8 sequences) for every
// corpus line, for every way a tokenizer is built (parts, tokenizer.json, the GGUF itself), byte-level and
// SentencePiece-style BPE alike.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/gguf.h"
#include "tokenizer/tokenizer.h"

using namespace kvscope;
using nlohmann::json;
using tokenizer::Tokenizer;

namespace {

const std::filesystem::path kDir = KVSCOPE_TOKENIZER_FIXTURE_DIR;

json loadJson(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error(p.string() + ": missing (run parity.make_tokenizer_fixtures first)");
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

const json& cases() {
  static const json c = loadJson(kDir / "cases.json");
  return c;
}

std::string shown(const std::string& s) {
  std::string out;
  for (const unsigned char c : s.substr(0, 80)) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20)
      out += "\\x" + std::string(1, "0123456789abcdef"[c >> 4]) + "0123456789abcdef"[c & 15];
    else
      out += static_cast<char>(c);
  }
  return s.size() > 80 ? out + "..." : out;
}

// Compares one tokenizer with one reference over the whole corpus; reports the first few mismatching lines.
void compare(const Tokenizer& tok, const std::string& refName, const std::string& how) {
  SCOPED_TRACE(refName + " via " + how);
  const json& ref = cases()["references"][refName];
  const json& corpus = cases()["corpus"];
  int bad = 0;
  const auto check = [&](bool same, std::size_t line, const char* what, const std::string& detail) {
    if (same) return;
    if (++bad <= 8)
      ADD_FAILURE() << what << " differs on line " << line << " '" << shown(corpus[line]) << "'\n" << detail;
  };
  const auto ids = [](const json& j) { return j.get<std::vector<std::int32_t>>(); };
  const auto str = [](const std::vector<std::int32_t>& v) {
    std::string s;
    for (const auto i : v) s += std::to_string(i) + " ";
    return s;
  };
  for (std::size_t i = 0; i < corpus.size(); ++i) {
    const std::string text = corpus[i];
    const auto want = ids(ref["ids_no_special"][i]);
    const auto got = tok.encode(text, false);
    check(got == want, i, "ids", "got  " + str(got) + "\nwant " + str(want));
    const auto gotSpecial = tok.encode(text, true);
    check(gotSpecial == ids(ref["ids"][i]), i, "ids with special", str(gotSpecial));
    const auto gotPlain = tok.encode(text, false, false);
    check(gotPlain == ids(ref["ids_plain"][i]), i, "ids with special tokens as text", str(gotPlain));
    check(tok.decode(want) == ref["decode"][i].get<std::string>(), i, "decode", shown(tok.decode(want)));
    check(tok.decode(want, true) == ref["decode_skip"][i].get<std::string>(), i, "decode skipping special",
          shown(tok.decode(want, true)));
    const std::vector<std::int32_t> half(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(want.size() / 2));
    check(tok.decode(half) == ref["decode_half"][i].get<std::string>(), i, "decode of the first half",
          shown(tok.decode(half)));
  }
  EXPECT_EQ(bad, 0) << "mismatches over " << corpus.size() << " lines";
  if (bad == 0) std::printf("  %s via %s: %zu lines identical\n", refName.c_str(), how.c_str(), corpus.size());
}

bool haveModel() {
  return cases()["references"].contains("smollm2_gguf");
}

Tokenizer smollm2FromParts(const std::string& preset) {
  const json p = loadJson(kDir / "smollm2_parts.json");
  std::vector<std::int32_t> types;
  for (const auto& t : p["token_type"]) types.push_back(t.get<std::int32_t>());
  const tokenizer::SpecialIds ids{p["bos_token_id"], p["eos_token_id"], p["unknown_token_id"], p["padding_token_id"]};
  return tokenizer::fromParts(p["tokens"].get<std::vector<std::string>>(), types,
                              p["merges"].get<std::vector<std::string>>(), preset, ids, p["add_bos_token"].get<bool>(),
                              false, "smollm2_parts.json");
}

#define REQUIRE_MODEL() \
  if (!haveModel()) GTEST_SKIP() << cases().value("model_missing", std::string("no SmolLM2 references"))

}  // namespace

TEST(TokenizerParity, TrainedBpeFamiliesViaTokenizerJson) {
  int n = 0;
  for (const auto& [name, ref] : cases()["references"].items()) {
    if (name.rfind("trained_", 0) != 0) continue;
    const auto tok = tokenizer::fromTokenizerJson((kDir / ref["tokenizer_json"].get<std::string>()).string());
    EXPECT_STREQ(tokenizer::presetName(tok.preset()), ref["preset"].get<std::string>().c_str());
    compare(tok, name, "tokenizer.json");
    ++n;
  }
  EXPECT_EQ(n, 5);
}

// SentencePiece-style BPE (Llama 2 / Mistral layouts) trained at test time: every corpus line through
// tokenizer.json, ids and decodes identical to tokenizers.
TEST(TokenizerParity, SentencePieceLayoutsViaTokenizerJson) {
  int n = 0;
  for (const auto& [name, ref] : cases()["references"].items()) {
    if (name.rfind("sp_", 0) != 0) continue;
    const auto tok = tokenizer::fromTokenizerJson((kDir / ref["tokenizer_json"].get<std::string>()).string());
    EXPECT_EQ(tok.mode(), tokenizer::Mode::SentencePiece) << name;
    EXPECT_EQ(tok.bosId(), ref["bos"].get<int>()) << name;
    EXPECT_TRUE(tok.addBos()) << name;
    compare(tok, name, "tokenizer.json");
    std::printf("    (%d lines with byte fallback >= 0x80, %d with <unk>)\n", ref["byte_fallback_lines"].get<int>(),
                ref["unk_lines"].get<int>());
    ++n;
  }
  EXPECT_EQ(n, 6);
  // The corpus does exercise what differs: byte fallback, <unk>, and the two layouts' prefix rules.
  const json& r = cases()["references"];
  EXPECT_GT(r["sp_llama2"]["byte_fallback_lines"].get<int>(), 50);
  EXPECT_GT(r["sp_unk"]["unk_lines"].get<int>(), 50);
  EXPECT_GT(r["sp_partial"]["unk_lines"].get<int>(), 50);
  EXPECT_GT(cases()["sp_layouts_differ"].get<int>(), 50);
}

// A GGUF SentencePiece vocabulary (tokenizer.ggml.model "llama": scores, no merges) against llama.cpp's own
// tokenizer (llama-tokenize): every corpus line with BOS and special tokens parsed, without BOS, with special tokens
// left as text, over the corpus and a few lines with the vocabulary's control and user-defined tokens; decoding gives
// the text back.
TEST(TokenizerParity, SentencePieceGgufAsLlamaCppTokenizes) {
  if (!cases().contains("spm_gguf"))
    GTEST_SKIP() << cases().value("spm_missing", std::string("no GGUF SentencePiece reference"));
  const json& ref = cases()["spm_gguf"];
  const model::GgufFile file((kDir / ref["gguf"].get<std::string>()).string());
  const Tokenizer tok = tokenizer::fromGguf(file);
  EXPECT_EQ(tok.mode(), tokenizer::Mode::SentencePiece);
  EXPECT_TRUE(tok.addBos());
  const json& corpus = ref["lines"];
  const auto ids = [](const json& j) { return j.get<std::vector<std::int32_t>>(); };
  int bad = 0, special = 0;
  for (std::size_t i = 0; i < corpus.size(); ++i) {
    const std::string text = corpus[i];
    const auto want = ids(ref["ids_no_special"][i]);
    const auto got = tok.encode(text, false);
    if (got != want && ++bad <= 8) ADD_FAILURE() << "ids differ on line " << i << " '" << shown(text) << "'";
    if (tok.encode(text, true) != ids(ref["ids"][i]) && ++bad <= 8)
      ADD_FAILURE() << "ids with BOS differ on line " << i << " '" << shown(text) << "'";
    const auto plain = ids(ref["ids_plain"][i]);
    if (tok.encode(text, false, false) != plain && ++bad <= 8)
      ADD_FAILURE() << "ids with special tokens as text differ on line " << i << " '" << shown(text) << "'";
    special += plain != want;
    // Decoding gives the text back where no added token cut it: after one, llama.cpp's tokenizer (as kvscope's)
    // starts the next fragment with the space prefix, which its detokenizer keeps.
    const bool added = std::any_of(want.begin(), want.end(), [&](std::int32_t id) {
      return tok.tokenType(id) == tokenizer::TokenType::Control ||
             tok.tokenType(id) == tokenizer::TokenType::UserDefined;
    });
    if (!added && tok.decode(want) != text && ++bad <= 8)
      ADD_FAILURE() << "decode differs on line " << i << ": '" << shown(tok.decode(want)) << "'";
  }
  EXPECT_EQ(bad, 0) << "mismatches over " << corpus.size() << " lines";
  EXPECT_GT(special, 0) << "no line has a special token: parsing them is not exercised";
  if (bad == 0) std::printf("  spm_llama.gguf: %zu lines identical to llama-tokenize\n", corpus.size());
}

TEST(TokenizerParity, SmolLM2FromParts) {
  REQUIRE_MODEL();
  // The GGUF says "smollm" (digits isolated): SmolLM2's own tokenizer.
  const auto tok = smollm2FromParts("smollm");
  EXPECT_EQ(tok.preset(), tokenizer::Preset::SmolLM);
  compare(tok, "smollm2_smollm", "parts");
  // transformers' GGUF conversion pre-tokenizes with the GPT-2 regex: the gpt2 preset over the same parts.
  compare(smollm2FromParts("gpt2"), "smollm2_gguf", "parts with the gpt2 preset");
  // The two references really differ, so each comparison above pins its preset.
  EXPECT_GT(cases()["smollm2_pre_differs"].size(), 10u);
  std::printf("  smollm vs gpt2 pre-tokenizer: ids differ on %zu of %zu lines\n", cases()["smollm2_pre_differs"].size(),
              cases()["corpus"].size());
}

TEST(TokenizerParity, SmolLM2FromTokenizerJson) {
  REQUIRE_MODEL();
  const auto gguf = tokenizer::fromTokenizerJson((kDir / "smollm2_gguf/tokenizer.json").string());
  EXPECT_EQ(gguf.preset(), tokenizer::Preset::Gpt2);
  compare(gguf, "smollm2_gguf", "tokenizer.json");
  const json& sp = cases()["smollm2_special"];
  EXPECT_EQ(gguf.bosId(), sp["bos"].get<int>());
  EXPECT_EQ(gguf.eosId(), sp["eos"].get<int>());
  EXPECT_EQ(gguf.unkId(), sp["unk"].get<int>());
  EXPECT_EQ(gguf.padId(), sp["pad"].get<int>());
  EXPECT_EQ(gguf.chatTemplate(), cases()["chat_template"].get<std::string>());
  const auto own = tokenizer::fromTokenizerJson((kDir / "smollm2_smollm/tokenizer.json").string());
  EXPECT_EQ(own.preset(), tokenizer::Preset::SmolLM);
  compare(own, "smollm2_smollm", "tokenizer.json");
}

TEST(TokenizerParity, SmolLM2FromGguf) {
  const char* path = std::getenv("KVSCOPE_MODEL");
  if (path == nullptr || !std::filesystem::is_regular_file(path))
    GTEST_SKIP() << "KVSCOPE_MODEL is unset or not a file (" << (path ? path : "unset")
                 << "): the embedded GGUF is needed";
  REQUIRE_MODEL();
  const model::GgufFile gguf(path);
  const auto tok = tokenizer::fromGguf(gguf);
  EXPECT_EQ(tok.vocabSize(), 49152);
  EXPECT_FALSE(tok.addBos());
  const json& sp = cases()["smollm2_special"];
  EXPECT_EQ(tok.bosId(), sp["bos"].get<int>());
  EXPECT_EQ(tok.eosId(), sp["eos"].get<int>());
  EXPECT_EQ(tok.chatTemplate(), cases()["chat_template"].get<std::string>());
  compare(tok, "smollm2_smollm", "fromGguf");

  // Every token's bytes, as the ByteLevel decoder maps it alone.
  const json& bytes = cases()["smollm2_token_bytes"];
  ASSERT_EQ(bytes.size(), static_cast<std::size_t>(tok.vocabSize()));
  int bad = 0;
  for (std::int32_t id = 0; id < tok.vocabSize(); ++id) {
    std::string hex;
    for (const unsigned char c : tok.tokenText(id))
      hex += std::string(1, "0123456789abcdef"[c >> 4]) + "0123456789abcdef"[c & 15];
    if (hex != bytes[id].get<std::string>() && ++bad <= 5) ADD_FAILURE() << "tokenText(" << id << ") = " << hex;
  }
  EXPECT_EQ(bad, 0);
}

TEST(TokenizerParity, SmolLM2ChatTemplate) {
  REQUIRE_MODEL();
  // The template in the GGUF is SmolLM2-Instruct's: it inserts exactly our default system message.
  EXPECT_NE(cases()["chat_template"].get<std::string>().find(std::string(tokenizer::kSmolLM2DefaultSystem)),
            std::string::npos);
  const auto tok = tokenizer::fromTokenizerJson((kDir / "smollm2_gguf/tokenizer.json").string());
  for (const auto& c : cases()["chat"]) {
    std::vector<std::pair<std::string, std::string>> messages;
    for (const auto& m : c["messages"]) messages.emplace_back(m[0], m[1]);
    const std::string text = tokenizer::applyChatML(messages, c["generation_prompt"].get<bool>());
    EXPECT_EQ(text, c["text"].get<std::string>());
    EXPECT_EQ(tok.encode(text, false), c["ids"].get<std::vector<std::int32_t>>()) << shown(text);
  }
}

TEST(TokenizerParity, HundredKilobytesUnderASecond) {
  REQUIRE_MODEL();
  const auto tok = smollm2FromParts("smollm");
  const std::size_t i = cases()["long_index"];
  const std::string text = cases()["corpus"][i];
  ASSERT_GE(text.size(), 100u * 1024);
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = tok.encode(text, false);  // cold: empty word cache
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("  encoded %zu bytes into %zu tokens in %.1f ms\n", text.size(), ids.size(), s * 1e3);
  EXPECT_LT(s, 1.0);
  EXPECT_EQ(ids, cases()["references"]["smollm2_smollm"]["ids_no_special"][i].get<std::vector<std::int32_t>>());
}
