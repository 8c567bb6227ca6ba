#include "docks.h"

#include <QComboBox>
#include <QFontMetrics>
#include <QHeaderView>
#include <QLabel>
#include <QScrollBar>
#include <QTableWidget>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <qcustomplot.h>

namespace kvscope::ui {

namespace {
double mib(std::int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }

// What a plot may shrink to: the window's minimum height adds up the docks' minimums, and it has to fit a 1366x768
// screen. Plots take what room there is above this.
const QSize kPlotMin(240, 140);

// The legend below the axes, in `columns` columns, so that it never covers the data.
void legendBelow(QCustomPlot* plot, int columns) {
  plot->axisRect()->insetLayout()->take(plot->legend);
  plot->plotLayout()->addElement(plot->plotLayout()->rowCount(), 0, plot->legend);
  plot->plotLayout()->setRowStretchFactor(plot->plotLayout()->rowCount() - 1, 0.001);
  plot->legend->setFillOrder(QCPLegend::foColumnsFirst);
  plot->legend->setWrap(columns);
  plot->legend->setMargins(QMargins(4, 1, 4, 1));
}

// A log axis over whole decades (10^k to 10^m, at least one decade), so that a range such as V scales of 1e-3..3e-3
// still has labelled ticks; labels as 10^k.
void wholeDecades(QCPAxis* axis) {
  const QCPRange r = axis->range();
  if (!(r.lower > 0) || !std::isfinite(r.upper)) return;
  const double lo = std::floor(std::log10(r.lower)), hi = std::max(lo + 1, std::ceil(std::log10(r.upper)));
  axis->setRange(std::pow(10.0, lo), std::pow(10.0, hi));
  axis->setNumberFormat("eb");
  axis->setNumberPrecision(0);
  axis->ticker()->setTickCount(std::clamp(axis->axisRect()->height() / 30, 1, 5));  // labels never overlap
}

// Mean |error| of a token's keys and values over heads and channels; NaN when nothing quantized it.
double meanError(const TokenErrorView& v, qint64 token) {
  double s = 0;
  int n = 0;
  for (const auto* side : {&v.keys, &v.values}) {
    if (side->empty()) continue;
    for (int h = 0; h < v.heads; ++h)
      for (int c = 0; c < v.channels; ++c)
        if (const float e = v.at(*side, token, h, c); std::isfinite(e)) s += e, ++n;
  }
  return n ? s / n : NAN;
}

QColor klColour(float kl) {
  // 0 -> pale green, 0.05 -> yellow, >= 0.5 -> red; infinite (NaN logits) -> purple.
  if (!std::isfinite(kl)) return QColor(190, 120, 230);
  const double t = std::clamp(std::log10(1.0 + kl * 100.0) / std::log10(51.0), 0.0, 1.0);
  return QColor::fromHsvF((1.0 - t) * 0.33, 0.45, 1.0);
}
}  // namespace

TextView::TextView(Selection* selection, QWidget* parent) : QWidget(parent), sel_(selection) {
  auto* l = new QVBoxLayout(this);
  l->setContentsMargins(0, 0, 0, 0);
  auto* bar = new QHBoxLayout();
  metric_ = new QComboBox(this);
  metric_->setObjectName("colourBy");
  metric_->addItems({tr("KL vs reference"), tr("top-1 agreement"), tr("K/V quantization error (selected layer)"),
                     tr("log-prob")});
  metric_->setToolTip(tr("What each token's colour shows; the error of a token is that of its keys and values in the "
                         "selected layer (grey: not quantized, e.g. still in a residual window)"));
  key_ = new QLabel(this);
  key_->setObjectName("colourKey");
  key_->setWordWrap(true);
  bar->addWidget(new QLabel(tr("Colour by"), this));
  bar->addWidget(metric_);
  bar->addWidget(key_, 1);
  l->addLayout(bar);
  browser_ = new QTextBrowser(this);
  browser_->setObjectName("textView");
  QFont mono("monospace", 11);
  mono.setStyleHint(QFont::Monospace);
  browser_->document()->setDefaultFont(mono);
  browser_->setOpenLinks(false);
  browser_->setPlaceholderText(tr("Generated text appears here, token by token. Click a token to select it."));
  l->addWidget(browser_, 1);
  connect(metric_, &QComboBox::currentIndexChanged, this, [this] { redraw(); });
  updateKey();
  connect(browser_, &QTextBrowser::anchorClicked, this, [this](const QUrl& url) {
    if (url.scheme() == "tok") sel_->setToken(url.path().toLongLong());
  });
  connect(sel_, &Selection::changed, this, [this] { redraw(); });
}

QString TextView::plainText() const { return browser_->toPlainText(); }

QString TextView::colourKey() const { return key_->text(); }

void TextView::updateKey() {
  auto sw = [](const QColor& c, const QString& what) {
    return QString("<span style='background-color:%1'>&nbsp;&nbsp;&nbsp;</span>&nbsp;%2").arg(c.name(), what);
  };
  const int m = metric_->currentIndex();
  const bool reference = !last_ || last_->shadow;
  QStringList k;
  if (m == Kl && reference) {
    k << sw(klColour(0), tr("KL 0")) << sw(klColour(0.05f), "0.05") << sw(klColour(0.5f), tr("&ge; 0.5 nats"))
      << sw(klColour(INFINITY), tr("NaN/inf"));
  } else if (m == Top1 && reference) {
    k << sw(QColor(200, 240, 200), tr("same top-1 as the reference")) << sw(QColor(255, 170, 170), tr("differs"));
  } else if (m == KvError) {
    k << sw(QColor::fromHsvF(0.33, 0.45, 1.0), tr("low |error|"))
      << sw(QColor::fromHsvF(0.0, 0.45, 1.0), tr("the run's worst token in this layer"))
      << sw(QColor(225, 225, 225), tr("not quantized"));
  } else {
    if (!reference) k << tr("<i>no shadow reference in this run: coloured by log-prob</i>");
    k << sw(QColor::fromHsvF(0.33, 0.35, 1.0), tr("p &asymp; 1")) << sw(QColor::fromHsvF(0.165, 0.35, 1.0), "0.5")
      << sw(QColor::fromHsvF(0.0, 0.35, 1.0), tr("p &asymp; 0"));
  }
  key_->setText(k.join(" &nbsp; "));
}

void TextView::setMetric(Metric m) { metric_->setCurrentIndex(static_cast<int>(m)); }

void TextView::show(const RunSnapshotPtr& run) {
  const bool sameRun = last_ && last_->runId == run->runId;
  const int before = sameRun ? shown_ : 0;
  last_ = run;
  if (run->tokenErrors) errors_ = run->tokenErrors;
  else if (!sameRun) errors_.reset();
  // While a run streams, the tokens already shown keep their colour (KL, top-1, log-prob are per token): only the
  // new ones are appended, so a long text costs no more per snapshot than a short one. The error colouring depends
  // on the run's worst token, so it redraws whole.
  if (sameRun && before > 0 && before <= run->tokens.size() && metric_->currentIndex() != KvError) {
    QString html;
    for (int i = before; i < run->tokens.size(); ++i) html += tokenHtml(i);
    if (!html.isEmpty()) {
      QTextCursor c(browser_->document());
      c.movePosition(QTextCursor::End);
      c.insertHtml(html);
    }
    shown_ = static_cast<int>(run->tokens.size());
  } else {
    redraw();
  }
  if (!run->finished) browser_->moveCursor(QTextCursor::End);
}

QString TextView::tokenHtml(int i) const {
  const TokenView& t = last_->tokens[i];
  const qint64 pos = last_->promptTokens + i;
  QString tip = tr("position %1, id %2, log-prob %3").arg(pos).arg(t.id).arg(t.logprob, 0, 'f', 3);
  if (last_->shadow)
    tip += tr("\nKL vs reference %1%2").arg(t.kl, 0, 'g', 3).arg(t.top1Agrees ? "" : tr(", top-1 differs"));
  tip += last_->shadow ? tr("\n  quantized            reference") : tr("\n  top candidates");
  for (int k = 0; k < t.top.size(); ++k) {
    tip += QString("\n  %1 %2").arg(t.top[k].first.toHtmlEscaped(), -10).arg(t.top[k].second, 7, 'f', 3);
    if (k < t.refTop.size())
      tip += QString("   %1 %2").arg(t.refTop[k].first.toHtmlEscaped(), -10).arg(t.refTop[k].second, 7, 'f', 3);
  }
  const bool selected = pos == sel_->token();
  return QString("<a href='tok:%1' style='color:black; text-decoration:%2; background-color:%3; white-space:pre-wrap;%4' "
                 "title='%5'>%6</a>")
      .arg(pos)
      .arg(selected ? "underline" : "none", colour(t, pos).name(), selected ? " font-weight:bold;" : "",
           tip.toHtmlEscaped(), t.text.toHtmlEscaped());
}

void TextView::showErrors(const TokenErrorViewPtr& errors) {
  if (!errors || !last_ || errors->runId != last_->runId) return;
  errors_ = errors;
  if (metric_->currentIndex() == KvError) redraw();
}

QColor TextView::colour(const TokenView& t, qint64 pos) const {
  switch (metric_->currentIndex()) {
    case Kl:
      if (last_->shadow) return klColour(t.kl);
      break;
    case Top1:
      if (last_->shadow) return t.top1Agrees ? QColor(200, 240, 200) : QColor(255, 170, 170);
      break;
    case KvError: {
      const double e = errors_ && pos < errors_->tokens ? meanError(*errors_, pos) : NAN;
      if (!std::isfinite(e) || errorScale_ <= 0) return QColor(225, 225, 225);  // not quantized (yet)
      // Mean |error| of the token's K and V: 0 -> green, the run's worst token in this layer -> red.
      return QColor::fromHsvF((1.0 - std::clamp(e / errorScale_, 0.0, 1.0)) * 0.33, 0.45, 1.0);
    }
    default:
      break;
  }
  return QColor::fromHsvF(0.33 * std::clamp(std::exp(t.logprob), 0.0f, 1.0f), 0.35, 1.0);
}

void TextView::redraw() {
  updateKey();
  if (!last_) return;
  errorScale_ = 0;
  if (errors_ && metric_->currentIndex() == KvError)
    for (qint64 t = 0; t < errors_->tokens; ++t)
      if (const double e = meanError(*errors_, t); std::isfinite(e)) errorScale_ = std::max(errorScale_, e);
  const auto* bar = browser_->verticalScrollBar();
  const int scroll = bar ? bar->value() : 0;
  QString html;
  for (int i = 0; i < last_->tokens.size(); ++i) html += tokenHtml(i);
  browser_->setHtml(html);
  shown_ = static_cast<int>(last_->tokens.size());
  if (auto* b = browser_->verticalScrollBar()) b->setValue(scroll);
}

MemoryDock::MemoryDock(Selection* selection, QWidget* parent) : QWidget(parent), sel_(selection) {
  auto* l = new QVBoxLayout(this);
  totals_ = new QLabel(tr("No run yet."), this);
  totals_->setObjectName("memoryTotals");
  totals_->setWordWrap(true);
  plot_ = new QCustomPlot(this);
  plot_->setMinimumSize(kPlotMin);
  steps_ = new QCustomPlot(this);
  steps_->setMinimumSize(kPlotMin.width(), kPlotMin.height() / 2);
  const QStringList names{tr("payload"), tr("scales/zeros"), tr("residual"), tr("dequantized buffer")};
  const QList<QColor> colours{QColor(52, 101, 164), QColor(245, 121, 0), QColor(115, 210, 22), QColor(186, 189, 182)};
  // One key for both plots, a label that wraps to the dock's width (a plot legend covered the bars or, below the
  // axes, cut its own entries on a narrow dock).
  QStringList key;
  for (int i = 0; i < names.size(); ++i)
    key << QString("<span style='color:%1'>&#9632;</span>&nbsp;%2").arg(colours[i].name(), names[i].toHtmlEscaped());
  key << tr("- - unquantized") << tr("<span style='color:%1'>&#9473;</span>&nbsp;stored (per step, below)")
                                     .arg(colours[0].name());
  auto* legend = new QLabel(key.join(" &nbsp; "), this);
  legend->setObjectName("memoryLegend");
  legend->setWordWrap(true);
  legend->setFont(QFont(font().family(), 8));
  l->addWidget(totals_);
  l->addWidget(plot_, 3);
  l->addWidget(legend);
  l->addWidget(steps_, 1);
  QCPBars* below = nullptr;
  for (int i = 0; i < names.size(); ++i) {
    auto* b = new QCPBars(plot_->xAxis, plot_->yAxis);
    b->setName(names[i]);
    b->setBrush(colours[i]);
    b->setPen(Qt::NoPen);
    b->setWidth(0.8);
    if (below) b->moveAbove(below);
    below = b;
  }
  auto* line = plot_->addGraph();
  line->setName(tr("unquantized"));
  line->setPen(QPen(Qt::black, 1.5, Qt::DashLine));
  plot_->xAxis->setLabel(tr("layer (click to select)"));
  plot_->yAxis->setLabel(tr("KiB (K + V)"));
  mark_ = new QCPItemRect(plot_);
  mark_->setPen(QPen(QColor(204, 0, 0), 1.5));
  mark_->setBrush(Qt::NoBrush);
  mark_->setVisible(false);
  auto* stored = steps_->addGraph();
  stored->setName(tr("stored"));
  stored->setPen(QPen(QColor(52, 101, 164), 2));
  auto* full = steps_->addGraph();
  full->setName(tr("unquantized"));
  full->setPen(QPen(Qt::black, 1.5, Qt::DashLine));
  steps_->xAxis->setLabel(tr("generated step"));
  steps_->yAxis->setLabel(tr("KV MiB"));
  steps_->yAxis->ticker()->setTickCount(2);  // a short plot: few labels, none on top of another

  connect(plot_, &QCustomPlot::mousePress, this, [this](QMouseEvent* e) {
    const int layer = static_cast<int>(std::lround(plot_->xAxis->pixelToCoord(e->position().x())));
    if (layer >= 0 && layer < layers_) sel_->setLayer(layer);
  });
  connect(sel_, &Selection::changed, this, [this] {
    markLayer();
    plot_->replot(QCustomPlot::rpQueuedReplot);
  });
}

void MemoryDock::markLayer() {
  const int layer = sel_->layer();
  mark_->setVisible(layer < layers_);
  mark_->topLeft->setCoords(layer - 0.45, plot_->yAxis->range().upper);
  mark_->bottomRight->setCoords(layer + 0.45, 0.0);
}

void MemoryDock::show(const RunSnapshotPtr& run) {
  const auto& mem = run->cache.memory;
  QVector<double> x, pay, meta, res, trans, full;
  for (std::size_t i = 0; i < mem.size(); ++i) {
    const auto t = mem[i].total();
    x << double(i);
    pay << t.payload / 1024.0;
    meta << t.metadata / 1024.0;
    res << t.residual / 1024.0;
    trans << t.transient / 1024.0;
    full << t.unquantized / 1024.0;
  }
  layers_ = static_cast<int>(mem.size());
  const QVector<QVector<double>*> series{&pay, &meta, &res, &trans};
  for (int i = 0; i < 4; ++i) qobject_cast<QCPBars*>(plot_->plottable(i))->setData(x, *series[i]);
  plot_->graph(0)->setData(x, full);
  plot_->rescaleAxes();
  plot_->xAxis->setRange(-0.8, std::max<double>(1.0, double(mem.size()) - 0.2));
  plot_->yAxis->setRangeLower(0);
  markLayer();
  plot_->replot(QCustomPlot::rpQueuedReplot);
  QVector<double> step, stored, unq;
  for (int i = 0; i < run->tokens.size(); ++i) {
    if (run->tokens[i].kvUnquantized == 0) continue;  // beam runs and old sessions carry no per-step bytes
    step << i;
    stored << mib(run->tokens[i].kvStored);
    unq << mib(run->tokens[i].kvUnquantized);
  }
  steps_->graph(0)->setData(step, stored);
  steps_->graph(1)->setData(step, unq);
  steps_->rescaleAxes();
  steps_->yAxis->setRangeLower(0);
  steps_->replot(QCustomPlot::rpQueuedReplot);
  const auto t = run->cache.total();
  // What the run really holds against an unquantized cache of the same tokens: the realized saving. Reference mode
  // keeps a dequantized copy of the history (transient) beside the codes; fused mode keeps none. Growth room
  // (allocated, not yet written) is named apart: an unquantized cache reserves room as well.
  const double inUse = mib(t.held() - t.reserved);
  const double saved = mib(t.unquantized) - inUse;
  const QString held =
      t.transient > 0
          ? tr("holds %1 MiB, with a %2 MiB dequantized copy (attention=reference)").arg(inUse, 0, 'f', 2).arg(mib(t.transient), 0, 'f', 2)
          : tr("holds %1 MiB, no full-precision copy").arg(inUse, 0, 'f', 2);
  const QString verdict = saved >= 0 ? tr("saves %1 MiB against an unquantized cache").arg(saved, 0, 'f', 2)
                                     : tr("%1 MiB more than an unquantized cache").arg(-saved, 0, 'f', 2);
  totals_->setText(tr("%1: stored %2 MiB of %3 MiB unquantized (%4x); %5: %6 (+%7 MiB growth room reserved)")
                       .arg(run->spec)
                       .arg(mib(t.stored()), 0, 'f', 2)
                       .arg(mib(t.unquantized), 0, 'f', 2)
                       .arg(t.stored() ? double(t.unquantized) / double(t.stored()) : 0.0, 0, 'f', 2)
                       .arg(held, verdict)
                       .arg(mib(t.reserved), 0, 'f', 2));
}

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
  plot_->xAxis->setLabel(tr("layer (click to select)"));
  plot_->yAxis->setLabel(tr("scale"));
  plot_->yAxis->setScaleType(QCPAxis::stLogarithmic);
  plot_->yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
  plot_->legend->setVisible(true);
  plot_->legend->setFont(QFont(font().family(), 8));
  legendBelow(plot_, 2);
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

void ScalesDock::markLayer() {
  const int layer = sel_->layer();
  const bool has = last_ && layer < static_cast<int>(last_->cache.stats.size()) &&
                   !last_->cache.stats[layer].keys.scales.empty();
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
  selected_->setText(tr("layer %1 — K scales [%2], amax per head [%3]; V scales [%4]; overflows K %5 / V %6, "
                        "NaN stored K %7 / V %8")
                         .arg(layer)
                         .arg(list(st.keys.scales, 8), list(st.keys.amaxPerHead, 8), list(st.values.scales, 8))
                         .arg(st.keys.overflowTotal)
                         .arg(st.values.overflowTotal)
                         .arg(st.keys.nonFiniteTotal)
                         .arg(st.values.nonFiniteTotal));
}

void ScalesDock::show(const RunSnapshotPtr& run) {
  last_ = run;
  QVector<double> x, ks, vs, ka, va;
  std::int64_t overflow = 0, nan = 0, recal = 0;
  QList<float> maxima;  // the fp8 formats' max seen (a per-layer config may mix e4m3fn and e5m2)
  auto mean = [](const std::vector<float>& v) {
    double s = 0;
    for (float f : v) s += f;
    return v.empty() ? 0.0 : s / double(v.size());
  };
  for (std::size_t i = 0; i < run->cache.stats.size(); ++i) {
    const auto& st = run->cache.stats[i];
    overflow += st.keys.overflowTotal + st.values.overflowTotal;
    nan += st.keys.nonFiniteTotal + st.values.nonFiniteTotal;
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
  const QString over = maxima.size() == 1
                           ? (maxima.front() == 448.0f ? tr("448 (e4m3fn max)")
                              : maxima.front() == 57344.0f ? tr("57344 (e5m2 max)")
                                                           : QString::number(maxima.front()))
                           : tr("format max");
  plot_->graph(2)->setName(tr("K amax / %1, latest step").arg(over));
  plot_->graph(3)->setName(tr("V amax / %1").arg(over));
  plot_->graph(0)->setData(x, ks);
  plot_->graph(1)->setData(x, vs);
  plot_->graph(2)->setData(x, ka);
  plot_->graph(3)->setData(x, va);
  plot_->rescaleAxes();
  wholeDecades(plot_->yAxis);
  markLayer();
  plot_->replot(QCustomPlot::rpQueuedReplot);
  if (x.isEmpty()) {
    counters_->setText(tr("%1 has no FP8 scales.").arg(run->spec));
    counters_->setStyleSheet("");
  } else {
    counters_->setText(tr("overflows %1, NaN/inf stored %2, recalibrations %3").arg(overflow).arg(nan).arg(recal));
    counters_->setStyleSheet(nan > 0 ? "color: white; background: #b00020; padding: 2px;" : "");
  }
}

namespace {
// Cells are whole layers, heads or channels: integer ticks only.
void integerTicks(QCPAxis* axis) {
  QSharedPointer<QCPAxisTickerFixed> ticker(new QCPAxisTickerFixed);
  ticker->setTickStep(1.0);
  ticker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
  axis->setTicker(ticker);
}

// The colour of a cell whose value is not finite (the cache stored NaN/inf there): no colour of the thermal scale.
const QColor kNanColour(230, 0, 230);

QCPColorMap* addColorMap(QCustomPlot* plot, const QString& label) {
  auto* map = new QCPColorMap(plot->xAxis, plot->yAxis);
  map->setInterpolate(false);
  auto* scale = new QCPColorScale(plot);
  plot->plotLayout()->addElement(0, 1, scale);
  scale->axis()->setLabel(label);
  map->setColorScale(scale);
  QCPColorGradient g(QCPColorGradient::gpThermal);
  g.setNanHandling(QCPColorGradient::nhTransparent);  // no value: the plot's background shows
  map->setGradient(g);
  return map;
}

// A layer over a colour map that paints the cells set to 1 in kNanColour and leaves the others (NaN) transparent.
QCPColorMap* addNanLayer(QCustomPlot* plot) {
  auto* map = new QCPColorMap(plot->xAxis, plot->yAxis);
  map->setInterpolate(false);
  QCPColorGradient g;
  g.clearColorStops();
  g.setColorStopAt(0, kNanColour);
  g.setColorStopAt(1, kNanColour);
  g.setNanHandling(QCPColorGradient::nhTransparent);
  map->setGradient(g);
  map->setDataRange(QCPRange(0, 1));
  return map;
}

// The colour range over the finite cells only (QCustomPlot's own rescale starts from the first cell, which may be
// NaN); [0, 1] when none is finite.
void setFiniteDataRange(QCPColorMap* map) {
  QCPColorMapData* d = map->data();  // cell() is not const in QCustomPlot 2.1
  double lo = INFINITY, hi = -INFINITY;
  for (int k = 0; k < d->keySize(); ++k)
    for (int v = 0; v < d->valueSize(); ++v)
      if (const double x = d->cell(k, v); std::isfinite(x)) lo = std::min(lo, x), hi = std::max(hi, x);
  if (!(lo <= hi)) lo = 0, hi = 1;
  if (lo == hi) hi = lo + (lo == 0 ? 1 : std::abs(lo) * 1e-3);
  map->setDataRange(QCPRange(lo, hi));
}
}  // namespace

ErrorDock::ErrorDock(Selection* selection, QWidget* parent) : QWidget(parent), sel_(selection) {
  auto* l = new QVBoxLayout(this);
  which_ = new QComboBox(this);
  which_->setObjectName("errorSide");
  which_->addItems({tr("keys"), tr("values")});
  l->addWidget(which_);
  plot_ = new QCustomPlot(this);
  plot_->setMinimumSize(kPlotMin);
  l->addWidget(plot_, 1);
  plot_->xAxis->setLabel(tr("layer"));
  plot_->yAxis->setLabel(tr("KV head (click a cell to select)"));
  map_ = addColorMap(plot_, tr("relative L2 error"));
  nanMap_ = addNanLayer(plot_);
  legend_ = new QLabel(this);
  legend_->setObjectName("errorLegend");
  legend_->setWordWrap(true);
  l->addWidget(legend_);
  integerTicks(plot_->xAxis);
  integerTicks(plot_->yAxis);
  mark_ = new QCPItemRect(plot_);
  mark_->setPen(QPen(Qt::cyan, 2));
  mark_->setBrush(Qt::NoBrush);
  mark_->setVisible(false);
  connect(which_, &QComboBox::currentIndexChanged, this, [this] { redraw(); });
  connect(plot_, &QCustomPlot::mousePress, this, [this](QMouseEvent* e) {
    const int layer = static_cast<int>(std::lround(plot_->xAxis->pixelToCoord(e->position().x())));
    const int head = static_cast<int>(std::lround(plot_->yAxis->pixelToCoord(e->position().y())));
    if (layer < 0 || layer >= static_cast<int>(relK_.size()) || head < 0 || head >= map_->data()->valueSize()) return;
    sel_->setLayer(layer);
    sel_->setHead(head);
  });
  connect(sel_, &Selection::changed, this, [this] { redraw(); });
}

void ErrorDock::show(const RunSnapshotPtr& run) {
  const auto& stats = run->cache.stats;
  if (relK_.size() != stats.size() || !last_ || last_->runId != run->runId)
    relK_.assign(stats.size(), {}), relV_.assign(stats.size(), {});
  for (std::size_t l = 0; l < stats.size(); ++l) {
    for (auto [src, dst] : {std::pair{&stats[l].keys.error, &relK_[l]}, std::pair{&stats[l].values.error, &relV_[l]}}) {
      if (src->empty()) continue;
      // ||x̂ - x|| / ||x|| over the whole head: a mean of per-cell ratios would be ruled by values near 0.
      dst->assign(src->headRelL2.begin(), src->headRelL2.end());
    }
  }
  last_ = run;
  redraw();
}

float ErrorDock::cell(int layer, int head) const {
  const auto& rel = which_->currentIndex() == 0 ? relK_ : relV_;
  if (layer < 0 || layer >= static_cast<int>(rel.size()) || head < 0 || head >= static_cast<int>(rel[layer].size()))
    return std::nanf("");
  return rel[layer][head];
}

void ErrorDock::redraw() {
  const auto& rel = which_->currentIndex() == 0 ? relK_ : relV_;
  const int layers = static_cast<int>(rel.size());
  int heads = 0;
  for (const auto& r : rel) heads = std::max<int>(heads, static_cast<int>(r.size()));
  if (layers == 0 || heads == 0) return;
  for (auto* m : {map_, nanMap_}) {
    m->data()->setSize(layers, heads);
    m->data()->setRange(QCPRange(0, layers - 1), QCPRange(0, heads - 1));
  }
  // Three kinds of cell: an error (thermal scale), nothing quantized yet (blank), NaN/inf (its own colour, never a
  // colour of the scale: a head whose cache stored NaN is not "low error").
  int blank = 0, nonFinite = 0;
  for (int l = 0; l < layers; ++l)
    for (int h = 0; h < heads; ++h) {
      const bool known = h < static_cast<int>(rel[l].size());
      const float e = cell(l, h);
      const bool bad = known && !std::isfinite(e);
      blank += !known;
      nonFinite += bad;
      map_->data()->setCell(l, h, known && !bad ? e : std::nanf(""));
      nanMap_->data()->setCell(l, h, bad ? 1.0 : std::nan(""));
    }
  setFiniteDataRange(map_);
  nanMap_->setVisible(nonFinite > 0);
  QStringList key;
  if (nonFinite > 0)
    key << tr("<span style='color:%1'>&#9632;</span> NaN/inf: %2 whose cache stored non-finite values")
               .arg(kNanColour.name(), nonFinite == 1 ? tr("1 head") : tr("%1 heads").arg(nonFinite));
  if (blank > 0) key << tr("blank: not quantized (yet)");
  legend_->setText(key.join(" &nbsp; "));
  legend_->setVisible(!key.isEmpty());
  plot_->rescaleAxes();
  const int l = sel_->layer(), h = sel_->head();
  mark_->setVisible(l < layers && h < heads);
  mark_->topLeft->setCoords(l - 0.5, h + 0.5);
  mark_->bottomRight->setCoords(l + 0.5, h - 0.5);
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

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

void TokenErrorDock::redraw() {
  if (!view_ || view_->tokens == 0 || view_->heads == 0) return;
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
        if (const float e = view_->at(side, tok, head, c); std::isfinite(e)) ts += e, tm = std::max<double>(tm, e), ++tn;
      text += tn ? tr("; token %1: mean %2, max %3").arg(tok).arg(ts / tn, 0, 'g', 3).arg(tm, 0, 'g', 3)
                 : tr("; token %1 not quantized").arg(tok);
    }
    title_->setText(text);
  }
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

OverlayPlot::OverlayPlot(QWidget* parent) : QWidget(parent) {
  auto* l = new QVBoxLayout(this);
  l->setContentsMargins(0, 0, 0, 0);
  metric_ = new QComboBox(this);
  metric_->setObjectName("overlayMetric");
  metric_->addItems({tr("KL vs reference per step"), tr("log-prob per step"), tr("stored KV MiB per step")});
  metric_->setToolTip(tr("One curve per run selected in the table (all runs when none is selected)"));
  plot_ = new QCustomPlot(this);
  plot_->setObjectName("overlayPlot");
  plot_->setMinimumSize(kPlotMin.width(), kPlotMin.height() * 3 / 4);
  plot_->xAxis->setLabel(tr("generated step"));
  plot_->legend->setVisible(true);
  plot_->legend->setFont(QFont(font().family(), 7));
  legendBelow(plot_, 2);
  l->addWidget(metric_);
  l->addWidget(plot_, 1);
  connect(metric_, &QComboBox::currentIndexChanged, this, [this] { redraw(); });
}

void OverlayPlot::show(const QVector<RunSnapshotPtr>& runs) {
  runs_ = runs;
  redraw();
}

void OverlayPlot::redraw() {
  plot_->clearGraphs();
  const int metric = metric_->currentIndex();
  static const QList<QColor> palette{QColor(52, 101, 164), QColor(204, 0, 0),   QColor(78, 154, 6),
                                     QColor(245, 121, 0),  QColor(117, 80, 123), QColor(193, 125, 17),
                                     QColor(6, 152, 154),  QColor(85, 87, 83)};
  // Steps without a finite value (a cache that stored NaN/inf makes KL and log-prob NaN or infinite) are not left
  // out silently, which would make such a run look good: each is a cross at the top of the plot, in the run's colour,
  // and the legend counts them.
  struct Missing {
    QVector<double> steps;
    QColor colour;
    QString name;
  };
  QVector<Missing> missing;
  int i = 0;
  for (const auto& run : runs_) {
    if (metric == 0 && !run->shadow) continue;  // no reference, no KL
    QVector<double> x, y, bad;
    for (int s = 0; s < run->tokens.size(); ++s) {
      const auto& t = run->tokens[s];
      if (metric == 2 && t.kvUnquantized == 0) continue;
      // KL: a log axis, so an exact 0 (the same distribution) shows at 1e-6.
      const double v = metric == 0 ? std::max(double(t.kl), 1e-6) : metric == 1 ? t.logprob : mib(t.kvStored);
      if (!std::isfinite(v)) {
        bad << s;
        continue;
      }
      x << s;
      y << v;
    }
    if (x.isEmpty() && bad.isEmpty()) continue;  // nothing to draw (a run stopped before its first token; beams carry no bytes)
    const QColor colour = palette[i++ % palette.size()];
    // Elided to fit two legend columns (the table beside it names the run in full).
    const QString name = tr("#%1 %2").arg(run->runId).arg(QFontMetrics(plot_->legend->font()).elidedText(run->spec, Qt::ElideMiddle, 90));
    auto* g = plot_->addGraph();
    g->setName(name);
    g->setPen(QPen(colour, 1.5));
    g->setData(x, y);
    if (!bad.isEmpty()) missing.push_back({bad, colour, name});
  }
  plot_->yAxis->setLabel(metric_->currentText());
  plot_->yAxis->setScaleType(metric == 0 ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
  if (metric == 0) plot_->yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
  else plot_->yAxis->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
  plot_->rescaleAxes();
  if (metric == 0) {
    wholeDecades(plot_->yAxis);
  } else {
    plot_->yAxis->setNumberFormat("gb");
    plot_->yAxis->setNumberPrecision(6);
  }
  if (!missing.isEmpty()) {
    bool anyFinite = false;
    for (int k = 0; k < plot_->graphCount(); ++k) anyFinite |= !plot_->graph(k)->data()->isEmpty();
    const bool log = metric == 0;
    QCPRange y = anyFinite ? plot_->yAxis->range() : (log ? QCPRange(1e-6, 1) : QCPRange(-1, 0));
    // Room above the curves for the crosses: a decade on the log axis, 8% of the range on a linear one.
    y.upper = log ? y.upper * 10 : y.upper + 0.08 * y.size();
    plot_->yAxis->setRange(y);
    const double at = log ? y.upper / 3 : y.upper - 0.04 * y.size();
    double x1 = anyFinite ? plot_->xAxis->range().upper : 1.0;
    for (const auto& m : missing) x1 = std::max(x1, m.steps.back());
    plot_->xAxis->setRange(anyFinite ? std::min(plot_->xAxis->range().lower, 0.0) : 0.0, std::max(x1, 1.0));
    for (const auto& m : missing) {
      auto* g = plot_->addGraph();
      g->setName(m.steps.size() == 1 ? tr("%1: NaN/inf at 1 step").arg(m.name)
                                     : tr("%1: NaN/inf at %2 steps").arg(m.name).arg(m.steps.size()));
      g->setPen(QPen(m.colour));
      g->setLineStyle(QCPGraph::lsNone);
      g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCross, m.colour, 7));
      g->setData(m.steps, QVector<double>(m.steps.size(), at));
    }
  }
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

}  // namespace kvscope::ui
