#include "docks/token_error_dock.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QLabel>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "docks/plot_style.h"
#include "runs_model.h"

namespace kvscope::ui {

TokenErrorDock::TokenErrorDock(Selection* selection, QWidget* parent) : QWidget(parent), sel_(selection) {
  auto* l = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout();
  which_ = new QComboBox(this);
  which_->setObjectName("tokenErrorSide");
  which_->addItems({tr("keys"), tr("values")});
  title_ = new QLabel(tr("Run a generation: the selected layer and head show here, token by channel."), this);
  title_->setObjectName("tokenErrorTitle");
  title_->setWordWrap(true);
  bar->addWidget(which_);
  bar->addWidget(title_, 1);
  l->addLayout(bar);
  plot_ = new QCustomPlot(this);
  plot_->setMinimumSize(kPlotMin);
  l->addWidget(plot_, 1);
  plot_->xAxis->setLabel(tr("token position (click to select)"));
  plot_->yAxis->setLabel(tr("channel"));
  map_ = addColorMap(plot_, tr("|quantized - original|"));
  mark_ = new QCPItemStraightLine(plot_);
  mark_->setPen(QPen(Qt::cyan, 1.5));
  mark_->setVisible(false);
  connect(which_, &QComboBox::currentIndexChanged, this, [this] { redraw(); });
  connect(plot_, &QCustomPlot::mousePress, this, [this](QMouseEvent* e) {
    if (!view_) return;
    const qint64 token = std::llround(plot_->xAxis->pixelToCoord(e->position().x()));
    if (token >= 0 && token < view_->tokens) sel_->setToken(token);
  });
  connect(sel_, &Selection::changed, this, [this] { redraw(); });
}

void TokenErrorDock::show(const TokenErrorViewPtr& view) {
  if (!view) return;
  view_ = view;
  redraw();
}

void TokenErrorDock::showRun(const RunSnapshotPtr& run) {
  if (!run) return;
  emptyReason_ = nothingQuantizedReason(*run);
  if (run->tokenErrors) return show(run->tokenErrors);
  if (view_ && view_->runId == run->runId) return redraw();  // the engine attaches errors at most twice a second
  auto none = std::make_shared<TokenErrorView>();
  none->runId = run->runId;
  none->layer = sel_->layer();
  view_ = none;
  redraw();
}

void TokenErrorDock::redraw() {
  if (!view_) return;
  if (view_->tokens == 0 || view_->heads == 0 || (view_->keys.empty() && view_->values.empty())) {
    map_->data()->clear();
    mark_->setVisible(false);
    title_->setText(emptyReason_.isEmpty() ? tr("nothing quantized yet") : emptyReason_);
    plot_->replot(QCustomPlot::rpQueuedReplot);
    return;
  }
  const auto& side = which_->currentIndex() == 0 ? view_->keys : view_->values;
  const int head = std::min(sel_->head(), view_->heads - 1);
  const int C = view_->channels;
  const qint64 T = view_->tokens;
  if (sel_->layer() != view_->layer) {
    title_->setText(tr("layer %1 selected; waiting for its errors…").arg(sel_->layer()));
  }
  map_->data()->setSize(static_cast<int>(T), C);
  map_->data()->setRange(QCPRange(0, double(T - 1)), QCPRange(0, C - 1));
  double sum = 0, worst = 0;
  qint64 n = 0;
  for (qint64 t = 0; t < T; ++t)
    for (int c = 0; c < C; ++c) {
      const float e = side.empty() ? std::nanf("") : view_->at(side, t, head, c);
      map_->data()->setCell(static_cast<int>(t), c, e);
      if (std::isfinite(e)) sum += e, worst = std::max<double>(worst, e), ++n;
    }
  setFiniteDataRange(map_);
  plot_->rescaleAxes();
  plot_->xAxis->setRange(-0.5, T - 0.5);
  plot_->yAxis->setRange(-0.5, C - 0.5);
  const qint64 tok = sel_->token();
  mark_->setVisible(tok >= 0 && tok < T);
  mark_->point1->setCoords(double(tok), 0);
  mark_->point2->setCoords(double(tok), 1);
  if (sel_->layer() == view_->layer) {
    QString text = tr("layer %1, KV head %2, %3: %4 tokens, mean |error| %5, max %6")
                       .arg(view_->layer)
                       .arg(head)
                       .arg(which_->currentText())
                       .arg(T)
                       .arg(n ? sum / n : 0.0, 0, 'g', 3)
                       .arg(worst, 0, 'g', 3);
    if (tok >= 0 && tok < T && !side.empty()) {
      double ts = 0, tm = 0;
      int tn = 0;
      for (int c = 0; c < C; ++c)
        if (const float e = view_->at(side, tok, head, c); std::isfinite(e))
          ts += e, tm = std::max<double>(tm, e), ++tn;
      text += tn ? tr("; token %1: mean %2, max %3").arg(tok).arg(ts / tn, 0, 'g', 3).arg(tm, 0, 'g', 3)
                 : tr("; token %1 not quantized").arg(tok);
    }
    title_->setText(text);
  }
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

}  // namespace kvscope::ui
