#include "docks/memory_dock.h"

#include <qcustomplot.h>

#include <QLabel>
#include <QMap>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "cache/engine_layers.h"
#include "docks/plot_style.h"
#include "util/layer_ranges.h"

namespace kvscope::ui {

namespace {
// "; sliding window 16 on layers 1,2 (layer 1 holds 17 of 130 tokens)": what the sliding layers keep, and which
// layers read another's KV; empty without.
QString slidingNote(const cache::CacheSnapshot& c) {
  const auto shared = [&c](std::size_t l) { return l < c.kvSources.size() && c.kvSources[l] >= 0; };
  QMap<std::int64_t, std::vector<int>> byWindow;
  for (std::size_t l = 0; l < c.windows.size(); ++l)
    if (c.windows[l] > 0 && !shared(l)) byWindow[c.windows[l]].push_back(static_cast<int>(l));
  QStringList parts;
  for (auto it = byWindow.cbegin(); it != byWindow.cend(); ++it) {
    const int first = it.value().front();
    const std::int64_t held = c.seqLength - c.dropped[static_cast<std::size_t>(first)];
    parts << QObject::tr("sliding window %1 on layers %2 (layer %3 holds %4 of %5 tokens)")
                 .arg(it.key())
                 .arg(QString::fromStdString(util::layerRanges(it.value())))
                 .arg(first)
                 .arg(held)
                 .arg(c.seqLength);
  }
  // Shared-KV layers (Gemma 4): no bars of their own; say whose cache they read.
  std::vector<int> readers, sources;
  for (std::size_t l = 0; l < c.kvSources.size(); ++l)
    if (shared(l)) {
      readers.push_back(static_cast<int>(l));
      if (std::find(sources.begin(), sources.end(), c.kvSources[l]) == sources.end()) sources.push_back(c.kvSources[l]);
    }
  std::sort(sources.begin(), sources.end());
  if (!readers.empty())
    parts << QObject::tr("layers %1 store no KV: they read the KV of layers %2")
                 .arg(QString::fromStdString(util::layerRanges(readers)))
                 .arg(QString::fromStdString(util::layerRanges(sources)));
  return parts.isEmpty() ? QString() : "; " + parts.join("; ");
}

// Which layers each engine quantizes when it runs this config as exported (cache/engine_layers.h), in one short line
// ("Quantized as exported: vLLM 0.33 4,9,14 · llama.cpp all 15"; a 768 px screen leaves the dock no room for
// more) and in full, with each engine's flags, as its tooltip. Empty without a config.
std::pair<QString, QString> enginesNote(const RunSnapshot& run) {
  if (!run.config) return {};
  std::vector<std::int64_t> windows = run.cache.windows;
  windows.resize(run.cache.memory.size(), 0);
  QStringList brief, full;
  try {
    for (const auto& e : cache::engineLayers(*run.config, windows, run.cache.kvSources)) {
      brief << QString::fromStdString(e.engine + " " + cache::briefEngineLayers(e));
      full << QObject::tr("<b>%1</b> <code>%2</code>%3: %4")
                  .arg(QString::fromStdString(e.engine).toHtmlEscaped(), QString::fromStdString(e.how).toHtmlEscaped(),
                       e.nearest ? QObject::tr(" (nearest)") : QString(),
                       QString::fromStdString(cache::describeEngineLayers(e)).toHtmlEscaped());
    }
  } catch (const cache::ConfigError& e) {
    const QString why = QString::fromStdString(e.what()).toHtmlEscaped();
    return {QObject::tr("Engines: %1").arg(why), why};
  }
  return {QObject::tr("Quantized as exported: %1").arg(brief.join(" · ")),
          QObject::tr("Which layers each engine quantizes with this config as kvscope exports it:<br>%1")
              .arg(full.join("<br>"))};
}
}  // namespace

MemoryDock::MemoryDock(Selection* selection, QWidget* parent) : QWidget(parent), sel_(selection) {
  auto* l = new QVBoxLayout(this);
  // Everything within the height a 768 px screen leaves this tab group (below it, Qt would lay the widgets over one
  // another): tight margins, and plots that may shrink to a readable minimum.
  l->setContentsMargins(2, 2, 2, 2);
  l->setSpacing(2);
  totals_ = new QLabel(tr("No run yet."), this);
  totals_->setObjectName("memoryTotals");
  totals_->setWordWrap(true);
  plot_ = new QCustomPlot(this);
  plot_->setMinimumSize(kPlotMin.width(), kPlotMin.height() * 3 / 4);
  steps_ = new QCustomPlot(this);
  steps_->setMinimumSize(kPlotMin.width(), kPlotMin.height() / 2);  // room for two tick labels and the axis title
  const QStringList names{tr("payload"), tr("scales/zeros"), tr("residual"), tr("dequantized buffer")};
  const QList<QColor> colours{QColor(52, 101, 164), QColor(245, 121, 0), QColor(115, 210, 22), QColor(186, 189, 182)};
  // One key for both plots, a label that wraps to the dock's width (a plot legend covered the bars or, below the
  // axes, cut its own entries on a narrow dock).
  QStringList key;
  for (int i = 0; i < names.size(); ++i)
    key << QString("<span style='color:%1'>&#9632;</span>&nbsp;%2").arg(colours[i].name(), names[i].toHtmlEscaped());
  key << tr("- - unquantized")
      << tr("<span style='color:%1'>&#9473;</span>&nbsp;stored (per step, below)").arg(colours[0].name());
  auto* legend = new QLabel(key.join(" &nbsp; "), this);
  legend->setObjectName("memoryLegend");
  legend->setWordWrap(true);
  legend->setFont(QFont(font().family(), 8));
  legendB_ = new QLabel(tr("<span style='color:#75507b'>&#9670;&nbsp;B stored (per layer and per step)</span>"), this);
  legendB_->setObjectName("memoryLegendB");
  legendB_->setFont(QFont(font().family(), 8));
  legendB_->setVisible(false);
  legendTiers_ = new QLabel(this);
  legendTiers_->setObjectName("memoryLegendTiers");
  legendTiers_->setWordWrap(true);
  legendTiers_->setFont(QFont(font().family(), 8));
  legendTiers_->setVisible(false);
  l->addWidget(totals_);
  l->addWidget(plot_, 3);
  l->addWidget(legend);
  l->addWidget(legendB_);
  l->addWidget(legendTiers_);
  engines_ = new QLabel(this);
  engines_->setObjectName("memoryEngines");
  engines_->setTextFormat(Qt::PlainText);
  // One line, elided to the dock's width (the full text is the tooltip): a 768 px screen leaves no room for a second.
  engines_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Fixed);
  engines_->setFont(QFont(font().family(), 8));
  engines_->setVisible(false);
  l->addWidget(engines_);
  l->addWidget(steps_, 2);
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
  line->setLineStyle(QCPGraph::lsStepCenter);  // one level per layer: a sliding layer's next to a global one's
  auto* other = plot_->addGraph();             // run B's stored bytes per layer (two runs shown)
  other->setName(tr("B stored"));
  other->setPen(QPen(QColor(117, 80, 123), 2));
  other->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDiamond, 8));
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
  auto* storedB = steps_->addGraph();
  storedB->setName(tr("B stored"));
  storedB->setPen(QPen(QColor(117, 80, 123), 2, Qt::DashDotLine));
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

void MemoryDock::elideEngines() {
  engines_->setText(engines_->fontMetrics().elidedText(enginesLine_, Qt::ElideRight, std::max(40, width() - 8)));
}

// A dock shorter than this (a 768 px screen's) shows the totals' first sentence, the rest (growth room, sliding and
// shared layers) in its tooltip: more lines would push the labels over the plots.
constexpr int kRoomForAllTotals = 420;

void MemoryDock::fitTotals() {
  if (abTotals_) return;
  const bool roomy = height() >= kRoomForAllTotals || totalsShort_ == totalsFull_;
  totals_->setText(roomy ? totalsFull_ : totalsShort_ + QChar(0x2026));
  totals_->setToolTip(roomy ? QString() : totalsFull_);
}

void MemoryDock::resizeEvent(QResizeEvent* e) {
  QWidget::resizeEvent(e);
  elideEngines();
  fitTotals();
}

void MemoryDock::markLayer() {
  const int layer = sel_->layer();
  mark_->setVisible(layer < layers_);
  mark_->topLeft->setCoords(layer - 0.45, plot_->yAxis->range().upper);
  mark_->bottomRight->setCoords(layer + 0.45, 0.0);
}

void MemoryDock::show(const RunSnapshotPtr& run, const RunSnapshotPtr& against) {
  const auto& mem = run->cache.memory;
  QVector<double> bx, bstored;
  if (against)
    for (std::size_t i = 0; i < against->cache.memory.size(); ++i) {
      bx << double(i);
      bstored << against->cache.memory[i].total().stored() / 1024.0;
    }
  plot_->graph(1)->setData(bx, bstored);
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
    if (run->tokens[i].kvUnquantized == 0) continue;  // old sessions carry no per-step bytes
    step << i;
    stored << mib(run->tokens[i].kvStored);
    unq << mib(run->tokens[i].kvUnquantized);
  }
  steps_->graph(0)->setData(step, stored);
  steps_->graph(1)->setData(step, unq);
  QVector<double> bstep, bsteps;
  if (against)
    for (int i = 0; i < against->tokens.size(); ++i)
      if (against->tokens[i].kvUnquantized > 0) bstep << i, bsteps << mib(against->tokens[i].kvStored);
  steps_->graph(2)->setData(bstep, bsteps);
  // Tiers by age: each tier's bytes over the steps (dashed, newest tier first), named in their own key.
  const int tiers = run->tokens.isEmpty() ? 0 : static_cast<int>(run->tokens.back().kvTiers.size());
  static const QList<QColor> kTierColours{QColor(78, 154, 6), QColor(196, 160, 0), QColor(92, 53, 102),
                                          QColor(206, 92, 0), QColor(32, 74, 135)};
  while (steps_->graphCount() < 3 + tiers) {
    auto* g = steps_->addGraph();
    g->setPen(QPen(kTierColours[(steps_->graphCount() - 4) % kTierColours.size()], 1.5, Qt::DashDotLine));
  }
  QStringList tierKey;
  for (int g = 3; g < steps_->graphCount(); ++g) {
    const int k = g - 3;
    QVector<double> ts, tb;
    for (int i = 0; i < run->tokens.size() && k < tiers; ++i)
      if (k < run->tokens[i].kvTiers.size()) ts << i, tb << mib(run->tokens[i].kvTiers[k]);
    steps_->graph(g)->setData(ts, tb);
    steps_->graph(g)->setVisible(k < tiers);
    if (k >= tiers) continue;
    const bool named = run->config && k < static_cast<int>(run->config->tiers.size());
    const QString what = named ? QString::fromStdString(run->config->tiers[static_cast<std::size_t>(k)].format)
                               : tr("tier %1").arg(k + 1);
    tierKey << QString("<span style='color:%1'>-&middot;-</span>&nbsp;%2 %3 MiB")
                   .arg(steps_->graph(g)->pen().color().name(), what.toHtmlEscaped())
                   .arg(tb.isEmpty() ? 0.0 : tb.back(), 0, 'f', 2);
  }
  legendTiers_->setText(tr("tiers by age (per step, below; newest first): %1").arg(tierKey.join(" &nbsp; ")));
  legendTiers_->setVisible(tiers > 0);
  steps_->rescaleAxes();
  steps_->yAxis->setRangeLower(0);
  steps_->replot(QCustomPlot::rpQueuedReplot);
  const auto t = run->cache.total();
  // What the run really holds against an unquantized cache of the same tokens: the realized saving. Reference mode
  // keeps a dequantized copy of the history (transient) beside the codes; fused mode keeps none. Growth room
  // (allocated, not yet written) is named apart: an unquantized cache reserves room as well.
  const double inUse = mib(t.held() - t.reserved);
  const double saved = mib(t.unquantized) - inUse;
  const QString held = t.transient > 0 ? tr("holds %1 MiB, with a %2 MiB dequantized copy (attention=reference)")
                                             .arg(inUse, 0, 'f', 2)
                                             .arg(mib(t.transient), 0, 'f', 2)
                                       : tr("holds %1 MiB, no full-precision copy").arg(inUse, 0, 'f', 2);
  const QString verdict = saved >= 0 ? tr("saves %1 MiB against an unquantized cache").arg(saved, 0, 'f', 2)
                                     : tr("%1 MiB more than an unquantized cache").arg(-saved, 0, 'f', 2);
  // A long spec (a per-layer config) cut short: the runs table and the status bar carry it whole.
  const QString spec = run->spec.size() > 40 ? run->spec.left(39) + QChar(0x2026) : run->spec;
  const QString head = tr("%1: stored %2 MiB of %3 MiB unquantized (%4x); %5: %6")
                           .arg(spec)
                           .arg(mib(t.stored()), 0, 'f', 2)
                           .arg(mib(t.unquantized), 0, 'f', 2)
                           .arg(t.compressionRatio(), 0, 'f', 2)
                           .arg(held, verdict);
  totalsFull_ =
      head + tr(" (+%1 MiB growth room reserved)%2").arg(mib(t.reserved), 0, 'f', 2).arg(slidingNote(run->cache));
  totalsShort_ = head;
  abTotals_ = false;
  fitTotals();
  // The engines' rule depends on the run's config and layer kinds only: once a run (and once its layers are known),
  // not at every snapshot.
  const QString enginesKey = QString("%1 %2 %3").arg(run->runId).arg(mem.size()).arg(run->spec);
  if (enginesKey != enginesKey_) {
    enginesKey_ = enginesKey;
    const auto [engines, enginesInFull] = enginesNote(*run);
    enginesLine_ = engines;
    elideEngines();
    engines_->setToolTip(enginesInFull);
    engines_->setVisible(!engines.isEmpty());
  }
  legendB_->setVisible(against != nullptr);
  if (!against) return;
  const auto tb = against->cache.total();
  const double d = mib(tb.stored()) - mib(t.stored());
  // Two runs: one line each would not fit a 768 px screen beside the plots; the single run's sentence is the tooltip.
  abTotals_ = true;
  totals_->setToolTip(totalsFull_);
  totals_->setText(tr("A #%1: stored %2 MiB (%3x) · B #%4: %5 MiB (%6x) · B − A: %7%8 MiB")
                       .arg(run->runId)
                       .arg(mib(t.stored()), 0, 'f', 2)
                       .arg(t.compressionRatio(), 0, 'f', 2)
                       .arg(against->runId)
                       .arg(mib(tb.stored()), 0, 'f', 2)
                       .arg(tb.compressionRatio(), 0, 'f', 2)
                       .arg(d >= 0 ? "+" : "")
                       .arg(d, 0, 'f', 2));
}

}  // namespace kvscope::ui
