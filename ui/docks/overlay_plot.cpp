#include "docks/overlay_plot.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QFontMetrics>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "docks/plot_style.h"

namespace kvscope::ui {

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
  // A legend entry's tooltip: the run's whole SPEC (the entry names what tells the runs apart, elided in the middle
  // when the plot is narrow).
  plot_->setMouseTracking(true);
  connect(plot_, &QCustomPlot::mouseMove, this, [this](QMouseEvent* e) {
    for (int k = 0; k < plot_->legend->itemCount(); ++k) {
      auto* item = qobject_cast<QCPPlottableLegendItem*>(plot_->legend->item(k));
      if (item && item->rect().contains(e->position().toPoint())) {
        QToolTip::showText(e->globalPosition().toPoint(), item->plottable()->property("spec").toString(), plot_);
        return;
      }
    }
    QToolTip::hideText();
  });
  connect(plot_, &QCustomPlot::mousePress, this, [this](QMouseEvent* e) {
    for (int k = 0; k < plot_->legend->itemCount(); ++k) {
      auto* item = qobject_cast<QCPPlottableLegendItem*>(plot_->legend->item(k));
      if (item && item->rect().contains(e->position().toPoint()))
        return Q_EMIT runClicked(item->plottable()->property("runId").toInt());
    }
  });
}

void OverlayPlot::show(const QVector<RunSnapshotPtr>& runs, const QStringList& names) {
  runs_ = runs;
  names_ = names;
  redraw();
}

void OverlayPlot::redraw() {
  plot_->clearGraphs();
  const int metric = metric_->currentIndex();
  static const QList<QColor> palette{QColor(52, 101, 164), QColor(204, 0, 0),    QColor(78, 154, 6),
                                     QColor(245, 121, 0),  QColor(117, 80, 123), QColor(193, 125, 17),
                                     QColor(6, 152, 154),  QColor(85, 87, 83)};
  // Steps without a finite value (a cache that stored NaN/inf makes KL and log-prob NaN or infinite) are not left
  // out silently, which would make such a run look good: each is a cross at the top of the plot, in the run's colour,
  // and the legend counts them.
  struct Missing {
    QVector<double> steps;
    QColor colour;
    QString name;
    int runId = 0;
  };
  QVector<Missing> missing;
  // Two legend columns when every name fits half the plot's width, else one: names are elided in the middle only
  // when even one column is too narrow, so that the options that tell runs apart stay readable.
  const QFontMetrics fm(plot_->legend->font());
  int widest = 0;
  for (int k = 0; k < runs_.size(); ++k)
    widest = std::max(widest, fm.horizontalAdvance(names_.size() == runs_.size() ? names_[k] : runs_[k]->spec));
  const int width = std::max(plot_->width(), kPlotMin.width());
  const int columns = widest + 60 <= width / 2 ? 2 : 1;
  plot_->legend->setWrap(columns);
  const int room = std::max(130, width / columns - 60);
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
    if (x.isEmpty() && bad.isEmpty()) continue;  // nothing to draw (a run stopped before its first token)
    const QColor colour = palette[i++ % palette.size()];
    // Elided to fit two legend columns (the table beside it names the run in full).
    const QString label = names_.size() == runs_.size() ? names_[runs_.indexOf(run)] : run->spec;
    const QString name = tr("#%1 %2").arg(run->runId).arg(fm.elidedText(label, Qt::ElideMiddle, room));
    auto* g = plot_->addGraph();
    g->setName(name);
    g->setProperty("spec", tr("#%1 %2").arg(run->runId).arg(run->spec));
    g->setProperty("runId", run->runId);
    g->setPen(QPen(colour, 1.5));
    g->setData(x, y);
    if (!bad.isEmpty()) missing.push_back({bad, colour, name, run->runId});
  }
  plot_->yAxis->setLabel(metric_->currentText());
  plot_->yAxis->setScaleType(metric == 0 ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
  if (metric == 0)
    plot_->yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
  else
    plot_->yAxis->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
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
      g->setProperty("spec", m.name);
      g->setProperty("runId", m.runId);
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
