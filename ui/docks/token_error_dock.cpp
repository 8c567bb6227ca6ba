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
  pairShow_ = new QComboBox(this);
  pairShow_->setObjectName("tokenErrorPair");
  pairShow_->addItems({tr("A"), tr("B"), tr("B − A")});
  pairShow_->setToolTip(tr("Two runs: A or B on one colour range, or B − A over the tokens both hold"));
  pairShow_->setVisible(false);
  bar->addWidget(which_);
  bar->addWidget(pairShow_);
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
  connect(pairShow_, &QComboBox::currentIndexChanged, this, [this] { redraw(); });
  connect(plot_, &QCustomPlot::mousePress, this, [this](QMouseEvent* e) {
    if (!view_) return;
    const qint64 token = std::llround(plot_->xAxis->pixelToCoord(e->position().x()));
    if (token >= 0 && token < view_->tokens) sel_->setToken(token);
  });
  connect(sel_, &Selection::changed, this, [this] { redraw(); });
}

void TokenErrorDock::show(const TokenErrorViewPtr& view) {
  if (!view) return;
  if (view->runId == liveRun_ || liveRun_ == 0) liveView_ = view;
  if (shownRun_ != 0 && view->runId != shownRun_) return;  // another run is shown: it keeps its map
  view_ = view;
  redraw();
}

void TokenErrorDock::setPairView(int which) {
  pairShow_->setCurrentIndex(which);
}

void TokenErrorDock::showRun(const RunSnapshotPtr& run, const RunSnapshotPtr& against) {
  if (!run) return;
  emptyReason_ = nothingQuantizedReason(*run);
  other_ = against ? against->tokenErrors : nullptr;
  pairShow_->setVisible(against != nullptr);
  shownRun_ = run->runId;
  // The engine's newest view of this run when it is of the selected layer (it answers a layer change after the run),
  // else the map the snapshot carries (attached at most twice a second, and to the final snapshot), else the view
  // shown before for this run.
  const bool live = liveView_ && liveView_->runId == run->runId;
  if (live && (liveView_->layer == sel_->layer() || !run->tokenErrors))
    view_ = liveView_;
  else if (run->tokenErrors)
    view_ = run->tokenErrors;
  if (view_ && view_->runId == run->runId) return redraw();
  auto none = std::make_shared<TokenErrorView>();
  none->runId = run->runId;
  none->layer = sel_->layer();
  view_ = none;
  redraw();
}

namespace {
// The largest value of `v`'s rows within tokens [t0, t1) of one head and channel; NaN where none.
float spanMax(const TokenErrorView& v, const std::vector<float>& side, qint64 t0, qint64 t1, int head, int channel) {
  if (side.empty() || channel < 0 || channel >= v.channels || t0 >= v.tokens) return std::nanf("");
  const qint64 r1 = std::min(v.rows(), (std::min(t1, v.tokens) + v.tokensPerRow - 1) / v.tokensPerRow);
  float best = std::nanf("");
  for (qint64 r = t0 / v.tokensPerRow; r < r1; ++r)
    if (const float e = v.cell(side, r, head, channel); !std::isnan(e)) best = std::isnan(best) ? e : std::max(best, e);
  return best;
}
}  // namespace

qint64 TokenErrorDock::shownTokensPerColumn() const {
  if (!view_) return 1;
  if (mode_ == 1 && other_) return other_->tokensPerRow;
  if (mode_ == 2 && other_) return std::max(view_->tokensPerRow, other_->tokensPerRow);
  return view_->tokensPerRow;
}

float TokenErrorDock::shownCell(qint64 token, int channel) const {
  if (!view_ || view_->heads == 0 || token < 0) return std::nanf("");
  const bool keys = which_->currentIndex() == 0;
  const int head = std::min(sel_->head(), view_->heads - 1);
  const qint64 w = shownTokensPerColumn(), t0 = token / w * w;
  auto value = [&](const TokenErrorView& v) { return spanMax(v, keys ? v.keys : v.values, t0, t0 + w, head, channel); };
  const int mode = other_ ? mode_ : 0;
  if (mode == 1) return value(*other_);
  if (mode == 2) return value(*other_) - value(*view_);
  return value(*view_);
}

void TokenErrorDock::redraw() {
  if (!view_) return;
  const bool pair = pairShow_->isVisibleTo(this);
  // B's map pairs with A's only when it is of the same layer and shape.
  const bool paired = pair && other_ && other_->layer == view_->layer && other_->heads == view_->heads &&
                      other_->channels == view_->channels && other_->tokens > 0;
  const int mode = mode_ = paired ? pairShow_->currentIndex() : 0;
  const TokenErrorView& shownView = mode == 1 ? *other_ : *view_;
  if (shownView.tokens == 0 || shownView.heads == 0 || (shownView.keys.empty() && shownView.values.empty())) {
    clearColorMap(map_);
    mark_->setVisible(false);
    title_->setText(emptyReason_.isEmpty() ? tr("nothing quantized yet") : emptyReason_);
    plot_->replot(QCustomPlot::rpQueuedReplot);
    return;
  }
  const int head = std::min(sel_->head(), view_->heads - 1);
  const int C = view_->channels;
  const qint64 T = mode == 2 ? std::min(view_->tokens, other_->tokens) : shownView.tokens;
  // One column per row of the bounded summary (tokensPerRow tokens each), never one per token: a 32k-token run draws
  // as many cells as a short one.
  const qint64 w = shownTokensPerColumn(), R = (T + w - 1) / w;
  map_->data()->setSize(static_cast<int>(R), C);
  map_->data()->setRange(QCPRange((w - 1) / 2.0, double((R - 1) * w) + (w - 1) / 2.0), QCPRange(0, C - 1));
  double sum = 0, worst = 0;
  qint64 n = 0;
  for (qint64 r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      const float e = shownCell(r * w, c);
      map_->data()->setCell(static_cast<int>(r), c, e);
      if (std::isfinite(e)) sum += e, worst = std::max<double>(worst, std::abs(e)), ++n;
    }
  QCPColorGradient g(mode == 2 ? QCPColorGradient::gpPolar : QCPColorGradient::gpThermal);
  g.setNanHandling(QCPColorGradient::nhTransparent);
  map_->setGradient(g);
  if (mode == 2) {
    map_->setDataRange(QCPRange(-std::max(worst, 1e-9), std::max(worst, 1e-9)));
    map_->colorScale()->setVisible(true);
  } else if (paired) {  // A and B on one range: a colour means the same error in both
    double hi = 0;
    for (const auto* v : {view_.get(), other_.get()}) {
      const auto& side = which_->currentIndex() == 0 ? v->keys : v->values;
      for (const float e : side)
        if (std::isfinite(e)) hi = std::max<double>(hi, e);
    }
    map_->setDataRange(QCPRange(0, hi > 0 ? hi : 1));
    map_->colorScale()->setVisible(true);
  } else {
    setFiniteDataRange(map_);
  }
  plot_->rescaleAxes();
  plot_->xAxis->setRange(-0.5, T - 0.5);
  plot_->yAxis->setRange(-0.5, C - 0.5);
  const qint64 tok = sel_->token();
  mark_->setVisible(tok >= 0 && tok < T);
  mark_->point1->setCoords(double(tok), 0);
  mark_->point2->setCoords(double(tok), 1);
  if (sel_->layer() != view_->layer) {
    title_->setText(view_->runId == liveRun_
                        ? tr("layer %1 selected; waiting for its errors…").arg(sel_->layer())
                        : tr("layer %1 selected; run #%2 kept layer %3's map (the layer inspected as it finished): "
                             "rerun its config to see another layer")
                              .arg(sel_->layer())
                              .arg(view_->runId)
                              .arg(view_->layer));
  } else {
    const QString what = mode == 2   ? tr("B − A (run #%1 − run #%2)").arg(other_->runId).arg(view_->runId)
                         : mode == 1 ? tr("B (run #%1)").arg(other_->runId)
                         : paired    ? tr("A (run #%1)").arg(view_->runId)
                                     : tr("run #%1").arg(view_->runId);
    QString text = tr("%1, layer %2, KV head %3, %4: %5 tokens, mean %6 %7, max %8")
                       .arg(what)
                       .arg(view_->layer)
                       .arg(head)
                       .arg(which_->currentText())
                       .arg(T)
                       .arg(mode == 2 ? tr("difference") : tr("|error|"))
                       .arg(n ? sum / double(n) : 0.0, 0, 'g', 3)
                       .arg(worst, 0, 'g', 3);
    if (w > 1) text += tr(" (%1 tokens per column, each its tokens' largest error)").arg(w);
    if (pair && !paired)
      text += tr("; B has no map of this layer to compare (it kept layer %1's)")
                  .arg(other_ ? QString::number(other_->layer) : tr("none"));
    if (tok >= 0 && tok < T) {
      double ts = 0, tm = 0;
      int tn = 0;
      for (int c = 0; c < C; ++c)
        if (const float e = shownCell(tok, c); std::isfinite(e)) ts += e, tm = std::max<double>(tm, std::abs(e)), ++tn;
      const qint64 t0 = tok / w * w;
      text += !tn     ? tr("; token %1 not quantized").arg(tok)
              : w > 1 ? tr("; tokens %1-%2 (holding token %3): mean %4, max %5")
                            .arg(t0)
                            .arg(std::min(t0 + w, T) - 1)
                            .arg(tok)
                            .arg(ts / tn, 0, 'g', 3)
                            .arg(tm, 0, 'g', 3)
                      : tr("; token %1: mean %2, max %3").arg(tok).arg(ts / tn, 0, 'g', 3).arg(tm, 0, 'g', 3);
    }
    title_->setText(text);
  }
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

}  // namespace kvscope::ui
