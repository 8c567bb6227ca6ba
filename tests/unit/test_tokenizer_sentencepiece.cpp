// Unit tests of the SentencePiece-style BPE (Llama 2 / Mistral tokenizer.json layouts) on tiny hand-built
// vocabularies: byte fallback, unk fusing, Metaspace, the decoder chain, both layouts through fromTokenizerJson, and
// the errors for what is not supported. The trained vocabularies are checked against Hugging Face tokenizers in
// tests/parity/test_tokenizer_parity.cpp.
#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "tokenizer/detail.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

using namespace kvscope::tokenizer;
namespace detail = kvscope::tokenizer::detail;

namespace {

using kvscope::testutil::mentions;
using kvscope::tokenizer::testutil::broken;
using kvscope::tokenizer::testutil::errorOf;
using kvscope::tokenizer::testutil::writeTemp;

const std::string kSp = "\xE2\x96\x81";  // "▁"
const std::string kFffd = "\xEF\xBF\xBD";

// Llama 2's layout: <unk> <s> </s>, the 256 byte tokens (ids 3..258), then pieces; merges in order.
struct SpVocab {
  std::vector<std::string> tokens{"<unk>", "<s>", "</s>"};
  std::vector<std::pair<std::string, std::string>> merges;
  SpVocab() {
    for (int b = 0; b < 256; ++b) tokens.push_back(detail::byteFallbackToken(static_cast<std::uint8_t>(b)));
  }
  std::int32_t add(const std::string& t) {
    tokens.push_back(t);
    return static_cast<std::int32_t>(tokens.size() - 1);
  }
  std::int32_t merge(const std::string& a, const std::string& b) {
    merges.emplace_back(a, b);
    return add(a + b);
  }
  static std::int32_t byte(std::uint8_t b) { return 3 + b; }
  // legacy: normalizer Prepend + Replace (no pre-tokenizer); otherwise Metaspace with `scheme`.
  TokenizerSpec spec(bool legacy, PrependScheme scheme = PrependScheme::First, bool split = false) const {
    TokenizerSpec s;
    s.mode = Mode::SentencePiece;
    s.tokens = tokens;
    s.merges = merges;
    s.byteFallback = true;
    s.fuseUnk = true;
    s.bpeUnk = 0;
    s.added = {{0, "<unk>", true}, {1, "<s>", true}, {2, "</s>", true}};
    s.prefix = {1};
    s.special = {1, 2, 0, -1};
    if (legacy)
      s.normalizer = {{NormalizerStep::Kind::Prepend, "", kSp}, {NormalizerStep::Kind::Replace, " ", kSp}};
    else
      s.metaspace = MetaspaceSpec{kSp, scheme, split};
    using K = DecoderStep::Kind;
    s.decoder = {{K::Replace, kSp, " "}, {K::ByteFallback}, {K::Fuse}, {K::Strip, "", " ", 1, 0}};
    return s;
  }
};

using Ids = std::vector<std::int32_t>;
using Strs = std::vector<std::string>;

}  // namespace

TEST(TokenizerSentencePiece, SymbolsFallBackToBytesThenUnk) {
  const std::unordered_map<char32_t, std::int32_t> chars{{U'a', 10}, {U'\u00E9', 11}};
  std::array<std::int32_t, 256> bytes{};
  bytes.fill(-1);
  bytes['j'] = 100;
  bytes[0xF0] = 200, bytes[0x9F] = 201, bytes[0x98] = 202, bytes[0x80] = 203;
  const auto sym = [&](std::string_view w, bool fallback, bool fuse, std::int32_t unk = 0) {
    Ids out;
    detail::sentencePieceSymbols(w, chars, bytes, fallback, unk, fuse, out);
    return out;
  };
  EXPECT_EQ(sym("a\u00E9a", true, true), (Ids{10, 11, 10}));
  EXPECT_EQ(sym("a\U0001F600", true, true), (Ids{10, 200, 201, 202, 203}));  // 😀: all four bytes exist
  EXPECT_EQ(sym("\U0001F600", false, true), (Ids{0}));
  // ŋ has no token and its bytes do not all exist: unk. Consecutive unks fuse; as in tokenizers, a pending unk is
  // written only before the next character found in the vocabulary (or at the end), so a byte-fallback 'j' that
  // follows it comes first.
  EXPECT_EQ(sym("\u014B\u014Bja\u014B", true, true), (Ids{100, 0, 10, 0}));
  EXPECT_EQ(sym("\u014B\u014Bja\u014B", true, false), (Ids{0, 100, 0, 10, 0}));
  EXPECT_EQ(sym("\u014Bj", true, true, -1), (Ids{100}));  // no unk token: dropped
  EXPECT_EQ(sym("a\xFF", true, true), (Ids{10, 0}));      // an invalid byte is a character of its own
  EXPECT_EQ(detail::byteFallbackToken(0x0A), "<0x0A>");
  EXPECT_EQ(detail::byteFallbackToken(0xE9), "<0xE9>");
}

TEST(TokenizerSentencePiece, MetaspacePrependsAndSplits) {
  const auto split = [](std::string_view text, PrependScheme scheme, bool cut, bool atStart) {
    std::string buf;
    std::vector<std::string_view> out;
    detail::metaspaceSplit(MetaspaceSpec{kSp, scheme, cut}, text, atStart, buf, out);
    return Strs(out.begin(), out.end());
  };
  const auto S = [](std::string s) { return detail::replaceAll(s, "_", kSp); };
  using P = PrependScheme;
  EXPECT_EQ(split("a  b", P::Always, true, false), (Strs{S("_a"), S("_"), S("_b")}));  // a cut before every ▁
  EXPECT_EQ(split("a  b", P::Always, false, false), (Strs{S("_a__b")}));
  EXPECT_EQ(split(" x", P::Always, false, true), (Strs{S("_x")}));  // starts with ▁ already: none added
  EXPECT_EQ(split("x ", P::First, true, true), (Strs{S("_x"), S("_")}));
  EXPECT_EQ(split("x", P::First, false, false), (Strs{"x"}));  // not at the start of the input (after <s>)
  EXPECT_EQ(split("x y", P::Never, false, true), (Strs{S("x_y")}));
  EXPECT_EQ(split("", P::Always, true, true), (Strs{}));
  EXPECT_EQ(
      detail::normalize({{NormalizerStep::Kind::Prepend, "", kSp}, {NormalizerStep::Kind::Replace, " ", kSp}}, " a b"),
      S("__a_b"));
  EXPECT_EQ(detail::normalize({{NormalizerStep::Kind::Prepend, "", kSp}}, ""), "");  // nothing before empty text
}

TEST(TokenizerSentencePiece, DecoderChainFusesBytes) {
  using K = DecoderStep::Kind;
  const std::vector<DecoderStep> llama{{K::Replace, kSp, " "}, {K::ByteFallback}, {K::Fuse}, {K::Strip, "", " ", 1, 0}};
  const auto run = [](const std::vector<DecoderStep>& steps, Strs t) {
    return detail::runDecoder(steps, std::move(t));
  };
  EXPECT_EQ(run(llama, {kSp + "Hi", kSp + "there"}), "Hi there");  // one leading space stripped
  EXPECT_EQ(run(llama, {kSp + kSp + "x"}), " x");
  EXPECT_EQ(run(llama, {"<s>", kSp + "Hi"}), "<s> Hi");  // the strip is of the whole text, not after <s>
  EXPECT_EQ(run(llama, {"a", "<0xF0>", "<0x9F>", "<0x98>", "<0x80>", "<0x0A>"}), "a\U0001F600\n");
  // A run of byte tokens that is not valid UTF-8 is one U+FFFD per byte, the valid part included (tokenizers).
  EXPECT_EQ(run(llama, {"a", "<0xF0>", "<0x9F>", "b", "<0x41>", "<0xE9>"}), "a" + kFffd + kFffd + "b" + kFffd + kFffd);
  EXPECT_EQ(run(llama, {"<0xe9>", "<0x+A>"}), kFffd + kFffd);  // lower-case and '+' parse as from_str_radix does
  EXPECT_EQ(detail::byteFallbackValue("<0x+A>"), 10);
  EXPECT_EQ(detail::byteFallbackValue("<0xG0>"), -1);
  EXPECT_EQ(detail::byteFallbackValue("<0x0A"), -1);
  // Metaspace: ▁ -> ' ', removed in the first token; <0xNN> stay text (no ByteFallback in the chain).
  const std::vector<DecoderStep> meta{{K::Metaspace, kSp, "", 0, 0, PrependScheme::Always}};
  EXPECT_EQ(run(meta, {kSp + "a" + kSp + "b", kSp + "c", "<0x41>"}), "ab c<0x41>");
  EXPECT_EQ(run({{K::Metaspace, kSp, "", 0, 0, PrependScheme::Never}}, {kSp + "a"}), " a");
  EXPECT_EQ(run({{K::Strip, "", "x", 0, 2}}, {"axxx", "xx"}), "ax");
  EXPECT_EQ(run({{K::Strip, "", "x", 0, 2}}, {""}), "");  // (tokenizers panics on an empty token here)
  EXPECT_EQ(run({}, {"a", "b"}), "a b");                  // no decoder: joined with spaces
}

TEST(TokenizerSentencePiece, LegacyAndMetaspaceLayouts) {
  SpVocab v;
  const auto a = v.add("a"), b = v.add("b"), sp = v.add(kSp);
  const auto spA = v.merge(kSp, "a");
  const auto ab = v.merge("a", "b");
  const auto spAb = v.merge(kSp + "a", "b");
  const Tokenizer legacy(v.spec(true)), first(v.spec(false, PrependScheme::First)),
      always(v.spec(false, PrependScheme::Always, true));
  EXPECT_EQ(legacy.mode(), Mode::SentencePiece);
  EXPECT_STREQ(modeName(legacy.mode()), "sentencepiece");
  const auto F0 = SpVocab::byte(0xF0), x9F = SpVocab::byte(0x9F), x98 = SpVocab::byte(0x98), x80 = SpVocab::byte(0x80);

  EXPECT_EQ(legacy.encode("ab a"), (Ids{1, spAb, spA}));
  EXPECT_EQ(first.encode("ab a"), (Ids{1, spAb, spA}));
  EXPECT_EQ(legacy.encode("ab", false), (Ids{spAb}));
  // A leading space: the legacy normalizer prepends anyway, Metaspace does not double it.
  EXPECT_EQ(legacy.encode(" ab", false), (Ids{sp, spAb}));
  EXPECT_EQ(first.encode(" ab", false), (Ids{spAb}));
  // Right after a special token: legacy prepends to every piece, "first" only at the start of the input.
  EXPECT_EQ(legacy.encode("<s>ab", false), (Ids{1, spAb}));
  EXPECT_EQ(first.encode("<s>ab", false), (Ids{1, ab}));
  EXPECT_EQ(always.encode("<s>ab", false), (Ids{1, spAb}));
  EXPECT_EQ(first.encode("<s>ab", false, false),  // special tokens as text: one piece from the start
            (Ids{sp, SpVocab::byte('<'), SpVocab::byte('s'), SpVocab::byte('>'), ab}));
  // Emoji: not in the vocabulary -> its four UTF-8 bytes; decoded back to the character.
  const auto emoji = first.encode("a\U0001F600", false);
  EXPECT_EQ(emoji, (Ids{spA, F0, x9F, x98, x80}));
  EXPECT_EQ(first.decode(emoji), "a\U0001F600");
  EXPECT_EQ(first.decode({spA, F0, x9F}), "a" + kFffd + kFffd);  // cut: one U+FFFD per byte
  EXPECT_EQ(first.decode({1, spA, b}, false), "<s> ab");
  EXPECT_EQ(first.decode({1, spA, b}, true), "ab");
  // The Strip removes what Prepend added; with Metaspace a leading space is lost (tokenizers does the same).
  EXPECT_EQ(legacy.decode(legacy.encode("  a b  ab ", false)), "  a b  ab ");
  EXPECT_EQ(first.decode(first.encode(" a\tb\n", false)), "a\tb\n");
  EXPECT_EQ(legacy.decode(legacy.encode("a b")), "<s> a b");
  EXPECT_EQ(first.preTokenize("a b"), (Strs{kSp + "a" + kSp + "b"}));
  EXPECT_EQ(always.preTokenize("a b"), (Strs{kSp + "a", kSp + "b"}));
  EXPECT_EQ(legacy.preTokenize("a b"), (Strs{kSp + "a" + kSp + "b"}));
  // What a token stands for alone (streaming).
  EXPECT_EQ(first.tokenText(spAb), " ab");
  EXPECT_EQ(first.tokenText(SpVocab::byte('\n')), "\n");
  EXPECT_EQ(first.tokenType(F0), TokenType::Byte);
  EXPECT_EQ(first.tokenType(a), TokenType::Normal);
  EXPECT_EQ(first.tokenType(0), TokenType::Control);  // <unk>: a special added token
}

TEST(TokenizerSentencePiece, NormalizedAddedTokenMatchesItsNormalizedForm) {
  SpVocab v;
  const auto a = v.add("a");
  v.add(kSp);
  const auto spA = v.merge(kSp, "a");
  auto spec = v.spec(true);
  const auto think = static_cast<std::int32_t>(v.tokens.size());
  spec.added.push_back({think, "<think>", false, false, false, /*normalized=*/true});
  const Tokenizer legacy(spec);
  // As in tokenizers: the pattern is the normalized content "▁<think>", so it matches only after a space (or at the
  // start, where the normalizer put a ▁) -- and decodes as " <think>".
  EXPECT_EQ(legacy.encode("a <think>a", false), (Ids{spA, think, a}));
  EXPECT_EQ(legacy.encode("<think>", false), (Ids{think}));
  EXPECT_NE(legacy.encode("a<think>", false).back(), think);
  EXPECT_EQ(legacy.decode({spA, think}), "a <think>");
  EXPECT_EQ(legacy.tokenId("<think>"), think);
}

TEST(TokenizerSentencePiece, FromTokenizerJsonBothLayoutsAndErrors) {
  SpVocab v;
  v.add("a");
  v.add(kSp);
  v.merge(kSp, "a");
  nlohmann::json vocab = nlohmann::json::object();
  for (std::size_t i = 0; i < v.tokens.size(); ++i) vocab[v.tokens[i]] = i;
  const auto added = [](int id, const char* content) {
    return nlohmann::json{{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
                          {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  const nlohmann::json strip = {{"type", "Sequence"},
                                {"decoders",
                                 {{{"type", "Replace"}, {"pattern", {{"String", kSp}}}, {"content", " "}},
                                  {{"type", "ByteFallback"}},
                                  {{"type", "Fuse"}},
                                  {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  const nlohmann::json legacy = {
      {"version", "1.0"},
      {"added_tokens", {added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", kSp}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSp}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder", strip},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<unk>"},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"vocab", vocab},
        {"merges", {kSp + " a"}}}}};
  auto metaspace = legacy;
  metaspace["normalizer"] = nullptr;
  metaspace["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", kSp}, {"prepend_scheme", "first"}, {"split", false}};
  metaspace["model"]["merges"] = nlohmann::json::array({nlohmann::json::array({kSp, "a"})});
  const auto l = fromTokenizerJson(writeTemp("sp_legacy", legacy.dump()));
  const auto m = fromTokenizerJson(writeTemp("sp_meta", metaspace.dump()));
  const auto spA = l.tokenId(kSp + "a").value(), aId = l.tokenId("a").value();
  EXPECT_EQ(l.encode("a<s>a"), (Ids{1, spA, 1, spA}));
  EXPECT_EQ(m.encode("a<s>a"), (Ids{1, spA, 1, aId}));
  EXPECT_EQ(l.bosId(), 1);
  EXPECT_EQ(l.unkId(), 0);
  EXPECT_TRUE(m.addBos());
  EXPECT_EQ(m.decode(m.encode("a \xC3\xA9"), true), "a \xC3\xA9");
  EXPECT_EQ(m.encode("\xC3\xA9", false), (Ids{spA - 1, SpVocab::byte(0xC3), SpVocab::byte(0xA9)}));

  EXPECT_TRUE(mentions(broken("sp_nfkc", legacy,
                              [](auto& j) {
                                j["normalizer"]["normalizers"][1] = {{"type", "NFKC"}};
                              }),
                       {"normalizer.normalizers[1]", "'NFKC'"}));
  EXPECT_TRUE(mentions(broken("sp_regex", legacy,
                              [](auto& j) {
                                j["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", " +"}};
                              }),
                       {"normalizer.normalizers[1].pattern", "String"}));
  EXPECT_TRUE(mentions(broken("sp_both", metaspace, [&](auto& j) { j["normalizer"] = legacy["normalizer"]; }),
                       {"normalizer", "Metaspace"}));
  EXPECT_TRUE(mentions(broken("sp_bytelevel_dec", legacy,
                              [](auto& j) {
                                j["decoder"] = {{"type", "ByteLevel"}};
                              }),
                       {"decoder", "'ByteLevel'", "SentencePiece"}));
  EXPECT_TRUE(mentions(broken("sp_nodec", legacy, [](auto& j) { j["decoder"] = nullptr; }), {"decoder", "missing"}));
  EXPECT_TRUE(
      mentions(broken("sp_scheme", metaspace, [](auto& j) { j["pre_tokenizer"]["prepend_scheme"] = "sometimes"; }),
               {"pre_tokenizer.prepend_scheme", "'sometimes'"}));
  EXPECT_TRUE(mentions(broken("sp_repl", metaspace, [](auto& j) { j["pre_tokenizer"]["replacement"] = "ab"; }),
                       {"pre_tokenizer.replacement", "one character"}));
  EXPECT_TRUE(mentions(broken("sp_strip", legacy, [](auto& j) { j["decoder"]["decoders"][3]["start"] = -1; }),
                       {"decoder.decoders[3].start"}));
  EXPECT_TRUE(mentions(broken("sp_bl_fallback", legacy,
                              [](auto& j) {
                                j["normalizer"] = nullptr;
                                j["pre_tokenizer"] = {{"type", "ByteLevel"}};
                              }),
                       {"model.byte_fallback", "byte-level"}));
}
