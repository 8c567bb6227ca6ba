// libFuzzer target: cache SPEC strings, JSON cache configs and sweep grids. Only ConfigError may come out; an
// accepted config must survive its own round trips (SPEC and kvscope JSON) unchanged, and every export must either
// answer or refuse with ConfigError.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cache/config.h"

using namespace kvscope::cache;

namespace {

bool sameRules(const CacheConfig& a, const CacheConfig& b);

// The same cache: unset keys and keys set to their default are alike.
bool same(const CacheConfig& a, const CacheConfig& b) {
  return a.backend == b.backend && a.resolvedNbits() == b.resolvedNbits() &&
         a.resolvedAxisKey() == b.resolvedAxisKey() && a.resolvedAxisValue() == b.resolvedAxisValue() &&
         a.resolvedGroupSize() == b.resolvedGroupSize() && a.resolvedResidualLength() == b.resolvedResidualLength() &&
         a.fp8Format == b.fp8Format && a.granularity == b.granularity && a.headroom == b.headroom &&
         a.overflow == b.overflow && a.hqqOptimize == b.hqqOptimize && a.sink == b.sink && sameRules(a, b);
}

bool sameRules(const CacheConfig& a, const CacheConfig& b) {
  if (a.layers.size() != b.layers.size()) return false;
  for (std::size_t i = 0; i < a.layers.size(); ++i) {
    const auto &x = a.layers[i], &y = b.layers[i];
    if (x.first != y.first || x.last != y.last || !same(x.keys, y.keys) || !same(x.values, y.values)) return false;
  }
  return true;
}

void roundTrip(const CacheConfig& cfg) {
  if (!same(parseSpec(toSpec(cfg)), cfg)) __builtin_trap();
  if (!same(configFromJson(toKvscopeJson(cfg)), cfg)) __builtin_trap();
  try {
    (void)toHfCacheConfig(cfg);
  } catch (const ConfigError&) {
  }
  (void)toVllmFlags(cfg);
  (void)toLlamaCppFlags(cfg);
}

// parseSpec reads a file for anything that looks like a path; the fuzzer only gives it SPECs.
bool plainSpec(std::string_view s) {
  return s.find(':') != std::string_view::npos && s.find('/') == std::string_view::npos &&
         !(s.size() >= 5 && s.substr(s.size() - 5) == ".json");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    roundTrip(configFromJson(text, "fuzz.json"));
  } catch (const ConfigError&) {
  }
  try {
    if (plainSpec(text))
      roundTrip(parseSpec(text));
    else
      (void)parseBackend(text);
  } catch (const ConfigError&) {
  }
  try {
    for (const auto& spec : expandGrid(text)) {
      try {
        if (plainSpec(spec)) roundTrip(parseSpec(spec));
      } catch (const ConfigError&) {
      }
    }
  } catch (const ConfigError&) {
  }
  return 0;
}
