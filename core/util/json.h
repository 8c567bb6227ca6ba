// JSON from a user's file, read one way by every reader (model config, safetensors header and index, tokenizer.json,
// cache configs): the nesting depth checked by a linear scan first, then parsed. nlohmann::json parses without
// recursion but copies, compares and dumps recursively, so a file of a few kilobytes of `[[[[...` would overflow the
// stack in an error message; anything nested deeper than kMaxJsonDepth is refused instead.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace kvscope {

/// No file kvscope reads (config.json, tokenizer.json, safetensors headers and indexes, cache configs) nests deeper
/// than a handful of levels.
inline constexpr std::size_t kMaxJsonDepth = 128;

/// The deepest nesting of [ and { outside strings (0 for a scalar). Stops counting once past `limit`.
inline std::size_t jsonNestingDepth(std::string_view text, std::size_t limit = kMaxJsonDepth) {
  std::size_t depth = 0, deepest = 0;
  bool inString = false, escaped = false;
  for (const char c : text) {
    if (inString) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest && (deepest = depth) > limit) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

/// A JSON text parsed, or why it could not be: "JSON nested deeper than 128 levels" or "not valid JSON (...)".
// (nlohmann::json's default constructor is not noexcept, though it allocates nothing for a null value: the implicit
// constructor cannot throw.)
struct JsonParse {  // NOLINT(bugprone-exception-escape)
  nlohmann::json value;
  std::string problem;  ///< empty: `value` holds the document
};

/// Parses `text` after checking its depth; never throws for bad input (the reader names the file in its own error).
inline JsonParse parseBoundedJson(std::string_view text) {
  JsonParse p;
  if (jsonNestingDepth(text) > kMaxJsonDepth) {
    p.problem = "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels";
    return p;
  }
  try {
    p.value = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number that overflows a double
    p.problem = std::string("not valid JSON (") + e.what() + ")";
  }
  return p;
}

}  // namespace kvscope
