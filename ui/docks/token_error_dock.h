#pragma once

#include <QWidget>

#include "selection.h"
#include "snapshots.h"

class QCustomPlot;
class QCPColorMap;
class QCPItemStraightLine;
class QComboBox;
class QLabel;

namespace kvscope::ui {

/// Token x channel absolute error |x̂ - x| of the selected layer and head (K or V) over the whole run, against the
/// states the model produced (a flush of a residual cache adds the drift of its re-quantization: see ErrorHistory). No
/// interpolation, labelled scale; the selected token is marked; clicking a cell selects its token. Drawn from the
/// engine's bounded summary: past its budget a column holds several tokens' largest error. Two runs (A and
/// B) whose maps are of the same layer: A, B (one colour range for both) or B - A over the tokens both hold.
class TokenErrorDock : public QWidget {
  Q_OBJECT
 public:
  TokenErrorDock(Selection* selection, QWidget* parent = nullptr);
  void show(const TokenErrorViewPtr& view);
  /// Shows `run`'s errors: its attached view, else the one this run's inspection sent last; for a run that has none
  /// (yet), an empty map and why, never the previous run's map.
  void showRun(const RunSnapshotPtr& run, const RunSnapshotPtr& against = nullptr);
  /// The run the engine is inspecting (its views follow the selected layer); other runs keep the map they finished
  /// with.
  void setLiveRun(int runId) { liveRun_ = runId; }
  /// What is shown for two runs: 0 A, 1 B, 2 B - A.
  void setPairView(int which);
  /// The value shown at (token, channel) of the selected head: that of the column holding the token; NaN where none.
  float shownCell(qint64 token, int channel) const;
  /// Tokens per drawn column: the summary's row width (the coarser of two runs' for B - A).
  qint64 shownTokensPerColumn() const;
  QCustomPlot* plot() const { return plot_; }
  TokenErrorViewPtr view() const { return view_; }

 private:
  void redraw();
  Selection* sel_;
  QCustomPlot* plot_;
  QCPColorMap* map_;
  QCPItemStraightLine* mark_;
  QComboBox* which_;
  QLabel* title_;
  TokenErrorViewPtr view_;
  TokenErrorViewPtr liveView_;  ///< the engine's latest view of the live run
  int shownRun_ = 0;            ///< the run shown (0: none yet, the engine's views show as they come)
  TokenErrorViewPtr other_;     ///< run B's map, when two runs of the same layer and shape are shown
  QComboBox* pairShow_;
  int liveRun_ = 0;
  int mode_ = 0;         ///< what redraw() showed: 0 A, 1 B, 2 B - A
  QString emptyReason_;  ///< what the title says when the view has nothing quantized
};

}  // namespace kvscope::ui
