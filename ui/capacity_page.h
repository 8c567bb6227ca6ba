// The compare dock's "Capacity" tab: what fits, per engine, for the loaded model (plan::makePlan on its file's header,
// never its weights): the engine, its version, the GPU or the KV memory, the request length and the sequences; a row
// per run's config with the engine's form of it, its bytes per token, the tokens and requests that fit and its mean
// KL; the engine's own log lines for the chosen row; and the accuracy x capacity front across the runs. The runs
// table's "fits" column reads fit().
#pragma once

#include <QWidget>
#include <map>
#include <optional>

#include "plan/plan.h"
#include "runs_model.h"
#include "snapshots.h"

class QComboBox;
class QCustomPlot;
class QDoubleSpinBox;
class QLabel;
class QPlainTextEdit;
class QSpinBox;
class QTableWidget;

namespace kvscope::ui {

class CapacityPage : public QWidget {
  Q_OBJECT
 public:
  explicit CapacityPage(QWidget* parent = nullptr);

  /// The loaded model's file (a .gguf, a config.json or a directory; a .safetensors file's directory): its layout
  /// is read from the header. A file the planner cannot read leaves the page saying why.
  void setModelPath(const QString& path);
  /// The runs whose configs the page plans (the compare table's).
  void setRuns(const QVector<RunSnapshotPtr>& runs);

  /// What a config gives under the page's settings: the tokens that fit and the requests of the chosen length;
  /// `text` for the runs table ("1.94M"), `why` the requests in words, or why there is no figure (no model, a config
  /// the engine cannot store, no memory).
  RunsModel::FitCell fit(const cache::CacheConfig& cfg) const;
  /// The settings in words, for the runs table's header tooltip ("vLLM 0.34 on H100-80GB, 131,072-token requests").
  QString settingsText() const;

  // For tests: the controls.
  QComboBox* engineBox() const { return engine_; }
  QComboBox* gpuBox() const { return gpu_; }
  QSpinBox* lengthBox() const { return length_; }
  QTableWidget* table() const { return table_; }
  QPlainTextEdit* logView() const { return log_; }

 Q_SIGNALS:
  /// The figures changed (settings, model or runs): the runs table redraws its column.
  void fitsChanged();

 private:
  plan::PlanOptions options() const;
  void replan();
  void fillVersions();
  void showLog(int row);
  void drawFront();

  std::optional<plan::ModelLayout> layout_;
  QString layoutError_;
  QVector<RunSnapshotPtr> runs_;
  std::map<std::string, plan::ConfigPlan> plans_;  ///< by SPEC, under the current settings
  QString planError_;
  QComboBox* engine_;
  QComboBox* version_;
  QComboBox* gpu_;
  QDoubleSpinBox* memory_;
  QSpinBox* length_;
  QSpinBox* parallel_;
  QSpinBox* tp_;
  QLabel* summary_;
  QTableWidget* table_;
  QPlainTextEdit* log_;
  QCustomPlot* plot_;
  std::vector<std::string> rowSpecs_;
};

}  // namespace kvscope::ui
