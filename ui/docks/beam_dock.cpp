#include "docks/beam_dock.h"

#include <QLabel>
#include <QTableWidget>
#include <QVBoxLayout>

namespace kvscope::ui {

BeamDock::BeamDock(Selection* selection, QWidget* parent) : QWidget(parent), sel_(selection) {
  auto* l = new QVBoxLayout(this);
  summary_ = new QLabel(tr("Beam search runs show here (Decoding: beam search)."), this);
  summary_->setWordWrap(true);
  table_ = new QTableWidget(0, 0, this);
  table_->setObjectName("beamTable");
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  l->addWidget(summary_);
  l->addWidget(table_, 1);
  connect(table_, &QTableWidget::cellClicked, this, [this](int row, int col) {
    if (!last_ || row >= last_->beamSteps.size()) return;
    sel_->setBeam(col);
    sel_->setToken(last_->promptTokens + last_->beamSteps[row].step);
  });
  connect(sel_, &Selection::changed, this, [this] { redraw(); });
}

void BeamDock::show(const RunSnapshotPtr& run) {
  if (run->beamSteps.isEmpty()) return;
  last_ = run;
  redraw();
  table_->scrollToBottom();
}

void BeamDock::redraw() {
  if (!last_) return;
  const auto& run = last_;
  const int beams = static_cast<int>(run->beamSteps.front().parents.size());
  table_->setColumnCount(beams);
  QStringList headers;
  for (int b = 0; b < beams; ++b) headers << (b == sel_->beam() ? tr("▶ beam %1").arg(b) : tr("beam %1").arg(b));
  table_->setHorizontalHeaderLabels(headers);
  table_->setRowCount(static_cast<int>(run->beamSteps.size()));
  for (int r = 0; r < run->beamSteps.size(); ++r) {
    const auto& st = run->beamSteps[r];
    table_->setVerticalHeaderItem(r, new QTableWidgetItem(QString::number(st.step)));
    const bool selectedStep = run->promptTokens + st.step == sel_->token();
    for (int b = 0; b < beams && b < st.parents.size(); ++b) {
      const bool moved = st.parents[b] != b;
      QString cell = tr("%1%2 %3").arg(moved ? QString("\u2190%1 ").arg(st.parents[b]) : QString(),
                                       st.tokens.value(b).trimmed().isEmpty() ? "\u2423" : st.tokens.value(b),
                                       QString::number(st.scores.value(b), 'f', 2));
      auto* item = new QTableWidgetItem(cell);
      item->setToolTip(tr("continues beam %1 (the cache rows were reordered to follow it); reads quantized-store row %2")
                           .arg(st.parents[b])
                           .arg(b < st.storeRows.size() ? QString::number(st.storeRows[b]) : tr("n/a")));
      if (moved) item->setBackground(QColor(255, 236, 179));
      if (b == sel_->beam() || selectedStep) {
        QFont f = item->font();
        f.setBold(b == sel_->beam() && selectedStep);
        item->setFont(f);
        if (!moved) item->setBackground(QColor(220, 235, 250));
      }
      table_->setItem(r, b, item);
    }
  }
  QString text = tr("%1: %2 steps; selected beam %3").arg(run->spec).arg(run->beamSteps.size()).arg(sel_->beam());
  for (int i = 0; i < run->beamTexts.size(); ++i)
    text += tr("<br><b>%1</b> (%2): %3").arg(i).arg(run->beamScores.value(i), 0, 'f', 4).arg(run->beamTexts[i].toHtmlEscaped());
  summary_->setText(text);
}

}  // namespace kvscope::ui
