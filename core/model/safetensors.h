// safetensors reader: memory-mapped, every offset and size checked against the file before any byte is read.
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include "model/mapped_file.h"
#include <stdexcept>
#include <string>
#include <vector>

namespace kvscope::model {

class FormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class SafetensorsFile {
 public:
  struct Entry {
    std::string name;
    std::string dtype;                 ///< as written: F32, F16, BF16, I64, U8, F8_E4M3, ...
    std::vector<std::int64_t> shape;
    const std::uint8_t* data = nullptr;
    std::uint64_t bytes = 0;
  };

  /// Opens and validates `path`. Throws FormatError naming the file, the tensor and the problem.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::vector<Entry>& entries() const { return entries_; }
  bool contains(const std::string& name) const;
  /// Throws FormatError when absent.
  const Entry& at(const std::string& name) const;

  /// Bytes per element of a safetensors dtype name, 0 when unknown.
  static int dtypeSize(const std::string& dtype);

 private:
  std::string path_;
  MappedFile file_;
  std::map<std::string, std::string> metadata_;
  std::vector<Entry> entries_;
};

}  // namespace kvscope::model
