// The compare dock: the finished runs (a RunsModel in a table beside their overlay), a sweep of a config grid judged
// under a budget (cache::planSweep / bestUnderBudget, as the CLI's sweep), the text evaluation of the runs'
// configs, and the per-layer tuner. It asks the window to run configs, to evaluate and to scan; it never talks to the
// engine.
#pragma once

#include <QWidget>
#include <vector>

#include "snapshots.h"

class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSplitter;
class QTabWidget;
class QTableView;

namespace kvscope::ui {

class CapacityPage;
class EvalPage;
class TunePage;
class DoctorPage;
class ProbePage;
class OverlayPlot;
class RunsModel;

class CompareDock : public QWidget {
  Q_OBJECT
 public:
  explicit CompareDock(QWidget* parent = nullptr);

  RunsModel* runs() const { return model_; }
  QTableView* table() const { return table_; }
  OverlayPlot* overlay() const { return overlay_; }
  EvalPage* evalPage() const { return eval_; }
  TunePage* tunePage() const { return tune_; }
  DoctorPage* doctorPage() const { return doctor_; }
  ProbePage* probePage() const { return probe_; }
  CapacityPage* capacityPage() const { return capacity_; }
  bool sweeping() const { return sweeping_; }

  /// A finished run joins the table (and, during a sweep, the sweep's results; the next config follows).
  void addRun(const RunSnapshotPtr& run);
  void setRuns(const QVector<RunSnapshotPtr>& runs);
  /// Runs every config of `grid` in turn (runRequested for each); false, with failed(), for a bad grid.
  bool startSweep(const QString& grid);
  /// Ends a sweep after the running config (Stop, a failed run): the best so far is named.
  void stopSweep();
  /// The configs the text evaluation takes: the selected runs' (every run's when none is selected), without repeats
  /// or the unquantized `dynamic` (always the reference); empty when no run has one.
  std::vector<cache::CacheConfig> evalConfigs() const;
  /// Whether Sweep, Evaluate and Scan can start (a model loaded, the engine idle: the window's busy state). Sweep also
  /// waits for a sweep to end.
  void setStartEnabled(bool on);
  /// A busy indicator for an evaluation (total 0: unknown; done < 0 hides it).
  void showProgress(int done, int total);

 Q_SIGNALS:
  /// Run this config next (a sweep's next point).
  void runRequested(const kvscope::cache::CacheConfig& config);
  /// A run's config was chosen (double-click): load it into the form.
  void configChosen(const kvscope::cache::CacheConfig& config);
  void evaluateRequested();
  /// The tuner's Scan was clicked.
  void tuneRequested();
  /// The doctor's Diagnose was clicked.
  void doctorRequested();
  /// The Long context page's Probe (its configs: evalConfigs()).
  void probeRequested();
  /// A probe opened as a run: its text, the config and its answer tokens.
  void probeRunRequested(const cache::CacheConfig& config, const QString& prompt, int maxNew);
  /// A layer was clicked on the tuner's bars: select it everywhere.
  void layerChosen(int layer);
  void failed(const QString& message);
  /// The table's selection: one run (b null), two (a the earlier row, b the later), or none (both null: the views
  /// follow the latest run). More than two selected rows choose none (they are the text evaluation's configs).
  void runsChosen(const kvscope::ui::RunSnapshotPtr& a, const kvscope::ui::RunSnapshotPtr& b);

 protected:
  void resizeEvent(QResizeEvent* e) override;

 private:
  void arrange();
  void updateOverlay();
  void nextInSweep();
  void finishSweep();

  RunsModel* model_;
  QTableView* table_;
  OverlayPlot* overlay_;
  EvalPage* eval_;
  TunePage* tune_;
  DoctorPage* doctor_;
  ProbePage* probe_;
  CapacityPage* capacity_;
  QSplitter* split_;
  QTabWidget* tabs_;
  QLabel* common_;
  QLineEdit* grid_;
  QPushButton* sweep_;
  QComboBox* budgetKind_;
  QDoubleSpinBox* budget_;
  QLabel* best_;
  QProgressBar* progress_;
  std::vector<cache::CacheConfig> queue_;
  QVector<RunSnapshotPtr> sweepRuns_;
  bool sweeping_ = false;
  bool startEnabled_ = true;
};

}  // namespace kvscope::ui
