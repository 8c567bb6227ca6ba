#include "model/mapped_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "model/safetensors.h"  // FormatError
#include "util/error.h"

namespace kvscope::model {

MappedFile::MappedFile(const std::string& path, std::size_t minSize, const char* kind) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw FormatError(fmt::format("{}: cannot open ({})", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw FormatError(fmt::format("{}: not a regular file", path));
  }
  size_ = static_cast<std::size_t>(st.st_size);
  if (size_ < minSize) {
    ::close(fd);
    throw FormatError(fmt::format("{}: {} bytes is too short for {}", path, size_, kind));
  }
  map_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    const int err = errno;
    map_ = nullptr;
    // The weights are used where they are mapped: no room for the mapping is running out of memory.
    if (err == ENOMEM)
      throw Error(ErrorCode::OutOfMemory, fmt::format("{}: no room to map its {} MiB", path, size_ >> 20));
    throw FormatError(fmt::format("{}: cannot map ({})", path, std::strerror(err)));
  }
  owned_ = true;
}

MappedFile::MappedFile(const std::uint8_t* data, std::size_t size, const std::string& name, std::size_t minSize,
                       const char* kind)
    : map_(const_cast<std::uint8_t*>(data)), size_(size) {
  if (size_ < minSize) throw FormatError(fmt::format("{}: {} bytes is too short for {}", name, size_, kind));
  if (!data && size_ > 0) throw FormatError(fmt::format("{}: no data", name));
}

void MappedFile::release(const void* p, std::size_t n) const {
  if (!owned_ || n == 0) return;
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto at = reinterpret_cast<std::uintptr_t>(p), base = reinterpret_cast<std::uintptr_t>(map_);
  if (at < base || at + n > base + size_) return;
  const std::uintptr_t first = (at + page - 1) / page * page, last = (at + n) / page * page;
  // A private read-only file mapping: the pages are dropped, never their contents (a read faults them in again).
  if (first < last) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
  if (map_ && owned_) ::munmap(map_, size_);
}

}  // namespace kvscope::model
