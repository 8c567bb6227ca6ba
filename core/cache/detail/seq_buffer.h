// A [batch, heads, capacity, dim] tensor that grows along the sequence by amortized O(1) appends: capacity doubles,
// so each token is copied O(1) times on average, and a step never concatenates the whole history.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace kvscope::cache::detail {

class SeqBuffer {
 public:
  bool defined() const { return buf_.defined(); }
  std::int64_t length() const { return len_; }
  std::int64_t capacity() const { return buf_.defined() ? buf_.size(2) : 0; }

  /// Makes room for `total` tokens, shaped like `like` ([B, H, *, D], its device, and `dtype` or its dtype) on first
  /// use.
  void reserve(std::int64_t total, const at::Tensor& like, std::optional<at::ScalarType> dtype = std::nullopt);
  /// Appends x [B, H, T, D] (converted to the buffer's dtype if needed).
  void append(const at::Tensor& x);
  /// Room for n more tokens after the valid ones, to be written in place; commit() makes them valid.
  at::Tensor tail(std::int64_t n, const at::Tensor& like, std::optional<at::ScalarType> dtype = std::nullopt);
  void commit(std::int64_t n) { len_ += n; }

  /// The valid tokens, [B, H, length, D] (a view).
  at::Tensor view() const;
  void setLength(std::int64_t n) { len_ = n; }
  /// Drops the first n valid tokens, moving the rest to the front (for short windows: O(length)).
  void dropFront(std::int64_t n);
  /// Reallocates to length() + room tokens when the buffer holds more than twice that (a window that shrank).
  void compact(std::int64_t room);
  /// Batch rows reordered: row i becomes old row idx[i]. Keeps the capacity.
  void reorderBatch(const at::Tensor& idx);
  void clear() {
    buf_ = at::Tensor();
    len_ = 0;
  }

  std::int64_t bytesPerToken() const;
  std::int64_t bytesUsed() const { return len_ * bytesPerToken(); }
  std::int64_t bytesReserved() const { return (capacity() - len_) * bytesPerToken(); }

 private:
  at::Tensor buf_;
  std::int64_t len_ = 0;
};

/// Checks a [B, H, T, D] floating tensor; `what` names it in the error.
void checkStates(const at::Tensor& t, const char* what);
/// The same B, H, D as `ref` (any T); throws CacheError naming both shapes.
void checkSameLayout(const at::Tensor& t, const at::Tensor& ref, const char* what);
/// Queries [B, Hq, T, D] for keys [B, Hkv, T, D]: floating, the same batch, tokens, head size and device, Hq a
/// multiple of Hkv; throws CacheError naming both shapes.
void checkQueries(const at::Tensor& q, const at::Tensor& keys, const char* what);
/// Validates a beam index for `batch` rows and returns it as int64 on `device`.
at::Tensor checkBeamIndex(const at::Tensor& idx, std::int64_t batch, const at::Device& device);

}  // namespace kvscope::cache::detail
