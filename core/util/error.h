// kvscope's one error type: every error kvscope raises carries a code, so that callers (the CLI's exit status, the
// GUI's message, a cancelled request) decide on the code, never on the class or the text. Torch-free, Qt-free.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace kvscope {

enum class ErrorCode {
  BadInput,     ///< a SPEC, an option, a combination, a request the cache cannot honour: the user's to fix
  BadFile,      ///< a model, tokenizer, config or session file that is unreadable, malformed or unsupported
  Unavailable,  ///< asked for something this machine or build does not have (a device)
  OutOfMemory,  ///< an allocation failed (the machine's memory, or a --memory-cap)
  Cancelled,    ///< stopped on request (Stop, Ctrl-C)
  Internal,     ///< kvscope's own failure
};

constexpr std::string_view errorCodeName(ErrorCode c) {
  switch (c) {
    case ErrorCode::BadInput:
      return "bad-input";
    case ErrorCode::BadFile:
      return "bad-file";
    case ErrorCode::Unavailable:
      return "unavailable";
    case ErrorCode::OutOfMemory:
      return "out-of-memory";
    case ErrorCode::Cancelled:
      return "cancelled";
    case ErrorCode::Internal:
      return "internal";
  }
  return "internal";
}

/// The exit status of kvscope's programs for a failure of this kind: 2 for what the user can fix (input, files,
/// devices), 130 for a cancel (as a shell reports SIGINT), 1 otherwise.
constexpr int exitStatus(ErrorCode c) {
  switch (c) {
    case ErrorCode::BadInput:
    case ErrorCode::BadFile:
    case ErrorCode::Unavailable:
      return 2;
    case ErrorCode::Cancelled:
      return 130;
    default:
      return 1;
  }
}

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

/// A load, an evaluation or a run stopped on request: the one cancellation every long operation throws.
class Cancelled : public Error {
 public:
  explicit Cancelled(const std::string& what = "cancelled") : Error(ErrorCode::Cancelled, what) {}
};

}  // namespace kvscope
