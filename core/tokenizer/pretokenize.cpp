// Byte-level mapping, UTF-8 helpers and the PCRE2 pre-tokenizer (see detail.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <new>

#include "tokenizer/detail.h"

namespace kvscope::tokenizer::detail {

namespace {

struct ByteTable {
  std::array<std::string, 256> spelling;
  std::array<char32_t, 256> cp{};
  ByteTable() {
    // GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 take U+0100 onwards.
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      cp[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
      appendUtf8(spelling[b], cp[b]);
    }
  }
};

const ByteTable& table() {
  static const ByteTable t;
  return t;
}

// The White_Space set as the inside of a character class (Oniguruma's \s under Unicode).
constexpr std::string_view kWhiteSpaceClass =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// Spelled exactly as in the tokenizer.json files / transformers, so fromTokenizerJson can recognise them.
constexpr const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kDigit = R"(\p{N})";
constexpr const char* kLlama3 = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3})"
                                R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2 = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})"
                               R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// tiktoken's o200k (gpt-oss, GPT-4o; llama.cpp's gpt-4o pre-tokenizer quotes it as "the original regex"): words split
// at case changes with their contractions, numbers of up to three digits.
constexpr const char* kGpt4o =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string pcreMessage(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof buf) < 0) return "PCRE2 error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

const std::string& byteToUnicode(std::uint8_t byte) {
  return table().spelling[byte];
}

int unicodeToByte(char32_t cp) {
  if (cp < 256) {
    const bool printable = (cp >= '!' && cp <= '~') || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE);
    return printable ? static_cast<int>(cp) : -1;
  }
  if (cp >= 256 + 68) return -1;
  static const std::array<int, 68> back = [] {
    std::array<int, 68> a{};
    for (int b = 0; b < 256; ++b)
      if (table().cp[b] >= 256) a[table().cp[b] - 256] = b;
    return a;
  }();
  return back[cp - 256];
}

std::string toByteLevel(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) out += table().spelling[static_cast<std::uint8_t>(c)];
  return out;
}

std::string fromByteLevel(std::string_view spelled) {
  std::string out;
  out.reserve(spelled.size());
  for (std::size_t i = 0; i < spelled.size();) {
    char32_t cp = 0;
    int bad = 0;
    const int n = decodeUtf8(spelled, i, cp, bad);
    const int b = n > 0 ? unicodeToByte(cp) : -1;
    if (b < 0) return std::string(spelled);  // not a byte-level spelling: the token is its own text
    out.push_back(static_cast<char>(b));
    i += static_cast<std::size_t>(n);
  }
  return out;
}

int decodeUtf8(std::string_view s, std::size_t i, char32_t& cp, int& bad) {
  const auto at = [&](std::size_t k) { return static_cast<std::uint8_t>(s[k]); };
  const std::uint8_t b0 = at(i);
  bad = 1;
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  int len = 0;
  std::uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte (excludes overlongs and surrogates)
  if (b0 >= 0xC2 && b0 <= 0xDF)
    len = 2;
  else if (b0 >= 0xE0 && b0 <= 0xEF)
    len = 3, lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
  else if (b0 >= 0xF0 && b0 <= 0xF4)
    len = 4, lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
  else
    return 0;
  char32_t v = b0 & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (int k = 1; k < len; ++k) {
    if (i + k >= s.size()) return 0;
    const std::uint8_t b = at(i + k);
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return 0;
    v = (v << 6) | (b & 0x3F);
    bad = k + 1;
  }
  cp = v;
  return len;
}

void appendUtf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

void appendUtf8Lossy(std::string& out, std::string_view bytes) {
  std::size_t i = 0, run = 0;  // [run, i) is valid and not yet copied
  while (i < bytes.size()) {
    char32_t cp = 0;
    int bad = 0;
    const int n = decodeUtf8(bytes, i, cp, bad);
    if (n > 0) {
      i += static_cast<std::size_t>(n);
      continue;
    }
    out.append(bytes.substr(run, i - run));
    out += "\xEF\xBF\xBD";
    i += static_cast<std::size_t>(bad);
    run = i;
  }
  out.append(bytes.substr(run));
}

bool isWhiteSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::vector<std::string> presetRegexes(Preset preset) {
  switch (preset) {
    case Preset::Gpt2:
      return {kGpt2};
    case Preset::SmolLM:
      return {kDigit, kGpt2};
    case Preset::Llama3:
      return {kLlama3};
    case Preset::Qwen2:
      return {kQwen2};
    case Preset::Gpt4o:
      return {kGpt4o};
  }
  throw TokenizerError("unknown pre-tokenizer preset");
}

std::string toPcrePattern(std::string_view p) {
  std::string out;
  bool inClass = false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      if (e == 's') {
        out += inClass ? std::string(kWhiteSpaceClass) : "[" + std::string(kWhiteSpaceClass) + "]";
      } else if (e == 'S') {
        if (inClass)
          throw TokenizerError("pre-tokenizer regex /" + std::string(p) + "/: \\S inside [] is not supported");
        out += "[^" + std::string(kWhiteSpaceClass) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!inClass && c == '[') {
      inClass = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (inClass && c == ']') inClass = false;
    out += c;
  }
  return out;
}

// ---- Regex -------------------------------------------------------------------------------------------------------

Regex::Regex(const std::string& onigPattern) : pattern_(onigPattern) {
  const std::string p = toPcrePattern(onigPattern);
  int err = 0;
  PCRE2_SIZE offset = 0;
  // MATCH_INVALID_UTF: raw bytes are allowed in the subject; invalid sequences simply never match.
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &offset, nullptr);
  if (code == nullptr)
    throw TokenizerError("pre-tokenizer regex /" + onigPattern + "/: " + pcreMessage(err) + " at offset " +
                         std::to_string(offset));
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  code_ = code;
}

Regex::~Regex() {
  pcre2_code_free(static_cast<pcre2_code*>(code_));
}

MatchScratch::MatchScratch() {
  matchData = pcre2_match_data_create(1, nullptr);  // only the whole match (pair 0) is read
  context = pcre2_match_context_create(nullptr);
  // The default 32 KiB JIT stack is too small for backtracking over very long runs (e.g. 100 KB of spaces).
  jitStack = pcre2_jit_stack_create(std::size_t{32} << 10, std::size_t{16} << 20, nullptr);
  if (matchData == nullptr || context == nullptr || jitStack == nullptr) {
    pcre2_match_data_free(static_cast<pcre2_match_data*>(matchData));
    pcre2_match_context_free(static_cast<pcre2_match_context*>(context));
    pcre2_jit_stack_free(static_cast<pcre2_jit_stack*>(jitStack));
    throw std::bad_alloc();
  }
  pcre2_jit_stack_assign(static_cast<pcre2_match_context*>(context), nullptr, static_cast<pcre2_jit_stack*>(jitStack));
}

MatchScratch::~MatchScratch() {
  pcre2_match_data_free(static_cast<pcre2_match_data*>(matchData));
  pcre2_match_context_free(static_cast<pcre2_match_context*>(context));
  pcre2_jit_stack_free(static_cast<pcre2_jit_stack*>(jitStack));
}

void Regex::split(std::string_view text, std::vector<std::string_view>& out, MatchScratch& scratch) const {
  auto* code = static_cast<pcre2_code*>(code_);
  auto* md = static_cast<pcre2_match_data*>(scratch.matchData);
  auto* mc = static_cast<pcre2_match_context*>(scratch.context);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const std::size_t n = text.size();
  std::size_t start = 0, pos = 0;
  while (pos < n) {
    const int rc = pcre2_match(code, subject, n, pos, 0, md, mc);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) throw TokenizerError("pre-tokenizer regex /" + pattern_ + "/: " + pcreMessage(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const std::size_t ms = ov[0], me = ov[1];
    if (me <= ms) {  // an empty match cuts nothing: step over one character
      pos = ms + 1;
      while (pos < n && (static_cast<std::uint8_t>(text[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (ms > start) out.push_back(text.substr(start, ms - start));
    out.push_back(text.substr(ms, me - ms));
    start = pos = me;
  }
  if (start < n) out.push_back(text.substr(start));
}

// ---- PreTokenizer ------------------------------------------------------------------------------------------------

PreTokenizer::PreTokenizer(Preset preset) : preset_(preset) {
  for (const auto& r : presetRegexes(preset)) stages_.push_back(std::make_unique<Regex>(r));
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out, MatchScratch& scratch) const {
  std::vector<std::string_view> cur{text}, next;
  for (std::size_t s = 0; s < stages_.size(); ++s) {
    auto& dst = s + 1 == stages_.size() ? out : next;
    for (const auto piece : cur) stages_[s]->split(piece, dst, scratch);
    if (&dst == &next) {
      cur.swap(next);
      next.clear();
    }
  }
}

}  // namespace kvscope::tokenizer::detail
