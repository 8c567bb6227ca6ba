#include "docks.h"

#include <QComboBox>
#include <QHeaderView>
#include <QLabel>
#include <QTableWidget>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <qcustomplot.h>

namespace kvscope::ui {

namespace {
double mib(std::int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }

QColor klColour(float kl) {
  // 0 -> pale green, 0.05 -> yellow, >= 0.5 -> red; infinite (NaN logits) -> purple.
  if (!std::isfinite(kl)) return QColor(190, 120, 230);
  const double t = std::clamp(std::log10(1.0 + kl * 100.0) / std::log10(51.0), 0.0, 1.0);
  return QColor::fromHsvF((1.0 - t) * 0.33, 0.45, 1.0);
}
}  // namespace

TextView::TextView(QWidget* parent) : QTextBrowser(parent) {
  setObjectName("textView");
  setOpenLinks(false);
  setPlaceholderText(tr("Generated text appears here, token by token."));
}

void TextView::show(const RunSnapshotPtr& run) {
  QString html = "<div style='font-family: monospace; font-size: 11pt; white-space: pre-wrap;'>";
  int pos = run->promptTokens;
  for (const auto& t : run->tokens) {
    QString tip = tr("position %1, id %2, log-prob %3").arg(pos++).arg(t.id).arg(t.logprob, 0, 'f', 3);
    if (run->shadow) tip += tr("\nKL vs reference %1%2").arg(t.kl, 0, 'g', 3).arg(t.top1Agrees ? "" : tr(", top-1 differs"));
    tip += run->shadow ? tr("\n  quantized            reference") : tr("\n  top candidates");
    for (int i = 0; i < t.top.size(); ++i) {
      tip += QString("\n  %1 %2").arg(t.top[i].first.toHtmlEscaped(), -10).arg(t.top[i].second, 7, 'f', 3);
      if (i < t.refTop.size())
        tip += QString("   %1 %2").arg(t.refTop[i].first.toHtmlEscaped(), -10).arg(t.refTop[i].second, 7, 'f', 3);
    }
    const QColor c = run->shadow ? klColour(t.kl) : QColor::fromHsvF(0.33 * std::clamp(std::exp(t.logprob), 0.0f, 1.0f), 0.35, 1.0);
    html += QString("<span style='background-color:%1' title='%2'>%3</span>")
                .arg(c.name(), tip.toHtmlEscaped(), t.text.toHtmlEscaped());
  }
  html += "</div>";
  setHtml(html);
  moveCursor(QTextCursor::End);
}

MemoryDock::MemoryDock(QWidget* parent) : QWidget(parent) {
  auto* l = new QVBoxLayout(this);
  totals_ = new QLabel(tr("No run yet."), this);
  totals_->setObjectName("memoryTotals");
  plot_ = new QCustomPlot(this);
  plot_->setMinimumSize(360, 220);
  l->addWidget(totals_);
  l->addWidget(plot_, 1);
  const QStringList names{tr("payload"), tr("scales/zeros"), tr("residual"), tr("dequantized buffer")};
  const QList<QColor> colours{QColor(52, 101, 164), QColor(245, 121, 0), QColor(115, 210, 22), QColor(186, 189, 182)};
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
  plot_->xAxis->setLabel(tr("layer"));
  plot_->yAxis->setLabel(tr("KiB (K + V)"));
  plot_->legend->setVisible(true);
  plot_->legend->setFont(QFont(font().family(), 8));
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
  const QVector<QVector<double>*> series{&pay, &meta, &res, &trans};
  for (int i = 0; i < 4; ++i) qobject_cast<QCPBars*>(plot_->plottable(i))->setData(x, *series[i]);
  plot_->graph(0)->setData(x, full);
  plot_->rescaleAxes();
  plot_->xAxis->setRange(-0.8, std::max<double>(1.0, double(mem.size()) - 0.2));
  plot_->yAxis->setRangeLower(0);
  plot_->replot(QCustomPlot::rpQueuedReplot);
  const auto t = run->cache.total();
  totals_->setText(tr("%1: stored %2 MiB of %3 MiB unquantized (%4x); held %5 MiB with the working buffer")
                       .arg(run->spec)
                       .arg(mib(t.stored()), 0, 'f', 2)
                       .arg(mib(t.unquantized), 0, 'f', 2)
                       .arg(t.stored() ? double(t.unquantized) / double(t.stored()) : 0.0, 0, 'f', 2)
                       .arg(mib(t.held()), 0, 'f', 2));
}

ScalesDock::ScalesDock(QWidget* parent) : QWidget(parent) {
  auto* l = new QVBoxLayout(this);
  counters_ = new QLabel(tr("FP8 scales appear for fp8 caches."), this);
  counters_->setObjectName("fp8Counters");
  counters_->setWordWrap(true);
  plot_ = new QCustomPlot(this);
  plot_->setMinimumSize(360, 200);
  l->addWidget(counters_);
  l->addWidget(plot_, 1);
  auto* k = plot_->addGraph();
  k->setName(tr("K scale"));
  k->setPen(QPen(QColor(52, 101, 164), 2));
  k->setScatterStyle(QCPScatterStyle::ssCircle);
  auto* v = plot_->addGraph();
  v->setName(tr("V scale"));
  v->setPen(QPen(QColor(204, 0, 0), 2));
  v->setScatterStyle(QCPScatterStyle::ssDiamond);
  auto* amax = plot_->addGraph();
  amax->setName(tr("K amax / 448 (latest step)"));
  amax->setPen(QPen(QColor(52, 101, 164), 1, Qt::DotLine));
  plot_->xAxis->setLabel(tr("layer"));
  plot_->yAxis->setLabel(tr("scale"));
  plot_->yAxis->setScaleType(QCPAxis::stLogarithmic);
  plot_->yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
  plot_->legend->setVisible(true);
  plot_->legend->setFont(QFont(font().family(), 8));
}

void ScalesDock::show(const RunSnapshotPtr& run) {
  QVector<double> x, ks, vs, ka;
  std::int64_t overflow = 0, nan = 0, recal = 0;
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
    double a = 0;
    for (float f : st.keys.amaxPerHead) a = std::max<double>(a, f);
    ka << a / 448.0;
  }
  plot_->graph(0)->setData(x, ks);
  plot_->graph(1)->setData(x, vs);
  plot_->graph(2)->setData(x, ka);
  plot_->rescaleAxes();
  plot_->replot(QCustomPlot::rpQueuedReplot);
  if (x.isEmpty()) {
    counters_->setText(tr("%1 has no FP8 scales.").arg(run->spec));
    counters_->setStyleSheet("");
  } else {
    counters_->setText(tr("overflows %1, NaN/inf stored %2, recalibrations %3").arg(overflow).arg(nan).arg(recal));
    counters_->setStyleSheet(nan > 0 ? "color: white; background: #b00020; padding: 2px;" : "");
  }
}

ErrorDock::ErrorDock(QWidget* parent) : QWidget(parent) {
  auto* l = new QVBoxLayout(this);
  which_ = new QComboBox(this);
  which_->addItems({tr("keys"), tr("values")});
  l->addWidget(which_);
  plot_ = new QCustomPlot(this);
  plot_->setMinimumSize(360, 220);
  l->addWidget(plot_, 1);
  plot_->xAxis->setLabel(tr("layer"));
  plot_->yAxis->setLabel(tr("KV head"));
  map_ = new QCPColorMap(plot_->xAxis, plot_->yAxis);
  map_->setInterpolate(false);
  // Cells are whole layers and heads: integer ticks only.
  for (QCPAxis* axis : {plot_->xAxis, plot_->yAxis}) {
    QSharedPointer<QCPAxisTickerFixed> ticker(new QCPAxisTickerFixed);
    ticker->setTickStep(1.0);
    ticker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
    axis->setTicker(ticker);
  }
  auto* scale = new QCPColorScale(plot_);
  plot_->plotLayout()->addElement(0, 1, scale);
  scale->axis()->setLabel(tr("relative L2 error"));
  map_->setColorScale(scale);
  map_->setGradient(QCPColorGradient::gpThermal);
  connect(which_, &QComboBox::currentIndexChanged, this, [this] { redraw(); });
}

void ErrorDock::show(const RunSnapshotPtr& run) {
  const auto& stats = run->cache.stats;
  if (relK_.size() != stats.size()) relK_.assign(stats.size(), {}), relV_.assign(stats.size(), {});
  for (std::size_t l = 0; l < stats.size(); ++l) {
    for (auto [src, dst] : {std::pair{&stats[l].keys.error, &relK_[l]}, std::pair{&stats[l].values.error, &relV_[l]}}) {
      if (src->empty()) continue;
      dst->assign(static_cast<std::size_t>(src->heads), 0.0f);
      for (std::int64_t h = 0; h < src->heads; ++h) {
        double s = 0;
        for (std::int64_t r = 0; r < src->ranges; ++r)
          for (std::int64_t c = 0; c < src->channels; ++c) s += src->rel(h, r, c);
        (*dst)[h] = static_cast<float>(s / double(src->ranges * src->channels));
      }
    }
  }
  last_ = run;
  redraw();
}

void ErrorDock::redraw() {
  const auto& rel = which_->currentIndex() == 0 ? relK_ : relV_;
  const int layers = static_cast<int>(rel.size());
  int heads = 0;
  for (const auto& r : rel) heads = std::max<int>(heads, static_cast<int>(r.size()));
  if (layers == 0 || heads == 0) return;
  map_->data()->setSize(layers, heads);
  map_->data()->setRange(QCPRange(0, layers - 1), QCPRange(0, heads - 1));
  for (int l = 0; l < layers; ++l)
    for (int h = 0; h < heads; ++h)
      map_->data()->setCell(l, h, h < static_cast<int>(rel[l].size()) ? rel[l][h] : std::nan(""));
  map_->rescaleDataRange(true);
  plot_->rescaleAxes();
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

BeamDock::BeamDock(QWidget* parent) : QWidget(parent) {
  auto* l = new QVBoxLayout(this);
  summary_ = new QLabel(tr("Beam search runs show here (Decoding: beam search)."), this);
  summary_->setWordWrap(true);
  table_ = new QTableWidget(0, 0, this);
  table_->setObjectName("beamTable");
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  l->addWidget(summary_);
  l->addWidget(table_, 1);
}

void BeamDock::show(const RunSnapshotPtr& run) {
  if (run->beamSteps.isEmpty()) return;
  const int beams = static_cast<int>(run->beamSteps.front().parents.size());
  table_->setColumnCount(beams);
  QStringList headers;
  for (int b = 0; b < beams; ++b) headers << tr("beam %1").arg(b);
  table_->setHorizontalHeaderLabels(headers);
  table_->setRowCount(static_cast<int>(run->beamSteps.size()));
  for (int r = 0; r < run->beamSteps.size(); ++r) {
    const auto& st = run->beamSteps[r];
    table_->setVerticalHeaderItem(r, new QTableWidgetItem(QString::number(st.step)));
    for (int b = 0; b < beams && b < st.parents.size(); ++b) {
      const bool moved = st.parents[b] != b;
      QString cell = tr("%1%2 %3").arg(moved ? QString("\u2190%1 ").arg(st.parents[b]) : QString(), st.tokens.value(b).trimmed().isEmpty() ? "\u2423" : st.tokens.value(b),
                                     QString::number(st.scores.value(b), 'f', 2));
      auto* item = new QTableWidgetItem(cell);
      item->setToolTip(tr("continues beam %1 (the cache rows were reordered to follow it); reads quantized-store row %2")
                           .arg(st.parents[b])
                           .arg(b < st.storeRows.size() ? QString::number(st.storeRows[b]) : tr("n/a")));
      if (moved) item->setBackground(QColor(255, 236, 179));
      table_->setItem(r, b, item);
    }
  }
  table_->scrollToBottom();
  QString text = tr("%1: %2 steps").arg(run->spec).arg(run->beamSteps.size());
  for (int i = 0; i < run->beamTexts.size(); ++i)
    text += tr("<br><b>%1</b> (%2): %3").arg(i).arg(run->beamScores.value(i), 0, 'f', 4).arg(run->beamTexts[i].toHtmlEscaped());
  summary_->setText(text);
}

}  // namespace kvscope::ui
