// Helpers shared by the tokenizer unit tests (on top of tests/common/test_helpers.h).
#pragma once

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "test_helpers.h"
#include "tokenizer/tokenizer.h"

namespace kvscope::tokenizer::testutil {

/// The TokenizerError message f throws, or "(no error)".
inline std::string errorOf(const std::function<void()>& f) {
  return kvscope::testutil::errorOf<TokenizerError>(f, "(no error)");
}

/// Writes `text` as tokenizer.json in a fresh temporary folder named after `name`; returns its path.
inline std::string writeTemp(const std::string& name, const std::string& text) {
  const auto dir = kvscope::testutil::tempPath("tok_" + name);
  return kvscope::testutil::writeFile(dir / "tokenizer.json", text);
}

/// The error fromTokenizerJson gives for `base` after `edit`, written as tokenizer.json (writeTemp, `name`); the
/// message must name that file.
inline std::string broken(const char* name, const nlohmann::json& base,
                          const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = base;
  edit(j);
  const auto path = writeTemp(name, j.dump());
  const auto msg = errorOf([&] { fromTokenizerJson(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  return msg;
}

}  // namespace kvscope::tokenizer::testutil
