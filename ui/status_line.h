// The status bar's line: the device, the latest run's figures and the process's resident memory.
#pragma once

#include <QString>

#include "snapshots.h"

namespace kvscope::ui {

/// "device cpu — SPEC: N tokens, KV x MiB, prefill p tok/s, decode d tok/s — process m MiB" (no run: device and
/// memory only).
QString statusLine(const QString& device, const RunSnapshotPtr& last);

}  // namespace kvscope::ui
