#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "cache/stats.h"

namespace kvscope::cache::detail {

/// max |x| per KV head of x [B, H, T, D].
std::vector<float> amaxPerHead(const at::Tensor& x);
/// Error of xq against x (both [B, H, T, D]) per (head, range of `bin` tokens, channel); positions start at tokenStart.
ErrorMap errorMap(const at::Tensor& x, const at::Tensor& xq, std::int64_t tokenStart, std::int64_t bin);
std::vector<float> toVector(const at::Tensor& t);

}  // namespace kvscope::cache::detail
