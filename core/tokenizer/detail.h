// Internals of the tokenizer shared by its .cpp files: the GPT-2 byte <-> unicode mapping, lossy UTF-8 decoding,
// and the PCRE2-backed pre-tokenizer. Not installed API; tests may use it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
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

}  // namespace kvscope::tokenizer::detail
