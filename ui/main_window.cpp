#include "main_window.h"

#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QCloseEvent>
#include <QDir>
#include <QDockWidget>
#include <QCoreApplication>
#include <QFile>
#include <QFileDialog>
#include <QFormLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QTimer>
#include <QMenu>
#include <QMenuBar>
#include <QLocale>
#include <QMessageBox>
#include <QMimeData>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSaveFile>
#include <QScreen>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QSplitter>
#include <QTabWidget>
#include <QStandardPaths>
#include <QFileInfo>
#include <QSpinBox>
#include <QStatusBar>
#include <QTableWidget>
#include <QTemporaryFile>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <unistd.h>

#include "cache/config.h"
#include "config_panel.h"
#include "docks/beam_dock.h"
#include "docks/error_dock.h"
#include "docks/memory_dock.h"
#include "docks/overlay_plot.h"
#include "docks/scales_dock.h"
#include "docks/text_view.h"
#include "docks/token_error_dock.h"
#include "message_bar.h"
#include "overflow_advice.h"
#include "selection.h"
#include "session.h"

#include <qcustomplot.h>

namespace kvscope::ui {

namespace {
/// exp(-mean log-prob) of the generated tokens under the run's own cache.
QString perplexity(const RunSnapshot& run) {
  if (!run.beamSteps.isEmpty()) return "-";  // beam hypotheses carry scores, not per-token log-probs
  double s = 0;
  int n = 0;
  for (const auto& t : run.tokens)
    if (std::isfinite(t.logprob)) s += t.logprob, ++n;
  return n ? QString::number(std::exp(-s / n), 'f', 3) : QString("-");
}

// The shipped evaluation text: installed next to the binaries, or in the source tree of a development build.
QString defaultEvalText() {
  for (const QString& p : {QCoreApplication::applicationDirPath() + "/../share/kvscope/eval/coriolanus.txt",
                           QString(KVSCOPE_RESOURCE_DIR) + "/eval/coriolanus.txt"})
    if (QFileInfo::exists(p)) return QFileInfo(p).canonicalFilePath();
  return QString();
}

QDockWidget* dock(QMainWindow* w, const QString& title, const QString& name, QWidget* content, Qt::DockWidgetArea area) {
  auto* d = new QDockWidget(title, w);
  d->setObjectName(name);  // restorable layout
  d->setWidget(content);
  w->addDockWidget(area, d);
  return d;
}

// Saved dock states carry this version: a layout saved by an older arrangement (the plots stacked three high, taller
// than a 1080p screen) is not restored.
constexpr int kLayoutVersion = 2;
// The window frame is unknown until a window manager has mapped the window: leave room for a title bar and borders.
const QSize kFrameAllowance(16, 48);
}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(tr("kvscope — quantized KV-cache workbench"));
  setAcceptDrops(true);

  // Run panel: model card, cache config, prompt, generation options.
  auto* panel = new QWidget(this);
  auto* pl = new QVBoxLayout(panel);
  modelCard_ = new QLabel(tr("No model loaded (File > Open model, or drop a GGUF file)."), panel);
  modelCard_->setObjectName("modelCard");
  modelCard_->setWordWrap(true);
  progress_ = new QProgressBar(panel);
  progress_->setVisible(false);
  dtype_ = new QComboBox(panel);
  dtype_->setObjectName("dtype");
  dtype_->addItems({"fp32", "bf16", "fp16"});
  dtype_->setToolTip(tr("Weights and activations; changing it reloads the model"));
  device_ = new QComboBox(panel);
  device_->setObjectName("device");
  device_->addItem("cpu");
  device_->setToolTip(tr("Where the model and its cache run; changing it reloads the model"));
  auto* modelRow = new QFormLayout();
  modelRow->addRow(tr("Device"), device_);
  modelRow->addRow(tr("Model dtype"), dtype_);
  for (QComboBox* box : {dtype_, device_})
    connect(box, &QComboBox::currentTextChanged, this, [this] {
      if (hasModel() && !loading_) openModel(model_.path);
    });
  config_ = new ConfigPanel(panel);
  prompt_ = new QPlainTextEdit(panel);
  prompt_->setObjectName("prompt");
  prompt_->setPlaceholderText(tr("Prompt"));
  prompt_->setPlainText(tr("Explain in three sentences why a quantized key-value cache saves memory."));
  chat_ = new QCheckBox(tr("Chat template"), panel);
  chat_->setChecked(true);
  shadow_ = new QCheckBox(tr("Shadow reference (KL vs unquantized)"), panel);
  shadow_->setChecked(true);
  maxNew_ = new QSpinBox(panel);
  maxNew_->setRange(1, 8192);
  maxNew_->setValue(64);
  prefillChunk_ = new QSpinBox(panel);
  prefillChunk_->setObjectName("prefillChunk");
  prefillChunk_->setRange(-1, 1 << 20);
  prefillChunk_->setValue(-1);
  prefillChunk_->setSpecialValueText(tr("auto"));
  prefillChunk_->setToolTip(tr("Prompt tokens per forward pass: the prefill's activations and attention scores are "
                               "bounded by the chunk. auto: 512 when the cache attends in fused mode, the whole "
                               "prompt at once in reference mode (as transformers); 0: the whole prompt at once."));
  decoding_ = new QComboBox(panel);
  decoding_->setObjectName("decoding");
  decoding_->addItems({tr("Greedy"), tr("Sampling"), tr("Beam search")});
  temperature_ = new QDoubleSpinBox(panel);
  temperature_->setRange(0.01, 5.0);
  temperature_->setValue(0.8);
  topP_ = new QDoubleSpinBox(panel);
  topP_->setRange(0.01, 1.0);
  topP_->setSingleStep(0.05);
  topP_->setValue(0.95);
  topK_ = new QSpinBox(panel);
  topK_->setRange(0, 100000);
  seed_ = new QSpinBox(panel);
  seed_->setRange(0, 1 << 30);
  beams_ = new QSpinBox(panel);
  beams_->setObjectName("beams");
  beams_->setRange(1, 16);
  beams_->setValue(4);
  auto* opts = new QFormLayout();
  opts->addRow(tr("New tokens"), maxNew_);
  opts->addRow(tr("Prefill chunk"), prefillChunk_);
  opts->addRow(tr("Decoding"), decoding_);
  opts->addRow(tr("Temperature"), temperature_);
  opts->addRow(tr("Top-p"), topP_);
  opts->addRow(tr("Top-k (0: off)"), topK_);
  opts->addRow(tr("Seed"), seed_);
  opts->addRow(tr("Beams"), beams_);
  auto showDecoding = [this, opts] {
    const int mode = decoding_->currentIndex();
    for (QWidget* w : {static_cast<QWidget*>(temperature_), static_cast<QWidget*>(topP_), static_cast<QWidget*>(topK_),
                       static_cast<QWidget*>(seed_)})
      opts->setRowVisible(w, mode == 1);
    opts->setRowVisible(beams_, mode == 2);
    shadow_->setEnabled(mode != 2);
  };
  connect(decoding_, &QComboBox::currentIndexChanged, this, showDecoding);
  showDecoding();
  runButton_ = new QPushButton(tr("Run"), panel);
  runButton_->setObjectName("runButton");
  stopButton_ = new QPushButton(tr("Stop"), panel);
  stopButton_->setObjectName("stopButton");
  auto* buttons = new QHBoxLayout();
  buttons->addWidget(runButton_);
  buttons->addWidget(stopButton_);
  pl->addWidget(modelCard_);
  pl->addWidget(progress_);
  pl->addLayout(modelRow);
  pl->addWidget(config_);
  pl->addWidget(prompt_, 1);
  pl->addWidget(chat_);
  pl->addWidget(shadow_);
  pl->addLayout(opts);
  pl->addLayout(buttons);
  // The form is taller than a 768 px screen leaves a dock: it scrolls rather than setting the window's height.
  auto* scroll = new QScrollArea(this);
  scroll->setObjectName("runScroll");
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setWidget(panel);
  scroll->setMinimumWidth(panel->minimumSizeHint().width() + scroll->verticalScrollBar()->sizeHint().width());
  dock(this, tr("Run"), "runDock", scroll, Qt::LeftDockWidgetArea);

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
  auto* md = dock(this, tr("KV memory"), "memoryDock", memory_, Qt::RightDockWidgetArea);
  // One tab group: the three plots stacked need more height than a 1080p screen has beside the bottom docks.
  tabifyDockWidget(md, dock(this, tr("FP8 scales"), "scalesDock", scales_, Qt::RightDockWidgetArea));
  tabifyDockWidget(md, dock(this, tr("Quantization error: layer x head"), "errorDock", errors_, Qt::RightDockWidgetArea));
  md->raise();
  int inspected = 0;
  connect(selection_, &Selection::changed, this, [this, inspected]() mutable {
    if (selection_->layer() == inspected) return;
    inspected = selection_->layer();
    if (inspect_) inspect_(inspected);
    if (!running_) Q_EMIT inspectionRequested();
  });
  beamDock_ = new BeamDock(selection_, this);
  auto* bd = dock(this, tr("Beams"), "beamDock", beamDock_, Qt::BottomDockWidgetArea);

  runs_ = new QTableWidget(0, 10, this);
  runs_->setObjectName("runsTable");
  runs_->setHorizontalHeaderLabels({tr("run"), tr("config"), tr("KV MiB"), tr("ratio"), tr("decode tok/s"),
                                    tr("mean KL"), tr("top-1"), tr("first divergence"), tr("max KL"),
                                    tr("perplexity")});
  runs_->horizontalHeaderItem(9)->setToolTip(tr("exp(-mean log-prob) of the generated tokens under the run's cache"));
  runs_->horizontalHeader()->setSectionResizeMode(1, QHeaderView::Stretch);
  runs_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  runs_->setSelectionBehavior(QAbstractItemView::SelectRows);
  runs_->setToolTip(tr("Double-click a run to load its config into the form"));
  // Compare dock: the runs table under a sweep bar (grid, budget, progress, best).
  auto* compare = new QWidget(this);
  auto* cl = new QVBoxLayout(compare);
  cl->setContentsMargins(2, 2, 2, 2);
  auto* bar = new QHBoxLayout();
  sweepGrid_ = new QLineEdit("quanto:nbits=2,4;q_group_size=32,64", compare);
  sweepGrid_->setObjectName("sweepGrid");
  sweepGrid_->setToolTip(tr("backend:key=v1,v2;key2=v1,v2 — every combination runs on the current prompt"));
  auto* sweep = new QPushButton(tr("Sweep"), compare);
  sweep->setObjectName("sweepButton");
  budgetKind_ = new QComboBox(compare);
  budgetKind_->addItems({tr("smallest KV with mean KL ≤"), tr("lowest mean KL with KV MiB ≤")});
  budget_ = new QDoubleSpinBox(compare);
  budget_->setObjectName("budget");
  budget_->setDecimals(4);
  budget_->setRange(0.0, 1e6);
  budget_->setValue(0.05);
  sweepProgress_ = new QProgressBar(compare);
  sweepProgress_->setVisible(false);
  best_ = new QLabel(compare);
  best_->setObjectName("bestLabel");
  best_->setWordWrap(true);  // a long config or message must not widen the dock past the screen
  bar->addWidget(new QLabel(tr("Grid"), compare));
  bar->addWidget(sweepGrid_, 2);
  bar->addWidget(sweep);
  bar->addWidget(budgetKind_);
  bar->addWidget(budget_);
  bar->addWidget(sweepProgress_, 1);
  cl->addLayout(bar);
  cl->addWidget(best_);
  overlay_ = new OverlayPlot(compare);
  auto* split = new QSplitter(Qt::Horizontal, compare);
  split->addWidget(runs_);
  split->addWidget(overlay_);
  split->setStretchFactor(0, 1);
  split->setStretchFactor(1, 1);
  // Text evaluation: the runs' configs (or the form's) on a text file, in windows, against the unquantized cache.
  auto* evalPage = new QWidget(compare);
  auto* el = new QVBoxLayout(evalPage);
  el->setContentsMargins(0, 0, 0, 0);
  auto* ebar = new QHBoxLayout();
  evalText_ = new QLineEdit(defaultEvalText(), evalPage);
  evalText_->setObjectName("evalText");
  auto* browse = new QPushButton(tr("…"), evalPage);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString p = QFileDialog::getOpenFileName(this, tr("Evaluation text"), evalText_->text(), tr("Text (*.txt);;All files (*)"));
    if (!p.isEmpty()) evalText_->setText(p);
  });
  evalCtx_ = new QSpinBox(evalPage);
  evalCtx_->setObjectName("evalCtx");
  evalCtx_->setRange(16, 32768);
  evalCtx_->setValue(256);
  evalWindows_ = new QSpinBox(evalPage);
  evalWindows_->setObjectName("evalWindows");
  evalWindows_->setRange(0, 100000);
  evalWindows_->setValue(2);
  evalWindows_->setToolTip(tr("windows of the text to use (0: all)"));
  auto* evalButton = new QPushButton(tr("Evaluate"), evalPage);
  evalButton->setObjectName("evalButton");
  evalButton->setToolTip(tr("The configs of the selected runs (all runs when none is selected; the form's config when "
                            "there is no run) on the text"));
  ebar->addWidget(new QLabel(tr("Text"), evalPage));
  ebar->addWidget(evalText_, 3);
  ebar->addWidget(browse);
  ebar->addWidget(new QLabel(tr("tokens/window"), evalPage));
  ebar->addWidget(evalCtx_);
  ebar->addWidget(new QLabel(tr("windows"), evalPage));
  ebar->addWidget(evalWindows_);
  ebar->addWidget(evalButton);
  evalSummary_ = new QLabel(evalPage);
  evalSummary_->setObjectName("evalSummary");
  evalSummary_->setWordWrap(true);
  evalTable_ = new QTableWidget(0, 8, evalPage);
  evalTable_->setObjectName("evalTable");
  evalTable_->setHorizontalHeaderLabels({tr("config"), tr("KV ratio"), tr("perplexity"), tr("Δ perplexity"),
                                         tr("mean KL"), tr("max KL"), tr("top-1"), tr("NaN positions")});
  evalTable_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
  evalTable_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  el->addLayout(ebar);
  el->addWidget(evalSummary_);
  el->addWidget(evalTable_, 1);
  connect(evalButton, &QPushButton::clicked, this, [this] { startEval(evalText_->text(), evalSpecs()); });
  auto* tabs = new QTabWidget(compare);
  tabs->setObjectName("compareTabs");
  tabs->addTab(split, tr("Runs"));
  tabs->addTab(evalPage, tr("Text evaluation"));
  cl->addWidget(tabs, 1);
  connect(runs_, &QTableWidget::itemSelectionChanged, this, &MainWindow::updateOverlay);
  connect(sweep, &QPushButton::clicked, this, [this] { startSweep(sweepGrid_->text()); });
  auto* rd = dock(this, tr("Compare runs"), "runsDock", compare, Qt::BottomDockWidgetArea);
  // Tokens run along x: the wide bottom area suits the token x channel map, beside the runs (beams tabbed with them).
  auto* td = dock(this, tr("Quantization error: token x channel"), "tokenErrorDock", tokenErrors_, Qt::BottomDockWidgetArea);
  removeDockWidget(bd);
  splitDockWidget(rd, td, Qt::Horizontal);
  tabifyDockWidget(rd, bd);
  bd->show();
  rd->raise();
  // The run panel, the tallest form, keeps the window's full height; the bottom docks span the text and the plots.
  setCorner(Qt::BottomLeftCorner, Qt::LeftDockWidgetArea);
  connect(runs_, &QTableWidget::cellDoubleClicked, this, [this](int row, int) {
    config_->setSpec(runs_->item(row, 1)->text());
  });

  status_ = new ElidedLabel(this);
  status_->setObjectName("statusLine");
  message_ = new ElidedLabel(this);
  message_->setObjectName("statusMessage");
  statusBar()->addWidget(status_, 1);
  statusBar()->addPermanentWidget(message_);

  connect(runButton_, &QPushButton::clicked, this, &MainWindow::run);
  connect(stopButton_, &QPushButton::clicked, this, &MainWindow::stop);
  connect(config_, &ConfigPanel::changed, this, [this] { updateActions(); });
  buildMenus();
  defaultLayout_ = saveState(kLayoutVersion);
  QSettings s;
  // The saved size, or the default one; either at most the screen's available area.
  const QRect avail = screen()->availableGeometry();
  const QSize room = avail.size() - kFrameAllowance;
  if (!restoreGeometry(s.value("window/geometry").toByteArray())) {
    resize(QSize(1500, 950).boundedTo(room));
    move(avail.topLeft() + QPoint(std::max(0, room.width() - width()) / 2, std::max(0, room.height() - height()) / 2));
  } else if (!isMaximized() && !isFullScreen() && size().boundedTo(room) != size()) {
    resize(size().boundedTo(room));  // saved on a larger screen
  }
  if (!restoreState(s.value("window/state").toByteArray(), kLayoutVersion)) sizeDocks();
  updateActions();
}

MainWindow::~MainWindow() = default;

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  QAction* open = file->addAction(tr("&Open model…"), this, [this] {
    const QString p = QFileDialog::getOpenFileName(this, tr("Open model"), QString(), tr("GGUF models (*.gguf);;All files (*)"));
    if (!p.isEmpty()) openModel(p);
  });
  open->setShortcut(QKeySequence::Open);
  file->addAction(tr("Open model &directory…"), this, [this] {
    const QString p = QFileDialog::getExistingDirectory(this, tr("Open a Hugging Face model directory"));
    if (!p.isEmpty()) openModel(p);
  });
  recent_ = file->addMenu(tr("Open &recent"));
  rebuildRecent();
  QAction* exp = file->addAction(tr("&Export cache config…"), this, &MainWindow::exportConfig);
  exp->setShortcut(QKeySequence(tr("Ctrl+E")));
  file->addAction(tr("&Save session…"), this, [this] {
    const QString p = QFileDialog::getSaveFileName(this, tr("Save session"), "session.kvscope.json",
                                                   tr("kvscope sessions (*.kvscope.json *.json)"));
    if (!p.isEmpty()) saveSessionTo(p);
  });
  file->addAction(tr("Open &session…"), this, [this] {
    const QString p = QFileDialog::getOpenFileName(this, tr("Open session"), QString(),
                                                   tr("kvscope sessions (*.kvscope.json *.json)"));
    if (!p.isEmpty()) openSession(p);
  });
  file->addAction(tr("Export runs as &CSV…"), this, &MainWindow::exportRuns);
  file->addAction(tr("Export &plots as PNG/PDF…"), this, &MainWindow::exportPlots);
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);
  QMenu* runMenu = menuBar()->addMenu(tr("&Run"));
  QAction* r = runMenu->addAction(tr("&Run"), this, &MainWindow::run);
  r->setShortcut(QKeySequence(tr("Ctrl+R")));
  QAction* st = runMenu->addAction(tr("&Stop"), this, &MainWindow::stop);
  st->setShortcut(QKeySequence(Qt::Key_Escape));
  QMenu* view = menuBar()->addMenu(tr("&View"));
  view->setObjectName("viewMenu");
  for (QDockWidget* d : findChildren<QDockWidget*>(Qt::FindDirectChildrenOnly)) view->addAction(d->toggleViewAction());
  view->addSeparator();
  view->addAction(tr("&Reset layout"), this, &MainWindow::resetLayout)->setObjectName("resetLayout");
  QMenu* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("&About kvscope"), this, [this] {
    QMessageBox::about(this, tr("About kvscope"),
                       tr("<b>kvscope %1</b><br>Quantized KV-cache workbench.<br>Qt %2.")
                           .arg(QApplication::applicationVersion(), qVersion()));
  });
}

void MainWindow::sizeDocks() {
  auto* run = findChild<QDockWidget*>("runDock");
  auto* plots = findChild<QDockWidget*>("memoryDock");
  auto* runs = findChild<QDockWidget*>("runsDock");
  auto* tokens = findChild<QDockWidget*>("tokenErrorDock");
  const int left = std::clamp(width() * 22 / 100, 300, 400);
  resizeDocks({run, plots}, {left, std::clamp(width() * 30 / 100, 340, 620)}, Qt::Horizontal);
  resizeDocks({runs}, {std::clamp(height() * 40 / 100, 220, 420)}, Qt::Vertical);
  const int bottom = width() - left;
  resizeDocks({runs, tokens}, {bottom * 6 / 10, bottom * 4 / 10}, Qt::Horizontal);
}

void MainWindow::resetLayout() {
  restoreState(defaultLayout_, kLayoutVersion);
  sizeDocks();
}

void MainWindow::rememberModel(const QString& path) {
  QSettings s;
  QStringList recent = s.value("recent/models").toStringList();
  recent.removeAll(path);
  recent.prepend(path);
  while (recent.size() > 8) recent.removeLast();
  s.setValue("recent/models", recent);
  rebuildRecent();
}

void MainWindow::rebuildRecent() {
  if (!recent_) return;
  recent_->clear();
  const QStringList recent = QSettings().value("recent/models").toStringList();
  for (const QString& p : recent) recent_->addAction(p, this, [this, p] { openModel(p); });
  recent_->setEnabled(!recent.isEmpty());
}

void MainWindow::updateActions() {
  runButton_->setEnabled(hasModel() && !running_ && !loading_ && config_->isValid());
  stopButton_->setEnabled(running_ || loading_);  // Stop also cancels a load
}

void MainWindow::openModel(const QString& path) {
  if (running_) stop();
  loading_ = true;
  progress_->setValue(0);
  progress_->setVisible(true);
  // An error was about the model before; an offer (the autosave) still stands.
  if (messageBar_->kind() != MessageBar::Kind::Info) messageBar_->dismiss();
  message_->setText(tr("Loading %1…").arg(path));
  updateActions();
  Q_EMIT loadRequested(path, dtype_->currentText(), device_->currentText(), ++runSerial_);
}

void MainWindow::askForModel() {
  modelCard_->setText(tr("<b>No model found.</b> Open a GGUF file or a Hugging Face directory (File > Open model), "
                         "or drop one on the window."));
  const QString p = QFileDialog::getOpenFileName(this, tr("Open a model to start"), QDir::homePath(),
                                                 tr("GGUF models (*.gguf);;All files (*)"));
  if (!p.isEmpty()) openModel(p);
}

void MainWindow::onLoadProgress(int done, int total) {
  progress_->setMaximum(total);
  progress_->setValue(done);
}

void MainWindow::onModelLoaded(const ModelInfo& info) {
  loading_ = false;
  model_ = info;
  progress_->setVisible(false);
  modelCard_->setText(tr("<b>%1</b> (%2)<br>%3 layers, hidden %4, %5 heads / %6 KV heads x %7, vocab %8<br>weights: %9")
                          .arg(info.name.isEmpty() ? info.path : info.name, info.arch)
                          .arg(info.layers)
                          .arg(info.hidden)
                          .arg(info.heads)
                          .arg(info.kvHeads)
                          .arg(info.headDim)
                          .arg(info.vocab)
                          .arg(info.weightTypes.join(", ")));
  message_->setText(tr("Model loaded (%1, %2).").arg(info.dtype, info.device));
  if (info.layers > 0 && selection_->layer() >= info.layers) selection_->clear();
  updateStatus();
  rememberModel(info.path);
  updateActions();
}

void MainWindow::run() {
  if (!runButton_->isEnabled()) return;
  RunRequest r;
  r.spec = config_->spec();
  r.prompt = prompt_->toPlainText();
  r.chat = chat_->isChecked();
  r.shadow = shadow_->isChecked();
  r.maxNew = maxNew_->value();
  r.prefillChunk = prefillChunk_->value();
  r.sample = decoding_->currentIndex() == 1;
  r.temperature = temperature_->value();
  r.topP = topP_->value();
  r.topK = topK_->value();
  r.seed = static_cast<quint64>(seed_->value());
  r.beams = decoding_->currentIndex() == 2 ? beams_->value() : 0;
  if (r.beams > 0) r.shadow = false;
  r.serial = ++runSerial_;
  running_ = true;
  message_->clear();
  messageBar_->dismiss();
  updateActions();
  Q_EMIT runRequested(r);
}

void MainWindow::setShadow(bool on) { shadow_->setChecked(on); }

void MainWindow::stop() {
  sweepQueue_.clear();  // a stop ends the sweep too
  if ((running_ || loading_) && stop_) stop_(runSerial_);  // the latest request: a run, an evaluation or a load
}

void MainWindow::startSweep(const QString& grid) {
  if (running_ || loading_ || !hasModel()) return;
  QStringList specs;
  try {
    for (const auto& s : cache::expandGrid(grid.toStdString())) {
      cache::parseSpec(s);  // every grid point valid before the first run
      specs << QString::fromStdString(s);
    }
  } catch (const cache::ConfigError& e) {
    onFailed(tr("sweep: %1").arg(QString::fromStdString(e.what())));
    return;
  }
  sweepQueue_ = specs;
  sweepRuns_.clear();
  sweepTotal_ = static_cast<int>(specs.size());
  sweeping_ = true;
  sweepProgress_->setRange(0, sweepTotal_);
  sweepProgress_->setValue(0);
  sweepProgress_->setVisible(true);
  best_->setText(tr("Sweeping %1 configs…").arg(sweepTotal_));
  runNextInSweep();
}

void MainWindow::runNextInSweep() {
  if (!sweeping_) return;
  if (sweepQueue_.isEmpty()) {
    finishSweep();
    return;
  }
  config_->setSpec(sweepQueue_.takeFirst());
  run();
}

void MainWindow::finishSweep() {
  sweeping_ = false;
  sweepProgress_->setVisible(false);
  const bool byKl = budgetKind_->currentIndex() == 0;
  const double limit = budget_->value();
  RunSnapshotPtr best;
  for (const auto& r : sweepRuns_) {
    if (r->stopReason == "cancelled") continue;
    const double mib = r->cache.total().stored() / 1048576.0;
    if (byKl) {
      if (r->shadow && r->meanKl <= limit && (!best || mib < best->cache.total().stored() / 1048576.0)) best = r;
    } else if (mib <= limit && (!best || r->meanKl < best->meanKl)) {
      best = r;
    }
  }
  const QString budget = byKl ? tr("mean KL ≤ %1").arg(limit) : tr("KV ≤ %1 MiB").arg(limit);
  if (!best) {
    best_->setText(tr("Sweep of %1 configs: none meets %2%3")
                       .arg(sweepRuns_.size())
                       .arg(budget, byKl && !shadow_->isChecked() ? tr(" (KL needs the shadow reference)") : QString()));
    return;
  }
  best_->setText(tr("Best under %1: <b>%2</b> (%3 MiB, %4x, mean KL %5)")
                     .arg(budget, best->spec)
                     .arg(best->cache.total().stored() / 1048576.0, 0, 'f', 3)
                     .arg(best->cache.total().stored() ? double(best->cache.total().unquantized) / best->cache.total().stored() : 0.0, 0, 'f', 2)
                     .arg(best->meanKl, 0, 'g', 3));
  runs_->selectRow(static_cast<int>(finished_.indexOf(best)));
}

void MainWindow::onRunUpdated(const RunSnapshotPtr& run) {
  last_ = run;
  text_->show(run);
  memory_->show(run);
  scales_->show(run);
  errors_->show(run);
  // The engine attaches the token x channel errors at most twice a second (and always to the final snapshot).
  if (run->tokenErrors) tokenErrors_->show(run->tokenErrors);
  beamDock_->show(run);
  updateStatus();
  if (run->finished) {
    running_ = false;
    finished_.append(run);
    addRunRow(run);
    updateOverlay();
    updateActions();
    autosave();
    offerOverflowFix(*run);
    if (sweeping_) {
      sweepRuns_.append(run);
      sweepProgress_->setValue(static_cast<int>(sweepRuns_.size()));
      if (run->stopReason == "cancelled") sweepQueue_.clear();
      QTimer::singleShot(0, this, &MainWindow::runNextInSweep);
    }
    Q_EMIT runFinished(run);
  }
}

void MainWindow::offerOverflowFix(const RunSnapshot& run) {
  const auto advice = overflowAdvice(run);
  if (!advice) return;
  QVector<MessageBar::Action> fix;
  // A sweep goes on with its own configs: the fix is offered once it has ended.
  if (!advice->saturatedSpec.isEmpty() && !sweeping_)
    fix.push_back({tr("Rerun with overflow=saturate"), "rerunSaturate", [this, spec = advice->saturatedSpec] {
                     config_->setSpec(spec);
                     this->run();
                   }});
  messageBar_->showMessage(MessageBar::Kind::Warning, advice->text, fix);
}

void MainWindow::onInspection(const TokenErrorViewPtr& view) {
  if (!view) return;
  tokenErrors_->show(view);
  text_->showErrors(view);
}

QStringList MainWindow::evalSpecs() const {
  QStringList specs;
  auto add = [&](const QString& runLabel) {
    const auto [spec, calibrated] = parseRunLabel(runLabel);  // "quanto:nbits=4 (3 beams)": the cache config
    if (calibrated) return;  // its scales are in no SPEC
    try {
      cache::parseSpec(spec.toStdString());
    } catch (const std::exception&) {
      return;
    }
    if (spec != "dynamic" && !specs.contains(spec)) specs << spec;
  };
  const auto rows = runs_->selectionModel()->selectedRows();
  for (const auto& idx : rows) add(runs_->item(idx.row(), 1)->text());
  if (rows.isEmpty())
    for (int r = 0; r < runs_->rowCount(); ++r) add(runs_->item(r, 1)->text());
  if (specs.isEmpty()) add(config_->spec());
  return specs;
}

void MainWindow::startEval(const QString& textPath, const QStringList& specs) {
  if (running_ || loading_ || !hasModel()) return;
  if (!QFileInfo(textPath).isFile()) {
    onFailed(tr("evaluation text `%1` not found").arg(textPath));
    return;
  }
  EvalRequest r;
  r.textPath = textPath;
  r.specs = specs;
  r.ctx = evalCtx_->value();
  r.windows = evalWindows_->value();
  r.prompt = std::min(64, r.ctx / 4);
  r.serial = ++runSerial_;
  running_ = evaluating_ = true;
  sweepProgress_->setRange(0, 0);
  sweepProgress_->setVisible(true);
  evalSummary_->setText(tr("Evaluating %1 config(s) on %2…").arg(specs.size()).arg(textPath));
  updateActions();
  Q_EMIT evalRequested(r);
}

void MainWindow::onEvalProgress(int done, int total) {
  sweepProgress_->setRange(0, total);
  sweepProgress_->setValue(done);
}

void MainWindow::onEvalFinished(const EvalResultView& result) {
  running_ = evaluating_ = false;
  sweepProgress_->setVisible(false);
  evalTable_->setRowCount(0);
  const double refPpl = result.rows.isEmpty() ? 0.0 : result.rows.front().ppl;
  auto num = [](double x, char f, int prec) { return std::isnan(x) ? QString("nan") : QString::number(x, f, prec); };
  for (const auto& row : result.rows) {
    const int r = evalTable_->rowCount();
    evalTable_->insertRow(r);
    const QStringList cells{row.spec,
                            QString::number(row.ratio, 'f', 2) + "x",
                            num(row.ppl, 'f', 3),
                            row.reference ? "-" : num(row.ppl - refPpl, 'f', 3),
                            row.reference ? "-" : num(row.meanKl, 'g', 4),
                            row.reference ? "-" : num(row.maxKl, 'g', 4),
                            row.reference ? "-" : QString::number(100.0 * row.top1, 'f', 1) + "%",
                            row.reference ? "-" : QString::number(row.nonFinitePositions)};
    for (int c = 0; c < cells.size(); ++c) evalTable_->setItem(r, c, new QTableWidgetItem(cells[c]));
  }
  evalSummary_->setText(tr("%1: %2 window(s) of %3 tokens, %4 scored tokens per config")
                            .arg(result.textPath)
                            .arg(result.windows)
                            .arg(result.ctx)
                            .arg(result.rows.isEmpty() ? 0 : result.rows.front().scored));
  updateActions();
  Q_EMIT evalDone();
}

void MainWindow::setDevices(const QStringList& devices) {
  const QSignalBlocker block(device_);  // filling the list is not a choice: no reload
  device_->clear();
  device_->addItems(devices.isEmpty() ? QStringList{"cpu"} : devices);
  device_->setEnabled(device_->count() > 1);
  if (device_->count() == 1)
    device_->setToolTip(tr("This version runs the model on the CPU only"));
}

void MainWindow::updateOverlay() {
  QVector<RunSnapshotPtr> runs;
  const auto rows = runs_->selectionModel()->selectedRows();
  for (const auto& idx : rows)
    if (idx.row() < finished_.size()) runs << finished_[idx.row()];
  if (runs.isEmpty()) runs = finished_.mid(std::max<qsizetype>(0, finished_.size() - 8));
  overlay_->show(runs);
}

void MainWindow::updateStatus() {
  QString text = tr("device %1").arg(model_.device.isEmpty() ? device_->currentText() : model_.device);
  if (last_) {
    text += tr(" — %1: %2 tokens, KV %3 MiB, prefill %4 tok/s, decode %5 tok/s")
                .arg(last_->spec)
                .arg(last_->tokens.size())
                .arg(last_->cache.total().stored() / 1048576.0, 0, 'f', 2)
                .arg(last_->prefillTokS, 0, 'f', 1)
                .arg(last_->decodeTokS, 0, 'f', 1);
  }
  // Resident memory of the whole process (model, caches, GUI).
  QFile statm("/proc/self/statm");
  if (statm.open(QIODevice::ReadOnly)) {
    const auto parts = statm.readAll().split(' ');
    if (parts.size() > 1) text += tr(" — process %1 MiB").arg(parts[1].toLongLong() * sysconf(_SC_PAGESIZE) / 1048576);
  }
  status_->setText(text);
}

void MainWindow::addRunRow(const RunSnapshotPtr& run) {
  const int row = runs_->rowCount();
  runs_->insertRow(row);
  const auto t = run->cache.total();
  const QStringList cells{QString::number(run->runId),
                          run->spec,
                          QString::number(t.stored() / 1048576.0, 'f', 3),
                          QString::number(t.stored() ? double(t.unquantized) / double(t.stored()) : 0.0, 'f', 2),
                          QString::number(run->decodeTokS, 'f', 1),
                          run->shadow ? QString::number(run->meanKl, 'g', 3) : "-",
                          run->shadow ? QString::number(100.0 * run->top1Agreement, 'f', 1) + "%" : "-",
                          run->shadow && run->firstDivergence >= 0 ? QString::number(run->firstDivergence) : "-",
                          run->shadow ? QString::number(run->maxKl, 'g', 3) : "-",
                          perplexity(*run)};
  for (int c = 0; c < cells.size(); ++c) runs_->setItem(row, c, new QTableWidgetItem(cells[c]));
}

void MainWindow::onFailed(const QString& message) {
  // Non-blocking: the message shows whole in the bar until dismissed, and stays in the status bar; the window keeps
  // its state.
  loading_ = false;
  running_ = false;
  if (evaluating_) {
    evaluating_ = false;
    sweepProgress_->setVisible(false);
    evalSummary_->setText(message.toHtmlEscaped());
  }
  progress_->setVisible(false);
  message_->setError(message);
  messageBar_->showError(message);
  updateActions();
}

void MainWindow::exportConfig() {
  // One dialog for every target; the filter chosen says which.
  const QList<QPair<ExportTarget, QString>> targets{
      {ExportTarget::Transformers, tr("transformers cache_config (*.json)")},
      {ExportTarget::Vllm, tr("vLLM flags (*.txt)")},
      {ExportTarget::LlamaCpp, tr("llama.cpp flags (*.txt)")},
      {ExportTarget::Kvscope, tr("kvscope config (*.json)")}};
  QStringList filters;
  for (const auto& t : targets) filters << t.second;
  QString chosen = filters.front();
  const QString path = QFileDialog::getSaveFileName(this, tr("Export cache config"), "cache_config.json",
                                                    filters.join(";;"), &chosen);
  if (path.isEmpty()) return;
  for (const auto& t : targets)
    if (t.second == chosen) exportConfigTo(path, t.first);
}

bool MainWindow::exportConfigTo(const QString& path, ExportTarget target) {
  try {
    const cache::CacheConfig cfg = cache::parseSpec(config_->spec().toStdString());
    std::string text;
    std::vector<std::string> notes;
    QString use;
    switch (target) {
      case ExportTarget::Transformers: {
        const auto e = cache::toHfCacheConfig(cfg);
        text = e.json + "\n";
        notes = e.notes;
        use = tr("model.generate(..., cache_implementation=\"quantized\", cache_config=<this file's dict>)");
        break;
      }
      case ExportTarget::Vllm:
      case ExportTarget::LlamaCpp: {
        const auto e = target == ExportTarget::Vllm ? cache::toVllmFlags(cfg) : cache::toLlamaCppFlags(cfg);
        text = "# " + cache::toSpec(cfg) + (target == ExportTarget::Vllm ? " for vLLM" : " for llama.cpp") + "\n";
        for (const auto& n : e.notes) text += "# note: " + n + "\n";
        text += e.flags + "\n";
        notes = e.notes;
        use = tr("add %1 to the %2 command line").arg(QString::fromStdString(e.flags),
                                                    target == ExportTarget::Vllm ? "vllm serve" : "llama-cli/llama-server");
        break;
      }
      case ExportTarget::Kvscope:
        text = cache::toKvscopeJson(cfg) + "\n";
        use = tr("kvscope-cli --cache %1").arg(path);
        break;
    }
    QSaveFile f(path);
    if (!f.open(QIODevice::WriteOnly) || f.write(QByteArray::fromStdString(text)) < 0 || !f.commit())
      throw std::runtime_error(tr("cannot write %1: %2").arg(path, f.errorString()).toStdString());
    message_->setText(tr("Exported %1: %2").arg(path, use));
    if (!notes.empty()) {
      // What does not carry over must be seen, not hidden in the status bar.
      QString said = tr("Exported %1. What the target does not express:").arg(path);
      for (const auto& n : notes) said += "\n- " + QString::fromStdString(n);
      messageBar_->showMessage(MessageBar::Kind::Warning, said);
    } else {
      messageBar_->dismiss();
    }
    return true;
  } catch (const std::exception& ex) {
    onFailed(QString::fromStdString(ex.what()));
    return false;
  }
}

QString MainWindow::autosavePath() {
  return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + "/autosave.kvscope.json";
}

void MainWindow::offerAutosave() {
  const QString path = autosavePath();
  const QFileInfo info(path);
  if (!info.isFile() || info.size() == 0) return;
  messageBar_->showMessage(
      MessageBar::Kind::Info,
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
    saveSession(Session{model_.path, finished_}, path);
  } catch (const SessionError& e) {
    onFailed(tr("autosave: %1").arg(QString::fromStdString(e.what())));
  }
}

void MainWindow::saveSessionTo(const QString& path) {
  try {
    saveSession(Session{model_.path, finished_}, path);
    message_->setText(tr("Saved %1 runs to %2").arg(finished_.size()).arg(path));
  } catch (const SessionError& e) {
    onFailed(QString::fromStdString(e.what()));
  }
}

void MainWindow::openSession(const QString& path) {
  Session s;
  try {
    s = loadSession(path);  // nothing changes unless the whole file reads
  } catch (const SessionError& e) {
    onFailed(QString::fromStdString(e.what()));
    return;
  }
  finished_ = s.runs;
  runs_->setRowCount(0);
  for (const auto& r : finished_) addRunRow(r);
  updateOverlay();
  if (!finished_.isEmpty()) {
    last_ = finished_.back();
    text_->show(last_);
    memory_->show(last_);
    // The form follows the run shown, where it can hold the run's config (not offline-calibrated scales).
    const RunLabel label = parseRunLabel(last_->spec);
    if (!label.calibrated) {
      const QSignalBlocker quiet(config_);
      config_->setSpec(label.spec);
    }
  }
  message_->setText(tr("Opened %1 runs from %2%3")
                        .arg(finished_.size())
                        .arg(path, s.modelPath.isEmpty() || s.modelPath == model_.path
                                       ? QString()
                                       : tr(" (recorded with %1)").arg(s.modelPath)));
}

void MainWindow::exportRuns() {
  const QString path = QFileDialog::getSaveFileName(this, tr("Export runs"), "kvscope_runs.csv", tr("CSV (*.csv)"));
  if (path.isEmpty()) return;
  QString csv;
  for (int c = 0; c < runs_->columnCount(); ++c)
    csv += (c ? "," : "") + runs_->horizontalHeaderItem(c)->text();
  csv += "\n";
  for (int r = 0; r < runs_->rowCount(); ++r) {
    for (int c = 0; c < runs_->columnCount(); ++c)
      csv += (c ? "," : "") + QString("\"%1\"").arg(runs_->item(r, c)->text().replace('"', "\"\""));
    csv += "\n";
  }
  QSaveFile f(path);
  if (!f.open(QIODevice::WriteOnly) || f.write(csv.toUtf8()) < 0 || !f.commit()) {
    onFailed(tr("cannot write %1: %2").arg(path, f.errorString()));
    return;
  }
  message_->setText(tr("Exported %1 runs to %2").arg(runs_->rowCount()).arg(path));
}

void MainWindow::exportPlots() {
  const QString dir = QFileDialog::getExistingDirectory(this, tr("Export plots to a folder"));
  if (!dir.isEmpty()) exportPlotsTo(dir);
}

namespace {

/// Writes `path` through `write(tmp)` into a temporary file beside it, then renames that over `path`: nobody sees a
/// half-written plot, and a failure leaves whatever was there.
bool writeAtomically(const QString& path, const std::function<bool(const QString&)>& write) {
  QTemporaryFile tmp(path + ".XXXXXX.part");
  if (!tmp.open()) return false;
  tmp.setPermissions(QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ReadGroup | QFileDevice::ReadOther);
  const QString t = tmp.fileName();
  tmp.close();
  return write(t) && ::rename(QFile::encodeName(t).constData(), QFile::encodeName(path).constData()) == 0;
}

}  // namespace

bool MainWindow::exportPlotsTo(const QString& dir) {
  const std::pair<const char*, QCustomPlot*> plots[] = {
      {"kv_memory", memory_->plot()},           {"kv_memory_per_step", memory_->stepsPlot()},
      {"fp8_scales", scales_->plot()},          {"quantization_error", errors_->plot()},
      {"token_channel_error", tokenErrors_->plot()}, {"runs_overlay", overlay_->plot()}};
  QStringList failed;
  for (const auto& [name, plot] : plots) {
    auto* p = plot;
    if (!writeAtomically(dir + "/" + name + ".png", [p](const QString& f) { return p->savePng(f, 0, 0, 2.0); }))
      failed << QString(name) + ".png";
    if (!writeAtomically(dir + "/" + name + ".pdf", [p](const QString& f) { return p->savePdf(f); }))
      failed << QString(name) + ".pdf";
  }
  if (failed.isEmpty())
    message_->setText(tr("Saved %1 plots as PNG and PDF in %2").arg(std::size(plots)).arg(dir));
  else
    onFailed(tr("could not write %1 in %2").arg(failed.join(", "), dir));
  return failed.isEmpty();
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
