// Constructors of the concrete layers (the classes stay private to their .cpp files).
#pragma once

#include <memory>

#include "cache/layer.h"

namespace kvscope::cache::detail {

std::unique_ptr<CacheLayer> makeDynamicLayer(const CacheConfig& cfg, const StatsOptions& stats);
std::unique_ptr<CacheLayer> makeFp8Layer(const CacheConfig& cfg, const StatsOptions& stats);
std::unique_ptr<CacheLayer> makeQuantoLayer(const CacheConfig& cfg, const StatsOptions& stats);
std::unique_ptr<CacheLayer> makeHqqLayer(const CacheConfig& cfg, const StatsOptions& stats);
std::unique_ptr<CacheLayer> makeKiviLayer(const CacheConfig& cfg, const StatsOptions& stats);
std::unique_ptr<CacheLayer> makeLlamaCppLayer(const CacheConfig& cfg, const StatsOptions& stats);
/// The first `sinks` tokens in full precision, the rest through `inner`.
std::unique_ptr<CacheLayer> makeSinkLayer(std::int64_t sinks, std::unique_ptr<CacheLayer> inner,
                                          const StatsOptions& stats);
/// Keys from `keys`, values from `values` (a per-layer config with different K and V configs).
std::unique_ptr<CacheLayer> makeSplitLayer(std::unique_ptr<CacheLayer> keys, std::unique_ptr<CacheLayer> values,
                                           const StatsOptions& stats);

/// A source's tokens as a dense [B, H, L, D] tensor of `dtype` (a transient copy), on the stored form's device: read
/// by the CPU kernels when that is the CPU and `hostKernels`, else by LibTorch's operators (StoredSource::dense).
at::Tensor materialize(const kernels::TokenSource& s, std::int64_t B, std::int64_t H, at::ScalarType dtype,
                       bool hostKernels = true);

}  // namespace kvscope::cache::detail
