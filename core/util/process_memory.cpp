#include "util/process_memory.h"

#include <malloc.h>
#include <sys/mman.h>

#include <fstream>
#include <limits>
#include <new>
#include <string>

namespace kvscope::util {
namespace {

// A "Key:   123 kB" line of a /proc file (the process's status, the machine's meminfo), in bytes.
std::int64_t procField(const char* file, const char* key) {
  std::ifstream in(file);
  std::string line;
  const std::string prefix = std::string(key) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    try {
      return std::stoll(line.substr(prefix.size())) * 1024;
    } catch (const std::exception&) {
      return 0;
    }
  }
  return 0;
}

}  // namespace

std::int64_t residentBytes() {
  return procField("/proc/self/status", "VmRSS");
}
std::int64_t peakResidentBytes() {
  return procField("/proc/self/status", "VmHWM");
}
std::int64_t availableMemoryBytes() {
  return procField("/proc/meminfo", "MemAvailable");
}

StreamedBuffer allocateStreamed(std::size_t bytes) {
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  void* p = nullptr;
  if (bytes < kHuge)
    p = std::malloc(bytes == 0 ? 1 : bytes);
  else if (posix_memalign(&p, kHuge, bytes) != 0)  // not aligned_alloc: C11 wants a size of whole 2 MiB
    p = nullptr;
  if (p == nullptr) throw std::bad_alloc();
  // Whole huge pages only: a tail in one would make up to 2 MiB resident that the buffer does not use. A hint: where
  // the kernel does not do huge pages on request, the buffer is in small pages and works the same.
  if (bytes >= kHuge) (void)madvise(p, bytes / kHuge * kHuge, MADV_HUGEPAGE);
  return StreamedBuffer(static_cast<std::uint8_t*>(p));
}

void releaseFreeMemory() {
  malloc_trim(0);
}

void setAllocatorPolicy() {
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
}

HeapReuse::HeapReuse() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  mallopt(M_MMAP_MAX, 0);
}

HeapReuse::~HeapReuse() {
  mallopt(M_TRIM_THRESHOLD, 128 << 10);  // glibc's default
  mallopt(M_MMAP_MAX, 65536);            // glibc's default
  setAllocatorPolicy();
  malloc_trim(0);
}

bool resetPeakResident() {
  malloc_trim(0);
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace kvscope::util
