#include "docks/scales_dock.h"

#include <qcustomplot.h>

#include <QHBoxLayout>
#include <QLabel>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "docks/plot_style.h"

namespace kvscope::ui {

ScalesDock::ScalesDock(Selection* selection, QWidget* parent) : QWidget(parent), sel_(selection) {
  auto* l = new QVBoxLayout(this);
  counters_ = new QLabel(tr("FP8 scales appear for fp8 caches."), this);
  counters_->setObjectName("fp8Counters");
  counters_->setWordWrap(true);
  selected_ = new QLabel(this);
  selected_->setObjectName("scalesSelected");
  selected_->setWordWrap(true);
  plot_ = new QCustomPlot(this);
  plot_->setMinimumSize(kPlotMin);
  l->addWidget(counters_);
  l->addWidget(plot_, 1);
  l->addWidget(selected_);
  auto* k = plot_->addGraph();
  k->setName(tr("K scale"));
  k->setPen(QPen(QColor(52, 101, 164), 2));
  k->setScatterStyle(QCPScatterStyle::ssCircle);
  auto* v = plot_->addGraph();
  v->setName(tr("V scale"));
  v->setPen(QPen(QColor(204, 0, 0), 2));
  v->setScatterStyle(QCPScatterStyle::ssDiamond);
  // What the scale must at least be for the latest step's states to fit the format: amax / the format's max.
  auto* amax = plot_->addGraph();
  amax->setPen(QPen(QColor(52, 101, 164), 1.5, Qt::DashLine));
  auto* vamax = plot_->addGraph();
  vamax->setPen(QPen(QColor(204, 0, 0), 1.5, Qt::DashLine));
  // Run B's scales (two runs shown): the same colours, hollow marks, dotted.
  for (const QColor& c : {QColor(52, 101, 164), QColor(204, 0, 0)}) {
    auto* b = plot_->addGraph();
    b->setPen(QPen(c, 1.5, Qt::DotLine));
    b->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssSquare, c, Qt::white, 7));
    b->setVisible(false);
  }
  plot_->xAxis->setLabel(tr("layer (click to select)"));
  plot_->yAxis->setLabel(tr("scale"));
  plot_->yAxis->setScaleType(QCPAxis::stLogarithmic);
  plot_->yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
  // The key is a label that wraps to the dock's width: a plot legend below the axes cut its entries ("K s") on a narrow
  // dock.
  key_ = new QLabel(this);
  key_->setObjectName("scalesKey");
  key_->setWordWrap(true);
  key_->setFont(QFont(font().family(), 8));
  l->insertWidget(2, key_);
  // The block-row formats: the selected layer's histograms, K beside V.
  blockBox_ = new QWidget(this);
  auto* bl = new QVBoxLayout(blockBox_);
  bl->setContentsMargins(0, 0, 0, 0);
  blockTitle_ = new QLabel(blockBox_);
  blockTitle_->setObjectName("blockScalesTitle");
  blockTitle_->setWordWrap(true);
  bl->addWidget(blockTitle_);
  auto* row = new QHBoxLayout;
  blocks_ = new QCustomPlot(blockBox_);
  codes_ = new QCustomPlot(blockBox_);
  for (auto [p, x] : {std::pair{blocks_, tr("scale, log2 of its binade")}, std::pair{codes_, tr("code")}}) {
    p->setMinimumSize(160, 120);
    p->xAxis->setLabel(x);
    QSharedPointer<QCPAxisTickerFixed> whole(new QCPAxisTickerFixed);  // binades and codes are whole numbers
    whole->setTickStep(1.0);
    whole->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
    p->xAxis->setTicker(whole);
    p->yAxis->setLabel(tr("% of stored"));
    for (const QColor& c : {QColor(52, 101, 164), QColor(204, 0, 0)}) {
      auto* bars = new QCPBars(p->xAxis, p->yAxis);
      bars->setWidth(0.4);
      bars->setPen(Qt::NoPen);
      bars->setBrush(c);
    }
    row->addWidget(p, 1);
  }
  bl->addLayout(row, 1);
  l->addWidget(blockBox_, 1);
  blockBox_->setVisible(false);
  mark_ = new QCPItemStraightLine(plot_);
  mark_->setPen(QPen(QColor(204, 0, 0, 120), 1, Qt::DashLine));
  mark_->setVisible(false);
  connect(plot_, &QCustomPlot::mousePress, this, [this](QMouseEvent* e) {
    if (!last_) return;
    const int layer = static_cast<int>(std::lround(plot_->xAxis->pixelToCoord(e->position().x())));
    if (layer >= 0 && layer < static_cast<int>(last_->cache.stats.size())) sel_->setLayer(layer);
  });
  connect(sel_, &Selection::changed, this, [this] {
    markLayer();
    plot_->replot(QCustomPlot::rpQueuedReplot);
  });
}

void ScalesDock::showBlocks() {
  const int layer = sel_->layer();
  const cache::LayerStats* st =
      last_ && layer < static_cast<int>(last_->cache.stats.size()) ? &last_->cache.stats[layer] : nullptr;
  const bool has = st && (!st->keys.scaleHistogram.empty() || !st->values.scaleHistogram.empty());
  blockBox_->setVisible(has);
  if (!has) return;
  // Shares in percent; x: the binade's log2 (scales) or the code, K left of V.
  int lo = 255, hi = 0, top = 0;
  for (const cache::TensorStats* t : {&st->keys, &st->values}) {
    for (int e = 0; e < static_cast<int>(t->scaleHistogram.size()); ++e)
      if (t->scaleHistogram[static_cast<std::size_t>(e)] > 0) lo = std::min(lo, e), hi = std::max(hi, e);
    for (int c = 0; c < static_cast<int>(t->codeHistogram.size()); ++c)
      if (t->codeHistogram[static_cast<std::size_t>(c)] > 0) top = std::max(top, c);
  }
  const int codes = top < 8 ? 8 : 16;
  bool anyCodes = false;
  for (int side = 0; side < 2; ++side) {
    const cache::TensorStats& t = side == 0 ? st->keys : st->values;
    const double offset = side == 0 ? -0.2 : 0.2;
    QVector<double> x, y, cx, cy;
    std::int64_t total = 0, codeTotal = 0;
    for (std::int64_t n : t.scaleHistogram) total += n;
    for (std::int64_t n : t.codeHistogram) codeTotal += n;
    for (int e = lo; e <= hi && total > 0; ++e) {
      x << (e == 0 ? -127.0 : e - 127.0) + offset;
      y << 100.0 * static_cast<double>(t.scaleHistogram[static_cast<std::size_t>(e)]) / static_cast<double>(total);
    }
    for (int c = 0; c < codes && codeTotal > 0; ++c) {
      cx << c + offset;
      cy << 100.0 * static_cast<double>(t.codeHistogram[static_cast<std::size_t>(c)]) / static_cast<double>(codeTotal);
    }
    anyCodes = anyCodes || codeTotal > 0;
    qobject_cast<QCPBars*>(blocks_->plottable(side))->setData(x, y);
    qobject_cast<QCPBars*>(codes_->plottable(side))->setData(cx, cy);
  }
  codes_->setVisible(anyCodes);
  const QString kind = QString::fromStdString(st->keys.scaleKind.empty() ? st->values.scaleKind : st->keys.scaleKind);
  const QString vkind = QString::fromStdString(st->values.scaleKind);
  blockTitle_->setText(
      tr("layer %1 — <span style='color:#3465a4'>K</span> / <span style='color:#cc0000'>V</span> %2 by binade%3")
          .arg(layer)
          .arg(vkind.isEmpty() || vkind == kind ? kind : kind + " / " + vkind)
          .arg(anyCodes ? tr("; codes by value (TurboQuant: centroid occupancy)") : QString()));
  for (QCustomPlot* p : {blocks_, codes_}) {
    p->rescaleAxes();
    p->xAxis->setRange(p->xAxis->range().lower - 0.6, p->xAxis->range().upper + 0.6);
    p->yAxis->setRangeLower(0.0);
    p->replot(QCustomPlot::rpQueuedReplot);
  }
}

void ScalesDock::markLayer() {
  showBlocks();
  const int layer = sel_->layer();
  const bool has =
      last_ && layer < static_cast<int>(last_->cache.stats.size()) && !last_->cache.stats[layer].keys.scales.empty();
  mark_->setVisible(has);
  mark_->point1->setCoords(layer, 1e-3);
  mark_->point2->setCoords(layer, 1.0);
  if (!has) {
    selected_->clear();
    return;
  }
  // The selected layer in full: per head (or per channel, summarised) K and V scales against what the step saw.
  const auto& st = last_->cache.stats[layer];
  auto list = [](const std::vector<float>& v, std::size_t n) {
    QStringList out;
    for (std::size_t i = 0; i < std::min(n, v.size()); ++i) out << QString::number(v[i], 'g', 3);
    if (v.size() > n) out << QString("… (%1 values)").arg(v.size());
    return out.join(", ");
  };
  QString text = tr("layer %1 — K scales [%2], amax per head [%3]; V scales [%4]; overflows K %5 / V %6, "
                    "NaN stored K %7 / V %8")
                     .arg(layer)
                     .arg(list(st.keys.scales, 8), list(st.keys.amaxPerHead, 8), list(st.values.scales, 8))
                     .arg(st.keys.overflowTotal)
                     .arg(st.values.overflowTotal)
                     .arg(st.keys.nonFiniteTotal)
                     .arg(st.values.nonFiniteTotal);
  if (against_ && layer < static_cast<int>(against_->cache.stats.size())) {
    const auto& b = against_->cache.stats[layer];
    auto ratio = [](const std::vector<float>& x, const std::vector<float>& y) {
      double sx = 0, sy = 0;
      for (float f : x) sx += f;
      for (float f : y) sy += f;
      return x.empty() || y.empty() || sx == 0
                 ? QString("—")
                 : QString::number((sy / double(y.size())) / (sx / double(x.size())), 'g', 4);
    };
    text += tr("<br>B (run #%1): K scales [%2]; V scales [%3]; B / A: K %4, V %5; NaN stored K %6 / V %7")
                .arg(against_->runId)
                .arg(list(b.keys.scales, 8), list(b.values.scales, 8), ratio(st.keys.scales, b.keys.scales),
                     ratio(st.values.scales, b.values.scales))
                .arg(b.keys.nonFiniteTotal)
                .arg(b.values.nonFiniteTotal);
  }
  selected_->setText(text);
}

void ScalesDock::show(const RunSnapshotPtr& run, const RunSnapshotPtr& against) {
  last_ = run;
  against_ = against;
  QVector<double> x, ks, vs, ka, va, bx, bk, bv;
  std::int64_t overflow = 0, nan = 0, recal = 0;
  QList<float> maxima;  // the fp8 formats' max seen (a per-layer config may mix e4m3fn and e5m2)
  auto mean = [](const std::vector<float>& v) {
    double s = 0;
    for (float f : v) s += f;
    return v.empty() ? 0.0 : s / double(v.size());
  };
  for (std::size_t i = 0; i < run->cache.stats.size(); ++i) {
    const auto& st = run->cache.stats[i];
    overflow += st.overflowTotal();
    nan += st.nonFiniteTotal();
    recal += st.keys.recalibrations + st.values.recalibrations;
    if (st.keys.scales.empty()) continue;
    x << double(i);
    ks << mean(st.keys.scales);
    vs << mean(st.values.scales);
    auto need = [&](const cache::TensorStats& t) {
      double a = 0;
      for (float f : t.amaxPerHead) a = std::max<double>(a, f);
      if (t.formatMax > 0 && !maxima.contains(t.formatMax)) maxima << t.formatMax;
      return t.formatMax > 0 ? a / t.formatMax : std::nan("");
    };
    ka << need(st.keys);
    va << need(st.values);
  }
  std::int64_t nanB = 0;
  if (against)
    for (std::size_t i = 0; i < against->cache.stats.size(); ++i) {
      const auto& st = against->cache.stats[i];
      nanB += st.nonFiniteTotal();
      if (st.keys.scales.empty()) continue;
      bx << double(i);
      bk << mean(st.keys.scales);
      bv << mean(st.values.scales);
    }
  QString over = maxima.size() == 1 ? QString::number(maxima.front()) : tr("format max");
  for (const auto f : {cache::Fp8Format::E4M3FN, cache::Fp8Format::E5M2})
    if (maxima.size() == 1 && maxima.front() == cache::fp8Max(f))
      over = tr("%1 (%2 max)").arg(over, QString::fromUtf8(std::string(cache::fp8FormatName(f))));
  plot_->graph(2)->setName(tr("K amax / %1, latest step").arg(over));
  plot_->graph(3)->setName(tr("V amax / %1").arg(over));
  plot_->graph(0)->setData(x, ks);
  plot_->graph(1)->setData(x, vs);
  plot_->graph(2)->setData(x, ka);
  plot_->graph(3)->setData(x, va);
  plot_->graph(4)->setData(bx, bk);
  plot_->graph(5)->setData(bx, bv);
  const bool pair = against != nullptr;
  for (int g = 4; g < 6; ++g) plot_->graph(g)->setName(tr("B: %1 scale").arg(g == 4 ? "K" : "V"));
  for (int g = 4; g < 6; ++g) plot_->graph(g)->setVisible(pair);
  // The key: each line's pen and mark, named (A's and B's when two runs are shown).
  QStringList key;
  for (int g = 0; g < (pair ? 6 : 4); ++g) {
    const QCPGraph* graph = plot_->graph(g);
    const QString style = graph->pen().style() == Qt::SolidLine ? "&#9473;"
                          : graph->pen().style() == Qt::DotLine ? "&#8943;"
                                                                : "- -";
    const QString mark = graph->scatterStyle().shape() == QCPScatterStyle::ssCircle    ? "&#9679;"
                         : graph->scatterStyle().shape() == QCPScatterStyle::ssDiamond ? "&#9670;"
                         : graph->scatterStyle().shape() == QCPScatterStyle::ssSquare  ? "&#9633;"
                                                                                       : "";
    const QString who = pair && g < 4 ? tr("A: ") : QString();
    key << QString("<span style='color:%1'>%2%3</span>&nbsp;%4")
               .arg(graph->pen().color().name(), style, mark, (who + graph->name()).toHtmlEscaped());
  }
  key_->setText(key.join(" &nbsp; "));
  plot_->rescaleAxes();
  wholeDecades(plot_->yAxis);
  markLayer();
  plot_->replot(QCustomPlot::rpQueuedReplot);
  bool blocks = false;
  for (const auto& st : run->cache.stats) blocks = blocks || !st.keys.scaleHistogram.empty();
  // A run of block scales alone: its histograms take the room of the empty FP8 plot.
  plot_->setVisible(!x.isEmpty() || !bx.isEmpty() || !blocks);
  key_->setVisible(plot_->isVisible());
  QString text = x.isEmpty()
                     ? (blocks ? tr("%1 stores block scales: the selected layer's below (click a layer in another "
                                    "view to select it).")
                                     .arg(run->spec)
                               : tr("%1 has no FP8 scales.").arg(run->spec))
                     : tr("overflows %1, NaN/inf stored %2, recalibrations %3").arg(overflow).arg(nan).arg(recal);
  if (pair) {
    text = tr("A (run #%1): %2 · B (run #%3): ").arg(run->runId).arg(text).arg(against->runId) +
           (bx.isEmpty() ? tr("%1 has no FP8 scales.").arg(against->spec) : tr("NaN/inf stored %1").arg(nanB));
  }
  counters_->setText(text);
  counters_->setStyleSheet(nan + nanB > 0 ? "color: white; background: #b00020; padding: 2px;" : "");
}

}  // namespace kvscope::ui
