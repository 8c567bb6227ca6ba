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
/// failure (std::bad_alloc, c10::OutOfMemoryError) is OutOfMemory; anything else is Internal: kvscope raises every
/// error the user can fix as a kvscope::Error, so a bare std:: exception (std::invalid_argument included) or a
/// LibTorch check (c10::Error) that fails means kvscope broke its own invariant or passed LibTorch what it should not.
Failure currentFailure();

/// What kvscope's programs add to the one line of an Internal failure.
inline constexpr const char* kReportHint = "this is a bug in kvscope; please report it";

/// Makes a failed CPU allocation throw c10::OutOfMemoryError (LibTorch's CPU allocator throws a plain c10::Error),
/// so that out of memory is a type, not a message to match. Call once at start-up, before any tensor exists.
void installOutOfMemoryType();

}  // namespace kvscope::runtime
