// The process's own memory as the kernel accounts it (Linux /proc): resident set now and its peak, and a reset of
// the peak so that one run's peak can be measured inside a longer process. Torch-free, Qt-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

namespace kvscope::util {

/// Resident bytes now (VmRSS); 0 where /proc is not readable.
std::int64_t residentBytes();
/// The machine's memory available to new allocations without swapping (MemAvailable); 0 where unknown.
std::int64_t availableMemoryBytes();
/// The allocator policy of kvscope's programs: buffers of 1 MiB and more are mapped on their own and go back to the
/// kernel when freed (glibc's mmap threshold fixed, where it would otherwise grow and keep such buffers in the heap).
/// Resident memory then follows what the model and the cache hold: without it a long chunked prefill of a quanto
/// cache peaked 1.6x higher on fragments. Call once at start-up.
void setAllocatorPolicy();
/// While it lives, freed buffers of any size stay in the heap for the next allocation (glibc maps nothing on its own
/// and trims nothing): for work that allocates the same large buffers over and over (the tuner's scan: logits of 25-50
/// MB, activations, a cache per run), where mapping each afresh, or giving the heap's top back, costs a page fault per
/// 4 KiB. Its end restores setAllocatorPolicy() and returns what is free to the kernel.
class HeapReuse {
 public:
  HeapReuse();
  ~HeapReuse();
  HeapReuse(const HeapReuse&) = delete;
  HeapReuse& operator=(const HeapReuse&) = delete;
};
/// Returns freed heap pages to the kernel (malloc_trim): between prefill chunks, so that the many short-lived
/// buffers of a long prompt do not leave the resident size above what the cache holds.
void releaseFreeMemory();
/// A buffer read whole over and over (a model's repacked weights), from allocateStreamed.
struct FreeDeleter {
  void operator()(std::uint8_t* p) const noexcept { std::free(p); }
};
using StreamedBuffer = std::unique_ptr<std::uint8_t[], FreeDeleter>;
/// `bytes` (not zeroed: pages become resident as they are written) aligned to 2 MiB and, where the kernel gives
/// transparent huge pages on request (`madvise` mode, Debian's default), in huge pages: a decode step streams every
/// weight once, and with 4 KiB pages it would walk the page tables once per 4 KiB of it. Throws std::bad_alloc.
StreamedBuffer allocateStreamed(std::size_t bytes);
/// Peak resident bytes since the process started or since the last resetPeakResident() (VmHWM); 0 if unknown.
std::int64_t peakResidentBytes();
/// Returns freed heap memory to the kernel (malloc_trim) and restarts the peak at the current resident size
/// (/proc/self/clear_refs). Returns false where the kernel does not allow the reset.
bool resetPeakResident();

}  // namespace kvscope::util
