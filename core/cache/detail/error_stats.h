#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "cache/stats.h"
#include "kernels/path.h"

namespace kvscope::cache::detail {

// Each runs its layer's kernel path: loops over the CPU tensors (Host), or LibTorch's operators on the tensors' device.
/// max |x| per KV head of x [B, H, T, D].
std::vector<float> amaxPerHead(const at::Tensor& x, kernels::KernelPath path);
/// Error of xq against x (both [B, H, T, D]) per (head, range of `bin` tokens, channel); positions start at tokenStart.
ErrorMap errorMap(const at::Tensor& x, const at::Tensor& xq, std::int64_t tokenStart, std::int64_t bin,
                  kernels::KernelPath path);
std::vector<float> toVector(const at::Tensor& t);

}  // namespace kvscope::cache::detail
