// Statistics a layer computed where its states are (the device path) and has not copied to the host yet. A layer
// adds each value with the place it goes; they cross to the host together, in one copy for a whole cache
// (KvCache::collectStats, which generate() folds into its step's own copy), or when the layer's stats() is
// read. Only the latest update's values wait: an update drops what the one before left (clear()), so a layer that
// is never read holds one update's worth.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace kvscope::cache::detail {

class DeferredStats {
 public:
  /// Receives the value's elements (as float64: every float32 and every counter below 2^53 exactly), row-major.
  using Sink = std::function<void(const double* values)>;
  void add(const at::Tensor& value, Sink sink);
  bool empty() const { return items_.empty(); }
  void clear() { items_.clear(); }
  /// Appends each value, flattened, as float64.
  void collect(std::vector<at::Tensor>& out) const;
  /// Hands each sink its elements from `h`, in collect()'s order, and forgets them; returns `h` past them.
  const double* deliver(const double* h);

 private:
  struct Item {
    at::Tensor value;
    Sink sink;
  };
  std::vector<Item> items_;
};

/// Copies the values of every set to the host in one copy (device::toHost) and delivers them.
void settle(const std::vector<DeferredStats*>& sets);

}  // namespace kvscope::cache::detail
