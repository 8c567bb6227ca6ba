// Preset names, the tokenizer built from plain parts (what a GGUF holds) and ChatML.
#include <ctime>

#include "tokenizer/detail.h"
#include "tokenizer/tokenizer.h"

namespace kvscope::tokenizer {

namespace {

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
  if (name == "gpt-4o" || name == "llama4") return Preset::Gpt4o;
  throw TokenizerError("unknown pre-tokenizer " + quoted(name) + " (supported: gpt2, smollm, llama3, qwen2, gpt-4o)");
}

const char* modeName(Mode mode) {
  return mode == Mode::SentencePiece ? "sentencepiece" : "byte-level";
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
    case Preset::Gpt4o:
      return "gpt-4o";
  }
  return "?";
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

std::string applyGemmaChat(const std::vector<std::pair<std::string, std::string>>& messages, bool addGenerationPrompt) {
  const auto trim = [](std::string_view s) {
    const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
    while (!s.empty() && space(s.front())) s.remove_prefix(1);
    while (!s.empty() && space(s.back())) s.remove_suffix(1);
    return std::string(s);
  };
  std::string out, prefix;
  std::size_t first = 0;
  if (!messages.empty() && messages.front().first == "system") {
    prefix = messages.front().second + "\n\n";  // as the template writes it: not trimmed
    first = 1;
  }
  for (std::size_t k = first; k < messages.size(); ++k) {
    const auto& [role, content] = messages[k];
    out += "<start_of_turn>" + (role == "assistant" ? std::string("model") : role) + "\n";
    if (k == first) out += prefix;
    out += trim(content) + "<end_of_turn>\n";
  }
  if (addGenerationPrompt) out += "<start_of_turn>model\n";
  return out;
}

std::string applyHarmonyChat(const std::vector<std::pair<std::string, std::string>>& messages, bool addGenerationPrompt,
                             const std::string& date) {
  std::string today = date;
  if (today.empty()) {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[16];
    std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
    today = buf;
  }
  std::string out =
      "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: "
      "2024-06\nCurrent date: " +
      today +
      "\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included for every "
      "message.<|end|>";
  std::size_t first = 0;
  if (!messages.empty() && (messages.front().first == "system" || messages.front().first == "developer")) {
    if (!messages.front().second.empty())
      out += "<|start|>developer<|message|># Instructions\n\n" + messages.front().second + "\n\n<|end|>";
    first = 1;
  }
  for (std::size_t k = first; k < messages.size(); ++k) {
    const auto& [role, content] = messages[k];
    out += role == "assistant" ? std::string("<|start|>assistant<|channel|>final") : "<|start|>" + role;
    out += "<|message|>";
    out += content;
    out += "<|end|>";
  }
  if (addGenerationPrompt) out += "<|start|>assistant";
  return out;
}

}  // namespace kvscope::tokenizer
