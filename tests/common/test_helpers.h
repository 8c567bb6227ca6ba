// Helpers shared by the C++ tests (std, GoogleTest and util/error.h only; no LibTorch, no Qt): the message or the code
// of an expected exception, "does this message name all of these", and files and folders in the test program's own
// temporary folder.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "util/error.h"

namespace kvscope::testutil {

/// The message of the `E` that `f` throws, or `none` when it throws nothing (any other exception goes through).
template <class E>
std::string errorOf(const std::function<void()>& f, const std::string& none = "") {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return none;
}

/// The code of the kvscope::Error that `f` throws, or nullopt when it throws nothing (any other exception goes
/// through: a test expecting a code fails on a bare std:: exception).
inline std::optional<ErrorCode> errorCodeOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return std::nullopt;
}

/// Expects `statement` to throw a kvscope::Error with `code` (EXPECT_THROW for a code rather than a type).
#define EXPECT_ERROR_CODE(statement, code) \
  EXPECT_EQ(::kvscope::testutil::errorCodeOf([&] { (void)(statement); }), (code))

/// Success when `msg` holds every one of `parts`; otherwise a failure naming the first part it lacks.
inline ::testing::AssertionResult mentions(const std::string& msg, std::initializer_list<const char*> parts) {
  for (const char* p : parts)
    if (msg.find(p) == std::string::npos) return ::testing::AssertionFailure() << "'" << msg << "' lacks '" << p << "'";
  return ::testing::AssertionSuccess();
}

/// Writes `bytes` to `path` (binary, replacing what was there), creating its folder first; returns the path.
inline std::string writeFile(const std::filesystem::path& path, std::string_view bytes) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return path.string();
}

/// A safetensors file's bytes: the 8-byte little-endian header length (`claimed` when not negative, else the
/// header's true size), the JSON header, then the data.
inline std::string safetensorsBytes(const std::string& header, const std::string& data, std::int64_t claimed = -1) {
  std::string b;
  const std::uint64_t n = claimed >= 0 ? static_cast<std::uint64_t>(claimed) : header.size();
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
  return b + header + data;
}

/// This test program's own folder, `kvscope_test_<pid>` in the system's temporary folder: made on first use and
/// removed with everything in it when the program ends, so that test runs leave no files behind (a program that
/// crashes leaves its folder).
inline const std::filesystem::path& scratchDir() {
  struct Dir {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("kvscope_test_" + std::to_string(::getpid()));
    Dir() { std::filesystem::create_directories(path); }
    Dir(const Dir&) = delete;
    Dir& operator=(const Dir&) = delete;
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Dir dir;
  return dir.path;
}

/// `name` in this test program's folder (scratchDir; nothing else is created).
inline std::filesystem::path tempPath(const std::string& name) {
  return scratchDir() / name;
}

/// A fresh, empty folder `name` in this test program's folder (what was there before is removed).
inline std::filesystem::path freshDir(const std::string& name) {
  const auto d = tempPath(name);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace kvscope::testutil
