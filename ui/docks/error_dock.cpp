#include "docks/error_dock.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QLabel>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "docks/plot_style.h"
#include "runs_model.h"

namespace kvscope::ui {

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
    if (layer < 0 || layer >= static_cast<int>(errors().size()) || head < 0 || head >= map_->data()->valueSize())
      return;
    sel_->setLayer(layer);
    sel_->setHead(head);
  });
  connect(sel_, &Selection::changed, this, [this] { redraw(); });
}

void ErrorDock::show(const RunSnapshotPtr& run) {
  last_ = run;
  redraw();
}

const QVector<QVector<float>>& ErrorDock::errors() const {
  // ||x̂ - x|| / ||x|| over each whole head (a mean of per-cell ratios would be ruled by values near 0), of the latest
  // update that quantized the layer: the engine keeps it between snapshots, and sessions keep it with the run.
  static const QVector<QVector<float>> none;
  if (!last_) return none;
  return which_->currentIndex() == 0 ? last_->headErrorK : last_->headErrorV;
}

float ErrorDock::cell(int layer, int head) const {
  const auto& rel = errors();
  if (layer < 0 || layer >= static_cast<int>(rel.size()) || head < 0 || head >= static_cast<int>(rel[layer].size()))
    return std::nanf("");
  return rel[layer][head];
}

void ErrorDock::redraw() {
  const auto& rel = errors();
  const int layers = static_cast<int>(rel.size());
  int heads = 0;
  for (const auto& r : rel) heads = std::max<int>(heads, static_cast<int>(r.size()));
  if (layers == 0 || heads == 0) {  // nothing quantized in the shown run: say why, never keep another run's map
    for (auto* m : {map_, nanMap_}) m->data()->clear();
    nanMap_->setVisible(false);
    mark_->setVisible(false);
    legend_->setText(last_ ? nothingQuantizedReason(*last_) : QString());
    legend_->setVisible(last_ != nullptr);
    plot_->replot(QCustomPlot::rpQueuedReplot);
    return;
  }
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

}  // namespace kvscope::ui
