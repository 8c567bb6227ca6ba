// GGUF reader (versions 2 and 3): metadata, tensor infos and data, memory-mapped. Every count, length, offset and
// size is checked against the file before it is used: a lying header is a FormatError naming the file and the
// key or tensor, never a wild read. No torch here; model/gguf_tensors.h turns tensors into at::Tensors.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "kernels/ggml_type.h"
#include "model/mapped_file.h"
#include "model/safetensors.h"  // FormatError

namespace kvscope::model {

class GgufFile {
 public:
  /// A metadata value: scalars widen to int64/uint64/double; arrays keep one vector per element kind.
  using Value = std::variant<std::int64_t, std::uint64_t, double, bool, std::string, std::vector<std::int64_t>,
                             std::vector<double>, std::vector<std::string>, std::vector<bool>>;

  struct Tensor {
    std::string name;
    std::uint32_t type = 0;          ///< a kernels::GgmlType number
    std::vector<std::int64_t> dims;  ///< ggml order: dims[0] is the fastest-varying (row length)
    std::uint64_t offset = 0;        ///< from the start of the data section
    const std::uint8_t* data = nullptr;
    std::uint64_t bytes = 0;
    std::int64_t numel() const;
  };

  /// Opens and validates `path`. Throws FormatError.
  explicit GgufFile(const std::string& path);
  /// Reads a GGUF image already in memory (the caller keeps `data` alive as long as this object and its tensors'
  /// data pointers); `name` stands for the file in messages. Throws FormatError.
  GgufFile(const std::uint8_t* data, std::size_t size, const std::string& name);
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  std::uint32_t version() const { return version_; }
  std::uint64_t alignment() const { return alignment_; }
  std::uint64_t fileSize() const { return file_.size(); }

  const std::map<std::string, Value>& metadata() const { return metadata_; }
  bool has(const std::string& key) const { return metadata_.count(key) != 0; }
  /// Typed getters: nullopt when absent; FormatError when present with another type.
  std::optional<std::string> getString(const std::string& key) const;
  std::optional<std::int64_t> getInt(const std::string& key) const;  ///< any integer type
  std::optional<double> getFloat(const std::string& key) const;      ///< float or integer
  std::optional<bool> getBool(const std::string& key) const;
  std::vector<std::string> getStringArray(const std::string& key) const;  ///< empty when absent
  std::vector<std::int64_t> getIntArray(const std::string& key) const;
  std::vector<double> getFloatArray(const std::string& key) const;

  const std::vector<Tensor>& tensors() const { return tensors_; }
  const MappedFile& mapping() const { return file_; }
  /// nullptr when absent.
  const Tensor* find(const std::string& name) const;
  /// Throws FormatError naming the missing tensor.
  const Tensor& at(const std::string& name) const;

  /// Bytes a tensor of `type` with `numel` elements takes; throws FormatError for unknown types or a numel that is
  /// not a whole number of blocks.
  static std::uint64_t tensorBytes(std::uint32_t type, std::int64_t numel, const std::string& what);

 private:
  void parse();

  std::string path_;
  MappedFile file_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::map<std::string, Value> metadata_;
  std::vector<Tensor> tensors_;
  std::map<std::string, std::size_t> index_;
};

}  // namespace kvscope::model
