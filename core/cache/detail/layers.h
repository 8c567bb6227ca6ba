// Constructors of the concrete layers (the classes stay private to their .cpp files).
#pragma once

#include <memory>

#include "cache/layer.h"

namespace kvscope::cache::detail {

std::unique_ptr<CacheLayer> makeDynamicLayer(const StatsOptions& stats);
std::unique_ptr<CacheLayer> makeFp8Layer(const CacheConfig& cfg, const StatsOptions& stats);
std::unique_ptr<CacheLayer> makeQuantoLayer(const CacheConfig& cfg, const StatsOptions& stats);
std::unique_ptr<CacheLayer> makeHqqLayer(const CacheConfig& cfg, const StatsOptions& stats);
std::unique_ptr<CacheLayer> makeKiviLayer(const CacheConfig& cfg, const StatsOptions& stats);
/// The first `sinks` tokens in full precision, the rest through `inner`.
std::unique_ptr<CacheLayer> makeSinkLayer(std::int64_t sinks, std::unique_ptr<CacheLayer> inner,
                                          const StatsOptions& stats);

}  // namespace kvscope::cache::detail
