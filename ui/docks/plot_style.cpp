#include "docks/plot_style.h"

#include <qcustomplot.h>

#include <algorithm>
#include <cmath>

namespace kvscope::ui {

double mib(std::int64_t b) {
  return static_cast<double>(b) / (1024.0 * 1024.0);
}

void legendBelow(QCustomPlot* plot, int columns) {
  plot->axisRect()->insetLayout()->take(plot->legend);
  plot->plotLayout()->addElement(plot->plotLayout()->rowCount(), 0, plot->legend);
  plot->plotLayout()->setRowStretchFactor(plot->plotLayout()->rowCount() - 1, 0.001);
  plot->legend->setFillOrder(QCPLegend::foColumnsFirst);
  plot->legend->setWrap(columns);
  plot->legend->setMargins(QMargins(4, 1, 4, 1));
}

void wholeDecades(QCPAxis* axis) {
  const QCPRange r = axis->range();
  if (!(r.lower > 0) || !std::isfinite(r.upper)) return;
  const double lo = std::floor(std::log10(r.lower)), hi = std::max(lo + 1, std::ceil(std::log10(r.upper)));
  axis->setRange(std::pow(10.0, lo), std::pow(10.0, hi));
  axis->setNumberFormat("eb");
  axis->setNumberPrecision(0);
  // Every decade labelled where the axis has 16 px a decade for it, else every second (third, ...) one: labels never
  // overlap. (Before the first layout the height is 0: every decade, as a plot's minimum height allows.)
  const int decades = static_cast<int>(hi - lo);
  const int height = axis->axisRect()->height();
  const int step = height > 0 ? std::max(1, (decades * 16 + height - 1) / height) : 1;
  axis->ticker()->setTickCount((decades + step - 1) / step);
  axis->ticker()->setTickStepStrategy(QCPAxisTicker::tssReadability);
}

void integerTicks(QCPAxis* axis) {
  QSharedPointer<QCPAxisTickerFixed> ticker(new QCPAxisTickerFixed);
  ticker->setTickStep(1.0);
  ticker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
  axis->setTicker(ticker);
}

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
  clearColorMap(map);  // QCustomPlot starts a map as 10 x 10 zeros: an empty view would look like zero error
  return map;
}

void clearColorMap(QCPColorMap* map) {
  map->data()->clear();
  if (map->colorScale()) map->colorScale()->setVisible(false);
}

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

void setFiniteDataRange(QCPColorMap* map) {
  QCPColorMapData* d = map->data();  // cell() is not const in QCustomPlot 2.1
  double lo = INFINITY, hi = -INFINITY;
  for (int k = 0; k < d->keySize(); ++k)
    for (int v = 0; v < d->valueSize(); ++v)
      if (const double x = d->cell(k, v); std::isfinite(x)) lo = std::min(lo, x), hi = std::max(hi, x);
  if (!(lo <= hi)) lo = 0, hi = 1;
  if (lo == hi) hi = lo + (lo == 0 ? 1 : std::abs(lo) * 1e-3);
  map->setDataRange(QCPRange(lo, hi));
  if (map->colorScale()) map->colorScale()->setVisible(true);
}

}  // namespace kvscope::ui
