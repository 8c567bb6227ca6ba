// A GGUF writer for hand-made (and hand-broken) files in the tests: the bytes as they are appended, and where each
// field starts (`boundaries`, for cuts at every one).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "test_helpers.h"

namespace kvscope::testutil {

struct GgufWriter {
  std::string bytes;
  std::vector<std::size_t> boundaries;

  void mark() { boundaries.push_back(bytes.size()); }
  template <class T>
  void put(T v) {
    bytes.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void str(const std::string& s) {
    put<std::uint64_t>(s.size());
    mark();
    bytes += s;
  }
  void header(std::uint64_t tensors, std::uint64_t kvs, std::uint32_t version = 3) {
    bytes = "GGUF";
    mark();
    put<std::uint32_t>(version);
    mark();
    put<std::uint64_t>(tensors);
    mark();
    put<std::uint64_t>(kvs);
    mark();
  }
  void kvStr(const std::string& k, const std::string& v) {
    str(k);
    mark();
    put<std::uint32_t>(8);
    mark();
    str(v);
    mark();
  }
  void kvU32(const std::string& k, std::uint32_t v) {
    str(k);
    mark();
    put<std::uint32_t>(4);
    mark();
    put(v);
    mark();
  }
  void kvF32(const std::string& k, float v) {
    str(k);
    mark();
    put<std::uint32_t>(6);
    mark();
    put(v);
    mark();
  }
  /// An array of INT32 (elementType 5) or BOOL (7) values.
  void kvArr(const std::string& k, std::uint32_t elementType, const std::vector<std::int64_t>& values) {
    str(k);
    mark();
    put<std::uint32_t>(9);
    put<std::uint32_t>(elementType);
    put<std::uint64_t>(values.size());
    mark();
    for (const auto v : values) {
      if (elementType == 7)
        put<std::uint8_t>(v != 0 ? 1 : 0);
      else
        put<std::int32_t>(static_cast<std::int32_t>(v));
    }
    mark();
  }
  void tensorInfo(const std::string& name, const std::vector<std::uint64_t>& dims, std::uint32_t type,
                  std::uint64_t off) {
    str(name);
    mark();
    put<std::uint32_t>(static_cast<std::uint32_t>(dims.size()));
    mark();
    for (auto d : dims) {
      put<std::uint64_t>(d);
      mark();
    }
    put<std::uint32_t>(type);
    mark();
    put<std::uint64_t>(off);
    mark();
  }
  void align(std::size_t a = 32) {
    while (bytes.size() % a) bytes.push_back('\0');
    mark();
  }
  /// A model's F32 tensors (GGUF's dims, innermost first): their infos one after the other, each padded to 32 bytes,
  /// then the alignment before the data.
  using Plan = std::vector<std::pair<std::string, std::vector<std::uint64_t>>>;
  void f32Infos(const Plan& plan) {
    std::uint64_t off = 0;
    for (const auto& [name, dims] : plan) {
      tensorInfo(name, dims, 0, off);
      off += (count(dims) * 4 + 31) / 32 * 32;
    }
    align();
  }
  /// Their data, in the plan's order: values(name, count) gives each tensor's floats.
  void f32Data(const Plan& plan, const std::function<std::vector<float>(const std::string&, std::int64_t)>& values) {
    for (const auto& [name, dims] : plan) {
      for (float v : values(name, static_cast<std::int64_t>(count(dims)))) put(v);
      align();
    }
  }
  static std::uint64_t count(const std::vector<std::uint64_t>& dims) {
    std::uint64_t n = 1;
    for (auto d : dims) n *= d;
    return n;
  }
  /// Writes the bytes as `name` in the temporary folder; returns its path.
  std::string write(const std::string& name) const { return writeFile(tempPath(name), bytes); }
};

}  // namespace kvscope::testutil
