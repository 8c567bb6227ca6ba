// SentencePiece-style BPE pieces (see detail.h): normalizer, Metaspace pre-tokenizer, byte-fallback symbols and the
// decoder chain, each written after its Hugging Face tokenizers counterpart (normalizers/{prepend,replace}.rs,
// pre_tokenizers/metaspace.rs, models/bpe/model.rs merge_word, decoders/{byte_fallback,fuse,strip}.rs).
#include "tokenizer/detail.h"

namespace kvscope::tokenizer::detail {

namespace {

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

int hexDigit(char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                : -1;
}

// The characters of s (UTF-8; an invalid byte is a character of its own) as views.
std::vector<std::string_view> chars(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    int bad = 0;
    const int n = decodeUtf8(s, i, cp, bad);
    const std::size_t len = n > 0 ? static_cast<std::size_t>(n) : 1;
    out.push_back(s.substr(i, len));
    i += len;
  }
  return out;
}

bool isValidUtf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    int bad = 0;
    const int n = decodeUtf8(s, i, cp, bad);
    if (n == 0) return false;
    i += static_cast<std::size_t>(n);
  }
  return true;
}

// decoders/byte_fallback.rs: a run of byte tokens becomes one string when valid UTF-8, else one U+FFFD per byte.
std::vector<std::string> byteFallback(std::vector<std::string> tokens) {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  std::string run;
  std::size_t runLen = 0;
  const auto flush = [&] {
    if (runLen == 0) return;
    if (isValidUtf8(run)) {
      out.push_back(run);
    } else {
      for (std::size_t k = 0; k < runLen; ++k) out.emplace_back(kReplacementChar);
    }
    run.clear();
    runLen = 0;
  };
  for (auto& t : tokens) {
    const int b = byteFallbackValue(t);
    if (b >= 0) {
      run.push_back(static_cast<char>(b));
      ++runLen;
    } else {
      flush();
      out.push_back(std::move(t));
    }
  }
  flush();
  return out;
}

// decoders/strip.rs: up to `start` leading and `stop` trailing `content` characters off.
std::string strip(const std::string& token, std::string_view content, std::size_t start, std::size_t stop) {
  const auto cs = chars(token);
  std::size_t begin = 0, end = cs.size();
  while (begin < start && begin < end && cs[begin] == content) ++begin;
  for (std::size_t k = 0; k < stop && end > begin && cs[end - 1] == content; ++k) --end;
  std::string out;
  for (std::size_t k = begin; k < end; ++k) out += cs[k];
  return out;
}

}  // namespace

std::string replaceAll(std::string_view s, std::string_view pattern, std::string_view content) {
  if (pattern.empty()) return std::string(s);
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  for (std::size_t hit; (hit = s.find(pattern, i)) != std::string_view::npos; i = hit + pattern.size()) {
    out.append(s.substr(i, hit - i));
    out.append(content);
  }
  out.append(s.substr(i));
  return out;
}

std::string normalize(const std::vector<NormalizerStep>& steps, std::string_view text) {
  std::string s(text);
  for (const auto& st : steps) {
    if (st.kind == NormalizerStep::Kind::Prepend) {
      if (!s.empty()) s.insert(0, st.content);
    } else {
      s = replaceAll(s, st.pattern, st.content);
    }
  }
  return s;
}

void metaspaceSplit(const MetaspaceSpec& ms, std::string_view text, bool atStart, std::string& buf,
                    std::vector<std::string_view>& out) {
  buf = replaceAll(text, " ", ms.replacement);
  if (buf.empty()) return;  // tokenizers' pre-tokenizer leaves no piece of an empty text
  const bool startsWith = buf.compare(0, ms.replacement.size(), ms.replacement) == 0;
  const bool prepend = !startsWith && (ms.prependScheme == PrependScheme::Always ||
                                       (ms.prependScheme == PrependScheme::First && atStart));
  if (prepend) buf.insert(0, ms.replacement);
  const std::string_view all(buf);
  if (!ms.split || ms.replacement.empty()) {
    out.push_back(all);
    return;
  }
  // MergedWithNext: a cut before every replacement.
  std::size_t begin = 0;
  for (std::size_t at = all.find(ms.replacement, 1); at != std::string_view::npos;
       at = all.find(ms.replacement, at + ms.replacement.size())) {
    if (at > begin) out.push_back(all.substr(begin, at - begin));
    begin = at;
  }
  out.push_back(all.substr(begin));
}

int byteFallbackValue(std::string_view t) {
  // u8::from_str_radix(&token[3..5], 16): two hex digits, or '+' and one.
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  const int hi = hexDigit(t[3]), lo = hexDigit(t[4]);
  if (lo < 0) return -1;
  if (t[3] == '+') return lo;
  return hi < 0 ? -1 : hi * 16 + lo;
}

std::string byteFallbackToken(std::uint8_t byte) {
  constexpr const char* kHex = "0123456789ABCDEF";
  return std::string("<0x") + kHex[byte >> 4] + kHex[byte & 15] + ">";
}

void sentencePieceSymbols(std::string_view word, const std::unordered_map<char32_t, std::int32_t>& charIds,
                          const std::array<std::int32_t, 256>& byteTokens, bool byteFallback, std::int32_t unk,
                          bool fuseUnk, std::vector<std::int32_t>& out) {
  bool pending = false;  // an unk not yet written
  for (std::size_t i = 0; i < word.size();) {
    char32_t cp = 0;
    int bad = 0;
    const int n = decodeUtf8(word, i, cp, bad);
    const std::size_t len = n > 0 ? static_cast<std::size_t>(n) : 1;
    const std::string_view ch = word.substr(i, len);
    i += len;
    if (n > 0) {
      if (const auto it = charIds.find(cp); it != charIds.end()) {
        if (pending) out.push_back(unk);
        pending = false;
        out.push_back(it->second);
        continue;
      }
    }
    if (byteFallback) {
      bool all = true;
      for (const char c : ch) all = all && byteTokens[static_cast<std::uint8_t>(c)] >= 0;
      if (all) {
        for (const char c : ch) out.push_back(byteTokens[static_cast<std::uint8_t>(c)]);
        continue;  // as tokenizers: a pending unk stays pending
      }
    }
    if (unk < 0) continue;
    if (pending && !fuseUnk) out.push_back(unk);
    pending = true;
  }
  if (pending) out.push_back(unk);
}

std::string runDecoder(const std::vector<DecoderStep>& steps, std::vector<std::string> tokens) {
  using K = DecoderStep::Kind;
  if (steps.empty()) {
    std::string out;
    for (std::size_t k = 0; k < tokens.size(); ++k) out += (k ? " " : "") + tokens[k];
    return out;
  }
  for (const auto& st : steps) {
    switch (st.kind) {
      case K::Replace:
        for (auto& t : tokens) t = replaceAll(t, st.pattern, st.content);
        break;
      case K::ByteFallback:
        tokens = byteFallback(std::move(tokens));
        break;
      case K::Fuse: {
        std::string all;
        for (const auto& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case K::Strip:
        for (auto& t : tokens) t = strip(t, st.content, st.start, st.stop);
        break;
      case K::Metaspace:
        for (std::size_t k = 0; k < tokens.size(); ++k)
          tokens[k] = replaceAll(tokens[k], st.pattern, k == 0 && st.prependScheme != PrependScheme::Never ? "" : " ");
        break;
    }
  }
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

std::string sentencePieceTokenText(const std::vector<DecoderStep>& steps, const std::string& token) {
  std::string t = token;
  for (const auto& st : steps) {
    if (st.kind == DecoderStep::Kind::ByteFallback) {
      if (const int b = byteFallbackValue(t); b >= 0) return std::string(1, static_cast<char>(b));
    } else if (st.kind == DecoderStep::Kind::Replace) {
      t = replaceAll(t, st.pattern, st.content);
    } else if (st.kind == DecoderStep::Kind::Metaspace) {
      t = replaceAll(t, st.pattern, " ");
    }
  }
  return t;
}

}  // namespace kvscope::tokenizer::detail
