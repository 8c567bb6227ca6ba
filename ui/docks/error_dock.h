#pragma once

#include <QWidget>
#include <vector>

#include "selection.h"
#include "snapshots.h"

class QCustomPlot;
class QCPColorMap;
class QCPItemRect;
class QComboBox;
class QLabel;

namespace kvscope::ui {

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
  /// The latest run's per-(layer, head) error of the side shown (RunSnapshot::headErrorK / V).
  const QVector<QVector<float>>& errors() const;
};

}  // namespace kvscope::ui
