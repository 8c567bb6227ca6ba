#pragma once

#include <QGridLayout>
#include <QWidget>
#include <array>
#include <vector>

#include "selection.h"
#include "snapshots.h"

class QCustomPlot;
class QCPColorMap;
class QCPItemRect;
class QComboBox;
class QLabel;

namespace kvscope::ui {

class ElidedLabel;

/// Layer x head relative error ||x̂ - x|| / ||x|| of what the latest update quantized there (K or V; a layer keeps its
/// last value while its updates quantize nothing), no interpolation, labelled scale.
/// Two runs (A and B) show as three maps: A and B on one colour range, and B - A on a diverging one (centred on 0).
/// Clicking a cell selects its layer and head.
class ErrorDock : public QWidget {
  Q_OBJECT
 public:
  ErrorDock(Selection* selection, QWidget* parent = nullptr);
  /// Shows `run`; with `against`, run A = `run` and B = `against` side by side with their difference.
  void show(const RunSnapshotPtr& run, const RunSnapshotPtr& against = nullptr);
  QCustomPlot* plot() const { return panes_[0].plot; }
  /// The map of B (1) or of B - A (2); hidden unless two runs are shown.
  QCustomPlot* plot(int pane) const { return panes_[static_cast<std::size_t>(pane)].plot; }
  /// The mean relative error shown for (layer, head) of the chosen side; NaN when none.
  float cell(int layer, int head) const;
  /// B - A at (layer, head) of the chosen side; NaN when either has none (or one run is shown).
  float difference(int layer, int head) const;

 private:
  struct Pane {
    ElidedLabel* title = nullptr;
    QCustomPlot* plot = nullptr;
    QCPColorMap* map = nullptr;
    QCPColorMap* nanMap = nullptr;  ///< the heads whose error is NaN/inf, in a colour of their own
    QCPItemRect* mark = nullptr;
  };
  void redraw();
  /// Fills pane `p` from `values` (layers x heads; NaN: blank, inf: stored NaN/inf); returns those two counts.
  std::pair<int, int> fill(Pane& p, const std::vector<std::vector<float>>& values, int layers, int heads);
  Selection* sel_;
  std::array<Pane, 3> panes_;
  QComboBox* which_;
  QLabel* legend_;
  QGridLayout* grid_;
  RunSnapshotPtr last_, against_;
  /// `run`'s per-(layer, head) error of the side shown (RunSnapshot::headErrorK / V).
  const QVector<QVector<float>>& errors(const RunSnapshotPtr& run) const;
};

}  // namespace kvscope::ui
