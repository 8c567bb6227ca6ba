// Helpers shared by the tokenizer unit tests.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "tokenizer/tokenizer.h"

namespace kvscope::tokenizer::testutil {

/// The TokenizerError message f throws, or "(no error)".
inline std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const TokenizerError& e) {
    return e.what();
  }
  return "(no error)";
}

/// Writes `text` as tokenizer.json in a fresh temporary folder named after `name`; returns its path.
inline std::string writeTemp(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / ("kvscope_tok_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::create_directories(dir);
  const auto path = (dir / "tokenizer.json").string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

}  // namespace kvscope::tokenizer::testutil
