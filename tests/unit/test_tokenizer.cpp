// Unit tests of the tokenizer (byte-level and SentencePiece-style BPE) on tiny hand-built vocabularies (real and
// trained vocabularies are checked against Hugging Face tokenizers in tests/parity/test_tokenizer_parity.cpp).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "tokenizer/detail.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

using namespace kvscope::tokenizer;
namespace detail = kvscope::tokenizer::detail;

namespace {

// Ids 0..255 are the 256 byte tokens in byte order; merges add tokens after them.
struct TinyVocab {
  std::vector<std::string> tokens;
  std::vector<std::int32_t> types;
  std::vector<std::string> merges;

  TinyVocab() {
    for (int b = 0; b < 256; ++b) tokens.push_back(detail::byteToUnicode(static_cast<std::uint8_t>(b)));
    types.assign(256, 1);
  }
  // Adds the merge "a b" and its result as a token; returns the new id.
  std::int32_t merge(const std::string& a, const std::string& b) {
    merges.push_back(a + " " + b);
    return add(a + b, 1);
  }
  std::int32_t add(const std::string& token, std::int32_t type) {
    tokens.push_back(token);
    types.push_back(type);
    return static_cast<std::int32_t>(tokens.size() - 1);
  }
  Tokenizer build(std::string_view preset = "gpt2", SpecialIds ids = {}, bool addBos = false) const {
    return fromParts(tokens, types, merges, preset, ids, addBos);
  }
};

std::int32_t byteId(char c) {
  return static_cast<std::uint8_t>(c);
}

std::string concatTokenText(const Tokenizer& t, const std::vector<std::int32_t>& ids) {
  std::string s;
  for (const auto id : ids) s += t.tokenText(id);
  return s;
}

using kvscope::testutil::mentions;
using kvscope::tokenizer::testutil::errorOf;
using kvscope::tokenizer::testutil::writeTemp;

}  // namespace

TEST(TokenizerByteLevel, TableIsGpt2sBytesToUnicode) {
  std::set<std::string> seen;
  for (int b = 0; b < 256; ++b) {
    const auto& s = detail::byteToUnicode(static_cast<std::uint8_t>(b));
    seen.insert(s);
    char32_t cp = 0;
    int bad = 0;
    ASSERT_EQ(detail::decodeUtf8(s, 0, cp, bad), static_cast<int>(s.size()));
    EXPECT_EQ(detail::unicodeToByte(cp), b);
  }
  EXPECT_EQ(seen.size(), 256u);
  EXPECT_EQ(detail::byteToUnicode('A'), "A");
  EXPECT_EQ(detail::byteToUnicode(' '), "\xC4\xA0");   // U+0120 'Ġ'
  EXPECT_EQ(detail::byteToUnicode('\n'), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(detail::byteToUnicode(0xAD), "\xC5\x83");  // soft hyphen is not printable: U+0143
  EXPECT_EQ(detail::unicodeToByte(U'\u0144'), -1);
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(detail::fromByteLevel(detail::toByteLevel(all)), all);
  EXPECT_EQ(detail::fromByteLevel("<|im_start|>"), "<|im_start|>");
  EXPECT_EQ(detail::fromByteLevel("日本"), "日本");  // not a byte-level spelling: kept as text
}

TEST(TokenizerBpe, MergesByRankThenLeftmost) {
  TinyVocab v;
  const auto he = v.merge("h", "e");
  const auto ll = v.merge("l", "l");
  const auto hell = v.merge("he", "ll");
  const auto hello = v.merge("hell", "o");
  const auto tok = v.build();
  EXPECT_EQ(tok.encode("hello"), (std::vector<std::int32_t>{hello}));
  EXPECT_EQ(tok.encode("hell"), (std::vector<std::int32_t>{hell}));
  EXPECT_EQ(tok.encode("helo"), (std::vector<std::int32_t>{he, byteId('l'), byteId('o')}));
  EXPECT_EQ(tok.encode("lll"), (std::vector<std::int32_t>{ll, byteId('l')}));  // leftmost pair first
  EXPECT_EQ(tok.encode(""), (std::vector<std::int32_t>{}));

  // Rank decides between overlapping pairs.
  TinyVocab a;
  const auto ab = a.merge("a", "b");
  a.merge("b", "c");
  EXPECT_EQ(a.build().encode("abc"), (std::vector<std::int32_t>{ab, byteId('c')}));
  TinyVocab b;
  const auto bc = b.merge("b", "c");
  b.merge("a", "b");
  EXPECT_EQ(b.build().encode("abc"), (std::vector<std::int32_t>{byteId('a'), bc}));
}

TEST(TokenizerBpe, SpaceIsPartOfTheFollowingWord) {
  TinyVocab v;
  const auto gw = v.merge("\xC4\xA0", "w");  // "Ġw"
  const auto tok = v.build();
  const auto ids = tok.encode("a w");
  EXPECT_EQ(ids, (std::vector<std::int32_t>{byteId('a'), gw}));
  EXPECT_EQ(tok.decode(ids), "a w");
  EXPECT_EQ(tok.tokenText(gw), " w");
  EXPECT_EQ(tok.tokenString(gw), "\xC4\xA0w");
  EXPECT_EQ(tok.tokenId("\xC4\xA0w"), gw);
  EXPECT_FALSE(tok.tokenId("nope").has_value());
}

TEST(TokenizerBpe, EveryByteHasAToken) {
  const auto tok = TinyVocab().build();
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const auto ids = tok.encode(all);
  ASSERT_EQ(ids.size(), 256u);
  EXPECT_EQ(concatTokenText(tok, ids), all);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[b], b);
}

TEST(TokenizerSpecial, AddedTokensMatchLongestFirst) {
  TinyVocab v;
  const auto start = v.add("<|im_start|>", 3);
  const auto end = v.add("<|im_end|>", 3);
  const auto think = v.add("<think>", 4);  // user-defined: matched even when special tokens are not parsed
  const auto longer = v.add("<think></think>", 4);
  const auto tok = v.build("gpt2", {start, end, -1, end}, true);
  EXPECT_TRUE(tok.addBos());
  EXPECT_EQ(tok.bosId(), start);
  EXPECT_EQ(tok.eosId(), end);

  const auto ids = tok.encode("<|im_start|>u\n<think></think>x<think>", false);
  EXPECT_EQ(ids, (std::vector<std::int32_t>{start, byteId('u'), byteId('\n'), longer, byteId('x'), think}));
  EXPECT_EQ(tok.encode("<|im_end|>").front(), start);  // BOS first when addSpecial
  EXPECT_EQ(tok.encode("<|im_end|>"), (std::vector<std::int32_t>{start, end}));

  // parseSpecial=false: control tokens are text, user-defined ones still match.
  const auto plain = tok.encode("<|im_end|><think>", false, false);
  ASSERT_GT(plain.size(), 2u);
  EXPECT_EQ(plain.back(), think);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), end), 0);
  EXPECT_EQ(tok.decode(plain), "<|im_end|><think>");

  EXPECT_EQ(tok.decode({start, byteId('h'), byteId('i'), end}), "<|im_start|>hi<|im_end|>");
  EXPECT_EQ(tok.decode({start, byteId('h'), byteId('i'), end}, true), "hi");
  EXPECT_EQ(tok.decode({think, byteId('h')}, true), "<think>h");  // not special: kept
  EXPECT_TRUE(tok.isSpecial(start));
  EXPECT_FALSE(tok.isSpecial(think));
  EXPECT_EQ(tok.tokenType(think), TokenType::UserDefined);
  EXPECT_EQ(tok.tokenId("<|im_end|>"), end);
}

TEST(TokenizerSpecial, LstripRstripSwallowWhitespace) {
  TokenizerSpec spec;
  for (int b = 0; b < 256; ++b) spec.tokens.push_back(detail::byteToUnicode(static_cast<std::uint8_t>(b)));
  spec.added.push_back({256, "<mask>", true, true, true, false});
  const Tokenizer tok(spec);
  EXPECT_EQ(tok.encode("a \t<mask>  b"), (std::vector<std::int32_t>{byteId('a'), 256, byteId('b')}));
}

TEST(TokenizerDecode, RoundTripAndPartialUtf8) {
  TinyVocab v;
  const auto eAcute = v.merge(detail::byteToUnicode(0xC3), detail::byteToUnicode(0xA9));  // "é"
  const auto im = v.add("<|im_start|>", 3);
  const auto tok = v.build();
  const std::string text = "naïve café — 日本語 😀 tabs\tand\nnewlines  ";
  const auto ids = tok.encode(text);
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_EQ(concatTokenText(tok, ids), text);
  EXPECT_NE(std::find(ids.begin(), ids.end(), eAcute), ids.end());

  // The 4 bytes of 😀 are 4 tokens; only the full list decodes to the character.
  const auto emoji = tok.encode("😀");
  ASSERT_EQ(emoji.size(), 4u);
  EXPECT_EQ(tok.decode(emoji), "😀");
  EXPECT_EQ(tok.decode({emoji[0]}), "\xEF\xBF\xBD");
  EXPECT_EQ(tok.tokenText(emoji[0]), "\xF0");
  // An added token in the middle ends the byte run, as in tokenizers: each half is invalid on its own.
  EXPECT_EQ(tok.decode({emoji[0], emoji[1], im, emoji[2], emoji[3]}),
            "\xEF\xBF\xBD<|im_start|>\xEF\xBF\xBD\xEF\xBF\xBD");  // F0 9F | 98 80
  // A skipped special token does not.
  EXPECT_EQ(tok.decode({emoji[0], emoji[1], im, emoji[2], emoji[3]}, true), "😀");
  EXPECT_EQ(tok.decode({-1, 100000, byteId('a')}), "a");  // ids naming no token are skipped
  EXPECT_EQ(tok.tokenText(-5), "");
}

TEST(TokenizerDecode, LossyUtf8FollowsMaximalSubparts) {
  const auto lossy = [](std::string_view s) {
    std::string out;
    detail::appendUtf8Lossy(out, s);
    return out;
  };
  const std::string R = "\xEF\xBF\xBD";
  EXPECT_EQ(lossy("ok"), "ok");
  EXPECT_EQ(lossy("a\xE2\x82"), "a" + R);  // truncated 3-byte sequence: one replacement
  EXPECT_EQ(lossy("\xE2\x82"
                  "A"),
            R + "A");
  EXPECT_EQ(lossy("\xED\xA0\x80"), R + R + R);  // encoded surrogate
  EXPECT_EQ(lossy("\xC0\xAF"), R + R);          // overlong
  EXPECT_EQ(lossy("\xF0\x9F\x98"
                  "A\xF0\x9F\x98\x80"),
            R + "A😀");
  EXPECT_EQ(lossy("\xF4\x90\x80\x80"), R + R + R + R);  // above U+10FFFF
  EXPECT_EQ(lossy("\xFF"), R);
}

TEST(TokenizerInput, InvalidUtf8IsTokenizedAsBytes) {
  TinyVocab v;
  const auto ab = v.merge("a", "b");
  for (const char* preset : {"gpt2", "smollm", "llama3", "qwen2"}) {
    const auto tok = v.build(preset);
    const std::string text = "ab\xFF\xFE ab \xC3(\xE2\x82 1\xF0\x9F";
    std::vector<std::int32_t> ids;
    ASSERT_NO_THROW(ids = tok.encode(text)) << preset;
    EXPECT_EQ(concatTokenText(tok, ids), text) << preset;
    EXPECT_EQ(ids.front(), ab) << preset;
    const std::string R = "\xEF\xBF\xBD";
    EXPECT_EQ(tok.decode(ids), fmt::format("ab{0}{0} ab {0}({0} 1{0}", R)) << preset;
  }
  const auto pieces = v.build("gpt2").preTokenize(
      "ab\xFF"
      "cd");
  EXPECT_EQ(pieces, (std::vector<std::string>{"ab", "\xFF", "cd"}));
}

TEST(TokenizerPreset, RegexesSplitLikeTheirFamilies) {
  const TinyVocab v;
  const auto pre = [&](const char* preset, std::string_view text) { return v.build(preset).preTokenize(text); };
  using S = std::vector<std::string>;
  EXPECT_EQ(pre("gpt2", "Hello world's  12345\n\tx  "),
            (S{"Hello", " world", "'s", " ", " 12345", "\n", "\t", "x", "  "}));  // \s+(?!\S) backs off one
  EXPECT_EQ(pre("gpt2", "IT'S"), (S{"IT", "'", "S"}));  // contractions are case-sensitive in GPT-2
  // SmolLM: every digit alone first, so the space before a number stays with the whitespace.
  EXPECT_EQ(pre("smollm", "abc123  45"), (S{"abc", "1", "2", "3", "  ", "4", "5"}));
  EXPECT_EQ(pre("gpt2", "abc123  45"), (S{"abc", "123", " ", " 45"}));
  EXPECT_EQ(pre("llama3", "IT'S 1234567 x\n\n y"), (S{"IT", "'S", " ", "123", "456", "7", " x", "\n\n", " y"}));
  EXPECT_EQ(pre("qwen2", "a 123"), (S{"a", " ", "1", "2", "3"}));
  // U+180E is not White_Space (Oniguruma agrees); PCRE2's own \s would take it.
  EXPECT_EQ(pre("gpt2", "a\u180E\u180Eb"), (S{"a", "\u180E\u180E", "b"}));
  EXPECT_EQ(pre("gpt2", "a\u00A0\u00A0b"), (S{"a", "\u00A0", "\u00A0", "b"}));
  EXPECT_EQ(presetFromName("llama-bpe"), Preset::Llama3);
  EXPECT_STREQ(presetName(Preset::SmolLM), "smollm");
}

TEST(TokenizerPerformance, HundredKilobytesWellUnderASecond) {
  TinyVocab v;
  v.merge("t", "h");
  v.merge("th", "e");
  v.merge("\xC4\xA0", "the");
  const auto tok = v.build("smollm");
  std::string text;
  while (text.size() < std::size_t{100} * 1024) text += "the quick brown fox, 1234 times! 日本語\n\t  ";
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = tok.encode(text);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 0.5) << ids.size() << " tokens";
  EXPECT_EQ(tok.decode(ids), text);
  // One long piece and one long whitespace run: BPE and the regex stay fast on both.
  const std::string word(std::size_t{100} * 1024, 'x'), spaces = std::string(std::size_t{100} * 1024, ' ') + "x";
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_EQ(tok.encode(word).size(), word.size());
  EXPECT_EQ(tok.decode(tok.encode(spaces)), spaces);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), 1.0);
}

TEST(TokenizerThreads, ConcurrentEncodesAgree) {
  TinyVocab v;
  v.merge("a", "b");
  const auto tok = v.build();
  const std::string text = "ab cab abab 12 ab\n";
  const auto want = tok.encode(text);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  threads.reserve(4);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i)
        if (tok.encode(text + std::to_string(i % 7)).size() < want.size()) ++bad;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(TokenizerChat, ChatMLWithSmolLM2DefaultSystem) {
  const std::string sys = "<|im_start|>system\n" + std::string(kSmolLM2DefaultSystem) + "<|im_end|>\n";
  EXPECT_EQ(applyChatML({{"user", "hi"}}, true), sys + "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(applyChatML({{"system", "S"}, {"user", "u"}, {"assistant", "a"}}, false),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nu<|im_end|>\n<|im_start|>assistant\na<|im_end|>\n");
  EXPECT_EQ(applyChatML({}, true), "<|im_start|>assistant\n");
  EXPECT_EQ(applyChatML({{"user", "x"}}, false, ""), "<|im_start|>user\nx<|im_end|>\n");
}

TEST(TokenizerChat, GemmaTurns) {
  EXPECT_EQ(applyGemmaChat({{"user", "  hi\n"}}, true), "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n");
  // A system message goes into the first user turn, untrimmed, with a blank line; "assistant" is "model".
  EXPECT_EQ(applyGemmaChat({{"system", "Be terse. "}, {"user", "u"}, {"assistant", " a "}, {"user", "v"}}, false),
            "<start_of_turn>user\nBe terse. \n\nu<end_of_turn>\n<start_of_turn>model\na<end_of_turn>\n"
            "<start_of_turn>user\nv<end_of_turn>\n");
  EXPECT_EQ(applyGemmaChat({}, true), "<start_of_turn>model\n");
}

TEST(TokenizerChat, HarmonyTurns) {
  const std::string sys =
      "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: "
      "2024-06\nCurrent date: 2026-12-07\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. "
      "Channel must be included for every message.<|end|>";
  EXPECT_EQ(applyHarmonyChat({{"user", "hi"}}, true, "2026-12-07"),
            sys + "<|start|>user<|message|>hi<|end|><|start|>assistant");
  // A leading system message is the developer's instructions; an earlier assistant turn is its final channel.
  EXPECT_EQ(applyHarmonyChat({{"system", "Be terse."}, {"user", "u"}, {"assistant", "a"}, {"user", "v"}}, false,
                             "2026-12-07"),
            sys +
                "<|start|>developer<|message|># Instructions\n\nBe terse.\n\n<|end|><|start|>user<|message|>u<|end|>"
                "<|start|>assistant<|channel|>final<|message|>a<|end|><|start|>user<|message|>v<|end|>");
  // Today's date where none is given.
  EXPECT_NE(applyHarmonyChat({}, true).find("Current date: 20"), std::string::npos);
}

TEST(TokenizerJson, LoadsBothMergeFormsAndTemplate) {
  TinyVocab v;
  v.merge("a", "b");
  v.merge("\xC4\xA0", "ab");
  const auto parts = v.build();
  nlohmann::json vocab = nlohmann::json::object();
  for (std::size_t i = 0; i < v.tokens.size(); ++i) vocab[v.tokens[i]] = i;
  const auto bos = static_cast<std::int32_t>(v.tokens.size());
  nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens", {{{"id", bos}, {"content", "<s>"}, {"special", true}, {"normalized", false}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {bos}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", v.merges}}}};
  const auto strForm = fromTokenizerJson(writeTemp("str", j.dump()));
  j["model"]["merges"] =
      nlohmann::json::array({nlohmann::json::array({"a", "b"}), nlohmann::json::array({"\xC4\xA0", "ab"})});
  const auto listForm = fromTokenizerJson(writeTemp("list", j.dump()));
  const std::string text = "ab ab xab<s>";
  auto want = parts.encode(text);
  want.pop_back();
  want.pop_back();
  want.pop_back();
  want.insert(want.begin(), bos);
  want.push_back(bos);
  EXPECT_EQ(strForm.encode(text), want);
  EXPECT_EQ(listForm.encode(text), want);
  EXPECT_EQ(listForm.bosId(), bos);
  EXPECT_TRUE(listForm.addBos());
  EXPECT_EQ(listForm.decode(want, true), "ab ab xab");
}

TEST(TokenizerErrors, MessagesNameTheSourceAndTheProblem) {
  {
    TinyVocab v;
    v.merges.push_back("x zz");
    EXPECT_TRUE(
        mentions(errorOf([&] { v.build(); }), {"tokenizer parts", "merge 0", "'x zz'", "second part", "vocabulary"}));
  }
  {
    TinyVocab v;
    v.merges.push_back("a b");  // "ab" itself is not a token
    EXPECT_TRUE(mentions(errorOf([&] { v.build(); }), {"merge 0", "merged token"}));
  }
  {
    TinyVocab v;
    v.merges.push_back("ab");
    EXPECT_TRUE(mentions(errorOf([&] { v.build(); }), {"merge 0", "'ab'", "one space"}));
  }
  {
    TinyVocab v;
    v.types[65] = 9;
    EXPECT_TRUE(mentions(errorOf([&] { v.build(); }), {"token 65", "'A'", "type 9"}));
    v.types.pop_back();
    EXPECT_TRUE(mentions(errorOf([&] { v.build(); }), {"255 token types for 256 tokens"}));
  }
  const TinyVocab v;
  EXPECT_TRUE(mentions(errorOf([&] { v.build("gpt5"); }), {"unknown pre-tokenizer 'gpt5'"}));
  EXPECT_TRUE(mentions(errorOf([&] { v.build("gpt2", {}, true); }), {"add_bos", "no BOS"}));
  EXPECT_TRUE(mentions(errorOf([&] { v.build("gpt2", {7, 300, -1, -1}); }), {"EOS id 300", "256 tokens"}));
  const auto tok = v.build();
  EXPECT_TRUE(mentions(errorOf([&] { tok.tokenString(256); }), {"token id 256"}));
  EXPECT_EQ(tok.encode("valid after errors"), tok.encode("valid after errors"));

  // tokenizer.json
  EXPECT_TRUE(mentions(errorOf([] { fromTokenizerJson("/nonexistent/tokenizer.json"); }),
                       {"/nonexistent/tokenizer.json", "cannot open"}));
  EXPECT_TRUE(mentions(errorOf([] { fromTokenizerJson(writeTemp("badjson", "{\"model\": [")); }), {"not valid JSON"}));
  const nlohmann::json good = {
      {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}}, {"merges", {"a b"}}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}}},
      {"decoder", {{"type", "ByteLevel"}}}};
  EXPECT_NO_THROW(fromTokenizerJson(writeTemp("good", good.dump())));
  const auto broken = [&](const char* name, const std::function<void(nlohmann::json&)>& edit) {
    return kvscope::tokenizer::testutil::broken(name, good, edit);
  };
  EXPECT_TRUE(
      mentions(broken("unigram", [](auto& j) { j["model"]["type"] = "Unigram"; }), {"model.type", "'Unigram'"}));
  EXPECT_TRUE(mentions(broken("nfc", [](auto& j) { j["normalizer"] = {{"type", "NFC"}}; }), {"normalizer", "'NFC'"}));
  EXPECT_TRUE(mentions(broken("merge",
                              [](auto& j) {
                                j["model"]["merges"] = nlohmann::json::array({nlohmann::json::array({"a", "b", "c"})});
                              }),
                       {"model.merges[0]"}));
  EXPECT_TRUE(mentions(broken("mergeoov", [](auto& j) { j["model"]["merges"] = {"b a"}; }), {"merge 0", "'b a'"}));
  EXPECT_TRUE(mentions(broken("vocabid", [](auto& j) { j["model"]["vocab"]["x"] = -3; }), {"model.vocab['x']", "-3"}));
  EXPECT_TRUE(mentions(broken("decoder",
                              [](auto& j) {
                                j["decoder"] = {{"type", "Metaspace"}};
                              }),
                       {"decoder", "Metaspace"}));
  EXPECT_TRUE(mentions(broken("wordpiece",
                              [](auto& j) {
                                j["pre_tokenizer"] = {{"type", "Whitespace"}};
                              }),
                       {"pre_tokenizer", "[Whitespace]"}));
  EXPECT_TRUE(mentions(broken("split",
                              [](auto& j) {
                                j["pre_tokenizer"] = {
                                    {"type", "Sequence"},
                                    {"pretokenizers",
                                     {{{"type", "Split"}, {"pattern", {{"Regex", "\\w+"}}}, {"behavior", "Isolated"}},
                                      {{"type", "ByteLevel"}, {"use_regex", false}}}}};
                              }),
                       {"pre_tokenizer.Split.pattern.Regex", "/\\w+/", "not a known preset"}));
  EXPECT_TRUE(
      mentions(broken("prefix", [](auto& j) { j["pre_tokenizer"]["add_prefix_space"] = true; }), {"add_prefix_space"}));
  EXPECT_TRUE(mentions(broken("single",
                              [](auto& j) {
                                j["added_tokens"] = {{{"id", 3}, {"content", "<x>"}, {"single_word", true}}};
                              }),
                       {"added_tokens[0].single_word", "'<x>'"}));
}
