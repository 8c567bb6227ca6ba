// A cancel token: one flag that Stop (the GUI), Ctrl-C (the CLI) or a test sets from any thread (or a signal
// handler: the flag is a lock-free atomic), and that long work reads at the points where it can stop cleanly: a
// generation between steps, the model between layers and between prefill chunks. Torch-free, Qt-free.
#pragma once

#include <atomic>

#include "util/error.h"

namespace kvscope {

class CancelToken {
 public:
  CancelToken() = default;
  CancelToken(const CancelToken&) = delete;
  CancelToken& operator=(const CancelToken&) = delete;

  void request() { flag_.store(true); }
  void reset() { flag_.store(false); }
  bool requested() const { return flag_.load(); }
  /// Throws kvscope::Cancelled("cancelled during <during>") once requested.
  void check(const char* during) const {
    if (requested()) throw Cancelled(std::string("cancelled during ") + during);
  }

 private:
  static_assert(std::atomic<bool>::is_always_lock_free, "a signal handler sets the flag");
  std::atomic<bool> flag_{false};
};

}  // namespace kvscope
