// What a finished run's NaN/inf counters mean, said where the user looks, with the fix: the run's own config
// (RunSnapshot::config) with overflow=saturate.
#pragma once

#include <QString>
#include <functional>
#include <optional>

#include "cache/config.h"
#include "snapshots.h"

namespace kvscope::ui {

struct OverflowAdvice {
  QString text;              ///< why the run stored NaN/inf and what avoids it (plain text)
  cache::CacheConfig rerun;  ///< the run's config with overflow=saturate on every side that stored NaN/inf; everything
                             ///< else kept (its other options, per-layer rules, calibrated scales)
};

/// For a run whose fp8 cache (a side of it, in a per-layer config) stored NaN/inf values under overflow=nan (the
/// seed-compatible default), read from the run's recorded config; nothing for any other run, also when its NaN came
/// from elsewhere (the model's own activations) or when the run has no recorded config.
std::optional<OverflowAdvice> overflowAdvice(const RunSnapshot& run);

class MessageBar;
/// The advice for `run`, if any, as a warning in `bar`, with a "Rerun with overflow=saturate" button calling
/// `rerun(config)` when `offerRerun`.
void showOverflowAdvice(MessageBar* bar, const RunSnapshot& run, bool offerRerun,
                        const std::function<void(const cache::CacheConfig& config)>& rerun);

}  // namespace kvscope::ui
