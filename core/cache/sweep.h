// A sweep of cache configs, planned and judged in one place for the CLI (`kvscope-cli sweep`) and the GUI's compare
// dock: the grid's configs, every one valid before the first runs, and the best run under a budget. No torch, no Qt.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cache/config.h"

namespace kvscope::cache {

/// Every config of the grids (expandGrid), in order, each validated. Throws ConfigError naming the first bad one.
std::vector<CacheConfig> planSweep(const std::vector<std::string>& grids);

/// What "best" means: the smallest stored KV whose mean KL stays within the limit, or the lowest mean KL whose
/// stored KV bytes stay within it.
struct SweepBudget {
  enum class Kind { MaxMeanKl, MaxStoredBytes };
  Kind kind = Kind::MaxMeanKl;
  double limit = 0;
};

/// One finished run of a sweep, as the budget sees it.
struct SweepOutcome {
  std::int64_t storedBytes = 0;
  double meanKl = 0;
  bool hasKl = true;     ///< false: run without the unquantized reference (no KL to judge)
  bool finished = true;  ///< false: cancelled, failed: never the best
  bool finite = true;    ///< false: the cache stored NaN/inf codes: never the best, whatever its figures say
};

/// The index of the best outcome under the budget; nullopt when none meets it. Ties keep the earlier run. A run that
/// did not finish, stored NaN/inf or has a KL that is not finite is never the best.
std::optional<std::size_t> bestUnderBudget(const std::vector<SweepOutcome>& outcomes, const SweepBudget& budget);

}  // namespace kvscope::cache
