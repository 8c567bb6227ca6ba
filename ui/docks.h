// The views of a run: each takes the latest snapshot and redraws itself; none calls another.
#pragma once

#include <QTextBrowser>
#include <QWidget>

#include "snapshots.h"

class QCustomPlot;
class QCPColorMap;
class QComboBox;
class QTableWidget;
class QLabel;

namespace kvscope::ui {

/// Streamed tokens, each coloured by KL against the shadow reference (or by log-prob without one); hovering shows
/// position, id and the top candidates.
class TextView : public QTextBrowser {
  Q_OBJECT
 public:
  explicit TextView(QWidget* parent = nullptr);
  void show(const RunSnapshotPtr& run);
  QString plainText() const { return toPlainText(); }
};

/// Per-layer stacked bars: quantized payload, scales/zero-points, residual, dequantized working buffer; the
/// unquantized-equivalent bytes as a line; totals and compression ratio in the title.
class MemoryDock : public QWidget {
  Q_OBJECT
 public:
  explicit MemoryDock(QWidget* parent = nullptr);
  void show(const RunSnapshotPtr& run);
  QCustomPlot* plot() const { return plot_; }

 private:
  QCustomPlot* plot_;
  QLabel* totals_;
};

/// FP8 scales per layer for K and V (one value per tensor; the mean over heads/channels when finer), and the
/// overflow / NaN counters, highlighted when the seed-compatible policy produced NaN.
class ScalesDock : public QWidget {
  Q_OBJECT
 public:
  explicit ScalesDock(QWidget* parent = nullptr);
  void show(const RunSnapshotPtr& run);
  QCustomPlot* plot() const { return plot_; }

 private:
  QCustomPlot* plot_;
  QLabel* counters_;
};

/// Layer x head relative L2 error of what the latest update quantized (K or V), no interpolation, labelled scale.
class ErrorDock : public QWidget {
  Q_OBJECT
 public:
  explicit ErrorDock(QWidget* parent = nullptr);
  void show(const RunSnapshotPtr& run);
  QCustomPlot* plot() const { return plot_; }

 private:
  void redraw();
  QCustomPlot* plot_;
  QCPColorMap* map_ = nullptr;
  QComboBox* which_;
  RunSnapshotPtr last_;
  // Keeps the latest error seen per (layer, head), since a step quantizes only some layers' history.
  std::vector<std::vector<float>> relK_, relV_;
};

/// Beam search, step by step: for each beam the old beam it continues (the cache reorder), the token it appended and
/// its score, and the row of the quantized store it reads; then the finished hypotheses.
class BeamDock : public QWidget {
  Q_OBJECT
 public:
  explicit BeamDock(QWidget* parent = nullptr);
  void show(const RunSnapshotPtr& run);

 private:
  QTableWidget* table_;
  QLabel* summary_;
};

}  // namespace kvscope::ui
