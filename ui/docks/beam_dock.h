#pragma once

#include <QWidget>

#include "selection.h"
#include "snapshots.h"

class QTableWidget;
class QLabel;

namespace kvscope::ui {

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

}  // namespace kvscope::ui
