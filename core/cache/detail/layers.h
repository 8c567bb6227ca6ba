// Constructors of the concrete layers (the classes stay private to their .cpp files).
#pragma once

#include <memory>

#include "cache/layer.h"

namespace kvscope::cache::detail {

// Each runs the kernels of `path` (CacheLayer::kernelPath); a wrapper, those of the layers it holds.
std::unique_ptr<CacheLayer> makeDynamicLayer(const CacheConfig& cfg, const StatsOptions& stats,
                                             kernels::KernelPath path);
std::unique_ptr<CacheLayer> makeFp8Layer(const CacheConfig& cfg, const StatsOptions& stats, kernels::KernelPath path);
std::unique_ptr<CacheLayer> makeQuantoLayer(const CacheConfig& cfg, const StatsOptions& stats,
                                            kernels::KernelPath path);
std::unique_ptr<CacheLayer> makeHqqLayer(const CacheConfig& cfg, const StatsOptions& stats, kernels::KernelPath path);
std::unique_ptr<CacheLayer> makeKiviLayer(const CacheConfig& cfg, const StatsOptions& stats, kernels::KernelPath path);
/// Block-quantized rows along the head dimension: llama.cpp's cache types (`llamacpp`), vLLM's NVFP4 (`vllm`) and
/// MXFP4 (`mxfp4`).
/// Tiers by age (`tiers=`): a row layer per tier, pages moved down as they age (kv_row_layer.cpp).
std::unique_ptr<CacheLayer> makeTieredLayer(const CacheConfig& cfg, const StatsOptions& stats,
                                            kernels::KernelPath path);
std::unique_ptr<CacheLayer> makeKvRowLayer(const CacheConfig& cfg, const StatsOptions& stats, kernels::KernelPath path);
/// The first `sinks` tokens in full precision, the rest through `inner`.
std::unique_ptr<CacheLayer> makeSinkLayer(std::int64_t sinks, std::unique_ptr<CacheLayer> inner,
                                          const StatsOptions& stats);
/// Keys from `keys`, values from `values` (a per-layer config with different K and V configs).
std::unique_ptr<CacheLayer> makeSplitLayer(std::unique_ptr<CacheLayer> keys, std::unique_ptr<CacheLayer> values,
                                           const StatsOptions& stats);

class StoredSource;
/// A source's tokens as a dense [B, H, L, D] tensor of `dtype` (a transient copy), on the stored form's device: read
/// by the CPU kernels on the host path, else by LibTorch's operators (StoredSource::dense).
at::Tensor materialize(const StoredSource& s, std::int64_t B, std::int64_t H, at::ScalarType dtype,
                       kernels::KernelPath path);

}  // namespace kvscope::cache::detail
