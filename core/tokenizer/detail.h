// Internals of the tokenizer shared by its .cpp files: the GPT-2 byte <-> unicode mapping, lossy UTF-8 decoding,
// the PCRE2-backed pre-tokenizer and the SentencePiece-style pieces. Not installed API; tests may use it.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace kvscope::tokenizer::detail {

/// GPT-2's byte -> printable code point table (bytes_to_unicode): UTF-8 spelling of the code point for each byte.
const std::string& byteToUnicode(std::uint8_t byte);
/// The byte a code point stands for in that table, or -1 when the code point is not one of the 256.
int unicodeToByte(char32_t cp);
/// Bytes -> their byte-level spelling ("Hello world" -> "HelloĠworld").
std::string toByteLevel(std::string_view bytes);
/// A vocabulary spelling -> bytes. Like tokenizers' ByteLevel decoder: when any character is outside the table the
/// token's own UTF-8 is returned unchanged.
std::string fromByteLevel(std::string_view spelled);

/// Decodes one UTF-8 sequence at s[i]: returns its length (1..4) and sets cp, or returns 0 when the bytes there are
/// not a valid sequence; then `bad` is the length of the maximal invalid subpart (Unicode's "maximal subpart"
/// rule, the one Rust's from_utf8_lossy follows).
int decodeUtf8(std::string_view s, std::size_t i, char32_t& cp, int& bad);
/// Appends `bytes` to out with every maximal invalid subpart replaced by U+FFFD (= String::from_utf8_lossy).
void appendUtf8Lossy(std::string& out, std::string_view bytes);
void appendUtf8(std::string& out, char32_t cp);
/// Unicode White_Space (what Rust's char::is_whitespace and Oniguruma's \s test).
bool isWhiteSpace(char32_t cp);

/// The Hugging Face (Oniguruma) spelling of each preset's split regexes, applied in order with "Isolated" behaviour.
std::vector<std::string> presetRegexes(Preset preset);
/// Rewrites an Oniguruma pattern for PCRE2: \s and \S become the explicit White_Space set, since PCRE2's UCP \s
/// also matches U+180E, which Oniguruma (and Unicode since 6.3) does not count as space.
std::string toPcrePattern(std::string_view onigPattern);

/// PCRE2 match data, match context and JIT stack for one thread's run of matches (made once per encode call).
struct MatchScratch {
  MatchScratch();
  ~MatchScratch();
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;
  void* matchData = nullptr;
  void* context = nullptr;
  void* jitStack = nullptr;
};

/// One compiled pattern; thread-safe to share (each match call brings its own match data).
class Regex {
 public:
  explicit Regex(const std::string& onigPattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  /// Splits `text` with Isolated behaviour: every match and every non-empty gap between matches is a piece.
  /// Invalid UTF-8 never matches (PCRE2_MATCH_INVALID_UTF), so such bytes end up in gaps.
  void split(std::string_view text, std::vector<std::string_view>& out, MatchScratch& scratch) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

/// A chain of split regexes (a preset).
class PreTokenizer {
 public:
  explicit PreTokenizer(Preset preset);
  /// Appends the pieces of `text` to out (views into text).
  void split(std::string_view text, std::vector<std::string_view>& out, MatchScratch& scratch) const;
  Preset preset() const { return preset_; }

 private:
  Preset preset_;
  std::vector<std::unique_ptr<Regex>> stages_;
};

// ---- SentencePiece-style BPE (sentencepiece.cpp) ----------------------------------------------------------------

/// Every `pattern` in s (left to right, not overlapping) -> `content`; s itself when pattern is empty.
std::string replaceAll(std::string_view s, std::string_view pattern, std::string_view content);
/// The normalizer steps applied to `text` in order.
std::string normalize(const std::vector<NormalizerStep>& steps, std::string_view text);
/// Metaspace pre-tokenization of one piece of text between added tokens. `atStart`: the piece starts the input
/// (offset 0, what PrependScheme::First tests). The transformed text goes to `buf`; `out` gets views into it.
void metaspaceSplit(const MetaspaceSpec& ms, std::string_view text, bool atStart, std::string& buf,
                    std::vector<std::string_view>& out);
/// The byte a token stands for in tokenizers' ByteFallback decoder ("<0x41>", "<0xe9>"), or -1.
int byteFallbackValue(std::string_view token);
/// The "<0xNN>" spelling byte_fallback looks up (upper-case hex, as tokenizers formats it).
std::string byteFallbackToken(std::uint8_t byte);

/// The symbols BPE starts from in SentencePiece mode (tokenizers' BPE::merge_word before merging): each character's
/// own token (charIds); else, with byteFallback, its UTF-8 bytes as <0xNN> tokens when all of them exist; else
/// unk (-1: dropped), consecutive ones fused into one when fuseUnk. As in tokenizers, a pending unk is written only
/// before the next character that has a token, or at the end (so byte-fallback tokens can come before it). Bytes
/// that are not valid UTF-8 count as one-byte characters.
void sentencePieceSymbols(std::string_view word, const std::unordered_map<char32_t, std::int32_t>& charIds,
                          const std::array<std::int32_t, 256>& byteTokens, bool byteFallback, std::int32_t unk,
                          bool fuseUnk, std::vector<std::int32_t>& out);

/// Runs the decoder steps over the token strings and concatenates the result (no steps: joined with ' ').
std::string runDecoder(const std::vector<DecoderStep>& steps, std::vector<std::string> tokens);
/// What one token stands for alone, for streaming: the byte of a <0xNN> token when the chain has ByteFallback,
/// else the token with the chain's Replace and Metaspace substitutions (the replacement as a space).
std::string sentencePieceTokenText(const std::vector<DecoderStep>& steps, const std::string& token);

}  // namespace kvscope::tokenizer::detail
