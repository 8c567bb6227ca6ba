// The status bar's line: the device, the latest run's figures and the process's resident memory.
#pragma once

#include <QString>

#include "snapshots.h"

namespace kvscope::ui {

/// "device cpu — SPEC: N tokens, KV x MiB, prefill p tok/s, decode d tok/s — process m MiB" (no run: device and
/// memory only). A CUDA device says its memory: "device cuda:0 (1.2 of 139.8 GiB) — ..." from the latest run, else
/// from `loaded` (the model's load).
QString statusLine(const QString& device, const RunSnapshotPtr& last, const DeviceMemoryView& loaded = {});

}  // namespace kvscope::ui
