// The FP8 formats of the fp8 cache and their largest finite values: one definition for the config library (no torch),
// the cache, the kernels (host and device code) and the GUI. Their SPEC names are the option table's
// (cache::fp8FormatName, config.h).
#pragma once

#include <cstdint>

#include "util/host_device.h"

namespace kvscope::cache {

enum class Fp8Format : std::uint8_t { E4M3FN, E5M2 };

/// Largest finite magnitude of each format (448 and 57344).
KVS_HD constexpr float fp8Max(Fp8Format f) {
  return f == Fp8Format::E4M3FN ? 448.0f : 57344.0f;
}

}  // namespace kvscope::cache
