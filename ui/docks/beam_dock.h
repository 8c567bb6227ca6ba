#pragma once

#include <QWidget>

#include "selection.h"
#include "snapshots.h"

class QTableWidget;
class QLabel;

namespace kvscope::ui {

/// Beam search, step by step, as the cache sees it: for each beam the old beam whose cache rows it continues (the
/// reorder), the token it appended, its score and the row of the quantized store it reads. Below it, compact, the
/// finished hypotheses. Clicking a cell selects that beam (the text view shows its sequence) and the step's token.
class BeamDock : public QWidget {
  Q_OBJECT
 public:
  BeamDock(Selection* selection, QWidget* parent = nullptr);
  void show(const RunSnapshotPtr& run);
  QTableWidget* table() const { return table_; }
  QTableWidget* hypotheses() const { return hypotheses_; }

 private:
  void redraw();
  Selection* sel_;
  QTableWidget* table_;
  QTableWidget* hypotheses_;
  QLabel* summary_;
  RunSnapshotPtr last_;
};

}  // namespace kvscope::ui
