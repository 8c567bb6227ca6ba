// The views of a run: each takes the latest snapshot and redraws itself; none calls another.
#pragma once

#include <QTextBrowser>
#include <QWidget>

#include "selection.h"
#include "snapshots.h"

class QCustomPlot;
class QCPColorMap;
class QCPItemRect;
class QCPItemStraightLine;
class QMouseEvent;
class QComboBox;
class QTableWidget;
class QLabel;

namespace kvscope::ui {

/// Streamed tokens, each coloured by a chosen metric (KL against the shadow reference, top-1 agreement, the
/// quantization error of its K/V in the selected layer, or log-prob); hovering shows position, id and the top
/// candidates; clicking a token selects its position.
class TextView : public QWidget {
  Q_OBJECT
 public:
  enum Metric { Kl, Top1, KvError, LogProb };
  TextView(Selection* selection, QWidget* parent = nullptr);
  void show(const RunSnapshotPtr& run);
  /// The inspected layer's error (for the KvError colouring), from a snapshot or from the engine after a run.
  void showErrors(const TokenErrorViewPtr& errors);
  QString plainText() const;
  void setMetric(Metric m);
  QTextBrowser* browser() const { return browser_; }
  /// What the colours mean for the latest run and metric (a run without a shadow reference has no KL or top-1:
  /// it is coloured by log-prob, and the key says so).
  QString colourKey() const;

 private:
  void redraw();
  void updateKey();
  QColor colour(const TokenView& t, qint64 pos) const;
  QString tokenHtml(int i) const;  ///< token i of the latest run as an anchor (colour, hover text)
  int shown_ = 0;                  ///< tokens of the latest run in the document
  Selection* sel_;
  QTextBrowser* browser_;
  QComboBox* metric_;
  QLabel* key_;
  RunSnapshotPtr last_;
  TokenErrorViewPtr errors_;
  double errorScale_ = 0;  ///< the worst token's mean |error| in the inspected layer (colour scale)
};

/// Per-layer stacked bars: quantized payload, scales/zero-points, residual, dequantized working buffer; the
/// unquantized-equivalent bytes as a line; totals and compression ratio in the title.
/// Below them, the stored bytes over the generated steps against the unquantized bytes. Clicking a layer selects it.
class MemoryDock : public QWidget {
  Q_OBJECT
 public:
  MemoryDock(Selection* selection, QWidget* parent = nullptr);
  void show(const RunSnapshotPtr& run);
  QCustomPlot* plot() const { return plot_; }
  QCustomPlot* stepsPlot() const { return steps_; }

 private:
  void markLayer();
  Selection* sel_;
  QCustomPlot* plot_;
  QCustomPlot* steps_;
  QCPItemRect* mark_ = nullptr;
  QLabel* totals_;
  int layers_ = 0;
};

/// FP8 scales per layer for K and V (one value per tensor; the mean over heads/channels when finer), and the
/// overflow / NaN counters, highlighted when the seed-compatible policy produced NaN.
class ScalesDock : public QWidget {
  Q_OBJECT
 public:
  ScalesDock(Selection* selection, QWidget* parent = nullptr);
  void show(const RunSnapshotPtr& run);
  QCustomPlot* plot() const { return plot_; }

 private:
  void markLayer();
  Selection* sel_;
  QCustomPlot* plot_;
  QCPItemStraightLine* mark_ = nullptr;
  QLabel* counters_;
  QLabel* selected_;
  RunSnapshotPtr last_;
};

/// Layer x head relative error ||x̂ - x|| / ||x|| of what the latest update quantized there (K or V; a layer keeps its
/// last value while its updates quantize nothing), no interpolation, labelled scale.
/// Clicking a cell selects its layer and head.
class ErrorDock : public QWidget {
  Q_OBJECT
 public:
  ErrorDock(Selection* selection, QWidget* parent = nullptr);
  void show(const RunSnapshotPtr& run);
  QCustomPlot* plot() const { return plot_; }
  /// The mean relative error shown for (layer, head) of the chosen side; NaN when none.
  float cell(int layer, int head) const;

 private:
  void redraw();
  Selection* sel_;
  QCustomPlot* plot_;
  QCPColorMap* map_ = nullptr;
  QCPColorMap* nanMap_ = nullptr;  ///< the heads whose error is NaN/inf, in a colour of their own
  QCPItemRect* mark_ = nullptr;
  QComboBox* which_;
  QLabel* legend_;
  RunSnapshotPtr last_;
  // Keeps the latest error seen per (layer, head), since a step quantizes only some layers' history.
  std::vector<std::vector<float>> relK_, relV_;
};

/// Beam search, step by step: for each beam the old beam it continues (the cache reorder), the token it appended and
/// its score, and the row of the quantized store it reads; then the finished hypotheses.
/// Clicking a cell selects that beam and the step's token position.
class BeamDock : public QWidget {
  Q_OBJECT
 public:
  BeamDock(Selection* selection, QWidget* parent = nullptr);
  void show(const RunSnapshotPtr& run);
  QTableWidget* table() const { return table_; }

 private:
  void redraw();
  Selection* sel_;
  QTableWidget* table_;
  QLabel* summary_;
  RunSnapshotPtr last_;
};

/// Token x channel absolute error |x̂ - x| of the selected layer and head (K or V) over the whole run, against the
/// states the model produced (a flush of a residual cache adds the drift of its re-quantization: see ErrorHistory). No
/// interpolation, labelled scale; the selected token is marked; clicking a cell selects its token.
class TokenErrorDock : public QWidget {
  Q_OBJECT
 public:
  TokenErrorDock(Selection* selection, QWidget* parent = nullptr);
  void show(const TokenErrorViewPtr& view);
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
};

/// Overlay of finished runs, one curve each: KL against the reference, log-prob, or stored KV MiB per generated step.
class OverlayPlot : public QWidget {
  Q_OBJECT
 public:
  explicit OverlayPlot(QWidget* parent = nullptr);
  void show(const QVector<RunSnapshotPtr>& runs);
  QCustomPlot* plot() const { return plot_; }
  QComboBox* metricBox() const { return metric_; }

 private:
  void redraw();
  QCustomPlot* plot_;
  QComboBox* metric_;
  QVector<RunSnapshotPtr> runs_;
};

}  // namespace kvscope::ui
