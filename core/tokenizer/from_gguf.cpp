// fromGguf: the tokenizer.ggml.* metadata of a GGUF -> fromParts. Kept apart so the tokenizer builds and tests
// without the GGUF reader.
#include "model/gguf.h"
#include "tokenizer/tokenizer.h"

namespace kvscope::tokenizer {

namespace {

// The BOS, EOS, unknown and padding ids the metadata names (-1 where it names none), each checked against the
// vocabulary of `vocab` tokens.
SpecialIds specialIds(const model::GgufFile& gguf, std::size_t vocab) {
  const auto id = [&](const char* key) -> std::int32_t {
    const auto v = gguf.getInt(key);
    if (!v) return -1;
    if (*v < 0 || *v >= static_cast<std::int64_t>(vocab))
      throw TokenizerError(gguf.path() + ": " + key + ": " + std::to_string(*v) + " is outside the vocabulary of " +
                           std::to_string(vocab) + " tokens");
    return static_cast<std::int32_t>(*v);
  };
  return {id("tokenizer.ggml.bos_token_id"), id("tokenizer.ggml.eos_token_id"), id("tokenizer.ggml.unknown_token_id"),
          id("tokenizer.ggml.padding_token_id")};
}

// llama.cpp's SPM vocabulary (tokenizer.ggml.model "llama": Llama 2, Mistral, Gemma): tokens with their scores and
// types, tokenized as llama_vocab::tokenize does it: control, user-defined (and, parsing special tokens, unknown)
// tokens are matched in the raw text first; each remaining fragment gets a leading space where add_space_prefix
// (default on), its spaces become U+2581, and llm_tokenizer_spm merges it by score; BOS before (add_bos_token,
// default on), EOS after where add_eos_token. Decoding turns U+2581 back into spaces, <0xNN> tokens into their
// bytes, and drops the prefix's space.
Tokenizer sentencePieceFromGguf(const model::GgufFile& gguf, const std::vector<std::string>& tokens) {
  const std::string& path = gguf.path();
  const auto fail = [&](const std::string& key, const std::string& what) -> TokenizerError {
    return TokenizerError(path + ": " + key + ": " + what);
  };
  const auto scores = gguf.getFloatArray("tokenizer.ggml.scores");
  if (scores.size() != tokens.size())
    throw fail("tokenizer.ggml.scores",
               std::to_string(scores.size()) + " scores for " + std::to_string(tokens.size()) + " tokens");
  const auto types = gguf.getIntArray("tokenizer.ggml.token_type");
  if (!types.empty() && types.size() != tokens.size())
    throw fail("tokenizer.ggml.token_type",
               std::to_string(types.size()) + " types for " + std::to_string(tokens.size()) + " tokens");
  const std::string sp = "\xE2\x96\x81";  // U+2581
  TokenizerSpec spec;
  spec.source = path + " (tokenizer.ggml.*)";
  spec.mode = Mode::SentencePiece;
  spec.tokens = tokens;
  for (std::size_t id = 0; id < tokens.size(); ++id) {
    const std::int64_t t = types.empty() ? 1 : types[id];
    if (t < 1 || t > 6) throw fail("tokenizer.ggml.token_type", "value " + std::to_string(t) + " is not 1..6");
    spec.types.push_back(static_cast<TokenType>(t));
    if ((t == 2 || t == 3 || t == 4) && !tokens[id].empty()) {
      AddedToken a;
      a.id = static_cast<std::int32_t>(id);
      a.content = tokens[id];
      a.special = t != 4;  // control and unknown tokens only where special tokens are parsed, as llama.cpp
      spec.added.push_back(std::move(a));
    }
  }
  for (const double s : scores) spec.scores.push_back(static_cast<float>(s));
  if (gguf.getBool("tokenizer.ggml.add_space_prefix").value_or(true))
    spec.normalizer.push_back({NormalizerStep::Kind::Prepend, "", sp});
  spec.normalizer.push_back({NormalizerStep::Kind::Replace, " ", sp});
  spec.decoder = {{DecoderStep::Kind::Replace, sp, " "}, {DecoderStep::Kind::ByteFallback}, {DecoderStep::Kind::Fuse}};
  if (gguf.getBool("tokenizer.ggml.add_space_prefix").value_or(true)) {
    DecoderStep strip{DecoderStep::Kind::Strip, "", " "};
    strip.start = 1;
    spec.decoder.push_back(strip);
  }
  spec.byteFallback = true;
  spec.special = specialIds(gguf, tokens.size());
  if (gguf.getBool("tokenizer.ggml.add_bos_token").value_or(true) && spec.special.bos >= 0)
    spec.prefix.push_back(spec.special.bos);
  if (gguf.getBool("tokenizer.ggml.add_eos_token").value_or(false) && spec.special.eos >= 0)
    spec.suffix.push_back(spec.special.eos);
  spec.chatTemplate = gguf.getString("tokenizer.chat_template").value_or("");
  return Tokenizer(std::move(spec));
}

}  // namespace

Tokenizer fromGguf(const model::GgufFile& gguf) {
  const std::string& path = gguf.path();
  const auto fail = [&](const std::string& key, const std::string& what) -> TokenizerError {
    return TokenizerError(path + ": " + key + ": " + what);
  };
  const auto modelName = gguf.getString("tokenizer.ggml.model");
  if (!modelName) throw fail("tokenizer.ggml.model", "missing");
  if (*modelName != "gpt2" && *modelName != "llama")
    throw fail("tokenizer.ggml.model",
               "'" + *modelName + "' is not supported (gpt2: byte-level BPE; llama: SentencePiece by scores)");
  const auto tokens = gguf.getStringArray("tokenizer.ggml.tokens");
  if (tokens.empty()) throw fail("tokenizer.ggml.tokens", "missing or empty");
  if (*modelName == "llama") return sentencePieceFromGguf(gguf, tokens);
  const auto merges = gguf.getStringArray("tokenizer.ggml.merges");
  if (merges.empty()) throw fail("tokenizer.ggml.merges", "missing or empty");
  std::vector<std::int32_t> types;
  for (const auto t : gguf.getIntArray("tokenizer.ggml.token_type")) {
    if (t < 1 || t > 6) throw fail("tokenizer.ggml.token_type", "value " + std::to_string(t) + " is not 1..6");
    types.push_back(static_cast<std::int32_t>(t));
  }
  // Without a pre-tokenizer name llama.cpp falls back to the GPT-2 regex; so do we.
  const std::string pre = gguf.getString("tokenizer.ggml.pre").value_or("gpt2");
  const SpecialIds special = specialIds(gguf, tokens.size());
  const bool addBos = gguf.getBool("tokenizer.ggml.add_bos_token").value_or(false);
  const bool addEos = gguf.getBool("tokenizer.ggml.add_eos_token").value_or(false);
  TokenizerSpec spec;
  try {
    spec = specFromParts(tokens, types, merges, pre, special, addBos, addEos, path);
  } catch (const TokenizerError& e) {
    throw TokenizerError(std::string(e.what()) + " (tokenizer.ggml.*)");
  }
  spec.chatTemplate = gguf.getString("tokenizer.chat_template").value_or("");
  return Tokenizer(std::move(spec));
}

}  // namespace kvscope::tokenizer
