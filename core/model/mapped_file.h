// A read-only memory map of a whole file, unmapped on destruction (or a view of caller-owned bytes); the readers
// check every offset against size().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvscope::model {

class MappedFile {
 public:
  /// Throws FormatError naming the file: cannot open, not a regular file, shorter than minSize (`kind` says what
  /// the file should have been, e.g. "a GGUF file"), cannot map.
  MappedFile(const std::string& path, std::size_t minSize, const char* kind);
  /// A view of bytes already in memory (the caller keeps them alive): the same checks, no file. `name` stands for
  /// the file in messages.
  MappedFile(const std::uint8_t* data, std::size_t size, const std::string& name, std::size_t minSize,
             const char* kind);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::uint8_t* data() const { return static_cast<const std::uint8_t*>(map_); }
  std::size_t size() const { return size_; }
  /// Whether this is a mapping of a file (not a view of a caller's bytes).
  bool mapped() const { return owned_; }
  /// Gives back to the kernel the whole pages of [p, p + n) (a range of this mapping) that a copy has replaced: they
  /// no longer count as resident, and a later read pages them in from the file again. A view does nothing.
  void release(const void* p, std::size_t n) const;

 private:
  void* map_ = nullptr;
  std::size_t size_ = 0;
  bool owned_ = false;  ///< map_ is a mapping of ours (unmapped on destruction), not a caller's view
};

}  // namespace kvscope::model
