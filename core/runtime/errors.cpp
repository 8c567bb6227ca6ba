#include "runtime/errors.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <exception>
#include <new>

namespace kvscope::runtime {

namespace {

std::string firstLine(const char* what) {
  std::string s(what ? what : "");
  if (const auto nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
  return s;
}

// The default CPU allocator, with its failures typed: whatever goes wrong inside an allocation is an allocation
// failure.
class TypedOomAllocator final : public c10::Allocator {
 public:
  explicit TypedOomAllocator(c10::Allocator* base) : base_(base) {}
  c10::DataPtr allocate(size_t n) override {
    try {
      return base_->allocate(n);
    } catch (const c10::OutOfMemoryError&) {
      throw;
    } catch (const c10::Error& e) {
      TORCH_CHECK_WITH(OutOfMemoryError, false, firstLine(e.what_without_backtrace()));
    }
  }
  c10::DeleterFnPtr raw_deleter() const override { return base_->raw_deleter(); }
  void copy_data(void* dest, const void* src, std::size_t count) const override { base_->copy_data(dest, src, count); }

 private:
  c10::Allocator* base_;
};

}  // namespace

Failure currentFailure() {
  try {
    throw;
  } catch (const Error& e) {
    return {e.code(), firstLine(e.what())};
  } catch (const c10::OutOfMemoryError& e) {
    return {ErrorCode::OutOfMemory, firstLine(e.what_without_backtrace())};
  } catch (const std::bad_alloc&) {
    return {ErrorCode::OutOfMemory, "an allocation failed"};
  } catch (const c10::Error& e) {
    return {ErrorCode::Internal, firstLine(e.what_without_backtrace())};
  } catch (const std::exception& e) {
    return {ErrorCode::Internal, firstLine(e.what())};
  } catch (...) {
    return {ErrorCode::Internal, "an unknown error"};
  }
}

void installOutOfMemoryType() {
  static TypedOomAllocator typed(c10::GetDefaultCPUAllocator());
  c10::SetCPUAllocator(&typed, /*priority=*/1);
}

}  // namespace kvscope::runtime
