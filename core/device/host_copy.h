// The one way the decode path copies a result into the host's memory, counted: on a device each copy waits for the
// queued work, so how many a step makes is what the tests hold down (tests/unit/test_host_copies.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace kvscope::device {

/// `t` in the host's memory (a contiguous copy; on the CPU, in portable mode too, a copy all the same, so the count
/// is the device's), counted.
at::Tensor toHost(const at::Tensor& t);
/// How many toHost() calls this process made (all threads).
std::int64_t hostCopies();

}  // namespace kvscope::device
