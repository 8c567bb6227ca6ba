#include "main_window.h"

#include <QCloseEvent>
#include <QDir>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QLocale>
#include <QMimeData>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>

#include "capacity_page.h"
#include "compare_dock.h"
#include "config_panel.h"
#include "docks/beam_dock.h"
#include "docks/error_dock.h"
#include "docks/memory_dock.h"
#include "docks/overlay_plot.h"
#include "docks/scales_dock.h"
#include "docks/text_view.h"
#include "docks/token_error_dock.h"
#include "doctor_page.h"
#include "eval_page.h"
#include "menus.h"
#include "message_bar.h"
#include "overflow_advice.h"
#include "probe_page.h"
#include "run_panel.h"
#include "runs_model.h"
#include "selection.h"
#include "session.h"
#include "status_line.h"
#include "tune_page.h"
#include "window_layout.h"

namespace kvscope::ui {

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(tr("kvscope — quantized KV-cache workbench"));
  setAcceptDrops(true);
  buildDocks();
  status_ = new ElidedLabel(this);
  status_->setObjectName("statusLine");
  message_ = new ElidedLabel(this);
  message_->setObjectName("statusMessage");
  statusBar()->addWidget(status_, 1);
  statusBar()->addPermanentWidget(message_);

  connect(runPanel_, &RunPanel::runClicked, this, &MainWindow::run);
  connect(runPanel_, &RunPanel::stopClicked, this, &MainWindow::stop);
  connect(runPanel_, &RunPanel::reloadWanted, this, [this] {
    if (hasModel() && busy_ != Busy::Loading) openModel(model_.path);
  });
  connect(configPanel(), &ConfigPanel::changed, this, [this] { updateActions(); });
  connect(compare_, &CompareDock::runRequested, this, &MainWindow::runConfig);
  connect(compare_, &CompareDock::runsChosen, this, &MainWindow::inspectRuns);
  connect(compare_, &CompareDock::configChosen, this,
          [this](const cache::CacheConfig& c) { configPanel()->setConfig(c); });
  connect(compare_, &CompareDock::failed, this, &MainWindow::showError);  // a bad grid, the tuner page's pick or save
  connect(compare_, &CompareDock::tuneRequested, this, &MainWindow::startTune);
  connect(compare_, &CompareDock::doctorRequested, this, &MainWindow::startDoctor);
  connect(compare_, &CompareDock::probeRequested, this, [this] {
    auto configs = compare_->evalConfigs();
    if (configs.empty()) configs.push_back(configPanel()->config());  // no run yet: the form's
    startProbe(configs);
  });
  connect(compare_, &CompareDock::probeRunRequested, this, &MainWindow::runProbe);
  connect(compare_, &CompareDock::layerChosen, this, [this](int layer) { selection_->setLayer(layer); });
  connect(selection_, &Selection::changed, this,
          [this] { compare_->tunePage()->setSelectedLayer(selection_->layer()); });
  connect(compare_, &CompareDock::evaluateRequested, this, [this] {
    auto configs = compare_->evalConfigs();
    if (configs.empty()) configs.push_back(configPanel()->config());  // no run yet: the form's
    startEval(compare_->evalPage()->textPath(), configs);
  });
  buildMenus(this);
  defaultLayout_ = saveState(kLayoutVersion);
  QSettings s;
  fitToScreen(this, s.value("window/geometry").toByteArray());
  if (!restoreState(s.value("window/state").toByteArray(), kLayoutVersion)) sizeDocks(this);
  updateActions();
}

MainWindow::~MainWindow() = default;

void MainWindow::buildDocks() {
  runPanel_ = new RunPanel(this);
  // The form is taller than a 768 px screen leaves a dock: it scrolls rather than setting the window's height.
  auto* scroll = new QScrollArea(this);
  scroll->setObjectName("runScroll");
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setWidget(runPanel_);
  scroll->setMinimumWidth(runPanel_->minimumSizeHint().width() + scroll->verticalScrollBar()->sizeHint().width());
  // Run and Stop stay below the scrolling form, always in view.
  auto* runSide = new QWidget(this);
  auto* rs = new QVBoxLayout(runSide);
  rs->setContentsMargins(0, 0, 0, 0);
  rs->setSpacing(0);
  rs->addWidget(scroll, 1);
  rs->addWidget(runPanel_->buttonBar());
  addDock(this, tr("Run"), "runDock", runSide, Qt::LeftDockWidgetArea);

  // One selection (layer, head, token, beam) that every view observes and sets; no view calls another.
  selection_ = new Selection(this);
  auto* centre = new QWidget(this);
  auto* cv = new QVBoxLayout(centre);
  cv->setContentsMargins(0, 0, 0, 0);
  messageBar_ = new MessageBar(centre);
  text_ = new TextView(selection_, centre);
  cv->addWidget(messageBar_);
  cv->addWidget(text_, 1);
  setCentralWidget(centre);
  memory_ = new MemoryDock(selection_, this);
  scales_ = new ScalesDock(selection_, this);
  errors_ = new ErrorDock(selection_, this);
  tokenErrors_ = new TokenErrorDock(selection_, this);
  auto* md = addDock(this, tr("KV memory"), "memoryDock", memory_, Qt::RightDockWidgetArea);
  // One tab group: the three plots stacked need more height than a 1080p screen has beside the bottom docks.
  tabifyDockWidget(md, addDock(this, tr("Scales"), "scalesDock", scales_, Qt::RightDockWidgetArea));
  tabifyDockWidget(
      md, addDock(this, tr("Quantization error: layer x head"), "errorDock", errors_, Qt::RightDockWidgetArea));
  md->raise();
  int inspected = 0;
  connect(selection_, &Selection::changed, this, [this, inspected]() mutable {
    if (selection_->layer() == inspected) return;
    inspected = selection_->layer();
    if (inspect_) inspect_(inspected);
    // A run, an evaluation or a scan sends the errors with its snapshots; otherwise the engine answers (after a load).
    if (busy_ == Busy::Idle || busy_ == Busy::Loading) Q_EMIT inspectionRequested();
  });
  beamDock_ = new BeamDock(selection_, this);
  auto* bd = addDock(this, tr("Beams"), "beamDock", beamDock_, Qt::BottomDockWidgetArea);
  compare_ = new CompareDock(this);
  auto* rd = addDock(this, tr("Compare runs"), "runsDock", compare_, Qt::BottomDockWidgetArea);
  // Tokens run along x: the wide bottom area suits the token x channel map, beside the runs (beams tabbed with them).
  auto* td = addDock(this, tr("Quantization error: token x channel"), "tokenErrorDock", tokenErrors_,
                     Qt::BottomDockWidgetArea);
  removeDockWidget(bd);
  splitDockWidget(rd, td, Qt::Horizontal);
  tabifyDockWidget(rd, bd);
  bd->show();
  rd->raise();
  // The run panel, the tallest form, keeps the window's full height; the bottom docks span the text and the plots.
  setCorner(Qt::BottomLeftCorner, Qt::LeftDockWidgetArea);
}

ConfigPanel* MainWindow::configPanel() const {
  return runPanel_->configPanel();
}
QPlainTextEdit* MainWindow::promptEdit() const {
  return runPanel_->promptEdit();
}
QSpinBox* MainWindow::maxNewBox() const {
  return runPanel_->maxNewBox();
}
void MainWindow::setShadow(bool on) {
  runPanel_->setShadow(on);
}
QTableView* MainWindow::runsTable() const {
  return compare_->table();
}
RunsModel* MainWindow::runsModel() const {
  return compare_->runs();
}
OverlayPlot* MainWindow::overlay() const {
  return compare_->overlay();
}
void MainWindow::setDevices(const QStringList& devices) {
  runPanel_->setDevices(devices);
}
void MainWindow::setDevice(const QString& device) {
  runPanel_->setDevice(device);
}

void MainWindow::resetLayout() {
  restoreState(defaultLayout_, kLayoutVersion);
  sizeDocks(this);
}

void MainWindow::setBusy(Busy busy) {
  // An evaluation's or a scan's progress ends with it (finished, failed, or stopped for a load).
  if ((busy_ == Busy::Evaluating || busy_ == Busy::Tuning || busy_ == Busy::Probing) && busy != busy_)
    compare_->showProgress(-1, 0);
  busy_ = busy;
  updateActions();
}

void MainWindow::updateActions() {
  const bool idle = busy_ == Busy::Idle;
  runPanel_->setRunEnabled(hasModel() && idle && configPanel()->isValid());
  runPanel_->setStopEnabled(!idle);               // Stop also cancels a load, an evaluation and a scan
  compare_->setStartEnabled(hasModel() && idle);  // Sweep, Evaluate, Scan
}

void MainWindow::openModel(const QString& path) {
  if (busy_ != Busy::Idle && busy_ != Busy::Loading) stop();  // the load replaces what the engine was doing
  runPanel_->showLoadProgress(0, 1);
  // An error was about the model before; an offer (the autosave) still stands.
  if (messageBar_->kind() != MessageBar::Kind::Info) messageBar_->dismiss();
  message_->setText(tr("Loading %1…").arg(path));
  setBusy(Busy::Loading);
  Q_EMIT loadRequested(LoadRequest{runPanel_->loadOptions(path), ++runSerial_});
}

void MainWindow::askForModel() {
  runPanel_->showNoModel();
  const QString p = QFileDialog::getOpenFileName(this, tr("Open a model to start"), QDir::homePath(),
                                                 tr("GGUF models (*.gguf);;All files (*)"));
  if (!p.isEmpty()) openModel(p);
}

void MainWindow::onLoadProgress(int done, int total) {
  runPanel_->showLoadProgress(done, std::max(total, 1));
}

void MainWindow::onModelLoaded(const ModelInfo& info) {
  model_ = info;
  runPanel_->showModel(info);
  compare_->capacityPage()->setModelPath(info.path);
  message_->setText(tr("Model loaded (%1, %2, %3).")
                        .arg(info.dtype, info.deviceLabel.isEmpty() ? info.device : info.deviceLabel, info.arithmetic));
  if (info.layers > 0 && selection_->layer() >= info.layers) selection_->clear();
  updateStatus();
  rememberModel(info.path);
  setBusy(Busy::Idle);
}

void MainWindow::run() {
  if (!runPanel_->runEnabled()) return;
  RunRequest r = runPanel_->request();
  r.serial = ++runSerial_;
  r.runId = nextRunId_++;
  compare_->table()->clearSelection();  // the views follow the new run
  message_->clear();
  messageBar_->dismiss();
  setBusy(Busy::Running);
  Q_EMIT runRequested(r);
}

void MainWindow::runConfig(const cache::CacheConfig& cfg) {
  if (configPanel()->setConfig(cfg)) run();
}

void MainWindow::stop() {
  compare_->stopSweep();                                // a stop ends the sweep too
  if (busy_ != Busy::Idle && stop_) stop_(runSerial_);  // the latest request: a run, an evaluation, a scan or a load
}

void MainWindow::startSweep(const QString& grid) {
  if (busy_ != Busy::Idle || !hasModel()) return;
  compare_->startSweep(grid);
}

void MainWindow::showRun(const RunSnapshotPtr& run) {
  const RunSnapshotPtr& b = against_;
  text_->show(run, b);
  memory_->show(run, b);
  scales_->show(run, b);
  errors_->show(run, b);
  // The engine attaches the token x channel errors at most twice a second (and always to the final snapshot).
  tokenErrors_->showRun(run, b);
  beamDock_->show(run);
  // Each view's title names the run it shows: set when what is shown changes, not at every snapshot (10 a second).
  const QPair<int, int> shown{run->runId, b ? b->runId : 0};
  if (std::exchange(titledFor_, shown) != shown) nameTheRunsShown(run, b);
  // A beam search's reorder is its primary view: the Beams tab comes to the front as the run starts.
  if (!run->beamSteps.isEmpty() && std::exchange(beamsRaisedFor_, run->runId) != run->runId)
    findChild<QDockWidget*>("beamDock")->raise();
}

void MainWindow::nameTheRunsShown(const RunSnapshotPtr& run, const RunSnapshotPtr& b) {
  const QString who =
      b ? tr(" — A: run #%1, B: run #%2").arg(run->runId).arg(b->runId) : tr(" — run #%1").arg(run->runId);
  for (auto* d : findChildren<QDockWidget*>()) {
    if (d->objectName() == "runDock" || d->objectName() == "runsDock") continue;
    if (!d->property("baseTitle").isValid()) d->setProperty("baseTitle", d->windowTitle());
    d->setWindowTitle(d->property("baseTitle").toString() +
                      (d->objectName() == "beamDock" ? tr(" — run #%1").arg(run->runId) : who));
  }
  // Once the views have settled: a switch of views may have grown the window past the screen for a moment.
  QTimer::singleShot(0, this, [this] { keepWithinScreen(this); });
}

void MainWindow::inspectRuns(const RunSnapshotPtr& a, const RunSnapshotPtr& b) {
  pinned_ = a;
  against_ = a ? b : nullptr;
  if (const RunSnapshotPtr& run = a ? a : last_) showRun(run);
}

bool MainWindow::showRuns(const QList<int>& ids) {
  QList<int> rows;
  for (const int id : ids) {
    const int row = runsModel()->rowOf(id);
    if (row < 0) return false;
    rows << row;
  }
  QItemSelection chosen;
  for (const int r : rows) chosen.select(runsModel()->index(r, 0), runsModel()->index(r, RunsModel::ColumnCount - 1));
  runsTable()->selectionModel()->select(chosen, QItemSelectionModel::ClearAndSelect);
  return true;
}

void MainWindow::onRunUpdated(const RunSnapshotPtr& run) {
  last_ = run;
  tokenErrors_->setLiveRun(run->runId);
  if (!pinned_) showRun(run);  // a run chosen in the table stays in view while another runs
  updateStatus();
  if (!run->finished) return;
  if (busy_ == Busy::Running) setBusy(Busy::Idle);  // (a run stopped for a load finishes while the load waits)
  compare_->addRun(run);
  autosave();
  // A sweep goes on with its own configs: the fix is offered once it has ended.
  showOverflowAdvice(messageBar_, *run, !compare_->sweeping(),
                     [this](const cache::CacheConfig& fixed) { runConfig(fixed); });
  Q_EMIT runFinished(run);
}

void MainWindow::onInspection(const TokenErrorViewPtr& view) {
  if (!view) return;
  tokenErrors_->show(view);
  text_->showErrors(view);
}

void MainWindow::startEval(const QString& textPath, const std::vector<cache::CacheConfig>& configs) {
  if (busy_ != Busy::Idle || !hasModel()) return;
  if (!QFileInfo(textPath).isFile()) {
    showError(tr("evaluation text `%1` not found").arg(textPath));
    return;
  }
  EvalRequest r = compare_->evalPage()->request(configs);
  r.textPath = textPath;
  r.serial = ++runSerial_;
  setBusy(Busy::Evaluating);
  compare_->showProgress(0, 0);
  compare_->evalPage()->showStarted(r);
  Q_EMIT evalRequested(r);
}

void MainWindow::onEvalProgress(int done, int total) {
  compare_->showProgress(done, total);
}

void MainWindow::onEvalFinished(const EvalResultView& result) {
  if (busy_ == Busy::Evaluating) setBusy(Busy::Idle);
  compare_->evalPage()->showResult(result);
  Q_EMIT evalDone();
}

void MainWindow::startTune() {
  if (busy_ != Busy::Idle || !hasModel()) return;
  TuneRequest r;
  try {
    r = compare_->tunePage()->request();
  } catch (const cache::ConfigError& e) {
    showError(tr("tuner: %1").arg(QString::fromUtf8(e.what())));
    return;
  }
  if (!QFileInfo(r.textPath).isFile()) {
    showError(tr("tuning text `%1` not found").arg(r.textPath));
    return;
  }
  r.modelPath = model_.path;
  r.serial = ++runSerial_;
  setBusy(Busy::Tuning);
  compare_->showProgress(0, 0);
  compare_->tunePage()->showStarted(r);
  Q_EMIT tuneRequested(r);
}

void MainWindow::onTuneProgress(const TuneResultView& partial) {
  if (busy_ == Busy::Tuning) compare_->tunePage()->showResult(partial);
}

void MainWindow::onTuneFinished(const TuneResultView& result) {
  if (busy_ == Busy::Tuning) setBusy(Busy::Idle);
  compare_->tunePage()->showResult(result);
  Q_EMIT tuneDone();
}

void MainWindow::startDoctor() {
  if (busy_ != Busy::Idle || !hasModel()) return;
  DoctorRequest r = compare_->doctorPage()->request();
  if (!QFileInfo(r.textPath).isFile()) {
    showError(tr("doctor: calibration text `%1` not found").arg(r.textPath));
    return;
  }
  r.serial = ++runSerial_;
  setBusy(Busy::Diagnosing);
  compare_->doctorPage()->showStarted(r);
  Q_EMIT doctorRequested(r);
}

void MainWindow::onDoctorFinished(const DoctorResultView& result) {
  if (busy_ == Busy::Diagnosing) setBusy(Busy::Idle);
  compare_->doctorPage()->showResult(result);
  Q_EMIT doctorDone();
}

void MainWindow::startProbe(const std::vector<cache::CacheConfig>& configs) {
  if (busy_ != Busy::Idle || !hasModel()) return;
  ProbeRequest r = compare_->probePage()->request(configs);
  r.serial = ++runSerial_;
  setBusy(Busy::Probing);
  compare_->showProgress(0, 0);
  compare_->probePage()->showStarted(r);
  Q_EMIT probeRequested(r);
}

void MainWindow::onProbeProgress(int done, int total) {
  if (busy_ == Busy::Probing) compare_->showProgress(done, total);
}

void MainWindow::onProbeFinished(const ProbeResultView& result) {
  if (busy_ == Busy::Probing) setBusy(Busy::Idle);
  compare_->probePage()->showResult(result);
  Q_EMIT probeDone();
}

void MainWindow::runProbe(const cache::CacheConfig& config, const QString& prompt, int maxNew) {
  if (busy_ != Busy::Idle || !hasModel()) return;
  RunRequest r = runPanel_->request();
  r.prompt = prompt;
  r.chat = false;  // the probe's text as the probes read it
  r.maxNew = maxNew;
  r.beams = 0;
  r.sample = false;
  runPanel_->setRequest(r);
  runConfig(config);
}

void MainWindow::updateStatus() {
  status_->setText(statusLine(model_.device.isEmpty() ? runPanel_->device() : model_.device, last_, model_.memory));
}

void MainWindow::onRequestFailed(quint64 serial, const QString& message) {
  if (serial == runSerial_) return onFailed(message);
  showError(message);
}

void MainWindow::onFailed(const QString& message) {
  // A failed run ends a sweep (its later configs would fail alike); an evaluation or a scan says so on its page.
  if (busy_ == Busy::Running) compare_->stopSweep();
  if (busy_ == Busy::Evaluating) compare_->evalPage()->showFailed(message);
  if (busy_ == Busy::Tuning) compare_->tunePage()->showFailed(message);
  if (busy_ == Busy::Diagnosing) compare_->doctorPage()->showFailed(message);
  if (busy_ == Busy::Probing) compare_->probePage()->showFailed(message);
  runPanel_->showLoadProgress(0, 0);
  setBusy(Busy::Idle);
  showError(message);
}

void MainWindow::showError(const QString& message) {
  // Non-blocking: the message shows whole in the bar until dismissed, and stays in the status bar.
  message_->setError(message);
  messageBar_->showError(message);
}

bool MainWindow::report(const ExportResult& r) {
  if (!r.ok) {
    showError(r.message);
    return false;
  }
  message_->setText(r.message);
  if (r.notes.isEmpty()) {
    messageBar_->dismiss();
  } else {  // what does not carry over must be seen, not hidden in the status bar
    messageBar_->showMessage(MessageBar::Kind::Warning,
                             tr("%1\nWhat the target does not express:\n- %2").arg(r.message, r.notes.join("\n- ")));
  }
  return true;
}

bool MainWindow::exportConfigTo(const QString& path, ExportTarget target) {
  return report(exportConfigFile(configPanel()->config(), target, path,
                                 cache::LayerWindows(model_.windows.begin(), model_.windows.end())));
}

bool MainWindow::exportRunsTo(const QString& path) {
  return report(exportRunsCsv(*runsModel(), path));
}

bool MainWindow::exportPlotsTo(const QString& dir) {
  return report(exportPlots(dir, {{"kv_memory", memory_->plot()},
                                  {"kv_memory_per_step", memory_->stepsPlot()},
                                  {"fp8_scales", scales_->plot()},
                                  {"quantization_error", errors_->plot()},
                                  {"token_channel_error", tokenErrors_->plot()},
                                  {"runs_overlay", overlay()->plot()}}));
}

QString MainWindow::autosavePath() {
  return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + "/autosave.kvscope.json";
}

void MainWindow::offerAutosave() {
  const QString path = autosavePath();
  const QFileInfo info(path);
  if (!info.isFile() || info.size() == 0) return;
  messageBar_->showMessage(MessageBar::Kind::Info,
                           tr("The last session's finished runs were autosaved on %1 (%2).")
                               .arg(QLocale().toString(info.lastModified(), QLocale::ShortFormat), path),
                           {{tr("Reopen"), "reopenAutosave", [this, path] { openSession(path); }}});
}

void MainWindow::autosave() {
  // Every finished run is on disk as soon as it finishes (written whole, atomically): a crash later in a sweep or a
  // session loses nothing that finished. File > Open session reopens it.
  const QString path = autosavePath();
  QDir().mkpath(QFileInfo(path).absolutePath());
  try {
    saveSession(Session{model_.path, runsModel()->runs()}, path);
  } catch (const SessionError& e) {
    showError(tr("autosave: %1").arg(QString::fromStdString(e.what())));
  }
}

void MainWindow::saveSessionTo(const QString& path) {
  try {
    saveSession(Session{model_.path, runsModel()->runs()}, path);
    message_->setText(tr("Saved %1 runs to %2").arg(runsModel()->rowCount()).arg(path));
  } catch (const SessionError& e) {
    showError(QString::fromStdString(e.what()));
  }
}

void MainWindow::openSession(const QString& path) {
  Session s;
  try {
    s = loadSession(path);  // nothing changes unless the whole file reads
  } catch (const SessionError& e) {
    showError(QString::fromStdString(e.what()));
    return;
  }
  compare_->setRuns(s.runs);
  for (const auto& r : s.runs) nextRunId_ = std::max(nextRunId_, r->runId + 1);  // new runs go on after these
  if (!s.runs.isEmpty()) {
    pinned_ = against_ = nullptr;
    last_ = s.runs.back();
    showRun(last_);
    onInspection(last_->tokenErrors);
    // The form follows the run shown (its recorded config, calibrated scales and per-layer rules included).
    if (last_->config) {
      const QSignalBlocker quiet(configPanel());
      configPanel()->setConfig(*last_->config);
    }
    if (last_->request) runPanel_->setRequest(*last_->request);  // its prompt and decoding too
    updateActions();
  }
  message_->setText(tr("Opened %1 runs from %2%3")
                        .arg(s.runs.size())
                        .arg(path, s.modelPath.isEmpty() || s.modelPath == model_.path
                                       ? QString()
                                       : tr(" (recorded with %1)").arg(s.modelPath)));
}

void MainWindow::closeEvent(QCloseEvent* e) {
  stop();
  QSettings s;
  s.setValue("window/geometry", saveGeometry());
  s.setValue("window/state", saveState(kLayoutVersion));
  e->accept();
}

void MainWindow::dragEnterEvent(QDragEnterEvent* e) {
  if (e->mimeData()->hasUrls()) e->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* e) {
  const auto urls = e->mimeData()->urls();
  if (!urls.isEmpty() && urls.front().isLocalFile()) openModel(urls.front().toLocalFile());
}

}  // namespace kvscope::ui
