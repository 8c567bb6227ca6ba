// What a finished run's NaN/inf counters mean, said where the user looks, with the fix when the form can apply it.
#pragma once

#include <QString>
#include <functional>
#include <optional>

#include "snapshots.h"

namespace kvscope::ui {

struct OverflowAdvice {
  QString text;           ///< why the run stored NaN/inf and what avoids it (plain text)
  QString saturatedSpec;  ///< the run's config with overflow=saturate; empty when the form cannot hold the config
                          ///< (per-layer rules, offline-calibrated scales)
};

/// For a run whose fp8 cache stored NaN/inf values under overflow=nan (the seed-compatible default); nothing for any
/// other run, also when its NaN came from elsewhere (the model's own activations).
std::optional<OverflowAdvice> overflowAdvice(const RunSnapshot& run);

class MessageBar;
/// The advice for `run`, if any, as a warning in `bar`, with a "Rerun with overflow=saturate" button calling
/// `rerun(spec)` when `offerRerun` and the form can hold the fixed config.
void showOverflowAdvice(MessageBar* bar, const RunSnapshot& run, bool offerRerun,
                        const std::function<void(const QString& spec)>& rerun);

}  // namespace kvscope::ui
