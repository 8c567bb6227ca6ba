// The failure of a whole operation (a load, a run, a command) as kvscope reports it: its code and one line. This is
// the one place that knows the exceptions kvscope does not raise itself (LibTorch's, the standard library's).
#pragma once

#include <string>

#include "util/error.h"

namespace kvscope::runtime {

struct Failure {
  ErrorCode code = ErrorCode::Internal;
  std::string message;  ///< one line: LibTorch's C++ backtrace and anything after the first line dropped
};

/// Call inside a catch block: the exception in flight as a Failure. kvscope::Error keeps its code; an allocation
/// failure (std::bad_alloc, c10::OutOfMemoryError) is OutOfMemory; std::invalid_argument (a kernel's argument check)
/// is BadInput; anything else Internal.
Failure currentFailure();

/// Makes a failed CPU allocation throw c10::OutOfMemoryError (LibTorch's CPU allocator throws a plain c10::Error),
/// so that out of memory is a type, not a message to match. Call once at start-up, before any tensor exists.
void installOutOfMemoryType();

}  // namespace kvscope::runtime
