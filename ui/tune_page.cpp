#include "tune_page.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QMouseEvent>
#include <QPushButton>
#include <QSaveFile>
#include <QScrollArea>
#include <QSpinBox>
#include <QTabWidget>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <limits>

#include "docks/plot_style.h"
#include "eval_page.h"
#include "runs_model.h"
#include "runtime/load_options.h"

namespace kvscope::ui {

namespace {

QColor targetColour(cache::TuneTarget t) {
  switch (t) {
    case cache::TuneTarget::Kvscope:
      return QColor(31, 119, 180);
    case cache::TuneTarget::LlamaCpp:
      return QColor(214, 39, 40);
    case cache::TuneTarget::Vllm:
      return QColor(44, 160, 44);
    case cache::TuneTarget::Transformers:
      return QColor(148, 103, 189);
    case cache::TuneTarget::ModelOpt:
      return QColor(255, 127, 14);
  }
  return Qt::black;
}

}  // namespace

TunePage::TunePage(QWidget* parent) : QWidget(parent) {
  // The controls in a column beside the plots: the dock is wide and short (a 1366x768 screen leaves it ~650 x 360).
  auto* l = new QHBoxLayout(this);
  l->setContentsMargins(0, 0, 0, 0);
  auto* controls = new QWidget(this);
  controls->setMaximumWidth(290);
  auto* form = new QFormLayout(controls);
  form->setContentsMargins(0, 0, 0, 0);
  form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  candidates_ = new QLineEdit("llamacpp:type_k=q8_0,type_v=q8_0 llamacpp:type_k=q4_0,type_v=q4_0", this);
  candidates_->setObjectName("tuneCandidates");
  candidates_->setToolTip(
      tr("candidate SPECs, separated by spaces: each is tried on every layer's keys and values "
         "alone, the rest unquantized"));
  const TextPicker picker = makeTextPicker(this, "tune", tr("Tuning text"), 128, 1);
  text_ = picker.path;
  QPushButton* browse = picker.browse;
  ctx_ = picker.ctx;
  windows_ = picker.windows;
  auto* scan = scan_ = new QPushButton(tr("Scan"), this);
  scan->setObjectName("tuneButton");
  scan->setToolTip(tr("One run per candidate, layer and side on the text (2 x layers x candidates runs)"));
  form->addRow(tr("Candidates"), candidates_);
  auto* textRow = new QHBoxLayout();
  textRow->addWidget(text_, 1);
  textRow->addWidget(browse);
  form->addRow(tr("Text"), textRow);
  auto* windowRow = new QHBoxLayout();
  windowRow->addWidget(ctx_);
  windowRow->addWidget(new QLabel(tr("tokens ×"), this));
  windowRow->addWidget(windows_);
  windowRow->addWidget(scan);
  form->addRow(tr("Windows"), windowRow);
  budget_ = new QDoubleSpinBox(this);
  budget_->setObjectName("tuneBudget");
  budget_->setDecimals(4);
  budget_->setRange(0.0, 100.0);
  budget_->setSingleStep(0.005);
  budget_->setValue(0.01);
  budget_->setToolTip(tr("the pick: the fewest KV bytes whose predicted mean KL stays within this"));
  target_ = new QComboBox(this);
  target_->setObjectName("tuneTarget");
  for (cache::TuneTarget t : cache::allTargets()) target_->addItem(QString::fromUtf8(cache::targetName(t).data()));
  target_->setToolTip(
      tr("kvscope: per layer and side; llamacpp: one K and one V type; vllm: one dtype with skipped "
         "layers; transformers: one config; modelopt: one FP8 or NVFP4 config (Model-Optimizer's checkpoint "
         "metadata)"));
  shown_ = new QComboBox(this);
  shown_->setObjectName("tuneShown");
  shown_->setToolTip(tr("the candidate whose per-layer KL the bars show"));
  auto* use = new QPushButton(tr("Use pick"), this);
  use->setObjectName("tuneUsePick");
  use->setToolTip(tr("Load the pick into the form"));
  auto* save = new QPushButton(tr("Save scan…"), this);
  save->setObjectName("tuneSaveScan");
  save->setToolTip(tr("The scan as kvscope-cli tune --scan-in reads it"));
  auto* budgetRow = new QHBoxLayout();
  budgetRow->addWidget(budget_, 1);
  budgetRow->addWidget(target_, 1);
  form->addRow(tr("Max mean KL"), budgetRow);
  form->addRow(tr("Bars"), shown_);
  axis_ = new QComboBox(this);
  axis_->setObjectName("tuneFrontAxis");
  axis_->addItems({tr("KV MiB"), tr("tokens that fit (Capacity tab)")});
  axis_->setToolTip(
      tr("The fronts' x axis: the bytes each assignment stores, or the tokens its config fits under the "
         "Capacity tab's engine and GPU (assignments that engine cannot store are left out)"));
  form->addRow(tr("Front x"), axis_);
  context_ = new QSpinBox(this);
  context_->setObjectName("tuneContext");
  context_->setRange(0, 1 << 24);
  context_->setSingleStep(1024);
  context_->setSpecialValueText(tr("as scanned"));
  context_->setSuffix(tr(" tokens"));
  context_->setToolTip(
      tr("Price the fronts at this many tokens of one sequence: every layer holds them all, a sliding-window layer "
         "at most its window (kvscope-cli tune --context). \"as scanned\": the bytes the scan's windows held."));
  form->addRow(tr("Price at"), context_);
  auto* buttons = new QHBoxLayout();
  buttons->addWidget(use);
  buttons->addWidget(save);
  form->addRow(buttons);

  summary_ = new QLabel(this);
  summary_->setObjectName("tuneSummary");
  summary_->setWordWrap(true);
  pick_ = new QLabel(this);
  pick_->setObjectName("tunePick");
  pick_->setWordWrap(true);
  pick_->setTextInteractionFlags(Qt::TextSelectableByMouse);

  layers_ = new QCustomPlot(this);
  layers_->setObjectName("tuneLayerPlot");
  layers_->setMinimumSize(kPlotMin);
  layers_->xAxis->setLabel(tr("layer (click: select)"));
  layers_->yAxis->setLabel(tr("mean KL, one side alone"));
  layers_->legend->setVisible(true);
  legendBelow(layers_, 2);
  integerTicks(layers_->xAxis);
  front_ = new QCustomPlot(this);
  front_->setObjectName("tuneFrontPlot");
  front_->setMinimumSize(kPlotMin);
  front_->xAxis->setLabel(tr("KV MiB (click a point: load it)"));
  front_->yAxis->setLabel(tr("predicted mean KL"));
  front_->legend->setVisible(true);
  legendBelow(front_, 2);
  auto* tabs = new QTabWidget(this);
  tabs->setObjectName("tuneTabs");
  tabs->setDocumentMode(true);
  tabs->addTab(layers_, tr("Per layer"));
  tabs->addTab(front_, tr("Pareto front"));
  // The pick's text (a long SPEC or export) has a tab of its own: at 768 px the controls' column left it ~100 px.
  pick_->setAlignment(Qt::AlignTop | Qt::AlignLeft);
  pick_->setContentsMargins(6, 6, 6, 6);
  tabs->addTab(pick_, tr("Pick"));
  auto* results = new QWidget(this);
  auto* rl = new QVBoxLayout(results);
  rl->setContentsMargins(0, 0, 0, 0);
  rl->setSpacing(2);
  rl->addWidget(summary_);  // the scan's state (progress, time left, stopped) above its plots
  rl->addWidget(tabs, 1);
  auto* scroll = new QScrollArea(this);  // the pick's text may be long: the column scrolls, the plots keep their room
  scroll->setObjectName("tuneControls");
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setWidget(controls);
  scroll->setMaximumWidth(300);
  scroll->setMinimumWidth(230);
  l->addWidget(scroll);
  l->addWidget(results, 1);

  connect(scan, &QPushButton::clicked, this, &TunePage::scanClicked);
  connect(use, &QPushButton::clicked, this, &TunePage::pickClicked);
  connect(save, &QPushButton::clicked, this, &TunePage::saveScan);
  connect(budget_, &QDoubleSpinBox::valueChanged, this, &TunePage::redraw);
  connect(context_, &QSpinBox::valueChanged, this, [this] {
    if (result_) showResult(TuneResultView(*result_));  // the fronts and the pick priced again
  });
  connect(target_, &QComboBox::currentIndexChanged, this, &TunePage::redraw);
  connect(shown_, &QComboBox::currentIndexChanged, this, &TunePage::redraw);
  connect(axis_, &QComboBox::currentIndexChanged, this, &TunePage::redraw);
  connect(layers_, &QCustomPlot::mousePress, this, [this](QMouseEvent* e) {
    if (!result_) return;
    const int layer = static_cast<int>(std::lround(layers_->xAxis->pixelToCoord(e->position().x())));
    if (layer >= 0 && layer < result_->scan.plan.numLayers) Q_EMIT layerClicked(layer);
  });
  connect(front_, &QCustomPlot::mousePress, this, [this](QMouseEvent* e) {
    if (!result_) return;
    // The nearest point of any target's front, within 12 pixels.
    double best = 12.0 * 12.0;
    std::optional<std::pair<cache::TuneTarget, int>> hit;
    for (cache::TuneTarget t : cache::allTargets()) {
      const auto& points = front(t);
      for (int i = 0; i < static_cast<int>(points.size()); ++i) {
        const auto x = frontX(points[static_cast<std::size_t>(i)]);
        if (!x) continue;
        const double dx = front_->xAxis->coordToPixel(*x) - e->position().x();
        const double dy =
            front_->yAxis->coordToPixel(points[static_cast<std::size_t>(i)].predictedKl) - e->position().y();
        if (dx * dx + dy * dy < best) best = dx * dx + dy * dy, hit = std::pair{t, i};
      }
    }
    if (hit)
      if (const auto cfg = frontConfig(hit->first, hit->second)) Q_EMIT configChosen(*cfg);
  });
}

TuneRequest TunePage::request() const {
  TuneRequest r;
  r.textPath = text_->text();
  for (const QString& s : candidates_->text().split(' ', Qt::SkipEmptyParts))
    r.candidates.push_back(cache::parseSpec(s.toStdString()));
  cache::planScan(r.candidates, 1);  // a bad candidate is an error before anything runs
  r.ctx = ctx_->value();
  r.windows = windows_->value();
  r.prompt = std::min(64, r.ctx / 2);
  return r;
}

void TunePage::showStarted(const TuneRequest& r) {
  summary_->setText(
      tr("Scanning %1 candidate(s) on every layer's K and V on %2…").arg(r.candidates.size()).arg(r.textPath));
}

void TunePage::showFailed(const QString& message) {
  summary_->setText(message.toHtmlEscaped());
}

void TunePage::setStartEnabled(bool on) {
  scan_->setEnabled(on);
}

void TunePage::showResult(const TuneResultView& result) {
  result_ = result;
  // A scan still going (or stopped) is solved from the candidates it has scanned whole; the bars show every point.
  solved_ = result.complete ? result.scan : cache::completedCandidates(result.scan);
  if (context_->value() > 0 && result.ctx > 0 && !solved_.plan.candidates.empty())
    solved_ = cache::pricedAt(solved_, {result.ctx, result.prompt, std::max(result.step, 1)}, context_->value(),
                              cache::LayerWindows(result.layerWindows.begin(), result.layerWindows.end()),
                              result.layerValues);
  fronts_.clear();
  for (cache::TuneTarget t : cache::allTargets())
    fronts_.push_back(solved_.plan.candidates.empty() ? std::vector<cache::Assignment>{}
                                                      : cache::paretoFront(solved_, t));
  const QSignalBlocker block(shown_);
  const int shownBefore = shown_->currentIndex();
  shown_->clear();
  // Each candidate named with every option resolved ("llamacpp" alone hid its types), the SPEC in the tooltip.
  QStringList specs;
  for (const auto& c : result.scan.plan.candidates) specs << QString::fromStdString(cache::toSpec(c));
  const QStringList names = specNames(specs);
  for (int i = 0; i < specs.size(); ++i) {
    shown_->addItem(names.value(i, specs[i]));
    shown_->setItemData(i, specs[i], Qt::ToolTipRole);
  }
  shown_->setCurrentIndex(std::clamp(shownBefore, 0, static_cast<int>(specs.size()) - 1));
  QString state;
  const auto planned = result.scan.plan.items.size();
  if (result.stopped || !result.complete) {
    state = (result.stopped ? tr("stopped after %1 of %2 layer-side runs") : tr("scanning: %1 of %2 layer-side runs"))
                .arg(result.scan.points.size())
                .arg(planned);
    if (!result.stopped && result.secondsLeft >= 0)
      state += tr(", about %1 left")
                   .arg(result.secondsLeft < 90 ? tr("%1 s").arg(std::ceil(result.secondsLeft))
                                                : tr("%1 min").arg(std::ceil(result.secondsLeft / 60)));
    state += tr("; fronts from %1 of %2 candidates (those scanned whole). ")
                 .arg(solved_.plan.candidates.size())
                 .arg(result.scan.plan.candidates.size());
  }
  // Short, above the plots (at 768 px every line is taken from them); the text's path is the tooltip.
  // "(f32)": the model computes in 8-bit activations, the scan in float32 (the tooltip says why).
  summary_->setText(state + tr("%1 × %2 tokens (%3 scored), %4 runs%5; unquantized KV %6 MiB%7")
                                .arg(result.windows)
                                .arg(result.ctx)
                                .arg(result.scored)
                                .arg(result.scan.points.size() + 1)
                                .arg(result.floatScanOfQ8 ? tr(" (f32)") : QString())
                                .arg(mib(solved_.referenceBytes), 0, 'f', 2)
                                .arg(context_->value() > 0 ? tr(" at %1 tokens").arg(context_->value()) : QString()));
  summary_->setToolTip(
      result.floatScanOfQ8
          ? tr("%1\nThe scan computes in float32 activations, not the model's 8-bit ones: on 8-bit activations any "
               "change to one layer's cache re-rounds every layer above it, a KL of its own that would hide the "
               "layer's cost. Evaluate a pick to see its KL on 8-bit activations.")
                .arg(result.textPath)
          : result.textPath);
  redraw();
}

void TunePage::setSelectedLayer(int layer) {
  if (layer == selectedLayer_) return;
  selectedLayer_ = layer;
  redraw();
}

const std::vector<cache::Assignment>& TunePage::front(cache::TuneTarget t) const {
  const auto all = cache::allTargets();
  return fronts_[static_cast<std::size_t>(std::find(all.begin(), all.end(), t) - all.begin())];
}

void TunePage::setCapacity(std::function<std::optional<double>(const cache::CacheConfig&)> fits) {
  fits_ = std::move(fits);
  refreshCapacity();
}

void TunePage::refreshCapacity() {
  if (axis_->currentIndex() == 1) redraw();
}

std::optional<double> TunePage::frontX(const cache::Assignment& a) const {
  if (axis_->currentIndex() == 0) return mib(a.storedBytes);
  if (!fits_) return std::nullopt;
  return fits_(cache::assignmentConfig(solved_, a));
}

std::optional<cache::CacheConfig> TunePage::frontConfig(cache::TuneTarget target, int index) const {
  if (!result_) return std::nullopt;
  const auto& points = front(target);
  if (index < 0 || index >= static_cast<int>(points.size())) return std::nullopt;
  return cache::assignmentConfig(solved_, points[static_cast<std::size_t>(index)]);
}

void TunePage::redraw() {
  layers_->clearPlottables();
  layers_->clearItems();
  front_->clearGraphs();
  front_->clearItems();
  if (!result_) {
    layers_->replot();
    front_->replot();
    return;
  }
  const cache::Scan& scan = result_->scan;
  // Bars: the shown candidate's KL per layer, K beside V; the selected layer marked.
  const std::size_t c = static_cast<std::size_t>(std::max(0, shown_->currentIndex()));
  if (c < scan.plan.candidates.size()) {
    QVector<double> xk, xv, k, v;
    double top = 0;
    for (int layer = 0; layer < scan.plan.numLayers; ++layer) {
      xk << layer - 0.2;
      xv << layer + 0.2;
      // Bars fill in per layer as a scan goes: a point not scanned yet is no bar.
      const auto* pk = scan.find(layer, cache::KvSide::Keys, c);
      const auto* pv = scan.find(layer, cache::KvSide::Values, c);
      k << (pk ? pk->meanKl : 0.0);
      v << (pv ? pv->meanKl : 0.0);
      for (double x : {k.back(), v.back()})
        if (std::isfinite(x)) top = std::max(top, x);
    }
    for (int side = 0; side < 2; ++side) {
      auto* b = new QCPBars(layers_->xAxis, layers_->yAxis);
      b->setName(side == 0 ? tr("K") : tr("V"));
      b->setWidth(0.4);
      b->setBrush(side == 0 ? QColor(31, 119, 180) : QColor(255, 127, 14));
      b->setPen(Qt::NoPen);
      b->setData(side == 0 ? xk : xv, side == 0 ? k : v);
    }
    auto* mark = new QCPItemRect(layers_);
    mark->topLeft->setCoords(selectedLayer_ - 0.5, top * 1.05);
    mark->bottomRight->setCoords(selectedLayer_ + 0.5, 0);
    mark->setPen(QPen(Qt::darkGray, 1, Qt::DashLine));
    layers_->xAxis->setRange(-0.7, scan.plan.numLayers - 0.3);
    layers_->yAxis->setRange(0, top > 0 ? top * 1.1 : 1);
  }
  layers_->replot();

  // Fronts: one graph per target; the pick of the chosen target circled.
  const cache::TuneTarget chosen = cache::parseTarget(target_->currentText().toStdString());
  const cache::SweepBudget budget{cache::SweepBudget::Kind::MaxMeanKl, budget_->value()};
  std::optional<cache::Assignment> pick;
  for (cache::TuneTarget t : cache::allTargets()) {
    const auto& points = front(t);
    QCPGraph* g = front_->addGraph();
    g->setName(QString::fromUtf8(cache::targetName(t).data()));
    g->setLineStyle(QCPGraph::lsStepLeft);
    g->setPen(QPen(targetColour(t), t == chosen ? 2.0 : 1.0));
    g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, targetColour(t), t == chosen ? 6 : 4));
    for (const auto& a : points)
      if (const auto x = frontX(a)) g->addData(*x, a.predictedKl);
    if (t == chosen) pick = cache::solve(points, budget);
  }
  front_->xAxis->setLabel(axis_->currentIndex() == 0 ? tr("KV MiB (click a point: load it)")
                                                     : tr("tokens that fit (click a point: load it)"));
  front_->rescaleAxes();
  front_->yAxis->setRangeLower(0);
  if (pick) {
    auto* ring = new QCPItemTracer(front_);
    ring->position->setCoords(frontX(*pick).value_or(std::nan("")), pick->predictedKl);
    ring->setStyle(QCPItemTracer::tsCircle);
    ring->setSize(14);
    ring->setPen(QPen(Qt::black, 1.5));
    const cache::CacheConfig cfg = cache::assignmentConfig(solved_, *pick);
    // Effective bits per value: the model dtype's bits times the pick's share of the unquantized bytes.
    const double refBits = runtime::dtypeBits(result_->dtype.toStdString());
    const double share = static_cast<double>(pick->storedBytes) / static_cast<double>(scan.referenceBytes);
    pick_->setText(tr("Pick for %1 (predicted mean KL ≤ %2): %3 MiB (%4x%5), predicted %6 — %7")
                       .arg(target_->currentText())
                       .arg(budget_->value())
                       .arg(mib(pick->storedBytes), 0, 'f', 2)
                       .arg(1.0 / share, 0, 'f', 2)
                       .arg(refBits > 0 ? tr(", %1 bits/value").arg(refBits * share, 0, 'f', 2) : QString())
                       .arg(pick->predictedKl, 0, 'g', 4)
                       .arg(QString::fromStdString(cache::exportFor(chosen, cfg).text)
                                .simplified()
                                .replace(";", QString(";") + QChar(0x200B))
                                .replace(",", QString(",") + QChar(0x200B))));  // long SPECs wrap at their separators
  } else {
    pick_->setText(tr("No %1 assignment meets the budget.").arg(target_->currentText()));
  }
  front_->replot();
}

void TunePage::pickClicked() {
  if (!result_) return Q_EMIT failed(tr("scan first: no tuner scan to pick from"));
  const cache::TuneTarget t = cache::parseTarget(target_->currentText().toStdString());
  const auto pick = cache::solve(front(t), {cache::SweepBudget::Kind::MaxMeanKl, budget_->value()});
  if (!pick)
    return Q_EMIT failed(
        tr("no %1 assignment meets a predicted mean KL of %2").arg(target_->currentText()).arg(budget_->value()));
  Q_EMIT configChosen(cache::assignmentConfig(solved_, *pick));
}

void TunePage::saveScan() {
  if (!result_) return Q_EMIT failed(tr("scan first: no tuner scan to save"));
  const QString path = QFileDialog::getSaveFileName(this, tr("Save scan"), "scan.json", tr("JSON (*.json)"));
  if (path.isEmpty()) return;
  QSaveFile f(path);
  // What `kvscope-cli tune --scan-in` reads back to check a pick with a full run.
  const QJsonObject o{{"model", result_->modelPath},      {"text", result_->textPath}, {"ctx", result_->ctx},
                      {"windows", result_->windows},      {"prompt", result_->prompt}, {"step", result_->step},
                      {"scored_tokens", result_->scored}, {"dtype", result_->dtype},   {"activations", "f32"}};
  const std::string settings = QJsonDocument(o).toJson(QJsonDocument::Compact).toStdString();
  // A partial scan saves the candidates it has whole (what --scan-in can solve).
  const std::string text = cache::scanToJson(solved_, settings) + "\n";
  if (!f.open(QIODevice::WriteOnly) || f.write(text.data(), static_cast<qint64>(text.size())) < 0 || !f.commit())
    Q_EMIT failed(tr("cannot write `%1`: %2").arg(path, f.errorString()));
}

}  // namespace kvscope::ui
