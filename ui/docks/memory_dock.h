#pragma once

#include <QWidget>

#include "selection.h"
#include "snapshots.h"

class QCustomPlot;
class QCPItemRect;
class QLabel;

namespace kvscope::ui {

/// Per-layer stacked bars: quantized payload, scales/zero-points, residual, dequantized working buffer; the
/// unquantized-equivalent bytes as a line; totals and compression ratio in the title.
/// Below them, the stored bytes over the generated steps against the unquantized bytes. Clicking a layer selects it.
/// Under the key, which layers each engine (vLLM, llama.cpp, transformers) quantizes with the run's config as exported.
/// Two runs (A and B): A's bars, B's stored bytes per layer and per step as a second line, and B - A in the title.
class MemoryDock : public QWidget {
  Q_OBJECT
 public:
  MemoryDock(Selection* selection, QWidget* parent = nullptr);
  void show(const RunSnapshotPtr& run, const RunSnapshotPtr& against = nullptr);
  QCustomPlot* plot() const { return plot_; }
  QCustomPlot* stepsPlot() const { return steps_; }
  /// The engines line before it is elided to the dock's width ("Quantized as exported: vLLM 0.33 4,9,14 · ...").
  const QString& enginesLine() const { return enginesLine_; }

 private:
  void markLayer();
  void elideEngines();
  void fitTotals();
  void resizeEvent(QResizeEvent* e) override;
  Selection* sel_;
  QCustomPlot* plot_;
  QCustomPlot* steps_;
  QCPItemRect* mark_ = nullptr;
  QLabel* totals_;
  QLabel* legendB_;
  QLabel* legendTiers_;               ///< tiers by age: each tier's line in the per-step plot
  QLabel* engines_;                   ///< which layers vLLM, llama.cpp and transformers quantize with this config
  QString enginesLine_;               ///< engines_'s text before elision
  QString enginesKey_;                ///< the run (id, layers, spec) enginesLine_ was made for
  QString totalsFull_, totalsShort_;  ///< the totals, and their first sentence for a short dock
  bool abTotals_ = false;             ///< two runs: totals_ holds the A/B line
  int layers_ = 0;
};

}  // namespace kvscope::ui
