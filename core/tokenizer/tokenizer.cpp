// Tokenizer: vocabulary checks, added-token matching, BPE, decoding; fromParts; ChatML.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <mutex>
#include <queue>
#include <unordered_map>

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

// True when every character of `s` is one of the 256 byte-level characters (how a BPE vocabulary spells tokens).
bool isByteLevelSpelled(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    int bad = 0;
    const int n = detail::decodeUtf8(s, i, cp, bad);
    if (n == 0 || detail::unicodeToByte(cp) < 0) return false;
    i += static_cast<std::size_t>(n);
  }
  return true;
}

std::string quoted(std::string_view s) {
  return "'" + std::string(s) + "'";
}

}  // namespace

Preset presetFromName(std::string_view name) {
  if (name == "gpt2") return Preset::Gpt2;
  if (name == "smollm") return Preset::SmolLM;
  if (name == "llama3" || name == "llama-bpe" || name == "llama-v3") return Preset::Llama3;
  if (name == "qwen2") return Preset::Qwen2;
  throw TokenizerError("unknown pre-tokenizer " + quoted(name) + " (supported: gpt2, smollm, llama3, qwen2)");
}

const char* presetName(Preset preset) {
  switch (preset) {
    case Preset::Gpt2:
      return "gpt2";
    case Preset::SmolLM:
      return "smollm";
    case Preset::Llama3:
      return "llama3";
    case Preset::Qwen2:
      return "qwen2";
  }
  return "?";
}

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
  // Per pass (0: non-normalized, 1: normalized), per first byte: added tokens, longest first.
  std::array<std::array<std::vector<std::int32_t>, 256>, 2> byFirstByte;
  std::array<bool, 2> passUsed{false, false};
  detail::PreTokenizer pre;
  SpecialIds sp;
  std::vector<std::int32_t> prefix, suffix;
  bool ignoreMerges = false;
  std::int32_t bpeUnk = -1;
  std::string chatTemplate;

  mutable std::mutex cacheMutex;
  mutable std::unordered_map<std::string, std::vector<std::int32_t>> cache;

  struct Segment {
    std::string_view text;
    std::int32_t id;  // >= 0: an added token
  };

  void matchAdded(std::string_view text, int pass, bool parseSpecial, std::vector<Segment>& out) const;
  void bpe(std::string_view piece, std::vector<std::int32_t>& out) const;
  std::vector<std::int32_t> bpeCompute(std::string_view piece) const;
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
      throw TokenizerError(m.source + ": merge " + std::to_string(r) + " (" + quoted(a + " " + b) + "): " + missing +
                           " is not in the vocabulary");
    m.ranks[pairKey(ia->second, ib->second)] = {static_cast<std::int32_t>(r), ic->second};
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = m.vocab.find(detail::byteToUnicode(static_cast<std::uint8_t>(b)));
    m.byteIds[b] = it == m.vocab.end() ? -1 : it->second;
  }

  m.special.assign(n, 0);
  m.added.assign(n, 0);
  m.addedOnly.assign(n, 0);
  m.bytes.resize(n);
  for (std::int32_t id = 0; id < n; ++id) {
    const int bv = m.types[id] == TokenType::Byte ? byteTokenValue(m.tokens[id]) : -1;
    m.bytes[id] = bv >= 0 ? std::string(1, static_cast<char>(bv)) : detail::fromByteLevel(m.tokens[id]);
  }
  for (auto& a : spec.added) {
    m.special[a.id] = a.special ? 1 : 0;
    m.added[a.id] = 1;
    m.bytes[a.id] = a.content;
    if (m.tokens[a.id].empty()) {
      m.tokens[a.id] = a.content;
      m.addedOnly[a.id] = 1;
    }
    if (m.types[a.id] == TokenType::Normal || m.types[a.id] == TokenType::Unused)
      m.types[a.id] = a.special ? TokenType::Control : TokenType::UserDefined;
    m.vocab.emplace(a.content, a.id);
    m.addedTokens.push_back(std::move(a));
  }
  for (std::size_t k = 0; k < m.addedTokens.size(); ++k) {
    const auto& a = m.addedTokens[k];
    const int pass = a.normalized ? 1 : 0;
    m.byFirstByte[pass][static_cast<std::uint8_t>(a.content[0])].push_back(static_cast<std::int32_t>(k));
    m.passUsed[pass] = true;
  }
  for (auto& pass : m.byFirstByte)
    for (auto& list : pass)
      std::stable_sort(list.begin(), list.end(), [&](std::int32_t x, std::int32_t y) {
        return m.addedTokens[x].content.size() > m.addedTokens[y].content.size();
      });

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
    for (const auto k : byFirstByte[pass][static_cast<std::uint8_t>(text[i])]) {
      const auto& c = addedTokens[k].content;
      if (text.compare(i, c.size(), c) == 0) {
        hit = &addedTokens[k];
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    std::size_t s = i, e = i + hit->content.size();
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

std::vector<std::int32_t> Tokenizer::Impl::bpeCompute(std::string_view piece) const {
  std::vector<std::int32_t> result;
  if (ignoreMerges) {
    const auto it = vocab.find(detail::toByteLevel(piece));
    if (it != vocab.end() && !addedOnly[it->second]) return {it->second};
  }
  struct Symbol {
    std::int32_t id, prev, next;
    bool alive;
  };
  std::vector<Symbol> sym;
  sym.reserve(piece.size());
  for (const char c : piece) {
    std::int32_t id = byteIds[static_cast<std::uint8_t>(c)];
    if (id < 0) id = bpeUnk;
    if (id < 0) continue;  // no token for this byte and no unk: dropped, as tokenizers does
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

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool addSpecial, bool parseSpecial) const {
  const Impl& m = *impl_;
  std::vector<std::int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (addSpecial) out = m.prefix;
  std::vector<Impl::Segment> first, segments;
  m.matchAdded(text, 0, parseSpecial, first);
  for (const auto& s : first) {
    if (s.id >= 0)
      segments.push_back(s);
    else
      m.matchAdded(s.text, 1, parseSpecial, segments);
  }
  detail::MatchScratch scratch;
  std::vector<std::string_view> pieces;
  for (const auto& s : segments) {
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    pieces.clear();
    m.pre.split(s.text, pieces, scratch);
    for (const auto p : pieces) m.bpe(p, out);
  }
  if (addSpecial) out.insert(out.end(), m.suffix.begin(), m.suffix.end());
  return out;
}

std::string Tokenizer::decode(const std::vector<std::int32_t>& ids, bool skipSpecial) const {
  const Impl& m = *impl_;
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
  detail::MatchScratch scratch;
  std::vector<std::string_view> pieces;
  impl_->pre.split(text, pieces, scratch);
  return {pieces.begin(), pieces.end()};
}

// ---- fromParts ---------------------------------------------------------------------------------------------------

TokenizerSpec specFromParts(const std::vector<std::string>& tokens, const std::vector<std::int32_t>& tokenTypes,
                            const std::vector<std::string>& merges, std::string_view preset, const SpecialIds& special,
                            bool addBos, bool addEos, std::string source) {
  TokenizerSpec spec;
  spec.source = std::move(source);
  if (!tokenTypes.empty() && tokenTypes.size() != tokens.size())
    throw TokenizerError(spec.source + ": " + std::to_string(tokenTypes.size()) + " token types for " +
                         std::to_string(tokens.size()) + " tokens");
  try {
    spec.preset = presetFromName(preset);
  } catch (const TokenizerError& e) {
    throw TokenizerError(spec.source + ": " + e.what());
  }
  spec.tokens.reserve(tokens.size());
  spec.types.reserve(tokens.size());
  for (std::size_t id = 0; id < tokens.size(); ++id) {
    const std::int32_t t = tokenTypes.empty() ? 1 : tokenTypes[id];
    if (t < 1 || t > 6)
      throw TokenizerError(spec.source + ": token " + std::to_string(id) + " (" + quoted(tokens[id]) + ") has type " +
                           std::to_string(t) + ", not a GGUF token type (1..6)");
    const bool spelled = isByteLevelSpelled(tokens[id]);
    // As transformers' GGUF conversion: a token written as text is looked up by its byte-level spelling; control
    // tokens become special added tokens and user-defined ones plain added tokens -- but only those spelled in
    // the byte alphabet (others are llama.cpp mislabels that stay ordinary vocabulary entries).
    spec.tokens.push_back(spelled ? tokens[id] : detail::toByteLevel(tokens[id]));
    spec.types.push_back(static_cast<TokenType>(t));
    if (spelled && (t == 3 || t == 4) && !tokens[id].empty()) {
      AddedToken a;
      a.id = static_cast<std::int32_t>(id);
      a.content = tokens[id];
      a.special = t == 3;
      spec.added.push_back(std::move(a));
    }
  }
  spec.merges.reserve(merges.size());
  for (std::size_t r = 0; r < merges.size(); ++r) {
    const auto sp = merges[r].find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == merges[r].size() ||
        merges[r].find(' ', sp + 1) != std::string::npos)
      throw TokenizerError(spec.source + ": merge " + std::to_string(r) + " (" + quoted(merges[r]) +
                           ") is not two tokens separated by one space");
    spec.merges.emplace_back(merges[r].substr(0, sp), merges[r].substr(sp + 1));
  }
  spec.special = special;
  if (addBos) {
    if (special.bos < 0) throw TokenizerError(spec.source + ": add_bos is set but there is no BOS token id");
    spec.prefix.push_back(special.bos);
  }
  if (addEos) {
    if (special.eos < 0) throw TokenizerError(spec.source + ": add_eos is set but there is no EOS token id");
    spec.suffix.push_back(special.eos);
  }
  return spec;
}

Tokenizer fromParts(const std::vector<std::string>& tokens, const std::vector<std::int32_t>& tokenTypes,
                    const std::vector<std::string>& merges, std::string_view preset, const SpecialIds& special,
                    bool addBos, bool addEos, std::string source) {
  return Tokenizer(specFromParts(tokens, tokenTypes, merges, preset, special, addBos, addEos, std::move(source)));
}

// ---- ChatML ------------------------------------------------------------------------------------------------------

std::string applyChatML(const std::vector<std::pair<std::string, std::string>>& messages, bool addGenerationPrompt,
                        std::string_view defaultSystem) {
  std::string out;
  const auto turn = [&](std::string_view role, std::string_view content) {
    out += "<|im_start|>";
    out += role;
    out += '\n';
    out += content;
    out += "<|im_end|>\n";
  };
  // SmolLM2's template: {% if loop.first and messages[0]['role'] != 'system' %} -> the default system turn.
  if (!messages.empty() && messages.front().first != "system" && !defaultSystem.empty()) turn("system", defaultSystem);
  for (const auto& [role, content] : messages) turn(role, content);
  if (addGenerationPrompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace kvscope::tokenizer
