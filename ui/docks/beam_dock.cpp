#include "docks/beam_dock.h"

#include <QHeaderView>
#include <QLabel>
#include <QTableWidget>
#include <QVBoxLayout>

namespace kvscope::ui {

BeamDock::BeamDock(Selection* selection, QWidget* parent) : QWidget(parent), sel_(selection) {
  auto* l = new QVBoxLayout(this);
  l->setContentsMargins(2, 2, 2, 2);
  summary_ = new QLabel(tr("Beam search runs show here (Decoding: beam search)."), this);
  summary_->setObjectName("beamSummary");
  summary_->setWordWrap(true);
  table_ = new QTableWidget(0, 0, this);
  table_->setObjectName("beamTable");
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setWordWrap(false);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  const int line = fontMetrics().height() + 6;  // one line a row: more steps in view
  table_->verticalHeader()->setDefaultSectionSize(line);
  table_->setToolTip(
      tr("Each cell: ←p when the beam continues beam p's cache rows (the reorder, shaded), the token it "
         "appended, its score, and the quantized-store row it reads"));
  hypotheses_ = new QTableWidget(0, 3, this);
  hypotheses_->setObjectName("beamHypotheses");
  hypotheses_->setHorizontalHeaderLabels({tr("#"), tr("score"), tr("finished hypothesis")});
  hypotheses_->verticalHeader()->setVisible(false);
  hypotheses_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  hypotheses_->horizontalHeader()->setSectionResizeMode(2, QHeaderView::Stretch);
  hypotheses_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  hypotheses_->setWordWrap(false);
  hypotheses_->setTextElideMode(
      Qt::ElideMiddle);  // the start and the end of each hypothesis stay; whole in the tooltip
  // A few lines: the reorder above is what this dock is for.
  hypotheses_->verticalHeader()->setDefaultSectionSize(line);
  hypotheses_->setMaximumHeight(hypotheses_->horizontalHeader()->sizeHint().height() + 3 * line + 4);
  l->addWidget(summary_);
  l->addWidget(table_, 1);
  l->addWidget(hypotheses_);
  // The selected beam is drawn by this dock (▶ in its header, shaded cells), never by the table's own selection, so
  // that a header click and a cell click select the same beam everywhere.
  table_->setSelectionMode(QAbstractItemView::NoSelection);
  connect(table_->horizontalHeader(), &QHeaderView::sectionClicked, this, [this](int col) {
    if (last_) sel_->setBeam(col);
  });
  connect(table_, &QTableWidget::cellClicked, this, [this](int row, int col) {
    if (!last_ || row >= last_->beamSteps.size()) return;
    sel_->setBeam(col);
    sel_->setToken(last_->promptTokens + last_->beamSteps[row].step);
  });
  connect(sel_, &Selection::changed, this, [this] { redraw(); });
}

void BeamDock::show(const RunSnapshotPtr& run) {
  if (run->beamSteps.isEmpty()) {  // not a beam search: nothing of another run stays
    last_.reset();
    table_->setRowCount(0);
    table_->setColumnCount(0);
    hypotheses_->setRowCount(0);
    hypotheses_->setVisible(false);
    summary_->setText(tr("Run #%1 is not a beam search (Decoding: beam search shows which cache rows each beam reads).")
                          .arg(run->runId));
    return;
  }
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
  int reorders = 0;
  for (int r = 0; r < run->beamSteps.size(); ++r) {
    const auto& st = run->beamSteps[r];
    table_->setVerticalHeaderItem(r, new QTableWidgetItem(tr("step %1").arg(st.step)));
    const bool selectedStep = run->promptTokens + st.step == sel_->token();
    for (int b = 0; b < beams && b < st.parents.size(); ++b) {
      const bool moved = st.parents[b] != b;
      reorders += moved;
      const QString row = b < st.storeRows.size() ? tr(" · row %1").arg(st.storeRows[b]) : QString();
      // transformers scores a beam that has finished with -1e9 (never continued): said in words.
      const float score = st.scores.value(b);
      const QString scoreText = score <= -1e8f ? tr("done") : QString::number(score, 'f', 2);
      QString cell = tr("%1%2  %3%4")
                         .arg(moved ? QString("\u2190%1 ").arg(st.parents[b]) : QString(),
                              st.tokens.value(b).trimmed().isEmpty() ? "\u2423" : st.tokens.value(b), scoreText, row);
      auto* item = new QTableWidgetItem(cell);
      item->setToolTip(tr("beam %1 continues beam %2 (the cache rows were reordered to follow it); reads "
                          "quantized-store row %3")
                           .arg(b)
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
  summary_->setText(tr("%1: %2 steps, %3 reorders (shaded ←p: the beam took beam p's cache rows). Beam %4 selected: "
                       "its sequence is in the text view.")
                        .arg(run->spec.toHtmlEscaped())
                        .arg(run->beamSteps.size())
                        .arg(reorders)
                        .arg(sel_->beam()));
  hypotheses_->setRowCount(static_cast<int>(run->beamTexts.size()));
  for (int i = 0; i < run->beamTexts.size(); ++i) {
    QString text = run->beamTexts[i];
    text.replace('\n', " ");
    const QStringList cells{QString::number(i), QString::number(run->beamScores.value(i), 'f', 4), text};
    for (int c = 0; c < cells.size(); ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      item->setToolTip(run->beamTexts[i]);
      hypotheses_->setItem(i, c, item);
    }
  }
  hypotheses_->setVisible(!run->beamTexts.isEmpty());
}

}  // namespace kvscope::ui
