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
