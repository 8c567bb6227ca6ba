#pragma once

#include <QVector>
#include <QWidget>

#include "snapshots.h"

class QCustomPlot;
class QComboBox;

namespace kvscope::ui {

/// Overlay of finished runs, one curve each: KL against the reference, log-prob, or stored KV MiB per generated step.
class OverlayPlot : public QWidget {
  Q_OBJECT
 public:
  explicit OverlayPlot(QWidget* parent = nullptr);
  /// `names`: how the runs table names them (RunsModel), one per run; empty: their labels.
  void show(const QVector<RunSnapshotPtr>& runs, const QStringList& names = {});
  QCustomPlot* plot() const { return plot_; }
  QComboBox* metricBox() const { return metric_; }

 Q_SIGNALS:
  /// A legend entry was clicked: the run it names (its number) is to be shown in every view.
  void runClicked(int runId);

 private:
  void redraw();
  QCustomPlot* plot_;
  QComboBox* metric_;
  QVector<RunSnapshotPtr> runs_;
  QStringList names_;
};

}  // namespace kvscope::ui
