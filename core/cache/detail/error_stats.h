#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "cache/detail/deferred_stats.h"
#include "cache/stats.h"
#include "kernels/path.h"

namespace kvscope::cache::detail {

// Each runs its layer's kernel path: loops over the CPU tensors (Host), or LibTorch's operators on the tensors' device
// (Device), whose results wait in `d` until the statistics are read (DeferredStats): `out` is filled then.
/// max |x| per KV head of x [B, H, T, D].
void amaxPerHead(const at::Tensor& x, kernels::KernelPath path, std::vector<float>& out, DeferredStats& d);
/// Error of xq against x (both [B, H, T, D]) per (head, range of `bin` tokens, channel); positions start at tokenStart.
void errorMap(const at::Tensor& x, const at::Tensor& xq, std::int64_t tokenStart, std::int64_t bin,
              kernels::KernelPath path, ErrorMap& out, DeferredStats& d);
/// t's values, as floats.
void valuesOf(const at::Tensor& t, kernels::KernelPath path, std::vector<float>& out, DeferredStats& d);

}  // namespace kvscope::cache::detail
