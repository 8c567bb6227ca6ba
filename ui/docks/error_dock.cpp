#include "docks/error_dock.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QGridLayout>
#include <QLabel>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "docks/plot_style.h"
#include "message_bar.h"
#include "runs_model.h"

namespace kvscope::ui {

ErrorDock::ErrorDock(Selection* selection, QWidget* parent) : QWidget(parent), sel_(selection) {
  auto* l = new QVBoxLayout(this);
  l->setContentsMargins(2, 2, 2, 2);
  l->setSpacing(2);
  which_ = new QComboBox(this);
  which_->setObjectName("errorSide");
  which_->addItems({tr("keys"), tr("values")});
  l->addWidget(which_);
  const QStringList scales{tr("relative L2 error"), tr("rel. L2 error"), tr("B − A")};
  // Two runs: A and B side by side (one colour range, B's scale stands for both), B − A below them at full width.
  // One run: A alone, the other cells hidden.
  auto* grid = grid_ = new QGridLayout();
  grid->setContentsMargins(0, 0, 0, 0);
  grid->setSpacing(2);
  l->addLayout(grid, 1);
  const int row[] = {0, 0, 2}, column[] = {0, 1, 0}, span[] = {1, 1, 2};
  for (std::size_t i = 0; i < panes_.size(); ++i) {
    Pane& p = panes_[i];
    p.title = new ElidedLabel(this);  // a long name is cut with "…", whole in the tooltip: the column stays narrow
    p.title->setObjectName(QString("errorPaneTitle%1").arg(i));
    p.title->setVisible(false);
    p.plot = new QCustomPlot(this);
    p.plot->setObjectName(QString("errorPane%1").arg(i));
    p.plot->setMinimumSize(i == 0 ? kPlotMin : QSize(kPlotMin.width() / 2, kPlotMin.height() / 2));
    p.plot->setVisible(i == 0);
    grid->addWidget(p.title, row[i], column[i], 1, span[i]);
    grid->addWidget(p.plot, row[i] + 1, column[i], 1, span[i]);
    grid->setRowStretch(row[i] + 1, 1);
    p.plot->xAxis->setLabel(tr("layer"));
    p.plot->yAxis->setLabel(i == 0 ? tr("KV head (click a cell to select)") : tr("KV head"));
    p.map = addColorMap(p.plot, scales[static_cast<int>(i)]);
    p.nanMap = addNanLayer(p.plot);
    integerTicks(p.plot->xAxis);
    integerTicks(p.plot->yAxis);
    p.mark = new QCPItemRect(p.plot);
    p.mark->setPen(QPen(Qt::cyan, 2));
    p.mark->setBrush(Qt::NoBrush);
    p.mark->setVisible(false);
    connect(p.plot, &QCustomPlot::mousePress, this, [this, plot = p.plot, map = p.map](QMouseEvent* e) {
      const int layer = static_cast<int>(std::lround(plot->xAxis->pixelToCoord(e->position().x())));
      const int head = static_cast<int>(std::lround(plot->yAxis->pixelToCoord(e->position().y())));
      if (layer < 0 || layer >= map->data()->keySize() || head < 0 || head >= map->data()->valueSize()) return;
      sel_->setLayer(layer);
      sel_->setHead(head);
    });
  }
  // The difference: blue where B's error is lower, red where it is higher, white where they agree.
  QCPColorGradient diverging(QCPColorGradient::gpPolar);
  diverging.setNanHandling(QCPColorGradient::nhTransparent);
  panes_[2].map->setGradient(diverging);
  legend_ = new QLabel(this);
  legend_->setObjectName("errorLegend");
  legend_->setWordWrap(true);
  l->addWidget(legend_);
  connect(which_, &QComboBox::currentIndexChanged, this, [this] { redraw(); });
  connect(sel_, &Selection::changed, this, [this] { redraw(); });
}

void ErrorDock::show(const RunSnapshotPtr& run, const RunSnapshotPtr& against) {
  last_ = run;
  against_ = against;
  redraw();
}

const QVector<QVector<float>>& ErrorDock::errors(const RunSnapshotPtr& run) const {
  // ||x̂ - x|| / ||x|| over each whole head (a mean of per-cell ratios would be ruled by values near 0), of the latest
  // update that quantized the layer: the engine keeps it between snapshots, and sessions keep it with the run.
  static const QVector<QVector<float>> none;
  if (!run) return none;
  return which_->currentIndex() == 0 ? run->headErrorK : run->headErrorV;
}

namespace {
float at(const QVector<QVector<float>>& rel, int layer, int head) {
  if (layer < 0 || layer >= static_cast<int>(rel.size()) || head < 0 || head >= static_cast<int>(rel[layer].size()))
    return std::nanf("");
  return rel[layer][head];
}
}  // namespace

float ErrorDock::cell(int layer, int head) const {
  return at(errors(last_), layer, head);
}

float ErrorDock::difference(int layer, int head) const {
  if (!against_) return std::nanf("");
  return at(errors(against_), layer, head) - at(errors(last_), layer, head);
}

std::pair<int, int> ErrorDock::fill(Pane& p, const std::vector<std::vector<float>>& values, int layers, int heads) {
  for (auto* m : {p.map, p.nanMap}) {
    m->data()->setSize(layers, heads);
    m->data()->setRange(QCPRange(0, layers - 1), QCPRange(0, heads - 1));
  }
  // Three kinds of cell: an error (the scale), nothing quantized yet (blank), NaN/inf (its own colour, never a colour
  // of the scale: a head whose cache stored NaN is not "low error").
  int blank = 0, nonFinite = 0;
  for (int l = 0; l < layers; ++l)
    for (int h = 0; h < heads; ++h) {
      const float e = values[static_cast<std::size_t>(l)][static_cast<std::size_t>(h)];
      const bool bad = std::isinf(e);
      blank += std::isnan(e);
      nonFinite += bad;
      p.map->data()->setCell(l, h, std::isfinite(e) ? e : std::nan(""));
      p.nanMap->data()->setCell(l, h, bad ? 1.0 : std::nan(""));
    }
  p.nanMap->setVisible(nonFinite > 0);
  p.plot->rescaleAxes();
  const int l = sel_->layer(), h = sel_->head();
  p.mark->setVisible(l < layers && h < heads);
  p.mark->topLeft->setCoords(l - 0.5, h + 0.5);
  p.mark->bottomRight->setCoords(l + 0.5, h - 0.5);
  return {nonFinite, blank};
}

void ErrorDock::redraw() {
  const bool pair = against_ != nullptr;
  const std::array<const QVector<QVector<float>>*, 2> rel{&errors(last_), &errors(against_)};
  int layers = 0, heads = 0;
  for (std::size_t r = 0; r < (pair ? 2U : 1U); ++r) {
    layers = std::max<int>(layers, static_cast<int>(rel[r]->size()));
    for (const auto& row : *rel[r]) heads = std::max<int>(heads, static_cast<int>(row.size()));
  }
  for (std::size_t i = 1; i < panes_.size(); ++i) {
    panes_[i].plot->setVisible(pair);
    panes_[i].title->setVisible(pair);
  }
  panes_[0].title->setVisible(pair);
  panes_[0].plot->yAxis->setLabel(pair ? tr("KV head") : tr("KV head (click a cell to select)"));
  // A's colour scale leaves the plot while B's, beside it, stands for both (a hidden one would keep its room).
  QCPColorScale* scaleA = panes_[0].map->colorScale();
  QCPLayoutGrid* layoutA = panes_[0].plot->plotLayout();
  if (pair && layoutA->hasElement(0, 1)) {
    layoutA->take(scaleA);
    layoutA->simplify();
  } else if (!pair && !layoutA->hasElement(0, 1)) {
    layoutA->addElement(0, 1, scaleA);
  }
  // One run: A takes the whole dock (a hidden pane's row or column would otherwise keep its share of the space).
  grid_->setColumnStretch(0, 1);
  grid_->setColumnStretch(1, pair ? 1 : 0);
  grid_->setRowStretch(3, pair ? 1 : 0);
  for (std::size_t i = 0; i < 2; ++i)  // half a dock's width: fewer labels, none on another
    panes_[i].plot->xAxis->ticker()->setTickCount(pair ? 3 : 5);
  panes_[1].plot->yAxis->setLabel(QString());  // beside A's: the same axis
  // Three maps in the height one had: each may shrink to a third (the window must still fit a 768 px screen).
  panes_[0].plot->setMinimumSize(pair ? QSize(kPlotMin.width() / 2, kPlotMin.height() / 2) : kPlotMin);
  panes_[0].map->colorScale()->axis()->setLabel(pair ? tr("rel. L2 error") : tr("relative L2 error"));
  for (auto& p : panes_)  // a short scale: few labels, none on another
    p.map->colorScale()->axis()->ticker()->setTickCount(pair ? 3 : 5);
  if (pair) {
    // Named by what tells the two apart (every option resolved), the SPEC in the tooltip.
    const QStringList names = configNames({last_, against_});
    panes_[0].title->setText(tr("A: run #%1 %2").arg(last_->runId).arg(names.value(0)));
    panes_[1].title->setText(tr("B: run #%1 %2").arg(against_->runId).arg(names.value(1)));
    panes_[2].title->setText(tr("B − A (blue: B's error lower, red: higher)"));
  }
  if (layers == 0 || heads == 0) {  // nothing quantized in the shown run(s): say why, never keep another run's map
    for (auto& p : panes_) {
      clearColorMap(p.map);
      p.nanMap->data()->clear();
      p.nanMap->setVisible(false);
      p.mark->setVisible(false);
      p.plot->replot(QCustomPlot::rpQueuedReplot);
    }
    QStringList why;
    if (last_) why << nothingQuantizedReason(*last_);
    if (pair) why << nothingQuantizedReason(*against_);
    legend_->setText(why.join("; "));
    legend_->setVisible(last_ != nullptr);
    return;
  }
  // Cells as the maps show them: a value, NaN where the run quantized nothing there, inf where it stored NaN/inf.
  auto grid = [&](const QVector<QVector<float>>& r) {
    std::vector<std::vector<float>> g(static_cast<std::size_t>(layers),
                                      std::vector<float>(static_cast<std::size_t>(heads), std::nanf("")));
    for (int l = 0; l < layers; ++l)
      for (int h = 0; h < heads; ++h)
        if (l < r.size() && h < r[l].size()) {
          const float e = r[l][h];
          g[static_cast<std::size_t>(l)][static_cast<std::size_t>(h)] = std::isfinite(e) ? e : INFINITY;
        }
    return g;
  };
  const auto a = grid(*rel[0]);
  const auto [nonFinite, blank] = fill(panes_[0], a, layers, heads);
  QStringList key;
  if (pair) {
    const auto b = grid(*rel[1]);
    const auto [nfB, blankB] = fill(panes_[1], b, layers, heads);
    std::vector<std::vector<float>> d = a;
    float worst = 0;
    for (std::size_t l = 0; l < d.size(); ++l)
      for (std::size_t h = 0; h < d[l].size(); ++h) {
        const float x = a[l][h], y = b[l][h];
        d[l][h] = std::isnan(x) || std::isnan(y) ? std::nanf("") : (std::isinf(x) || std::isinf(y) ? INFINITY : y - x);
        if (std::isfinite(d[l][h])) worst = std::max(worst, std::abs(d[l][h]));
      }
    fill(panes_[2], d, layers, heads);
    // A and B on one range (a colour means the same error in both); the difference centred on 0.
    double lo = INFINITY, hi = -INFINITY;
    for (const auto* g : {&a, &b})
      for (const auto& row : *g)
        for (const float e : row)
          if (std::isfinite(e)) lo = std::min<double>(lo, e), hi = std::max<double>(hi, e);
    if (!(lo <= hi)) lo = 0, hi = 1;
    if (lo == hi) hi = lo + (lo == 0 ? 1 : std::abs(lo) * 1e-3);
    for (std::size_t i = 0; i < 2; ++i) panes_[i].map->setDataRange(QCPRange(lo, hi));
    const double span = worst > 0 ? worst : 1e-6;
    panes_[2].map->setDataRange(QCPRange(-span, span));
    for (auto& p : panes_) p.map->colorScale()->setVisible(&p != &panes_[0]);  // (A's is out of its plot)
    if (nfB > 0) key << tr("B stored NaN/inf in %1 heads").arg(nfB);
    if (blankB > 0 && blank == 0) key << tr("B: blank cells not quantized (yet)");
  } else {
    setFiniteDataRange(panes_[0].map);
  }
  if (nonFinite > 0)
    key.prepend(tr("<span style='color:%1'>&#9632;</span> NaN/inf: %2 whose cache stored non-finite values")
                    .arg(kNanColour.name(), nonFinite == 1 ? tr("1 head") : tr("%1 heads").arg(nonFinite)));
  if (blank > 0) key << tr("blank: not quantized (yet)");
  legend_->setText(key.join(" &nbsp; "));
  legend_->setVisible(!key.isEmpty());
  for (auto& p : panes_)
    if (p.plot->isVisibleTo(this) || &p == &panes_[0]) p.plot->replot(QCustomPlot::rpQueuedReplot);
}

}  // namespace kvscope::ui
