#include "exports.h"

#include <qcustomplot.h>

#include <QCoreApplication>
#include <QFile>
#include <QPair>
#include <QSaveFile>
#include <QTemporaryFile>
#include <cstdio>
#include <functional>

#include "runs_model.h"

namespace kvscope::ui {

namespace {
QString tr(const char* s) {
  return QCoreApplication::translate("ConfigExport", s);
}
/// Writes `path` through `write(tmp)` into a temporary file beside it, then renames that over `path`: nobody sees a
/// half-written plot, and a failure leaves whatever was there.
bool writeThrough(const QString& path, const std::function<bool(const QString&)>& write) {
  QTemporaryFile tmp(path + ".XXXXXX.part");
  if (!tmp.open()) return false;
  tmp.setPermissions(QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ReadGroup |
                     QFileDevice::ReadOther);
  const QString t = tmp.fileName();
  tmp.close();
  return write(t) && std::rename(QFile::encodeName(t).constData(), QFile::encodeName(path).constData()) == 0;
}

QStringList qt(const std::vector<std::string>& v) {
  QStringList out;
  for (const auto& s : v) out << QString::fromStdString(s);
  return out;
}
}  // namespace

ConfigExport exportConfig(const cache::CacheConfig& cfg, ExportTarget target, const QString& path,
                          const cache::LayerWindows& windows) {
  ConfigExport out;
  switch (target) {
    case ExportTarget::Transformers: {
      const auto e = cache::toHfCacheConfig(cfg);
      out.text = QString::fromStdString(e.json) + "\n";
      out.notes = qt(e.notes);
      out.use = tr("model.generate(..., cache_implementation=\"quantized\", cache_config=<this file's dict>)");
      break;
    }
    case ExportTarget::Vllm:
    case ExportTarget::LlamaCpp: {
      const bool vllm = target == ExportTarget::Vllm;
      const auto e = vllm ? cache::toVllmFlags(cfg, windows) : cache::toLlamaCppFlags(cfg, windows);
      out.text = "# " + QString::fromStdString(cache::toSpec(cfg)) + (vllm ? " for vLLM" : " for llama.cpp") + "\n";
      for (const auto& n : e.notes) out.text += "# note: " + QString::fromStdString(n) + "\n";
      if (!e.env.empty()) out.text += "# environment: " + QString::fromStdString(e.env) + "\n";
      out.text += QString::fromStdString(e.flags) + "\n";
      out.notes = qt(e.notes);
      out.use =
          e.env.empty()
              ? tr("add %1 to the %2 command line")
                    .arg(QString::fromStdString(e.flags), vllm ? "vllm serve" : "llama-cli/llama-server")
              : tr("run %2 with %3 in its environment and add %1 to its command line")
                    .arg(QString::fromStdString(e.flags), "llama-cli/llama-server", QString::fromStdString(e.env));
      break;
    }
    case ExportTarget::ModelOpt: {
      const auto e = cache::toModelOptConfig(cfg);
      out.text = QString::fromStdString(e.hfQuantConfig) + "\n";
      out.notes = qt(e.notes);
      out.use = tr("save it as hf_quant_config.json in the checkpoint directory, and add to config.json "
                   "\"quantization_config\": %1")
                    .arg(QString::fromStdString(e.quantizationConfig));
      break;
    }
    case ExportTarget::Kvscope:
      out.text = QString::fromStdString(cache::toKvscopeJson(cfg)) + "\n";
      out.use = tr("kvscope-cli --cache %1").arg(path);
      break;
  }
  return out;
}

QList<QPair<ExportTarget, QString>> exportFilters() {
  return {{ExportTarget::Transformers, tr("transformers cache_config (*.json)")},
          {ExportTarget::Vllm, tr("vLLM flags (*.txt)")},
          {ExportTarget::LlamaCpp, tr("llama.cpp flags (*.txt)")},
          {ExportTarget::ModelOpt, tr("Model-Optimizer hf_quant_config (*.json)")},
          {ExportTarget::Kvscope, tr("kvscope config (*.json)")}};
}

bool writeFileAtomically(const QString& path, const QByteArray& text, QString* error) {
  QSaveFile f(path);
  if (f.open(QIODevice::WriteOnly) && f.write(text) >= 0 && f.commit()) return true;
  if (error) *error = tr("cannot write %1: %2").arg(path, f.errorString());
  return false;
}

ExportResult exportConfigFile(const cache::CacheConfig& cfg, ExportTarget target, const QString& path,
                              const cache::LayerWindows& windows) {
  ExportResult r;
  try {
    const ConfigExport e = exportConfig(cfg, target, path, windows);
    r.ok = writeFileAtomically(path, e.text.toUtf8(), &r.message);
    if (r.ok) r.message = tr("Exported %1: %2").arg(path, e.use);
    r.notes = e.notes;
  } catch (const cache::ConfigError& e) {
    r.message = QString::fromStdString(e.what());
  }
  return r;
}

ExportResult exportRunsCsv(const RunsModel& runs, const QString& path) {
  ExportResult r;
  r.ok = writeFileAtomically(path, runs.csv().toUtf8(), &r.message);
  if (r.ok) r.message = tr("Exported %1 runs to %2").arg(runs.rowCount()).arg(path);
  return r;
}

ExportResult exportPlots(const QString& dir, const QList<QPair<QString, QCustomPlot*>>& plots) {
  QStringList failed;
  for (const auto& [name, plot] : plots) {
    auto* p = plot;
    if (!writeThrough(dir + "/" + name + ".png", [p](const QString& f) { return p->savePng(f, 0, 0, 2.0); }))
      failed << name + ".png";
    if (!writeThrough(dir + "/" + name + ".pdf", [p](const QString& f) { return p->savePdf(f); }))
      failed << name + ".pdf";
  }
  ExportResult r;
  r.ok = failed.isEmpty();
  r.message = r.ok ? tr("Saved %1 plots as PNG and PDF in %2").arg(plots.size()).arg(dir)
                   : tr("could not write %1 in %2").arg(failed.join(", "), dir);
  return r;
}

}  // namespace kvscope::ui
