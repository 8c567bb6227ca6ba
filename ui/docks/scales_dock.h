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
/// beside A's (hollow marks), and B / A for the selected layer. The block-row formats (llamacpp, vllm, mxfp4): the
/// selected layer's stored scales by binade (NVFP4's E4M3 block scales, MXFP4's E8M0, TurboQuant's key norms, ...)
/// and its codes by value (TurboQuant's centroid occupancy), K beside V.
class ScalesDock : public QWidget {
  Q_OBJECT
 public:
  ScalesDock(Selection* selection, QWidget* parent = nullptr);
  void show(const RunSnapshotPtr& run, const RunSnapshotPtr& against = nullptr);
  QCustomPlot* plot() const { return plot_; }
  QCustomPlot* blockPlot() const { return blocks_; }
  QCustomPlot* codePlot() const { return codes_; }

 private:
  void markLayer();
  void showBlocks();  // the selected layer's scale and code histograms (block-row formats)
  Selection* sel_;
  QCustomPlot* plot_;
  QWidget* blockBox_;
  QLabel* blockTitle_;
  QCustomPlot* blocks_;  // scales by binade
  QCustomPlot* codes_;   // codes by value
  QCPItemStraightLine* mark_ = nullptr;
  QLabel* counters_;
  QLabel* selected_;
  QLabel* key_;  ///< what each line is
  RunSnapshotPtr last_, against_;
};

}  // namespace kvscope::ui
