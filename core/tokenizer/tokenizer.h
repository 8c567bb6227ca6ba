// BPE tokenizer matching Hugging Face `tokenizers` id for id, in two modes: byte-level BPE (GPT-2 family: SmolLM,
// Llama 3, Qwen2) and SentencePiece-style BPE with byte fallback (Llama 2, Mistral 7B, TinyLlama). Built from plain
// parts (fromParts, what a GGUF holds), from a GGUF (fromGguf) or from a Hugging Face tokenizer.json
// (fromTokenizerJson). No torch, no Qt: pre-tokenizer regexes run on PCRE2.
//
// Encoding follows tokenizers' pipeline: added tokens are cut out of the text first (leftmost, then longest match;
// non-normalized tokens over the whole text, then normalized ones over what is left), the rest is split by the
// preset's regexes (Isolated behaviour), each piece is mapped to its byte-level spelling and merged by BPE (lowest
// rank first, leftmost on ties). Decoding concatenates token bytes and replaces invalid UTF-8 like
// String::from_utf8_lossy; an added token is written as its text and ends the run of bytes before it.
//
// SentencePiece mode differs after the added tokens are cut out: each remaining piece of text is normalized
// (Prepend "▁", Replace " " -> "▁": the older Llama 2 layout) or pre-tokenized by Metaspace (the newer layout), then
// BPE starts from characters (not bytes): a character that is not a token becomes its UTF-8 bytes as <0xNN> tokens
// (byte_fallback) or the unknown token. Decoding runs tokenizers' decoder chain (Replace, ByteFallback, Fuse, Strip,
// Metaspace) over the token strings, added tokens included.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/error.h"

namespace kvscope::model {
class GgufFile;
}

namespace kvscope::tokenizer {

/// Bad or unsupported tokenizer data; the message names the source (file, key) and the problem.
class TokenizerError : public Error {
 public:
  explicit TokenizerError(const std::string& what) : Error(ErrorCode::BadFile, what) {}
};

/// GGUF token types (tokenizer.ggml.token_type).
enum class TokenType : std::int32_t { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

/// Pre-tokenizer presets, as Hugging Face tokenizers splits text for each model family:
///   Gpt2    the GPT-2 regex (ByteLevel use_regex=true)
///   SmolLM  each \p{N} isolated first (Digits individual_digits=true), then the GPT-2 regex (SmolLM/StarCoder)
///   Llama3  Llama 3's Split regex (\p{N}{1,3}, case-insensitive contractions)
///   Qwen2   Qwen2's Split regex (single \p{N})
enum class Preset { Gpt2, SmolLM, Llama3, Qwen2, Gpt4o };
/// "gpt2", "smollm", "llama3" (also llama.cpp's "llama-bpe", "llama-v3"), "qwen2", "gpt-4o" (o200k: gpt-oss, also
/// llama.cpp's "llama4"). TokenizerError otherwise.
Preset presetFromName(std::string_view name);
const char* presetName(Preset preset);

/// How text becomes model symbols and back:
///   ByteLevel      GPT-2 byte-level BPE: every byte is a printable character; a Preset pre-tokenizer; ByteLevel
///                  decoding (bytes concatenated, invalid UTF-8 replaced)
///   SentencePiece  SentencePiece-style BPE (Llama 2, Mistral): characters are symbols as they are, with byte fallback;
///                  spaces become "▁" by the normalizer or a Metaspace pre-tokenizer; decoding by the decoder chain
enum class Mode { ByteLevel, SentencePiece };
const char* modeName(Mode mode);  ///< "byte-level", "sentencepiece"

/// tokenizers' Metaspace prepend_scheme.
enum class PrependScheme { Always, First, Never };

/// A normalizer step (tokenizers' Prepend and Replace with a String pattern). Steps run in order on each piece of text
/// between added tokens. Prepend puts `content` before non-empty text; Replace replaces each `pattern` (left to
/// right, not overlapping) with `content`.
struct NormalizerStep {
  enum class Kind { Prepend, Replace };
  Kind kind = Kind::Replace;
  std::string pattern, content;
};

/// tokenizers' Metaspace pre-tokenizer: every ' ' becomes `replacement`; then `replacement` is put before text that
/// does not start with it (Always: every piece of text between added tokens; First: only the piece that starts the
/// input, so none right after an added token; Never: none); when `split`, the text is cut before every replacement.
struct MetaspaceSpec {
  std::string replacement = "\xE2\x96\x81";  ///< one character; U+2581 "▁"
  PrependScheme prependScheme = PrependScheme::Always;
  bool split = true;
};

/// A decoder step. Steps run in order over the list of token strings, which is then concatenated:
///   Replace       each `pattern` in every token -> `content`
///   ByteFallback  each run of <0xNN> tokens -> its bytes when they are valid UTF-8, else one U+FFFD per byte
///   Fuse          all tokens -> one
///   Strip         up to `start` leading and `stop` trailing `content` characters off every token
///   Metaspace     `pattern` (the replacement) -> ' ' in every token; in the first token it is removed instead,
///                 unless prependScheme is Never
struct DecoderStep {
  enum class Kind { Replace, ByteFallback, Fuse, Strip, Metaspace };
  Kind kind = Kind::Fuse;
  std::string pattern, content;
  std::size_t start = 0, stop = 0;
  PrependScheme prependScheme = PrependScheme::Always;
};

struct SpecialIds {
  std::int32_t bos = -1, eos = -1, unk = -1, pad = -1;  ///< -1: none
};

/// A token matched literally in the text before pre-tokenization (tokenizers' AddedToken).
struct AddedToken {
  std::int32_t id = -1;
  std::string content;      ///< the text it matches (not byte-level spelled)
  bool special = false;     ///< skipped by decode(skipSpecial) and not matched by encode(parseSpecial = false)
  bool lstrip = false;      ///< also swallows the whitespace before it
  bool rstrip = false;      ///< also swallows the whitespace after it
  bool normalized = false;  ///< matched in the second pass (tokenizers' normalized trie)
};

/// Everything a Tokenizer is made of, as plain data. The constructor checks it.
struct TokenizerSpec {
  std::string source = "tokenizer";                         ///< names the origin in error messages
  std::vector<std::string> tokens;                          ///< id -> vocabulary spelling (byte-level for BPE tokens)
  std::vector<TokenType> types;                             ///< per id; empty: all Normal
  std::vector<std::pair<std::string, std::string>> merges;  ///< in rank order (rank = index)
  std::vector<AddedToken> added;
  Preset preset = Preset::Gpt2;
  SpecialIds special;
  std::vector<std::int32_t> prefix, suffix;  ///< ids encode(addSpecial = true) puts around the text (BOS, EOS)
  bool ignoreMerges = false;                 ///< a piece that is itself a vocabulary token is emitted whole (Llama 3)
  std::int32_t bpeUnk = -1;  ///< a character without a token becomes this id; -1 drops it (tokenizers, no unk)
  bool fuseUnk = false;      ///< consecutive characters without a token become one bpeUnk
  std::string chatTemplate;  ///< Jinja source, when the origin carries one

  Mode mode = Mode::ByteLevel;
  // SentencePiece mode only (`preset` is then unused):
  std::vector<NormalizerStep> normalizer;  ///< also applied to the content of normalized added tokens
  std::optional<MetaspaceSpec> metaspace;  ///< the pre-tokenizer; none: each piece of text is one BPE word
  std::vector<DecoderStep> decoder;        ///< empty: tokens joined with ' ' (tokenizers without a decoder)
  bool byteFallback = false;               ///< a character without a token becomes its <0xNN> tokens (all must exist)
  /// SentencePiece scores, one per token (a GGUF's tokenizer.ggml.scores): given, a word is tokenized as llama.cpp's
  /// SPM tokenizer does (llm_tokenizer_spm): from its characters, repeatedly the adjacent pair whose concatenation is
  /// a token of the highest score (the leftmost among equal ones) merges; each final piece is its token, else the
  /// pieces it was merged from, else its <0xNN> bytes. `merges` are then unused.
  std::vector<float> scores;
};

class Tokenizer {
 public:
  /// Builds and checks: every merge part and merge result must be a token, ids in range. Throws TokenizerError.
  explicit Tokenizer(TokenizerSpec spec);

  /// Token ids of `text` (raw bytes; invalid UTF-8 is tokenized byte by byte, never rejected). addSpecial adds
  /// the prefix/suffix ids (BOS when add_bos); parseSpecial=false leaves special added tokens as plain text
  /// (tokenizers' encode_special_tokens) while non-special added tokens are still matched.
  std::vector<std::int32_t> encode(std::string_view text, bool addSpecial = true, bool parseSpecial = true) const;
  /// Text of `ids`; invalid or partial UTF-8 becomes U+FFFD only where the concatenated bytes are invalid. Ids that
  /// name no token are skipped (as tokenizers does).
  std::string decode(const std::vector<std::int32_t>& ids, bool skipSpecial = false) const;
  /// Raw bytes of one token (may be part of a UTF-8 sequence), for streaming; "" for an id out of range.
  std::string tokenText(std::int32_t id) const;

  std::int32_t vocabSize() const;
  std::int32_t bosId() const;
  std::int32_t eosId() const;
  std::int32_t unkId() const;
  std::int32_t padId() const;
  bool addBos() const;
  /// Id of a vocabulary spelling ("Ġthe") or an added token's text ("<|im_start|>").
  std::optional<std::int32_t> tokenId(std::string_view token) const;
  /// The vocabulary spelling of an id (added tokens: their text). TokenizerError when out of range.
  const std::string& tokenString(std::int32_t id) const;
  TokenType tokenType(std::int32_t id) const;
  bool isSpecial(std::int32_t id) const;
  Preset preset() const;  ///< meaningful in ByteLevel mode
  Mode mode() const;
  const std::string& chatTemplate() const;
  /// The pre-tokenizer's pieces of `text` (raw bytes), with no added-token matching: for tests and diagnostics. In
  /// SentencePiece mode: the normalized text cut by Metaspace (as the start of the input), i.e. the BPE words.
  std::vector<std::string> preTokenize(std::string_view text) const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared by copies: immutable except for the internally locked word cache
};

/// From the arrays a GGUF stores: tokens (byte-level spelled, control tokens as text), GGUF token types (1..6),
/// merges ("a b"), a preset name. Like transformers' GGUF conversion, control tokens (type 3) become special added
/// tokens and user-defined ones (type 4) plain added tokens; BOS is the prefix when addBos, EOS the suffix when
/// addEos. `source` names the origin in errors.
Tokenizer fromParts(const std::vector<std::string>& tokens, const std::vector<std::int32_t>& tokenTypes,
                    const std::vector<std::string>& merges, std::string_view preset, const SpecialIds& special,
                    bool addBos, bool addEos = false, std::string source = "tokenizer parts");
/// What fromParts builds from, for callers that add to it (fromGguf sets the chat template).
TokenizerSpec specFromParts(const std::vector<std::string>& tokens, const std::vector<std::int32_t>& tokenTypes,
                            const std::vector<std::string>& merges, std::string_view preset, const SpecialIds& special,
                            bool addBos, bool addEos = false, std::string source = "tokenizer parts");

/// From a Hugging Face tokenizer.json: model BPE (merges as "a b" or [a, b]; unk_token, fuse_unk, byte_fallback);
/// post_processor TemplateProcessing/ByteLevel/none; and either
///   ByteLevel mode: pre_tokenizer ByteLevel, Sequence[Digits, ByteLevel] or Sequence[Split(known regex),
///     ByteLevel]; no normalizer; decoder ByteLevel; or
///   SentencePiece mode (pre_tokenizer null or Metaspace): normalizer null, Prepend, Replace(String) or a Sequence
///     of them (only without Metaspace); decoder Metaspace, Replace(String), ByteFallback, Fuse, Strip or a Sequence
///     of them (Llama 2 / Mistral / TinyLlama, older and newer layouts).
/// When a tokenizer_config.json sits beside it, BOS/EOS/UNK/PAD and the chat template come from there (or from
/// chat_template.jinja, as transformers 5 saves it); without one, BOS is the post-processor's single prefix id.
/// Anything else is a TokenizerError naming the file and the key.
Tokenizer fromTokenizerJson(const std::string& path);
/// The same from text already in memory: `tokenizerJson` (named `source` in messages), the tokenizer_config.json
/// beside it when there is one (named `configSource`), and the chat_template.jinja text ("" when none; a template in
/// tokenizer_config.json wins).
Tokenizer fromTokenizerJsonText(std::string_view tokenizerJson, const std::string& source,
                                std::optional<std::string_view> tokenizerConfig = std::nullopt,
                                const std::string& configSource = "tokenizer_config.json",
                                const std::string& chatTemplate = "");

/// From a GGUF's tokenizer.ggml.* metadata (model "gpt2" only) and tokenizer.chat_template. Defined in
/// from_gguf.cpp.
Tokenizer fromGguf(const model::GgufFile& gguf);

/// SmolLM2-Instruct's default system message (its chat template inserts it when the first message is not "system").
inline constexpr std::string_view kSmolLM2DefaultSystem =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

/// ChatML as SmolLM2-Instruct's template renders it: "<|im_start|>{role}\n{content}<|im_end|>\n" per message, a
/// system message with `defaultSystem` first when the first message's role is not "system" (none when
/// defaultSystem is empty or there are no messages), and "<|im_start|>assistant\n" when addGenerationPrompt.
std::string applyChatML(const std::vector<std::pair<std::string, std::string>>& messages, bool addGenerationPrompt,
                        std::string_view defaultSystem = kSmolLM2DefaultSystem);

/// Gemma's turns as its chat template renders them (Gemma 3's chat_template, without the BOS the tokenizer adds):
/// "<start_of_turn>{role}\n{content, trimmed}<end_of_turn>\n" per message, "assistant" spelled "model", a leading
/// system message folded into the first user turn ("{system}\n\n{content, trimmed}"), and "<start_of_turn>model\n" when
/// addGenerationPrompt.
std::string applyGemmaChat(const std::vector<std::pair<std::string, std::string>>& messages, bool addGenerationPrompt);

/// gpt-oss's harmony format as its chat_template renders it without tools: a system message (the model identity,
/// "Knowledge cutoff: 2024-06", "Current date: {date}", "Reasoning: medium", the valid channels), a leading system or
/// developer message as the developer's "# Instructions", then "<|start|>{role}<|message|>{content}<|end|>" per
/// message (an assistant's as its final channel), and "<|start|>assistant" when addGenerationPrompt. `date`:
/// YYYY-MM-DD (the template's strftime_now; today's when empty).
std::string applyHarmonyChat(const std::vector<std::pair<std::string, std::string>>& messages, bool addGenerationPrompt,
                             const std::string& date = {});

}  // namespace kvscope::tokenizer
