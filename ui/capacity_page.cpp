#include "capacity_page.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPlainTextEdit>
#include <QSpinBox>
#include <QSplitter>
#include <QTabWidget>
#include <QTableWidget>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "docks/plot_style.h"
#include "runs_model.h"

namespace kvscope::ui {

namespace {

QString tokensText(double t) {
  if (t >= 1e6) return QString::number(t / 1e6, 'f', 2) + "M";
  if (t >= 1e4) return QString::number(t / 1e3, 'f', 1) + "k";
  return QString::number(t, 'f', 0);
}

QString cellText(const std::optional<double>& v, int decimals) {
  return v ? QString::number(*v, 'f', decimals) : QString("-");
}

const char* kCustomMemory = "KV memory (GiB)";

}  // namespace

CapacityPage::CapacityPage(QWidget* parent) : QWidget(parent) {
  // Controls in a column beside the table and the plot, as the tuner's (the dock is wide and short).
  auto* l = new QHBoxLayout(this);
  l->setContentsMargins(0, 0, 0, 0);
  auto* controls = new QWidget(this);
  controls->setMaximumWidth(210);
  auto* form = new QFormLayout(controls);
  form->setContentsMargins(0, 0, 0, 0);
  form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  engine_ = new QComboBox(this);
  engine_->setObjectName("capacityEngine");
  engine_->addItem("vLLM", "vllm");
  engine_->addItem("llama.cpp", "llamacpp");
  engine_->addItem("SGLang", "sglang");
  version_ = new QComboBox(this);
  version_->setObjectName("capacityVersion");
  gpu_ = new QComboBox(this);
  gpu_->setObjectName("capacityGpu");
  for (const auto& g : plan::knownGpus())
    gpu_->addItem(QString("%1 (%2 GiB)").arg(QString::fromStdString(g.name)).arg(g.memoryGib, 0, 'f', 1),
                  QString::fromStdString(g.name));
  gpu_->addItem(tr(kCustomMemory), QString());
  memory_ = new QDoubleSpinBox(this);
  memory_->setObjectName("capacityMemory");
  memory_->setRange(0.01, 1e5);
  memory_->setDecimals(2);
  memory_->setValue(60);
  memory_->setSuffix(" GiB");
  memory_->setToolTip(tr("The KV cache's memory per GPU: vLLM's \"Available KV cache memory\" line gives it exactly"));
  length_ = new QSpinBox(this);
  length_->setObjectName("capacityLength");
  length_->setRange(256, 16 << 20);
  length_->setSingleStep(1024);
  length_->setValue(32768);
  length_->setToolTip(tr("Tokens per request: vLLM's --max-model-len; llama.cpp's context per sequence"));
  parallel_ = new QSpinBox(this);
  parallel_->setRange(1, 256);
  parallel_->setToolTip(tr("llama.cpp's -np: sequences sharing the context"));
  tp_ = new QSpinBox(this);
  tp_->setRange(1, 64);
  tp_->setToolTip(tr("Tensor-parallel GPUs (vLLM, SGLang): the KV heads and the weights are split over them"));
  form->addRow(tr("Engine"), engine_);
  form->addRow(tr("Version"), version_);
  form->addRow(tr("GPU"), gpu_);
  form->addRow(tr("KV memory"), memory_);
  form->addRow(tr("Request"), length_);
  form->addRow(tr("Sequences"), parallel_);
  form->addRow(tr("TP"), tp_);
  summary_ = new QLabel(this);
  summary_->setObjectName("capacitySummary");
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  l->addWidget(controls);

  table_ = new QTableWidget(0, 7, this);
  table_->setObjectName("capacityTable");
  // What fits and what it costs in accuracy first: a narrow dock scrolls to the engine's details.
  table_->setHorizontalHeaderLabels({tr("config"), tr("fits\n(tokens)"), tr("requests"), tr("mean\nKL"),
                                     tr("engine form"), tr("bytes/\ntoken"), tr("KV\nMiB")});
  table_->verticalHeader()->setVisible(false);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->setWordWrap(true);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Interactive);  // a name keeps a readable width
  table_->setColumnWidth(0, 150);
  table_->setHorizontalScrollMode(QAbstractItemView::ScrollPerPixel);
  table_->verticalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);  // long names wrap
  log_ = new QPlainTextEdit(this);
  log_->setObjectName("capacityLog");
  log_->setReadOnly(true);
  log_->setLineWrapMode(QPlainTextEdit::WidgetWidth);
  log_->setPlaceholderText(tr("The engine's log lines for the chosen row"));
  plot_ = new QCustomPlot(this);
  plot_->setObjectName("capacityFront");
  plot_->setMinimumSize(kPlotMin);
  plot_->xAxis->setLabel(tr("tokens that fit"));
  plot_->xAxis->ticker()->setTickCount(4);
  plot_->yAxis->setLabel(tr("mean KL (nats)"));
  plot_->yAxis->setScaleType(QCPAxis::stLogarithmic);
  plot_->yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
  // The table beside a tab pair: the chosen row's engine log, and the accuracy x capacity front.
  auto* below = new QTabWidget(this);
  below->setObjectName("capacityTabs");
  below->addTab(log_, tr("Engine log"));
  below->addTab(plot_, tr("Accuracy x capacity"));
  auto* right = new QWidget(this);
  auto* rl = new QVBoxLayout(right);
  rl->setContentsMargins(0, 0, 0, 0);
  rl->addWidget(summary_);
  // Side by side: the dock is wide and short.
  auto* split = new QSplitter(Qt::Horizontal, this);
  split->addWidget(table_);
  split->addWidget(below);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  rl->addWidget(split, 1);
  l->addWidget(right, 1);

  fillVersions();
  const auto changed = [this] { replan(); };
  connect(engine_, &QComboBox::currentIndexChanged, this, [this] {
    fillVersions();
    replan();
  });
  connect(version_, &QComboBox::currentIndexChanged, this, changed);
  connect(gpu_, &QComboBox::currentIndexChanged, this, [this] {
    memory_->setEnabled(gpu_->currentData().toString().isEmpty());
    replan();
  });
  connect(memory_, &QDoubleSpinBox::valueChanged, this, changed);
  connect(length_, &QSpinBox::valueChanged, this, changed);
  connect(parallel_, &QSpinBox::valueChanged, this, changed);
  connect(tp_, &QSpinBox::valueChanged, this, changed);
  connect(table_, &QTableWidget::currentCellChanged, this, [this](int row) { showLog(row); });
  memory_->setEnabled(false);
  replan();
}

void CapacityPage::fillVersions() {
  const QSignalBlocker block(version_);
  version_->clear();
  const auto e = plan::parseEngine(engine_->currentData().toString().toStdString());
  for (const auto& v : plan::engineVersions(e)) version_->addItem(QString::fromStdString(v));
  version_->setCurrentIndex(version_->count() - 1);
  parallel_->setEnabled(e == plan::Engine::LlamaCpp);
  tp_->setEnabled(e != plan::Engine::LlamaCpp);
}

void CapacityPage::setModelPath(const QString& path) {
  layout_.reset();
  layoutError_.clear();
  QFileInfo fi(path);
  QString target = path;
  if (fi.isFile() && fi.suffix() != "gguf" && fi.suffix() != "json") target = fi.absolutePath();  // safetensors
  try {
    layout_ = plan::loadLayout(target.toStdString());
    // A GGUF is llama.cpp's file; a Hugging Face model is served by vLLM first.
    const QSignalBlocker blockEngine(engine_);
    engine_->setCurrentIndex(engine_->findData(layout_->source == "gguf" ? "llamacpp" : "vllm"));
    fillVersions();
    // The request length starts at the model's trained context (capped for the spin box).
    const QSignalBlocker block(length_);
    length_->setValue(static_cast<int>(std::clamp<std::int64_t>(layout_->contextLength, 256, length_->maximum())));
  } catch (const std::exception& e) {
    layoutError_ = QString::fromUtf8(e.what());
  }
  replan();
}

void CapacityPage::setRuns(const QVector<RunSnapshotPtr>& runs) {
  runs_ = runs;
  replan();
}

plan::PlanOptions CapacityPage::options() const {
  plan::PlanOptions o;
  o.engine = plan::parseEngine(engine_->currentData().toString().toStdString());
  o.engineVersion = version_->currentText().toStdString();
  o.gpu = gpu_->currentData().toString().toStdString();
  if (o.gpu.empty()) o.kvMemoryGib = memory_->value();
  o.maxModelLen = length_->value();
  o.parallel = parallel_->value();
  o.ctx = std::int64_t{length_->value()} * parallel_->value();
  o.tp = tp_->value();
  return o;
}

QString CapacityPage::settingsText() const {
  const QString where = gpu_->currentData().toString().isEmpty()
                            ? tr("%1 GiB of KV memory").arg(memory_->value(), 0, 'f', 2)
                            : gpu_->currentData().toString();
  return tr("%1 %2 on %3, %4-token requests")
      .arg(engine_->currentText(), version_->currentText(), where, QLocale().toString(length_->value()));
}

void CapacityPage::replan() {
  plans_.clear();
  planError_.clear();
  rowSpecs_.clear();
  // The runs' configs, each once, in run order; the engine's defaults when there is no run yet.
  std::vector<std::string> specs;
  for (const auto& r : runs_)
    if (r && r->config) {
      const std::string s = cache::toSpec(*r->config);
      if (std::find(specs.begin(), specs.end(), s) == specs.end()) specs.push_back(s);
    }
  if (specs.empty()) specs = plan::defaultSpecs(options().engine);
  if (layout_) {
    try {
      const plan::Plan p = plan::makePlan(*layout_, specs, options());
      for (const auto& c : p.configs) plans_[c.spec] = c;
      QString memory;
      for (const auto& n : p.memoryNotes) memory += QString::fromStdString(n) + " ";
      summary_->setText(tr("%1: %2 layers (%3). %4")
                            .arg(QString::fromStdString(layout_->arch))
                            .arg(layout_->layers.size())
                            .arg(layout_->count(plan::LayerKind::Full) == static_cast<int>(layout_->layers.size())
                                     ? tr("all full attention")
                                     : tr("%1 full, %2 sliding, %3 shared, %4 linear, %5 MLA")
                                           .arg(layout_->count(plan::LayerKind::Full))
                                           .arg(layout_->count(plan::LayerKind::Sliding))
                                           .arg(layout_->count(plan::LayerKind::Shared))
                                           .arg(layout_->count(plan::LayerKind::Linear))
                                           .arg(layout_->count(plan::LayerKind::Mla)),
                                 memory.trimmed()));
    } catch (const std::exception& e) {
      planError_ = QString::fromUtf8(e.what());
      summary_->setText(planError_);
    }
  } else {
    summary_->setText(layoutError_.isEmpty() ? tr("Load a model: its file's header says what each layer caches")
                                             : tr("The planner cannot read this model: %1").arg(layoutError_));
  }

  // The table: a row per config, its run's mean KL where a run has one.
  const int keep = table_->currentRow();
  table_->setRowCount(0);
  QStringList specList;
  for (const std::string& s : specs) specList << QString::fromStdString(s);
  const QStringList names = specNames(specList);  // what tells the configs apart, as the runs table names them
  for (const std::string& s : specs) {
    const auto it = plans_.find(s);
    const int row = table_->rowCount();
    table_->insertRow(row);
    rowSpecs_.push_back(s);
    auto set = [&](int col, const QString& text, const QString& tip = {}) {
      auto* item = new QTableWidgetItem(text);
      if (col > 0) item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
      if (!tip.isEmpty()) item->setToolTip(tip);
      table_->setItem(row, col, item);
    };
    set(0, names.value(row, QString::fromStdString(s)), QString::fromStdString(s));
    std::optional<double> kl;
    for (const auto& r : runs_)
      if (r && r->config && r->shadow && cache::toSpec(*r->config) == s) kl = r->meanKl;
    set(3, kl ? QString::number(*kl, 'g', 3) : QString("-"));
    if (it == plans_.end()) {
      set(4, "-", planError_.isEmpty() ? layoutError_ : planError_);
      continue;
    }
    const plan::ConfigPlan& c = it->second;
    if (!c.expressible) {
      const QString why = c.notes.empty() ? QString() : QString::fromStdString(c.notes.front());
      set(1, tr("cannot store"), why);
      set(4, "-", why);
      continue;
    }
    set(1, c.fitTokens ? tokensText(static_cast<double>(*c.fitTokens)) : QString("-"));
    set(2, cellText(c.fitRequests, 2));
    set(4, QString::fromStdString(c.engineType));
    set(5, cellText(c.bytesPerToken, 0));
    set(6, cellText(c.kvMib, 1));
  }
  if (keep >= 0 && keep < table_->rowCount()) table_->setCurrentCell(keep, 0);
  showLog(table_->currentRow() >= 0 ? table_->currentRow() : 0);
  drawFront();
  Q_EMIT fitsChanged();
}

void CapacityPage::showLog(int row) {
  if (row < 0 || row >= static_cast<int>(rowSpecs_.size())) {
    log_->clear();
    return;
  }
  const auto it = plans_.find(rowSpecs_[static_cast<std::size_t>(row)]);
  if (it == plans_.end()) {
    log_->setPlainText(planError_.isEmpty() ? layoutError_ : planError_);
    return;
  }
  QString text;
  for (const auto& l : it->second.log) text += QString::fromStdString(l) + "\n";
  for (const auto& n : it->second.notes) text += "note: " + QString::fromStdString(n) + "\n";
  log_->setPlainText(text.trimmed());
}

RunsModel::FitCell CapacityPage::fit(const cache::CacheConfig& cfg) const {
  RunsModel::FitCell f;
  const auto it = plans_.find(cache::toSpec(cfg));
  if (it == plans_.end()) {
    f.why = !planError_.isEmpty() ? planError_ : !layoutError_.isEmpty() ? layoutError_ : tr("no model loaded");
    return f;
  }
  const plan::ConfigPlan& c = it->second;
  if (!c.expressible) {
    f.why = c.notes.empty() ? tr("the engine cannot store this config") : QString::fromStdString(c.notes.front());
    return f;
  }
  if (!c.fitTokens) {
    f.why = tr("no budget: choose a GPU or the KV memory");
    return f;
  }
  f.tokens = static_cast<double>(*c.fitTokens);
  f.requests = c.fitRequests;
  f.text = tokensText(*f.tokens);
  if (f.requests)
    f.why = tr("%1 requests of %2 tokens").arg(*f.requests, 0, 'f', 2).arg(QLocale().toString(length_->value()));
  return f;
}

void CapacityPage::drawFront() {
  // A point per run with a mean KL and a figure; the front joins the runs no other run beats on both axes.
  plot_->clearGraphs();
  plot_->clearItems();
  QVector<double> xs, ys;
  QStringList labels;
  double most = 0;
  for (const auto& r : runs_)
    if (r && r->config) most = std::max(most, fit(*r->config).tokens.value_or(0));
  const double unit = most >= 1e6 ? 1e6 : most >= 1e4 ? 1e3 : 1;
  plot_->xAxis->setLabel(unit == 1e6   ? tr("tokens that fit (millions)")
                         : unit == 1e3 ? tr("tokens that fit (thousands)")
                                       : tr("tokens that fit"));
  for (const auto& r : runs_) {
    if (!r || !r->config || !r->shadow || brokenRun(*r)) continue;
    const RunsModel::FitCell f = fit(*r->config);
    if (!f.tokens || !(r->meanKl > 0) || !std::isfinite(r->meanKl)) continue;
    xs << *f.tokens / unit;
    ys << r->meanKl;
    labels << QString("#%1").arg(r->runId);
  }
  auto* points = plot_->addGraph();
  points->setName(tr("runs"));
  points->setLineStyle(QCPGraph::lsNone);
  points->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, QColor(31, 119, 180), 7));
  points->setData(xs, ys, false);
  QVector<int> order(xs.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return xs[a] > xs[b] || (xs[a] == xs[b] && ys[a] < ys[b]); });
  QVector<double> fx, fy;
  double best = std::numeric_limits<double>::infinity();
  for (int i : order)
    if (ys[i] < best) best = ys[i], fx.prepend(xs[i]), fy.prepend(ys[i]);  // ascending in x
  auto* front = plot_->addGraph();
  front->setName(tr("front"));
  front->setPen(QPen(QColor(214, 39, 40), 1.5, Qt::DashLine));
  front->setLineStyle(QCPGraph::lsStepLeft);
  front->setData(fx, fy, true);
  for (int i = 0; i < xs.size(); ++i) {
    auto* label = new QCPItemText(plot_);
    label->position->setCoords(xs[i], ys[i]);
    label->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
    label->setText(labels[i]);
  }
  if (!xs.isEmpty()) {
    plot_->rescaleAxes();
    const QCPRange x = plot_->xAxis->range();
    const double pad = std::max(x.size() * 0.15, std::abs(x.center()) * 0.1);
    plot_->xAxis->setRange(std::max(0.0, x.lower - pad), x.upper + pad);
    const QCPRange y = plot_->yAxis->range();
    plot_->yAxis->setRange(y.lower / 2, y.upper * 2);
  }
  plot_->replot();
}

}  // namespace kvscope::ui
