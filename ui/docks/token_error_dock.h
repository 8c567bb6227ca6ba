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
/// interpolation, labelled scale; the selected token is marked; clicking a cell selects its token.
class TokenErrorDock : public QWidget {
  Q_OBJECT
 public:
  TokenErrorDock(Selection* selection, QWidget* parent = nullptr);
  void show(const TokenErrorViewPtr& view);
  /// Shows `run`'s errors: its attached view, else the one this run's inspection sent last; for a run that has none
  /// (yet), an empty map and why, never the previous run's map.
  void showRun(const RunSnapshotPtr& run);
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
  QString emptyReason_;  ///< what the title says when the view has nothing quantized
};

}  // namespace kvscope::ui
