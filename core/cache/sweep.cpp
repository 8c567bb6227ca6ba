#include "cache/sweep.h"

#include <cmath>

namespace kvscope::cache {

std::vector<CacheConfig> planSweep(const std::vector<std::string>& grids) {
  std::vector<CacheConfig> out;
  for (const auto& g : grids)
    for (const auto& s : expandGrid(g)) out.push_back(parseSpec(s));
  return out;
}

std::optional<std::size_t> bestUnderBudget(const std::vector<SweepOutcome>& outcomes, const SweepBudget& budget) {
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    const SweepOutcome& o = outcomes[i];
    if (!o.finished || !o.finite || (o.hasKl && !std::isfinite(o.meanKl))) continue;
    if (budget.kind == SweepBudget::Kind::MaxMeanKl) {
      if (o.hasKl && o.meanKl <= budget.limit && (!best || o.storedBytes < outcomes[*best].storedBytes)) best = i;
    } else if (static_cast<double>(o.storedBytes) <= budget.limit && o.hasKl &&
               (!best || o.meanKl < outcomes[*best].meanKl)) {
      best = i;
    }
  }
  return best;
}

}  // namespace kvscope::cache
