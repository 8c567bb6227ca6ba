#include "cache/detail/deferred_stats.h"

#include <ATen/ATen.h>

#include "device/host_copy.h"

namespace kvscope::cache::detail {

void DeferredStats::add(const at::Tensor& value, Sink sink) {
  items_.push_back({value, std::move(sink)});
}

void DeferredStats::collect(std::vector<at::Tensor>& out) const {
  for (const Item& i : items_) out.push_back(i.value.reshape({-1}).to(at::kDouble));
}

const double* DeferredStats::deliver(const double* h) {
  std::vector<Item> items = std::move(items_);
  items_.clear();
  for (Item& i : items) {
    i.sink(h);
    h += i.value.numel();
  }
  return h;
}

void settle(const std::vector<DeferredStats*>& sets) {
  std::vector<at::Tensor> parts;
  for (const DeferredStats* s : sets) s->collect(parts);
  if (parts.empty()) return;
  const at::Tensor host = device::toHost(at::cat(parts));
  const double* h = host.const_data_ptr<double>();
  for (DeferredStats* s : sets) h = s->deliver(h);
}

}  // namespace kvscope::cache::detail
