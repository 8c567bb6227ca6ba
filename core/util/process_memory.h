// The process's own memory as the kernel accounts it (Linux /proc): resident set now and its peak, and a reset of
// the peak so that one run's peak can be measured inside a longer process. Torch-free, Qt-free.
#pragma once

#include <cstdint>

namespace kvscope::util {

/// Resident bytes now (VmRSS); 0 where /proc is not readable.
std::int64_t residentBytes();
/// Peak resident bytes since the process started or since the last resetPeakResident() (VmHWM); 0 if unknown.
std::int64_t peakResidentBytes();
/// Returns freed heap memory to the kernel (malloc_trim) and restarts the peak at the current resident size
/// (/proc/self/clear_refs). Returns false where the kernel does not allow the reset.
bool resetPeakResident();

}  // namespace kvscope::util
