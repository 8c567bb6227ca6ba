#pragma once

#include <QWidget>

#include "selection.h"
#include "snapshots.h"

class QCustomPlot;
class QCPItemStraightLine;
class QLabel;

namespace kvscope::ui {

/// FP8 scales per layer for K and V (one value per tensor; the mean over heads/channels when finer), and the
/// overflow / NaN counters, highlighted when the seed-compatible policy produced NaN. Two runs (A and B): B's scales
/// beside A's (hollow marks), and B / A for the selected layer.
class ScalesDock : public QWidget {
  Q_OBJECT
 public:
  ScalesDock(Selection* selection, QWidget* parent = nullptr);
  void show(const RunSnapshotPtr& run, const RunSnapshotPtr& against = nullptr);
  QCustomPlot* plot() const { return plot_; }

 private:
  void markLayer();
  Selection* sel_;
  QCustomPlot* plot_;
  QCPItemStraightLine* mark_ = nullptr;
  QLabel* counters_;
  QLabel* selected_;
  QLabel* key_;  ///< what each line is
  RunSnapshotPtr last_, against_;
};

}  // namespace kvscope::ui
