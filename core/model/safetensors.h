// safetensors reader: memory-mapped, every offset and size checked against the file before any byte is read.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "model/mapped_file.h"
#include "util/error.h"

namespace kvscope::model {

/// A model file that is unreadable, malformed or unsupported (ErrorCode::BadFile); the message names the file.
class FormatError : public Error {
 public:
  explicit FormatError(const std::string& what) : Error(ErrorCode::BadFile, what) {}
};

class SafetensorsFile {
 public:
  struct Entry {
    std::string name;
    std::string dtype;  ///< as written: F32, F16, BF16, I64, U8, F8_E4M3, ...
    std::vector<std::int64_t> shape;
    const std::uint8_t* data = nullptr;
    std::uint64_t bytes = 0;
  };

  /// Opens and validates `path`. Throws FormatError naming the file, the tensor and the problem.
  explicit SafetensorsFile(const std::string& path);
  /// Reads a safetensors image already in memory (the caller keeps `data` alive as long as this object and its
  /// entries' data pointers); `name` stands for the file in messages. Throws FormatError.
  SafetensorsFile(const std::uint8_t* data, std::size_t size, const std::string& name);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::vector<Entry>& entries() const { return entries_; }
  const MappedFile& mapping() const { return file_; }
  bool contains(const std::string& name) const;
  /// Throws FormatError when absent.
  const Entry& at(const std::string& name) const;

  /// Bytes per element of a safetensors dtype name, 0 when unknown.
  static int dtypeSize(const std::string& dtype);

 private:
  void parse();

  std::string path_;
  MappedFile file_;
  std::map<std::string, std::string> metadata_;
  std::vector<Entry> entries_;
};

/// One tensor to write: its name, safetensors dtype name (F32, ...), shape and raw little-endian bytes.
struct SafetensorsTensor {
  std::string name, dtype;
  std::vector<std::int64_t> shape;
  std::string bytes;
};
/// A safetensors file image (what the `safetensors` package writes: the JSON header padded with spaces to a multiple
/// of 8 bytes, then the tensors' bytes back to back in the order given, `__metadata__` when not empty). Throws
/// FormatError for a duplicate name, an unknown dtype or bytes that do not match the shape.
std::string safetensorsImage(const std::vector<SafetensorsTensor>& tensors,
                             const std::map<std::string, std::string>& metadata = {});

/// The weight map of a sharded model's model.safetensors.index.json (`text`; `where` names it in messages): tensor
/// name -> shard file name. Each shard must be a plain file name in the same directory (no '/', not "." or "..").
/// Throws FormatError naming the file, the key and the problem.
std::map<std::string, std::string> readSafetensorsIndex(std::string_view text, const std::string& where);

}  // namespace kvscope::model
