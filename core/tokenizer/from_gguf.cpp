// fromGguf: the tokenizer.ggml.* metadata of a GGUF -> fromParts. Kept apart so the tokenizer builds and tests
// without the GGUF reader.
#include "model/gguf.h"
#include "tokenizer/tokenizer.h"

namespace kvscope::tokenizer {

Tokenizer fromGguf(const model::GgufFile& gguf) {
  const std::string& path = gguf.path();
  const auto fail = [&](const std::string& key, const std::string& what) -> TokenizerError {
    return TokenizerError(path + ": " + key + ": " + what);
  };
  const auto modelName = gguf.getString("tokenizer.ggml.model");
  if (!modelName) throw fail("tokenizer.ggml.model", "missing");
  if (*modelName != "gpt2")
    throw fail("tokenizer.ggml.model", "'" + *modelName + "' is not supported (only gpt2, byte-level BPE)");
  const auto tokens = gguf.getStringArray("tokenizer.ggml.tokens");
  if (tokens.empty()) throw fail("tokenizer.ggml.tokens", "missing or empty");
  const auto merges = gguf.getStringArray("tokenizer.ggml.merges");
  if (merges.empty()) throw fail("tokenizer.ggml.merges", "missing or empty");
  std::vector<std::int32_t> types;
  for (const auto t : gguf.getIntArray("tokenizer.ggml.token_type")) {
    if (t < 1 || t > 6) throw fail("tokenizer.ggml.token_type", "value " + std::to_string(t) + " is not 1..6");
    types.push_back(static_cast<std::int32_t>(t));
  }
  // Without a pre-tokenizer name llama.cpp falls back to the GPT-2 regex; so do we.
  const std::string pre = gguf.getString("tokenizer.ggml.pre").value_or("gpt2");
  const auto id = [&](const char* key) -> std::int32_t {
    const auto v = gguf.getInt(key);
    if (!v) return -1;
    if (*v < 0 || *v >= static_cast<std::int64_t>(tokens.size()))
      throw fail(key,
                 std::to_string(*v) + " is outside the vocabulary of " + std::to_string(tokens.size()) + " tokens");
    return static_cast<std::int32_t>(*v);
  };
  SpecialIds special{id("tokenizer.ggml.bos_token_id"), id("tokenizer.ggml.eos_token_id"),
                     id("tokenizer.ggml.unknown_token_id"), id("tokenizer.ggml.padding_token_id")};
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
