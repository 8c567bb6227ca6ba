// Tokenizer: vocabulary checks, added-token matching, BPE, decoding (both modes). fromParts and ChatML: parts.cpp.
#include "tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <functional>
#include <mutex>
#include <optional>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "tokenizer/detail.h"

namespace kvscope::tokenizer {

namespace {

constexpr std::size_t kMaxCachedPiece = 256;  // longer pieces are rare and would bloat the cache
constexpr std::size_t kMaxCacheEntries = 1 << 17;

std::uint64_t pairKey(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

// "<0x0A>" -> 10; -1 when the token is not spelled that way.
int byteTokenValue(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  int v = 0;
  for (int k = 3; k < 5; ++k) {
    const char c = t[k];
    v = v * 16 + (c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                         : -1000);
  }
  return v >= 0 ? v : -1;
}

std::string quoted(std::string_view s) {
  return "'" + std::string(s) + "'";
}

}  // namespace

struct Tokenizer::Impl {
  explicit Impl(Preset p) : pre(p) {}

  std::string source;
  std::vector<std::string> tokens;  // id -> spelling
  std::vector<TokenType> types;
  std::vector<std::string> bytes;                       // id -> decoded bytes
  std::vector<std::uint8_t> special, added, addedOnly;  // addedOnly: not in the model vocabulary
  std::unordered_map<std::string, std::int32_t> vocab;  // spelling (and added text) -> id
  std::unordered_map<std::uint64_t, std::pair<std::int32_t, std::int32_t>> ranks;  // (a, b) -> (rank, merged)
  std::array<std::int32_t, 256> byteIds{};
  std::vector<AddedToken> addedTokens;
  std::vector<std::string> patterns;  // per added token: the text matched (normalized content when normalized)
  // Per pass (0: non-normalized, 1: normalized), per first byte: added tokens, longest first.
  std::array<std::array<std::vector<std::int32_t>, 256>, 2> byFirstByte;
  std::array<bool, 2> passUsed{false, false};
  detail::PreTokenizer pre;
  SpecialIds sp;
  std::vector<std::int32_t> prefix, suffix;
  bool ignoreMerges = false;
  std::int32_t bpeUnk = -1;
  bool fuseUnk = false;
  std::string chatTemplate;

  // SentencePiece mode
  Mode mode = Mode::ByteLevel;
  std::vector<NormalizerStep> normalizer;
  std::optional<MetaspaceSpec> metaspace;
  std::vector<DecoderStep> decoder;
  bool byteFallback = false;
  std::vector<float> scores;                           // llama.cpp's SPM merges by score (empty: merges by rank)
  std::unordered_map<char32_t, std::int32_t> charIds;  // one-character model tokens
  std::array<std::int32_t, 256> fallbackIds{};         // <0xNN> model tokens, -1 when missing
  std::vector<std::string> decodeText;                 // id -> the string the decoder chain sees ("" = none)
  std::unordered_set<std::string> specialContents;     // what decode(skipSpecial) drops (by string, as tokenizers)

  mutable std::mutex cacheMutex;
  mutable std::unordered_map<std::string, std::vector<std::int32_t>> cache;

  struct Segment {
    std::string_view text;
    std::int32_t id;  // >= 0: an added token
  };

  void matchAdded(std::string_view text, int pass, bool parseSpecial, std::vector<Segment>& out) const;
  // The BPE words of one piece of text between added tokens; `atStart`: it starts the input.
  void words(std::string_view text, bool atStart, std::vector<std::string_view>& out, std::string& buf,
             std::optional<detail::MatchScratch>& scratch) const;
  void bpe(std::string_view piece, std::vector<std::int32_t>& out) const;
  std::vector<std::int32_t> bpeCompute(std::string_view piece) const;
  std::vector<std::int32_t> spmCompute(std::string_view piece) const;
  void checkId(std::int32_t id, const char* what) const {
    if (id < -1 || id >= static_cast<std::int32_t>(tokens.size()))
      throw TokenizerError(source + ": " + what + " id " + std::to_string(id) + " is outside the vocabulary of " +
                           std::to_string(tokens.size()) + " tokens");
  }
};

Tokenizer::Tokenizer(TokenizerSpec spec) : impl_(std::make_shared<Impl>(spec.preset)) {
  Impl& m = *impl_;
  m.source = std::move(spec.source);
  if (spec.tokens.empty()) throw TokenizerError(m.source + ": the vocabulary is empty");
  if (!spec.types.empty() && spec.types.size() != spec.tokens.size())
    throw TokenizerError(m.source + ": " + std::to_string(spec.types.size()) + " token types for " +
                         std::to_string(spec.tokens.size()) + " tokens");
  m.tokens = std::move(spec.tokens);
  m.types = spec.types.empty() ? std::vector<TokenType>(m.tokens.size(), TokenType::Normal) : std::move(spec.types);

  // Added tokens may lie beyond the model vocabulary (tokenizer.json): grow it.
  for (const auto& a : spec.added) {
    if (a.id < 0 || a.id > (1 << 24))
      throw TokenizerError(m.source + ": added token " + quoted(a.content) + " has id " + std::to_string(a.id));
    if (a.content.empty())
      throw TokenizerError(m.source + ": added token " + std::to_string(a.id) + " has empty content");
    if (a.id >= static_cast<std::int32_t>(m.tokens.size())) {
      m.tokens.resize(a.id + 1);
      m.types.resize(a.id + 1, TokenType::Unused);
    }
  }
  const auto n = static_cast<std::int32_t>(m.tokens.size());
  // Later duplicates win, like building a dict / HashMap from the list.
  for (std::int32_t id = 0; id < n; ++id)
    if (!m.tokens[id].empty()) m.vocab[m.tokens[id]] = id;

  for (std::size_t r = 0; r < spec.merges.size(); ++r) {
    const auto& [a, b] = spec.merges[r];
    const auto ia = m.vocab.find(a), ib = m.vocab.find(b), ic = m.vocab.find(a + b);
    const char* missing = ia == m.vocab.end()   ? "its first part"
                          : ib == m.vocab.end() ? "its second part"
                          : ic == m.vocab.end() ? "the merged token"
                                                : nullptr;
    if (missing != nullptr)
      throw TokenizerError(fmt::format("{}: merge {} ({}): {} is not in the vocabulary", m.source, r,
                                       quoted(fmt::format("{} {}", a, b)), missing));
    m.ranks[pairKey(ia->second, ib->second)] = {static_cast<std::int32_t>(r), ic->second};
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = m.vocab.find(detail::byteToUnicode(static_cast<std::uint8_t>(b)));
    m.byteIds[b] = it == m.vocab.end() ? -1 : it->second;
  }

  m.mode = spec.mode;
  m.fuseUnk = spec.fuseUnk;
  m.special.assign(n, 0);
  m.added.assign(n, 0);
  m.addedOnly.assign(n, 0);
  for (const auto& a : spec.added)
    if (m.tokens[a.id].empty()) m.addedOnly[a.id] = 1;
  if (m.mode == Mode::SentencePiece) {
    if (!spec.normalizer.empty() && spec.metaspace && spec.metaspace->prependScheme == PrependScheme::First)
      throw TokenizerError(m.source + ": a normalizer together with Metaspace prepend_scheme 'first' is not supported");
    if (spec.metaspace && spec.metaspace->replacement.empty())
      throw TokenizerError(m.source + ": the Metaspace replacement is empty");
    m.normalizer = std::move(spec.normalizer);
    m.metaspace = std::move(spec.metaspace);
    m.decoder = std::move(spec.decoder);
    m.byteFallback = spec.byteFallback;
    if (!spec.scores.empty() && spec.scores.size() != static_cast<std::size_t>(n))
      throw TokenizerError(m.source + ": " + std::to_string(spec.scores.size()) + " scores for " + std::to_string(n) +
                           " tokens");
    m.scores = std::move(spec.scores);
    m.fallbackIds.fill(-1);
    for (int b = 0; b < 256; ++b) {
      const auto it = m.vocab.find(detail::byteFallbackToken(static_cast<std::uint8_t>(b)));
      if (it == m.vocab.end() || m.addedOnly[it->second]) continue;
      m.fallbackIds[b] = it->second;
      if (m.byteFallback && m.types[it->second] == TokenType::Normal) m.types[it->second] = TokenType::Byte;
    }
    for (std::int32_t id = 0; id < n; ++id) {
      const std::string& t = m.tokens[id];
      char32_t cp = 0;
      int bad = 0;
      if (!t.empty() && !m.addedOnly[id] && detail::decodeUtf8(t, 0, cp, bad) == static_cast<int>(t.size()) &&
          m.vocab[t] == id)
        m.charIds[cp] = id;
    }
    m.decodeText = m.tokens;
  }
  m.bytes.resize(n);
  for (std::int32_t id = 0; id < n; ++id) {
    if (m.mode == Mode::SentencePiece) {
      m.bytes[id] = detail::sentencePieceTokenText(m.decoder, m.tokens[id]);
      continue;
    }
    const int bv = m.types[id] == TokenType::Byte ? byteTokenValue(m.tokens[id]) : -1;
    m.bytes[id] = bv >= 0 ? std::string(1, static_cast<char>(bv)) : detail::fromByteLevel(m.tokens[id]);
  }
  for (auto& a : spec.added) {
    m.special[a.id] = a.special ? 1 : 0;
    m.added[a.id] = 1;
    m.bytes[a.id] = a.content;
    if (m.tokens[a.id].empty()) m.tokens[a.id] = a.content;
    // tokenizers matches a normalized added token by its normalized content, and decodes it as that too.
    m.patterns.push_back(a.normalized && !m.normalizer.empty() ? detail::normalize(m.normalizer, a.content)
                                                               : a.content);
    if (m.mode == Mode::SentencePiece) {
      m.decodeText[a.id] = m.patterns.back();
      if (a.special) m.specialContents.insert(a.content);
    }
    if (m.types[a.id] == TokenType::Normal || m.types[a.id] == TokenType::Unused)
      m.types[a.id] = a.special ? TokenType::Control : TokenType::UserDefined;
    m.vocab.emplace(a.content, a.id);
    m.addedTokens.push_back(std::move(a));
  }
  for (std::size_t k = 0; k < m.addedTokens.size(); ++k) {
    const int pass = m.addedTokens[k].normalized ? 1 : 0;
    if (m.patterns[k].empty()) continue;
    m.byFirstByte[pass][static_cast<std::uint8_t>(m.patterns[k][0])].push_back(static_cast<std::int32_t>(k));
    m.passUsed[pass] = true;
  }
  for (auto& pass : m.byFirstByte)
    for (auto& list : pass)
      std::stable_sort(list.begin(), list.end(),
                       [&](std::int32_t x, std::int32_t y) { return m.patterns[x].size() > m.patterns[y].size(); });

  m.sp = spec.special;
  m.checkId(m.sp.bos, "BOS");
  m.checkId(m.sp.eos, "EOS");
  m.checkId(m.sp.unk, "UNK");
  m.checkId(m.sp.pad, "PAD");
  m.checkId(spec.bpeUnk, "unknown-character");
  for (const auto id : spec.prefix) m.checkId(id < 0 ? n : id, "prefix");
  for (const auto id : spec.suffix) m.checkId(id < 0 ? n : id, "suffix");
  m.prefix = std::move(spec.prefix);
  m.suffix = std::move(spec.suffix);
  m.ignoreMerges = spec.ignoreMerges;
  m.bpeUnk = spec.bpeUnk;
  m.chatTemplate = std::move(spec.chatTemplate);
}

// Leftmost match first, the longest among those starting there (tokenizers' Aho-Corasick LeftmostLongest).
void Tokenizer::Impl::matchAdded(std::string_view text, int pass, bool parseSpecial, std::vector<Segment>& out) const {
  if (!passUsed[pass]) {
    out.push_back({text, -1});
    return;
  }
  std::size_t done = 0, i = 0;
  while (i < text.size()) {
    const AddedToken* hit = nullptr;
    std::size_t len = 0;
    for (const auto k : byFirstByte[pass][static_cast<std::uint8_t>(text[i])]) {
      const auto& c = patterns[k];
      if (text.compare(i, c.size(), c) == 0) {
        hit = &addedTokens[k];
        len = c.size();
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    std::size_t s = i, e = i + len;
    i = e;
    if (hit->special && !parseSpecial) continue;  // found, then left as text (encode_special_tokens)
    if (hit->lstrip) {
      while (s > done) {
        std::size_t p = s - 1;
        while (p > done && (static_cast<std::uint8_t>(text[p]) & 0xC0) == 0x80) --p;
        char32_t cp = 0;
        int bad = 0;
        if (detail::decodeUtf8(text, p, cp, bad) == 0 || !detail::isWhiteSpace(cp)) break;
        s = p;
      }
    }
    if (hit->rstrip) {
      while (e < text.size()) {
        char32_t cp = 0;
        int bad = 0;
        const int len = detail::decodeUtf8(text, e, cp, bad);
        if (len == 0 || !detail::isWhiteSpace(cp)) break;
        e += static_cast<std::size_t>(len);
      }
      i = e;
    }
    if (s > done) out.push_back({text.substr(done, s - done), -1});
    out.push_back({text.substr(s, e - s), hit->id});
    done = e;
  }
  if (done < text.size()) out.push_back({text.substr(done), -1});
}

// llama.cpp's llm_tokenizer_spm_session::tokenize, step for step: symbols are the piece's UTF-8 characters; a bigram
// enters the queue when its text is a token (any token, as llama.cpp's text_to_token), with that token's score; the
// best (highest score, then leftmost) merges unless a neighbour merged first; then each symbol is resegmented: its
// token, else the two symbols its text was last merged from, else its bytes as <0xNN> tokens.
std::vector<std::int32_t> Tokenizer::Impl::spmCompute(std::string_view piece) const {
  struct Symbol {
    std::int32_t prev, next;
    std::size_t at, n;
  };
  std::vector<Symbol> sym;
  for (std::size_t i = 0; i < piece.size();) {
    const auto lead = static_cast<std::uint8_t>(piece[i]);
    // llama.cpp's unicode_len_utf8: the length the lead byte announces (1 for a continuation byte), cut at the end.
    const std::size_t len = lead < 0x80 ? 1 : lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    const std::size_t n = std::min(len, piece.size() - i);
    const auto k = static_cast<std::int32_t>(sym.size());
    i += n;
    sym.push_back({k - 1, i == piece.size() ? -1 : k + 1, i - n, n});
  }
  struct Bigram {
    std::int32_t left, right;
    float score;
    std::size_t size;
  };
  const auto worse = [](const Bigram& a, const Bigram& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
  std::unordered_map<std::string, std::pair<std::int32_t, std::int32_t>> revMerge;
  const auto text = [&](const Symbol& s) { return piece.substr(s.at, s.n); };
  const auto tryAdd = [&](std::int32_t left, std::int32_t right) {
    if (left == -1 || right == -1) return;
    const std::string t(piece.substr(sym[left].at, sym[left].n + sym[right].n));
    const auto it = vocab.find(t);
    if (it == vocab.end()) return;
    queue.push({left, right, scores[static_cast<std::size_t>(it->second)], t.size()});
    revMerge[t] = {left, right};
  };
  for (std::int32_t i = 1; i < static_cast<std::int32_t>(sym.size()); ++i) tryAdd(i - 1, i);
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    tryAdd(l.prev, b.left);
    tryAdd(b.left, l.next);
  }
  std::vector<std::int32_t> out;
  const std::function<void(const Symbol&)> resegment = [&](const Symbol& s) {
    const std::string t(text(s));
    if (const auto it = vocab.find(t); it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
    if (const auto m = revMerge.find(t); m != revMerge.end() &&
                                         sym[m->second.first].n + sym[m->second.second].n == t.size() &&
                                         sym[m->second.first].n > 0 && sym[m->second.second].n > 0) {
      resegment(sym[m->second.first]);
      resegment(sym[m->second.second]);
      return;
    }
    for (const char c : t) {
      const std::int32_t id = fallbackIds[static_cast<std::uint8_t>(c)];
      if (id >= 0) out.push_back(id);  // llama.cpp's byte_to_token fails on a vocabulary without the byte
    }
  };
  for (std::int32_t i = sym.empty() ? -1 : 0; i != -1; i = sym[i].next) resegment(sym[i]);
  return out;
}

std::vector<std::int32_t> Tokenizer::Impl::bpeCompute(std::string_view piece) const {
  if (!scores.empty()) return spmCompute(piece);
  std::vector<std::int32_t> result;
  const bool sp = mode == Mode::SentencePiece;
  if (ignoreMerges) {
    const auto it = vocab.find(sp ? std::string(piece) : detail::toByteLevel(piece));
    if (it != vocab.end() && !addedOnly[it->second]) return {it->second};
  }
  std::vector<std::int32_t> start;
  start.reserve(piece.size());
  if (sp) {
    detail::sentencePieceSymbols(piece, charIds, fallbackIds, byteFallback, bpeUnk, fuseUnk, start);
  } else {
    bool prevUnk = false;
    for (const char c : piece) {
      std::int32_t id = byteIds[static_cast<std::uint8_t>(c)];
      const bool unk = id < 0;
      if (unk) id = (fuseUnk && prevUnk) ? -1 : bpeUnk;
      prevUnk = unk;
      if (id >= 0) start.push_back(id);  // no token for this byte and no unk: dropped, as tokenizers does
    }
  }
  struct Symbol {
    std::int32_t id, prev, next;
    bool alive;
  };
  std::vector<Symbol> sym;
  sym.reserve(start.size());
  for (const auto id : start) {
    const auto k = static_cast<std::int32_t>(sym.size());
    sym.push_back({id, k - 1, -1, true});
    if (k > 0) sym[k - 1].next = k;
  }
  if (sym.empty()) return result;

  struct Merge {
    std::int32_t rank, pos, id;
  };
  const auto later = [](const Merge& x, const Merge& y) { return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos; };
  std::priority_queue<Merge, std::vector<Merge>, decltype(later)> heap(later);
  const auto push = [&](std::int32_t pos) {
    const std::int32_t nx = sym[pos].next;
    if (nx < 0) return;
    const auto it = ranks.find(pairKey(sym[pos].id, sym[nx].id));
    if (it != ranks.end()) heap.push({it->second.first, pos, it->second.second});
  };
  for (std::int32_t k = 0; k + 1 < static_cast<std::int32_t>(sym.size()); ++k) push(k);
  while (!heap.empty()) {
    const Merge top = heap.top();
    heap.pop();
    Symbol& left = sym[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = sym[left.next];
    const auto it = ranks.find(pairKey(left.id, right.id));
    if (it == ranks.end() || it->second.second != top.id) continue;  // stale: a neighbour merged meanwhile
    left.id = top.id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) sym[left.next].prev = top.pos;
    if (left.prev >= 0) push(left.prev);
    push(top.pos);
  }
  for (std::int32_t k = 0; k >= 0; k = sym[k].next) result.push_back(sym[k].id);
  return result;
}

void Tokenizer::Impl::bpe(std::string_view piece, std::vector<std::int32_t>& out) const {
  const bool cacheable = piece.size() <= kMaxCachedPiece;
  if (cacheable) {
    std::lock_guard lock(cacheMutex);
    const auto it = cache.find(std::string(piece));
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  auto ids = bpeCompute(piece);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard lock(cacheMutex);
    if (cache.size() >= kMaxCacheEntries) cache.clear();
    cache.emplace(std::string(piece), std::move(ids));
  }
}

void Tokenizer::Impl::words(std::string_view text, bool atStart, std::vector<std::string_view>& out, std::string& buf,
                            std::optional<detail::MatchScratch>& scratch) const {
  if (mode == Mode::ByteLevel) {
    if (!scratch) scratch.emplace();
    pre.split(text, out, *scratch);
  } else if (metaspace) {
    detail::metaspaceSplit(*metaspace, text, atStart, buf, out);
  } else if (!text.empty()) {
    out.push_back(text);
  }
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool addSpecial, bool parseSpecial) const {
  const Impl& m = *impl_;
  std::vector<std::int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (addSpecial) out = m.prefix;
  // Added tokens over the raw text, then (each remaining piece normalized) the normalized ones, then BPE words.
  std::vector<Impl::Segment> first, second;
  m.matchAdded(text, 0, parseSpecial, first);
  std::optional<detail::MatchScratch> scratch;
  std::vector<std::string_view> pieces;
  std::string normalized, buf;
  for (const auto& s : first) {
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    std::string_view seg = s.text;
    if (!m.normalizer.empty()) {
      normalized = detail::normalize(m.normalizer, seg);
      seg = normalized;
    }
    second.clear();
    m.matchAdded(seg, 1, parseSpecial, second);
    for (const auto& t : second) {
      if (t.id >= 0) {
        out.push_back(t.id);
        continue;
      }
      pieces.clear();
      m.words(t.text, t.text.data() == text.data(), pieces, buf, scratch);
      for (const auto p : pieces) m.bpe(p, out);
    }
  }
  if (addSpecial) out.insert(out.end(), m.suffix.begin(), m.suffix.end());
  return out;
}

std::string Tokenizer::decode(const std::vector<std::int32_t>& ids, bool skipSpecial) const {
  const Impl& m = *impl_;
  if (m.mode == Mode::SentencePiece) {  // tokenizers' Tokenizer::decode: token strings through the decoder chain
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (const auto id : ids) {
      if (id < 0 || id >= static_cast<std::int32_t>(m.tokens.size()) || m.tokens[id].empty()) continue;
      const std::string& t = m.decodeText[id];
      if (skipSpecial && m.specialContents.count(t)) continue;
      tokens.push_back(t);
    }
    return detail::runDecoder(m.decoder, std::move(tokens));
  }
  std::string out, run;  // run: bytes of consecutive model tokens, made valid UTF-8 together
  for (const auto id : ids) {
    if (id < 0 || id >= static_cast<std::int32_t>(m.tokens.size())) continue;
    if (m.added[id]) {
      if (skipSpecial && m.special[id]) continue;
      detail::appendUtf8Lossy(out, run);
      run.clear();
      out += m.bytes[id];
    } else {
      run += m.bytes[id];
    }
  }
  detail::appendUtf8Lossy(out, run);
  return out;
}

std::string Tokenizer::tokenText(std::int32_t id) const {
  if (id < 0 || id >= vocabSize()) return {};
  return impl_->bytes[id];
}

std::int32_t Tokenizer::vocabSize() const {
  return static_cast<std::int32_t>(impl_->tokens.size());
}
std::int32_t Tokenizer::bosId() const {
  return impl_->sp.bos;
}
std::int32_t Tokenizer::eosId() const {
  return impl_->sp.eos;
}
std::int32_t Tokenizer::unkId() const {
  return impl_->sp.unk;
}
std::int32_t Tokenizer::padId() const {
  return impl_->sp.pad;
}
bool Tokenizer::addBos() const {
  return impl_->sp.bos >= 0 && !impl_->prefix.empty() && impl_->prefix.front() == impl_->sp.bos;
}
Preset Tokenizer::preset() const {
  return impl_->pre.preset();
}
Mode Tokenizer::mode() const {
  return impl_->mode;
}
const std::string& Tokenizer::chatTemplate() const {
  return impl_->chatTemplate;
}

std::optional<std::int32_t> Tokenizer::tokenId(std::string_view token) const {
  const auto it = impl_->vocab.find(std::string(token));
  if (it == impl_->vocab.end()) return std::nullopt;
  return it->second;
}

const std::string& Tokenizer::tokenString(std::int32_t id) const {
  if (id < 0 || id >= vocabSize())
    throw TokenizerError(impl_->source + ": token id " + std::to_string(id) + " is outside the vocabulary of " +
                         std::to_string(vocabSize()) + " tokens");
  return impl_->tokens[id];
}

TokenType Tokenizer::tokenType(std::int32_t id) const {
  tokenString(id);  // range check
  return impl_->types[id];
}

bool Tokenizer::isSpecial(std::int32_t id) const {
  return id >= 0 && id < vocabSize() && impl_->special[id];
}

std::vector<std::string> Tokenizer::preTokenize(std::string_view text) const {
  std::optional<detail::MatchScratch> scratch;
  std::vector<std::string_view> pieces;
  std::string buf;
  const std::string normalized = detail::normalize(impl_->normalizer, text);
  impl_->words(normalized, true, pieces, buf, scratch);
  return {pieces.begin(), pieces.end()};
}

}  // namespace kvscope::tokenizer
