// The window's exports: the cache config for each deployment target (with what it cannot express), the runs as
// CSV, and the plots as PNG and PDF. Every file is written atomically; each export says what it did in one result.
#pragma once

#include <QList>
#include <QPair>
#include <QString>
#include <QStringList>

#include "cache/config.h"

class QCustomPlot;

namespace kvscope::ui {

class RunsModel;

enum class ExportTarget { Transformers, Kvscope, Vllm, LlamaCpp, ModelOpt };

struct ConfigExport {
  QString text;       ///< the file's contents
  QStringList notes;  ///< what the target does not express (also as comments in flag files)
  QString use;        ///< how to use it, one line
};

/// The export of `cfg` for `target`, written at `path` (named in the "use" line); `windows`: the loaded model's
/// sliding windows per layer, for the engines' rules on those layers (empty: none known). Throws cache::ConfigError
/// when the target cannot take the config at all (e.g. `dynamic` for transformers).
ConfigExport exportConfig(const cache::CacheConfig& cfg, ExportTarget target, const QString& path,
                          const cache::LayerWindows& windows = {});
/// The save dialog's filter of each target, in the order it offers them.
QList<QPair<ExportTarget, QString>> exportFilters();
/// Writes `text` to `path` atomically (QSaveFile); false with `error` set on failure.
bool writeFileAtomically(const QString& path, const QByteArray& text, QString* error);

/// What an export did: its one-line status, or the error; and what the target does not express.
struct ExportResult {
  bool ok = false;
  QString message;    ///< the status line (ok) or the error
  QStringList notes;  ///< shown in the message bar
};
/// The config file for `target` at `path`.
ExportResult exportConfigFile(const cache::CacheConfig& cfg, ExportTarget target, const QString& path,
                              const cache::LayerWindows& windows = {});
/// The runs table as CSV at `path`.
ExportResult exportRunsCsv(const RunsModel& runs, const QString& path);
/// Each plot as NAME.png and NAME.pdf in `dir`.
ExportResult exportPlots(const QString& dir, const QList<QPair<QString, QCustomPlot*>>& plots);

}  // namespace kvscope::ui
