// How deeply a JSON text nests its arrays and objects, found by a linear scan before parsing. nlohmann::json parses
// without recursion but copies, compares and dumps recursively, so a file of a few kilobytes of `[[[[...` would
// overflow the stack in an error message; the readers refuse anything nested deeper than kMaxJsonDepth instead.
#pragma once

#include <cstddef>
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
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') inString = false;
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

}  // namespace kvscope
