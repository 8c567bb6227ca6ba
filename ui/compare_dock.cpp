#include "compare_dock.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QResizeEvent>
#include <QSplitter>
#include <QTabWidget>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>

#include "cache/sweep.h"
#include "capacity_page.h"
#include "docks/overlay_plot.h"
#include "doctor_page.h"
#include "eval_page.h"
#include "probe_page.h"
#include "runs_model.h"
#include "tune_page.h"

namespace kvscope::ui {

namespace {
constexpr int kOverlayBesideWidth = 1000;
}  // namespace

CompareDock::CompareDock(QWidget* parent) : QWidget(parent) {
  auto* cl = new QVBoxLayout(this);
  cl->setContentsMargins(2, 2, 2, 2);
  auto* bar = new QHBoxLayout();
  grid_ = new QLineEdit("quanto:nbits=2,4;q_group_size=32,64", this);
  grid_->setObjectName("sweepGrid");
  grid_->setToolTip(tr("backend:key=v1,v2;key2=v1,v2 — every combination runs on the current prompt"));
  auto* sweep = sweep_ = new QPushButton(tr("Sweep"), this);
  sweep->setObjectName("sweepButton");
  budgetKind_ = new QComboBox(this);
  budgetKind_->addItems({tr("smallest KV with mean KL ≤"), tr("lowest mean KL with KV MiB ≤")});
  budget_ = new QDoubleSpinBox(this);
  budget_->setObjectName("budget");
  budget_->setDecimals(4);
  budget_->setRange(0.0, 1e6);
  budget_->setValue(0.05);
  progress_ = new QProgressBar(this);
  progress_->setVisible(false);
  best_ = new QLabel(this);
  best_->setObjectName("bestLabel");
  best_->setWordWrap(true);  // a long config or message must not widen the dock past the screen
  common_ = new QLabel(this);
  common_->setObjectName("commonConfig");
  common_->setWordWrap(true);
  bar->addWidget(new QLabel(tr("Grid"), this));
  bar->addWidget(grid_, 2);
  bar->addWidget(sweep);
  bar->addWidget(budgetKind_);
  bar->addWidget(budget_);
  bar->addWidget(progress_, 1);
  cl->addLayout(bar);
  cl->addWidget(best_);

  model_ = new RunsModel(this);
  table_ = new QTableView(this);
  table_->setObjectName("runsTable");
  table_->setModel(model_);
  table_->verticalHeader()->setVisible(false);  // the run column numbers the rows; no header to scroll under
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setHorizontalScrollMode(QAbstractItemView::ScrollPerPixel);
  table_->setWordWrap(true);  // a long config name takes two lines rather than hiding its middle
  table_->verticalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  auto* header = table_->horizontalHeader();
  header->setSectionResizeMode(QHeaderView::ResizeToContents);
  header->setSectionResizeMode(RunsModel::Config, QHeaderView::Stretch);
  header->setMinimumSectionSize(36);
  // Click a header to sort; a run that stored NaN/inf goes last in either order (RunsModel::sort).
  header->setSortIndicator(RunsModel::Run, Qt::AscendingOrder);
  table_->setSortingEnabled(true);
  overlay_ = new OverlayPlot(this);
  split_ = new QSplitter(Qt::Horizontal, this);
  auto* runsPage = new QWidget(this);
  auto* rl = new QVBoxLayout(runsPage);
  rl->setContentsMargins(0, 0, 0, 0);
  rl->addWidget(common_);
  rl->addWidget(table_, 1);
  split_->addWidget(runsPage);
  split_->setStretchFactor(0, 3);
  eval_ = new EvalPage(this);
  tabs_ = new QTabWidget(this);
  tabs_->setObjectName("compareTabs");
  tabs_->addTab(split_, tr("Runs"));
  tabs_->addTab(eval_, tr("Text evaluation"));
  tune_ = new TunePage(this);
  tabs_->addTab(tune_, tr("Tuner"));
  doctor_ = new DoctorPage(this);
  tabs_->addTab(doctor_, tr("Doctor"));
  probe_ = new ProbePage(this);
  tabs_->addTab(probe_, tr("Long context"));
  capacity_ = new CapacityPage(this);
  tabs_->addTab(capacity_, tr("Capacity"));
  // The runs table's "fits" column reads the Capacity tab's plan of each run's config.
  model_->setFits(
      [this](const RunSnapshot& r) {
        if (r.config) return capacity_->fit(*r.config);
        RunsModel::FitCell none;
        none.why = tr("this run's config was not recorded");
        return none;
      },
      capacity_->settingsText());
  tune_->setCapacity([this](const cache::CacheConfig& c) { return capacity_->fit(c).tokens; });
  connect(capacity_, &CapacityPage::fitsChanged, this, [this] {
    model_->refreshFits(capacity_->settingsText());
    tune_->refreshCapacity();
  });
  cl->addWidget(tabs_, 1);
  arrange();

  connect(sweep, &QPushButton::clicked, this, [this] { startSweep(grid_->text()); });
  connect(table_->selectionModel(), &QItemSelectionModel::selectionChanged, this, &CompareDock::updateOverlay);
  connect(table_->selectionModel(), &QItemSelectionModel::selectionChanged, this, [this] {
    auto rows = table_->selectionModel()->selectedRows();
    std::sort(rows.begin(), rows.end(), [](const QModelIndex& x, const QModelIndex& y) { return x.row() < y.row(); });
    const bool chosen = rows.size() == 1 || rows.size() == 2;
    Q_EMIT runsChosen(chosen ? model_->run(rows[0].row()) : nullptr,
                      rows.size() == 2 ? model_->run(rows[1].row()) : nullptr);
  });
  // A legend entry of the overlay chooses its run, as its row does.
  connect(overlay_, &OverlayPlot::runClicked, this, [this](int runId) {
    if (const int row = model_->rowOf(runId); row >= 0) table_->selectRow(row);
  });
  connect(table_, &QTableView::doubleClicked, this, [this](const QModelIndex& i) {
    if (const auto r = model_->run(i.row()); r && r->config) Q_EMIT configChosen(*r->config);
  });
  connect(eval_, &EvalPage::evaluateClicked, this, &CompareDock::evaluateRequested);
  connect(tune_, &TunePage::scanClicked, this, &CompareDock::tuneRequested);
  connect(tune_, &TunePage::layerClicked, this, &CompareDock::layerChosen);
  connect(tune_, &TunePage::configChosen, this, &CompareDock::configChosen);
  connect(tune_, &TunePage::failed, this, &CompareDock::failed);
  connect(doctor_, &DoctorPage::diagnoseClicked, this, &CompareDock::doctorRequested);
  connect(doctor_, &DoctorPage::configChosen, this, &CompareDock::configChosen);
  connect(probe_, &ProbePage::probeClicked, this, &CompareDock::probeRequested);
  connect(probe_, &ProbePage::runProbe, this, &CompareDock::probeRunRequested);
  connect(model_, &QAbstractItemModel::modelReset, this, &CompareDock::updateOverlay);
  connect(model_, &QAbstractItemModel::headerDataChanged, this, [this] {
    const QString c = model_->commonConfig();
    common_->setText(c.isEmpty() ? QString() : tr("Every run: %1").arg(c));
    common_->setVisible(!c.isEmpty());
  });
  common_->setVisible(false);
}

void CompareDock::resizeEvent(QResizeEvent* e) {
  QWidget::resizeEvent(e);
  arrange();
}

void CompareDock::arrange() {
  // Wide: the overlay beside the table. Narrow (a 1366 px screen): a tab of its own, so that the table keeps the
  // width its config names and figures need.
  const bool beside = width() >= kOverlayBesideWidth;
  const bool isBeside = overlay_->parentWidget() == split_;
  if (beside == isBeside && (beside || tabs_->indexOf(overlay_) >= 0)) return;
  QWidget* current = tabs_->currentWidget();
  if (beside) {
    tabs_->removeTab(tabs_->indexOf(overlay_));
    split_->addWidget(overlay_);
    split_->setStretchFactor(1, 2);
    overlay_->setVisible(true);  // a tab page it was, hidden unless current
  } else {
    tabs_->insertTab(1, overlay_, tr("Overlay"));
  }
  tabs_->setCurrentWidget(current == overlay_ ? split_ : current);  // the overlay's page: now beside the table
}

void CompareDock::addRun(const RunSnapshotPtr& run) {
  model_->append(run);
  capacity_->setRuns(model_->runs());
  updateOverlay();
  if (!sweeping_) return;
  sweepRuns_.append(run);
  progress_->setValue(static_cast<int>(sweepRuns_.size()));
  if (run->cancelled) queue_.clear();
  QTimer::singleShot(0, this, &CompareDock::nextInSweep);
}

void CompareDock::setRuns(const QVector<RunSnapshotPtr>& runs) {
  model_->setRuns(runs);
  capacity_->setRuns(model_->runs());
}

bool CompareDock::startSweep(const QString& grid) {
  try {
    queue_ = cache::planSweep({grid.toStdString()});  // every grid point valid before the first run
  } catch (const cache::ConfigError& e) {
    Q_EMIT failed(tr("sweep: %1").arg(QString::fromStdString(e.what())));
    return false;
  }
  sweepRuns_.clear();
  sweeping_ = true;
  sweep_->setEnabled(false);
  progress_->setRange(0, static_cast<int>(queue_.size()));
  progress_->setValue(0);
  progress_->setVisible(true);
  best_->setText(tr("Sweeping %1 configs…").arg(queue_.size()));
  nextInSweep();
  return true;
}

void CompareDock::stopSweep() {
  queue_.clear();
  if (sweeping_) QTimer::singleShot(0, this, &CompareDock::nextInSweep);
}

void CompareDock::nextInSweep() {
  if (!sweeping_) return;
  if (queue_.empty()) return finishSweep();
  const cache::CacheConfig next = queue_.front();
  queue_.erase(queue_.begin());
  Q_EMIT runRequested(next);
}

void CompareDock::finishSweep() {
  sweeping_ = false;
  sweep_->setEnabled(startEnabled_);
  progress_->setVisible(false);
  const bool byKl = budgetKind_->currentIndex() == 0;
  const double limit = budget_->value();
  std::vector<cache::SweepOutcome> outcomes;
  for (const auto& r : sweepRuns_)
    outcomes.push_back(
        {r->cache.total().stored(), r->meanKl, r->shadow, !r->cancelled, r->cache.overflowTotals().nonFinite == 0});
  const auto at = cache::bestUnderBudget(
      outcomes, byKl ? cache::SweepBudget{cache::SweepBudget::Kind::MaxMeanKl, limit}
                     : cache::SweepBudget{cache::SweepBudget::Kind::MaxStoredBytes, limit * 1048576.0});
  const QString budget = byKl ? tr("mean KL ≤ %1").arg(limit) : tr("KV ≤ %1 MiB").arg(limit);
  if (!at) {
    const bool noKl = std::none_of(outcomes.begin(), outcomes.end(), [](const auto& o) { return o.hasKl; });
    best_->setText(tr("Sweep of %1 configs: none meets %2%3")
                       .arg(sweepRuns_.size())
                       .arg(budget, noKl ? tr(" (KL needs the shadow reference)") : QString()));
    return;
  }
  const RunSnapshotPtr best = sweepRuns_[static_cast<qsizetype>(*at)];
  const auto t = best->cache.total();
  // Named by what sets it apart from the sweep's other configs, every option resolved (its SPEC hides defaults).
  const QString name = configNames(sweepRuns_).value(static_cast<int>(*at), best->spec);
  best_->setText(tr("Best under %1: <b>%2</b> (#%6 %3 MiB, %4x, mean KL %5)")
                     .arg(budget, name.toHtmlEscaped())
                     .arg(t.stored() / 1048576.0, 0, 'f', 3)
                     .arg(t.compressionRatio(), 0, 'f', 2)
                     .arg(best->meanKl, 0, 'g', 3)
                     .arg(best->runId));
  best_->setToolTip(best->spec);
  table_->selectRow(static_cast<int>(model_->runs().indexOf(best)));
}

std::vector<cache::CacheConfig> CompareDock::evalConfigs() const {
  std::vector<cache::CacheConfig> out;
  auto add = [&](const RunSnapshotPtr& r) {
    if (!r || !r->config || (r->config->backend == cache::Backend::Dynamic && !r->config->mixed())) return;
    if (std::find(out.begin(), out.end(), *r->config) == out.end()) out.push_back(*r->config);
  };
  const auto rows = table_->selectionModel()->selectedRows();
  for (const auto& idx : rows) add(model_->run(idx.row()));
  if (rows.isEmpty())
    for (const auto& r : model_->runs()) add(r);
  return out;
}

void CompareDock::setStartEnabled(bool on) {
  startEnabled_ = on;
  sweep_->setEnabled(on && !sweeping_);
  eval_->setStartEnabled(on);
  tune_->setStartEnabled(on);
  doctor_->setStartEnabled(on);
  probe_->setStartEnabled(on);
}

void CompareDock::showProgress(int done, int total) {
  progress_->setVisible(done >= 0);
  progress_->setRange(0, total);
  progress_->setValue(std::max(done, 0));
}

void CompareDock::updateOverlay() {
  QVector<RunSnapshotPtr> runs;
  for (const auto& idx : table_->selectionModel()->selectedRows())
    if (const auto r = model_->run(idx.row())) runs << r;
  const auto& all = model_->runs();
  if (runs.isEmpty()) runs = all.mid(std::max<qsizetype>(0, all.size() - 8));
  QStringList names;
  for (const auto& r : runs) names << model_->name(static_cast<int>(all.indexOf(r)));
  overlay_->show(runs, names);
}

}  // namespace kvscope::ui
