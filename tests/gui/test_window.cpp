// The window alone (no engine, no model): its size on a small screen, the View menu, the message bar, and the advice
// for a run that stored NaN, fed synthetic snapshots.
#include <QRegularExpression>

#include "cache/error_history.h"
#include "gui_tests.h"
#include "kernels/cpu/kv_blocks.h"

using namespace kvscope;

class WindowTest : public QObject {
  Q_OBJECT
 private:
  ui::MainWindow* w_ = nullptr;

  QFrame* bar() const { return w_->findChild<QFrame*>("messageBar"); }
  QString barText() const { return bar()->findChild<QLabel*>("messageText")->text(); }
  ui::MessageBar::Kind barKind() const { return w_->messageBar()->kind(); }

  /// A finished run of two layers whose second layer's values stored `nan` NaN/inf codes; its config is `spec`'s, its
  /// label `label` (the SPEC when empty).
  static ui::RunSnapshotPtr nanRun(const QString& spec, std::int64_t nan, const QString& label = {}) {
    static int id = 0;
    auto r = std::make_shared<ui::RunSnapshot>();
    r->runId = ++id;
    r->spec = label.isEmpty() ? spec : label;
    r->config = cache::parseSpec(spec.toStdString());
    r->finished = true;
    r->stopReason = "max_new";
    r->cache.memory.resize(2);
    r->cache.stats.resize(2);
    for (auto& st : r->cache.stats)
      for (auto* side : {&st.keys, &st.values}) {
        side->scales = {0.01f};
        side->scaleShape = {1};
        side->amaxPerHead = {4.0f, 4.0f, 4.0f};
      }
    r->cache.stats[1].values.overflowTotal = nan;
    r->cache.stats[1].values.nonFiniteTotal = nan;
    return r;
  }

 private Q_SLOTS:
  void init() {
    w_ = new ui::MainWindow();
    w_->show();
    QVERIFY(QTest::qWaitForWindowExposed(w_));
  }

  void cleanup() {
    delete w_;
    w_ = nullptr;
  }

  void fitsA1366x768Screen() {
    w_->resetLayout();
    const QSize hint = w_->minimumSizeHint();
    QVERIFY2(fits1366(hint), qPrintable(QString("minimumSizeHint %1x%2").arg(hint.width()).arg(hint.height())));
    const QSize enforced = w_->layout()->minimumSize();
    QVERIFY2(fits1366(enforced),
             qPrintable(QString("layout minimum %1x%2").arg(enforced.width()).arg(enforced.height())));
    // The window opened within its screen's available area (or at its minimum, when the screen is smaller still).
    const QSize avail = w_->screen()->availableGeometry().size();
    QVERIFY(w_->width() <= std::max(avail.width(), enforced.width()));
    QVERIFY(w_->height() <= std::max(avail.height(), enforced.height()));
    // The plots share one tab group instead of stacking three high.
    auto* memory = w_->findChild<QDockWidget*>("memoryDock");
    const auto tabs = w_->tabifiedDockWidgets(memory);
    QVERIFY(tabs.contains(w_->findChild<QDockWidget*>("scalesDock")));
    QVERIFY(tabs.contains(w_->findChild<QDockWidget*>("errorDock")));
    // The run form scrolls rather than setting the window's height; Run and Stop stay below it, always in view.
    auto* scroll = w_->findChild<QScrollArea*>("runScroll");
    QVERIFY(scroll);
    for (const char* b : {"runButton", "stopButton"}) {
      auto* button = w_->findChild<QPushButton*>(b);
      QVERIFY2(button && !scroll->isAncestorOf(button) && button->isVisibleTo(w_), b);
    }
  }

  void viewMenuTogglesEveryDockAndResetsTheLayout() {
    auto* view = w_->findChild<QMenu*>("viewMenu");
    QVERIFY(view);
    const auto docks = w_->findChildren<QDockWidget*>();
    QCOMPARE(docks.size(), 7);
    for (auto* d : docks) {
      QVERIFY(!d->objectName().isEmpty());  // the saved layout names them
      QVERIFY2(view->actions().contains(d->toggleViewAction()), qPrintable(d->objectName()));
    }
    auto* scales = w_->findChild<QDockWidget*>("scalesDock");
    scales->toggleViewAction()->trigger();
    QVERIFY(scales->isHidden());
    QVERIFY(!scales->toggleViewAction()->isChecked());
    auto* runs = w_->findChild<QDockWidget*>("runsDock");
    w_->addDockWidget(Qt::LeftDockWidgetArea, runs);
    QCOMPARE(w_->dockWidgetArea(runs), Qt::LeftDockWidgetArea);
    QAction* reset = w_->findChild<QAction*>("resetLayout");
    QVERIFY(reset && view->actions().contains(reset));
    reset->trigger();
    QVERIFY(!scales->isHidden());
    QVERIFY(scales->toggleViewAction()->isChecked());
    QCOMPARE(w_->dockWidgetArea(scales), Qt::RightDockWidgetArea);
    QVERIFY(w_->tabifiedDockWidgets(scales).contains(w_->findChild<QDockWidget*>("memoryDock")));
    QCOMPARE(w_->dockWidgetArea(runs), Qt::BottomDockWidgetArea);
    QVERIFY(fits1366(w_->minimumSizeHint()));
  }

  void messageBarShowsAnErrorWholeUntilDismissed() {
    QVERIFY(bar() && bar()->isHidden());
    QString error = "cannot read `/home/someone/models/a-model-with-a-rather-long-name.Q4_1.gguf`: ";
    for (int i = 0; i < 8; ++i)
      error += QString("tensor blk.%1.attn_k.weight has a shape the header does not state; ").arg(i);
    w_->onFailed(error);
    QVERIFY(bar()->isVisible());
    QCOMPARE(bar(), w_->messageBar());
    QCOMPARE(barText(), error);
    QCOMPARE(w_->messageBar()->text(), error);
    QVERIFY(barKind() == ui::MessageBar::Kind::Error);
    QVERIFY(bar()->findChild<QLabel*>("messageText")->wordWrap());
    // The status bar keeps the message too, cut to its width (whole in text() and the tooltip): it does not widen
    // the window.
    auto* status = w_->findChild<ui::ElidedLabel*>("statusMessage");
    QVERIFY(status);
    QCOMPARE(status->text(), error);
    QVERIFY(status->isElided());
    QVERIFY(fits1366(w_->minimumSizeHint()));
    QTest::mouseClick(bar()->findChild<QToolButton*>("messageBarClose"), Qt::LeftButton);
    QVERIFY(bar()->isHidden());
    // The window's own errors show there too.
    w_->exportPlotsTo("/nonexistent/folder");
    QVERIFY(bar()->isVisible());
    QVERIFY(barText().contains("could not write kv_memory.png"));
  }

  void nanUnderOverflowNanIsExplainedAndRerunSaturated() {
    // The default fp8 config (e4m3fn, overflow=nan): the explanation with e4m3fn's max and the fix.
    w_->onRunUpdated(nanRun("fp8", 7));
    QVERIFY(bar()->isVisible());
    QVERIFY2(barText().contains("NaN/inf stored: 7 values") && barText().contains("448 for e4m3fn") &&
                 barText().contains("calibrated on the prompt") && barText().contains("stored as NaN"),
             qPrintable(barText()));
    QVERIFY(!barText().contains("57344"));
    QVERIFY(barKind() == ui::MessageBar::Kind::Warning);
    // e5m2: its own max, and inf rather than NaN.
    w_->onRunUpdated(nanRun("fp8:format=e5m2", 3));
    QVERIFY2(barText().contains("57344 for e5m2") && barText().contains("stored as inf"), qPrintable(barText()));
    QVERIFY(!barText().contains("448"));
    auto* rerun = bar()->findChild<QPushButton*>("rerunSaturate");
    QVERIFY(rerun && rerun->isVisible());
    QCOMPARE(rerun->text(), QString("Rerun with overflow=saturate"));
    QTest::mouseClick(rerun, Qt::LeftButton);
    QCOMPARE(w_->configPanel()->spec(), QString("fp8:format=e5m2,overflow=saturate"));
    QCOMPARE(w_->findChild<QComboBox*>("opt_overflow")->currentText(), QString("saturate"));
    QCOMPARE(w_->findChild<QComboBox*>("opt_format")->currentText(), QString("e5m2"));
    QVERIFY(bar()->isHidden());
    // NaN under saturate came from elsewhere (the model's own activations), and other backends have no such policy.
    w_->onRunUpdated(nanRun("fp8:overflow=saturate", 2));
    QVERIFY(bar()->isHidden());
    w_->onRunUpdated(nanRun("quanto:nbits=4", 2));
    QVERIFY(bar()->isHidden());
    w_->onRunUpdated(nanRun("fp8", 0));
    QVERIFY(bar()->isHidden());
    // The run's recorded config decides, not its label: a beam search's "SPEC (N beams)", or a label that is no SPEC.
    w_->onRunUpdated(nanRun("fp8:granularity=head,headroom=1.5,sink=4", 4, "my run (3 beams)"));
    QVERIFY2(barText().contains("per-head") && barText().contains("448 for e4m3fn"), qPrintable(barText()));
    QTest::mouseClick(bar()->findChild<QPushButton*>("rerunSaturate"), Qt::LeftButton);
    QVERIFY2(
        w_->configPanel()->config() == cache::parseSpec("fp8:granularity=head,headroom=1.5,sink=4,overflow=saturate"),
        qPrintable(w_->configPanel()->spec()));
    // A run without a recorded config says nothing (its label is not read).
    auto bare = std::const_pointer_cast<ui::RunSnapshot>(nanRun("fp8", 5));
    bare->config.reset();
    w_->onRunUpdated(bare);
    QVERIFY(bar()->isHidden());
  }

  void overflowAdviceRerunsThePerLayerAndCalibratedConfigWhole() {
    // A per-layer config: every fp8 side under overflow=nan is explained (both formats' max) and saturated; the other
    // sides, the rules and the mirrored fields stay as they were.
    const QString mixed = "layers=0:K=fp8:format=e5m2,V=dynamic;*:K=fp8:granularity=channel,V=quanto:nbits=2";
    w_->onRunUpdated(nanRun(mixed, 5));
    QVERIFY2(bar()->isVisible() && barText().contains("57344 for e5m2, 448 for e4m3fn") &&
                 barText().contains("per-tensor/per-channel") && barText().contains("stored as inf/NaN"),
             qPrintable(barText()));
    const auto advice = ui::overflowAdvice(*w_->lastRun());
    QVERIFY(advice);
    const auto fixed = cache::parseSpec(
        "layers=0:K=fp8:format=e5m2,overflow=saturate,V=dynamic;"
        "*:K=fp8:granularity=channel,overflow=saturate,V=quanto:nbits=2");
    QVERIFY2(advice->rerun == fixed, cache::toSpec(advice->rerun).c_str());
    QTest::mouseClick(bar()->findChild<QPushButton*>("rerunSaturate"), Qt::LeftButton);
    QVERIFY(w_->configPanel()->config() == fixed);  // the form holds it whole
    QVERIFY(w_->configPanel()->isValid());
    // A side with another policy is left alone, and only the nan side is named.
    w_->onRunUpdated(nanRun("layers=*:K=fp8:overflow=recalibrate,V=fp8:format=e5m2", 2));
    QVERIFY2(barText().contains("57344 for e5m2") && !barText().contains("448"), qPrintable(barText()));
    QVERIFY(ui::overflowAdvice(*w_->lastRun())->rerun ==
            cache::parseSpec("layers=*:K=fp8:overflow=recalibrate,V=fp8:format=e5m2,overflow=saturate"));
    // Offline-calibrated scales (no SPEC holds them): said so, and kept in the rerun's config.
    auto calibrated = std::const_pointer_cast<ui::RunSnapshot>(nanRun("fp8:granularity=head", 3, "fp8 [calibrated]"));
    calibrated->config->keyScales = calibrated->config->valueScales = {{0.5f, 0.5f}, {0.25f, 0.75f}};
    w_->onRunUpdated(calibrated);
    QVERIFY2(barText().contains("calibrated offline"), qPrintable(barText()));
    QTest::mouseClick(bar()->findChild<QPushButton*>("rerunSaturate"), Qt::LeftButton);
    cache::CacheConfig expected = *calibrated->config;
    expected.overflow = cache::OverflowPolicy::Saturate;
    QVERIFY(w_->configPanel()->config() == expected);
    // scale=unit: no calibration at all, the scale is 1.0.
    w_->onRunUpdated(nanRun("fp8:scale=unit", 1));
    QVERIFY2(barText().contains("fixed at 1.0"), qPrintable(barText()));
  }

  void oneBusyStateDrivesTheActions() {
    using Busy = ui::MainWindow::Busy;
    auto enabled = [this](const char* name) { return w_->findChild<QPushButton*>(name)->isEnabled(); };
    quint64 stopped = 0;
    w_->setStopHandler([&](quint64 serial) { stopped = serial; });
    // No model: nothing can start, nothing to stop.
    QVERIFY(w_->busy() == Busy::Idle);
    for (const char* b : {"runButton", "stopButton", "sweepButton", "evalButton", "tuneButton"})
      QVERIFY2(!enabled(b), b);
    // A load (no engine here: it stays pending): Stop cancels it, nothing else starts.
    qRegisterMetaType<ui::LoadRequest>();
    QSignalSpy loads(w_, &ui::MainWindow::loadRequested);
    w_->openModel("/nonexistent/model.gguf");
    QCOMPARE(loads.count(), 1);
    const quint64 serial = loads.takeFirst().at(0).value<ui::LoadRequest>().serial;
    QVERIFY(serial > 0);
    QVERIFY(w_->busy() == Busy::Loading);
    QVERIFY(enabled("stopButton"));
    for (const char* b : {"runButton", "sweepButton", "evalButton", "tuneButton"}) QVERIFY2(!enabled(b), b);
    w_->findChild<QPushButton*>("stopButton")->click();
    QCOMPARE(stopped, serial);
    // The window's own error (an export) and a run's late final snapshot leave the load pending.
    QVERIFY(!w_->exportPlotsTo("/nonexistent/folder"));
    QVERIFY(w_->busy() == Busy::Loading);
    w_->onRunUpdated(nanRun("fp8:overflow=saturate", 0));
    QVERIFY(w_->busy() == Busy::Loading);
    QVERIFY(enabled("stopButton"));
    // An earlier request's failure is shown but leaves it; the load's own failure ends it.
    w_->onRequestFailed(serial - 1, "an earlier request failed");
    QVERIFY(w_->busy() == Busy::Loading);
    w_->onRequestFailed(serial, "cannot read `/nonexistent/model.gguf`");
    QVERIFY(w_->busy() == Busy::Idle);
    QVERIFY(!enabled("stopButton"));
    QCOMPARE(barText(), QString("cannot read `/nonexistent/model.gguf`"));
  }

  void nanNeverLooksLikeALowError() {
    // Two layers of three KV heads: layer 0 quantized with finite errors, layer 1's head 0 stored NaN, its other heads
    // finite; layer 2 not quantized yet (no error map).
    auto r = std::make_shared<ui::RunSnapshot>();
    r->runId = 900;
    r->spec = "fp8";
    r->shadow = true;
    r->finished = true;
    r->cache.memory.resize(3);
    r->cache.stats.resize(3);
    const float nan = std::nanf("");
    const std::vector<std::vector<float>> rel{{0.05f, 0.06f, 0.07f}, {nan, 0.1f, 0.2f}};
    for (const auto& l : rel) r->headErrorK << QVector<float>(l.begin(), l.end());
    r->headErrorK << QVector<float>();  // layer 2: nothing quantized yet
    r->headErrorV = r->headErrorK;
    for (int s = 0; s < 6; ++s) {
      ui::TokenView t;
      t.kl = s < 2 ? 0.01f * (s + 1) : (s == 4 ? INFINITY : nan);  // steps 2..5 have no finite KL
      t.logprob = -1.0f;
      r->tokens.push_back(t);
    }
    w_->onRunUpdated(r);
    // The layer x head map: the NaN head is not on the colour scale but on its own layer, in its own colour; the
    // colour range is that of the finite cells; the key says what each kind of cell is.
    auto* plot = w_->errorDock()->plot();
    QCOMPARE(plot->plottableCount(), 2);
    auto* errors = qobject_cast<QCPColorMap*>(plot->plottable(0));
    auto* nanLayer = qobject_cast<QCPColorMap*>(plot->plottable(1));
    QVERIFY(errors && nanLayer && nanLayer->visible());
    QVERIFY(std::isnan(errors->data()->cell(1, 0)));
    QCOMPARE(nanLayer->data()->cell(1, 0), 1.0);
    QVERIFY(std::isnan(nanLayer->data()->cell(1, 1)) && std::isnan(nanLayer->data()->cell(0, 0)));
    QCOMPARE(errors->data()->cell(1, 2), 0.2f);
    QVERIFY(std::abs(errors->dataRange().lower - 0.05) < 1e-6 && std::abs(errors->dataRange().upper - 0.2) < 1e-6);
    QVERIFY(std::isnan(errors->data()->cell(2, 0)) && std::isnan(nanLayer->data()->cell(2, 0)));  // blank
    const QString key = w_->findChild<QLabel*>("errorLegend")->text();
    QVERIFY2(key.contains("NaN/inf: 1 head") && key.contains("not quantized"), qPrintable(key));
    QCOMPARE(nanLayer->gradient().nanHandling(), QCPColorGradient::nhTransparent);
    QCOMPARE(errors->gradient().nanHandling(), QCPColorGradient::nhTransparent);
    // The overlay: the 2 finite steps as the curve, the 4 others as marks in the legend, none dropped silently.
    auto* overlay = w_->overlay()->plot();
    w_->overlay()->metricBox()->setCurrentIndex(0);
    bool curve = false, marks = false;
    for (int g = 0; g < overlay->graphCount(); ++g) {
      const QString name = overlay->graph(g)->name();
      if (!name.startsWith("#900")) continue;
      if (name.contains("NaN/inf at 4 steps")) {
        marks = true;
        QCOMPARE(overlay->graph(g)->data()->size(), 4);
        QVERIFY(overlay->graph(g)->data()->at(0)->value <= overlay->yAxis->range().upper);
        QCOMPARE(overlay->graph(g)->lineStyle(), QCPGraph::lsNone);
      } else {
        curve = true;
        QCOMPARE(overlay->graph(g)->data()->size(), 2);
      }
    }
    QVERIFY(curve && marks);
    // The legend sits below the axes, not over the curves.
    QVERIFY(!overlay->axisRect()->insetLayout()->elements(false).contains(overlay->legend));
  }

  void aRunThatQuantizedNothingSaysWhyAndNeverShowsThePreviousRunsMaps() {
    // Run A quantized: both maps show its errors.
    auto a = std::make_shared<ui::RunSnapshot>();
    a->runId = 950;
    a->spec = "quanto:nbits=2";
    a->config = cache::parseSpec("quanto:nbits=2");
    a->finished = true;
    a->headErrorK = {QVector<float>{0.1f, 0.2f, 0.3f}};
    a->headErrorV = a->headErrorK;
    auto te = std::make_shared<ui::TokenErrorView>();
    te->runId = 950;
    te->layer = 0;
    te->tokens = 4;
    te->heads = 3;
    te->channels = 2;
    te->keys.assign(std::size_t{4} * 3 * 2, 0.0875f);
    te->values = te->keys;
    a->tokenErrors = te;
    w_->onRunUpdated(a);
    auto* map = qobject_cast<QCPColorMap*>(w_->errorDock()->plot()->plottable(0));
    auto* tokenMap = qobject_cast<QCPColorMap*>(w_->tokenErrorDock()->plot()->plottable(0));
    QVERIFY(map && tokenMap);
    QCOMPARE(map->data()->keySize(), 1);
    QCOMPARE(tokenMap->data()->keySize(), 4);
    // Run B, kivi on a short prompt: its window holds every token, nothing is quantized, no maps at all.
    auto b = std::make_shared<ui::RunSnapshot>();
    b->runId = 951;
    b->spec = "kivi";
    b->config = cache::parseSpec("kivi");
    b->finished = true;
    b->promptTokens = 40;
    b->tokens.resize(21);
    w_->onRunUpdated(b);
    QCOMPARE(map->data()->keySize(), 0);  // not run A's map
    QCOMPARE(tokenMap->data()->keySize(), 0);
    const QString why = w_->findChild<QLabel*>("errorLegend")->text();
    QVERIFY2(why.contains("nothing quantized yet in run #951") && why.contains("kivi keeps the newest 128 tokens") &&
                 why.contains("40 prompt + 21 generated"),
             qPrintable(why));
    QCOMPARE(w_->tokenErrorDock()->view()->runId, 951);
    bool said = false;
    for (auto* l : w_->tokenErrorDock()->findChildren<QLabel*>()) said = said || l->text() == why;
    QVERIFY(said);
    // The unquantized cache says that it has nothing to compare.
    auto d = std::make_shared<ui::RunSnapshot>(*b);
    d->runId = 952;
    d->spec = "dynamic";
    d->config = cache::parseSpec("dynamic");
    w_->onRunUpdated(d);
    QVERIFY(w_->findChild<QLabel*>("errorLegend")->text().contains("dynamic stores every token unquantized"));
    // TurboQuant's boundary layers: the run is quantized, but not the layer in view.
    auto t = std::make_shared<ui::RunSnapshot>(*b);
    t->runId = 953;
    t->spec = "vllm:kv=turboquant_4bit_nc";
    t->config = cache::parseSpec(t->spec.toStdString());
    w_->onRunUpdated(t);
    const QString boundary = w_->findChild<QLabel*>("errorLegend")->text();
    QVERIFY2(boundary.contains("turboquant_4bit_nc vLLM keeps the first and last two layers unquantized"),
             qPrintable(boundary));
    // Tiers by age whose newest tier is 16-bit: the views follow that tier, and say so.
    auto tiered = std::make_shared<ui::RunSnapshot>(*b);
    tiered->runId = 954;
    tiered->spec = "tiers=32:bf16,*:nvfp4";
    tiered->config = cache::parseSpec(tiered->spec.toStdString());
    w_->onRunUpdated(tiered);
    const QString why954 = w_->findChild<QLabel*>("errorLegend")->text();
    QVERIFY2(why954.contains("the error views follow the newest tier (bf16"), qPrintable(why954));
    QCOMPARE(ui::configNames({tiered}).front(), QString("tiers=32:bf16,*:nvfp4"));
  }

  void selectingRunsSwitchesEveryViewAndTwoShowTheirDifference() {
    // Three finished runs of one layer, three heads: each with its own errors, tokens, scales and bytes.
    auto make = [](int id, const char* spec, float err, const QVector<qint64>& ids, float scale, std::int64_t bytes) {
      auto r = std::make_shared<ui::RunSnapshot>();
      r->runId = id;
      r->spec = spec;
      r->config = cache::parseSpec(spec);
      r->finished = true;
      r->stopReason = "max_new";
      r->promptTokens = 5;
      for (qint64 t : ids) {
        ui::TokenView v;
        v.id = t;
        v.text = QString(" t%1").arg(t);
        v.kvStored = bytes;
        v.kvUnquantized = 4 * bytes;
        r->tokens << v;
      }
      r->headErrorK = {QVector<float>{err, 2 * err, 3 * err}};
      r->headErrorV = r->headErrorK;
      r->cache.memory.resize(1);
      r->cache.memory[0].keys.payload = bytes;
      r->cache.stats.resize(1);
      r->cache.stats[0].keys.scales = {scale};
      r->cache.stats[0].values.scales = {scale};
      auto te = std::make_shared<ui::TokenErrorView>();
      te->runId = id;
      te->tokens = 5 + ids.size();
      te->heads = 3;
      te->channels = 2;
      te->keys.assign(static_cast<std::size_t>(te->tokens) * 3 * 2, err);
      te->values = te->keys;
      r->tokenErrors = te;
      return r;
    };
    const auto r1 = make(971, "quanto:nbits=4", 0.01f, {10, 11, 12, 13}, 0.01f, 1000);
    const auto r2 = make(972, "quanto:nbits=2", 0.04f, {10, 11, 20, 21}, 0.02f, 600);
    const auto r3 = make(973, "fp8:overflow=saturate", 0.002f, {10, 11, 12, 13}, 0.03f, 2000);
    for (const auto& r : {r1, r2, r3}) w_->onRunUpdated(r);
    auto* table = w_->runsTable();
    auto* errors = w_->errorDock();
    auto* tokens = w_->tokenErrorDock();
    auto dockTitle = [this](const char* name) { return w_->findChild<QDockWidget*>(name)->windowTitle(); };
    // The views follow the latest run (#973) until a row is chosen.
    QCOMPARE(errors->cell(0, 1), 0.004f);
    QVERIFY(dockTitle("errorDock").endsWith("run #973"));
    // One row: every view shows that run, and says so.
    table->selectRow(0);
    QCOMPARE(errors->cell(0, 1), 0.02f);
    QCOMPARE(tokens->view()->runId, 971);
    QCOMPARE(tokens->shownCell(0, 0), 0.01f);
    QVERIFY(w_->textView()->plainText().contains(" t12 t13"));
    QVERIFY(w_->findChild<QLabel*>("memoryTotals")->text().startsWith("quanto:nbits=4"));
    QVERIFY(w_->findChild<QLabel*>("fp8Counters")->text().contains("overflows 0"));
    for (const char* d : {"memoryDock", "scalesDock", "errorDock", "tokenErrorDock", "beamDock"})
      QVERIFY2(dockTitle(d).endsWith("run #971"), qPrintable(dockTitle(d)));
    QCOMPARE(w_->findChild<QLabel*>("textRunTitle")->text(), QString("run #971"));
    // A later snapshot of another run does not take the views from the chosen one.
    auto live = std::make_shared<ui::RunSnapshot>(*r3);
    live->runId = 974;
    live->finished = false;
    w_->onRunUpdated(live);
    QCOMPARE(errors->cell(0, 1), 0.02f);
    // Two rows: A (the earlier) and B side by side, their difference on a scale centred on 0.
    table->selectionModel()->select(table->model()->index(1, 0),
                                    QItemSelectionModel::Select | QItemSelectionModel::Rows);
    QCOMPARE(errors->cell(0, 2), 0.03f);
    QCOMPARE(errors->difference(0, 2), 0.12f - 0.03f);
    QVERIFY(errors->plot(1)->isVisibleTo(errors) && errors->plot(2)->isVisibleTo(errors));
    auto* diff = qobject_cast<QCPColorMap*>(errors->plot(2)->plottable(0));
    QCOMPARE(diff->dataRange().lower, -diff->dataRange().upper);
    auto* mapA = qobject_cast<QCPColorMap*>(errors->plot(0)->plottable(0));
    auto* mapB = qobject_cast<QCPColorMap*>(errors->plot(1)->plottable(0));
    QCOMPARE(mapA->dataRange(), mapB->dataRange());            // one colour range for A and B
    QVERIFY(!errors->plot()->plotLayout()->hasElement(0, 1));  // B's scale stands for A's
    QVERIFY(dockTitle("errorDock").endsWith("A: run #971, B: run #972"));
    // Three maps still fit a 1366x768 screen (the layout as it settles).
    QApplication::processEvents();
    w_->layout()->activate();
    QVERIFY2(fits1366(w_->layout()->minimumSize()), qPrintable(QString("layout minimum %1x%2")
                                                                   .arg(w_->layout()->minimumSize().width())
                                                                   .arg(w_->layout()->minimumSize().height())));
    // The token x channel map: A, B, B - A.
    tokens->setPairView(1);
    QCOMPARE(tokens->shownCell(3, 1), 0.04f);
    tokens->setPairView(2);
    QCOMPARE(tokens->shownCell(3, 1), 0.04f - 0.01f);
    tokens->setPairView(0);
    // The text marks where B's tokens part from A's: the third generated token (12 against 20).
    QCOMPARE(w_->textView()->divergence(), 2);
    QVERIFY(w_->textView()->colourKey().contains("agree on the first 2 generated tokens"));
    QVERIFY2(w_->textView()->plainText().contains(" t11▼B « t20» t12"), qPrintable(w_->textView()->plainText()));
    // Scales and memory name both runs.
    QVERIFY(w_->findChild<QLabel*>("fp8Counters")->text().contains("B (run #972)"));
    QVERIFY(w_->findChild<QLabel*>("scalesKey")->text().contains("B: K scale"));
    QVERIFY2(w_->findChild<QLabel*>("memoryTotals")->text().contains("B − A: -"),
             qPrintable(w_->findChild<QLabel*>("memoryTotals")->text()));
    // Runs that agree throughout are said to.
    table->clearSelection();
    table->selectionModel()->select(table->model()->index(0, 0),
                                    QItemSelectionModel::Select | QItemSelectionModel::Rows);
    table->selectionModel()->select(table->model()->index(2, 0),
                                    QItemSelectionModel::Select | QItemSelectionModel::Rows);
    QCOMPARE(w_->textView()->divergence(), -1);
    QVERIFY(w_->textView()->colourKey().contains("the same 4 tokens"));
    // A legend entry of the overlay chooses its run as its row does.
    table->clearSelection();
    Q_EMIT w_->overlay()->runClicked(972);
    QCOMPARE(errors->cell(0, 1), 0.08f);
    QVERIFY(dockTitle("memoryDock").endsWith("run #972"));
    // No row: the views follow the latest run again; the pair views go.
    table->clearSelection();
    QCOMPARE(errors->cell(0, 1), 0.004f);
    QVERIFY(!errors->plot(1)->isVisibleTo(errors));
    QVERIFY(dockTitle("errorDock").endsWith("run #974"));
    QVERIFY(errors->plot()->plotLayout()->hasElement(0, 1));  // one run: its own scale again
  }

  void aRunThatStoredNanNeverRanksBestOnAnyColumn() {
    // #1 stored NaN codes: the smallest KV, the "best" own-token perplexity (it repeats one token), and a reference
    // perplexity of NaN. #2 and #3 are sound.
    auto run = [](int id, const char* spec, std::int64_t bytes, double refPpl, std::int64_t nan) {
      auto r = std::make_shared<ui::RunSnapshot>();
      r->runId = id;
      r->spec = spec;
      r->config = cache::parseSpec(spec);
      r->finished = true;
      r->shadow = true;
      r->meanKl = nan ? INFINITY : 0.01 * id;
      r->maxKl = r->meanKl;
      r->refPerplexity = refPpl;
      r->refTokens = 32;
      r->cache.memory.resize(1);
      r->cache.memory[0].keys.payload = bytes;
      r->cache.memory[0].keys.unquantized = 4000;
      r->dtypeBits = id == 3 ? 0 : 32;  // #3 reopened from a session that did not record its dtype
      r->cache.stats.resize(1);
      r->cache.stats[0].values.nonFiniteTotal = nan;
      for (int i = 0; i < 4; ++i) {
        ui::TokenView t;
        t.id = 0;
        t.logprob = nan ? -0.01f : -1.0f;
        r->tokens << t;
      }
      return r;
    };
    auto* model = w_->runsModel();
    model->setRuns({run(1, "fp8", 100, std::nan(""), 5), run(2, "quanto:nbits=2", 500, 3.5, 0),
                    run(3, "quanto:nbits=4", 900, 2.5, 0)});
    auto order = [model] {
      QList<int> ids;
      for (const auto& r : model->runs()) ids << r->runId;
      return ids;
    };
    QVERIFY(ui::brokenRun(*model->run(0)));
    QCOMPARE(model->data(model->index(0, ui::RunsModel::Perplexity)).toString(), QString("NaN"));
    QVERIFY(model->headerData(ui::RunsModel::Perplexity, Qt::Horizontal, Qt::ToolTipRole)
                .toString()
                .contains("same tokens"));
    QVERIFY(model->data(model->index(1, ui::RunsModel::Perplexity), Qt::ToolTipRole)
                .toString()
                .contains("on 32 reference tokens"));
    // Bits per value: 32 bits ÷ the ratio 4000 / 500 for #2; "-" without the dtype, sorted after the known ones.
    QCOMPARE(model->data(model->index(1, ui::RunsModel::BitsPerValue)).toString(), QString("4.00"));
    QCOMPARE(model->data(model->index(2, ui::RunsModel::BitsPerValue)).toString(), QString("-"));
    w_->runsTable()->sortByColumn(ui::RunsModel::BitsPerValue, Qt::AscendingOrder);
    QCOMPARE(order(), (QList<int>{2, 3, 1}));
    w_->runsTable()->sortByColumn(ui::RunsModel::KvMiB, Qt::AscendingOrder);
    QCOMPARE(order(), (QList<int>{2, 3, 1}));  // the smallest KV, but broken: last
    w_->runsTable()->sortByColumn(ui::RunsModel::KvMiB, Qt::DescendingOrder);
    QCOMPARE(order(), (QList<int>{3, 2, 1}));
    w_->runsTable()->sortByColumn(ui::RunsModel::Perplexity, Qt::AscendingOrder);
    QCOMPARE(order(), (QList<int>{3, 2, 1}));
    w_->runsTable()->sortByColumn(ui::RunsModel::MeanKl, Qt::DescendingOrder);
    QCOMPARE(order(), (QList<int>{3, 2, 1}));
    w_->runsTable()->sortByColumn(ui::RunsModel::Run, Qt::AscendingOrder);
    QCOMPARE(order(), (QList<int>{2, 3, 1}));
    QVERIFY(model->data(model->index(2, ui::RunsModel::Config), Qt::BackgroundRole).isValid());
    // A selected row keeps its run through a sort.
    w_->runsTable()->selectRow(0);  // #2
    w_->runsTable()->sortByColumn(ui::RunsModel::Run, Qt::DescendingOrder);
    QCOMPARE(model->run(w_->runsTable()->selectionModel()->selectedRows().value(0).row())->runId, 2);
  }

  void klByPositionMarksTheNanConfigInsteadOfLeavingItOut() {
    ui::EvalPage page;
    ui::EvalResultView result;
    result.textPath = "t.txt";
    result.windows = 1;
    result.ctx = 6;
    const double nan = std::nan("");
    ui::EvalRowView ref, good, broken;
    ref.spec = "dynamic";
    ref.reference = true;
    ref.klByPosition = {nan, nan, 0, 0, 0, 0};
    good.spec = "quanto:nbits=4";
    good.klByPosition = {nan, nan, 0.01, 0.02, 0.02, 0.03};
    broken.spec = "fp8";
    broken.nonFinitePositions = 3;
    broken.klByPosition = {nan, nan, 0.5, nan, nan, nan};
    result.rows = {ref, good, broken};
    page.showResult(result);
    auto* plot = page.findChild<QCustomPlot*>("evalPositionPlot");
    QStringList names;
    for (int g = 0; g < plot->graphCount(); ++g) names << plot->graph(g)->name();
    QVERIFY2(
        std::any_of(names.begin(), names.end(),
                    [](const QString& n) { return n.startsWith("fp8:") && n.endsWith(": NaN/inf at 3 positions"); }),
        qPrintable(names.join(" | ")));
    // The config column names what tells the configs apart (the whole SPEC in the tooltip).
    auto* table = page.findChild<QTableWidget*>("evalTable");
    QVERIFY2(table->item(1, 0)->text().startsWith("quanto: nbits=4"), qPrintable(table->item(1, 0)->text()));
    QCOMPARE(table->item(1, 0)->toolTip(), QString("quanto:nbits=4"));
    QCOMPARE(plot->graph(1)->data()->size(), 1);  // fp8's one finite position is still drawn
    QVERIFY(page.findChild<QLabel*>("evalPositionKey")->text().contains("NaN/inf at 3 positions"));
  }

  void scalesPlotDividesByTheFormatsOwnMax() {
    // An e5m2 cache: amax / 57344, not / 448; V's line too; a log axis over whole decades, so that scales of
    // 1e-3..3e-3 keep labelled ticks.
    auto r = std::make_shared<ui::RunSnapshot>();
    r->runId = 901;
    r->spec = "fp8:format=e5m2";
    r->finished = true;
    r->cache.memory.resize(2);
    r->cache.stats.resize(2);
    for (int l = 0; l < 2; ++l) {
      auto& st = r->cache.stats[l];
      st.keys.scales = {0.002f};
      st.values.scales = {0.001f * (l + 1)};
      st.keys.scaleShape = st.values.scaleShape = {1};
      st.keys.amaxPerHead = {57344.0f * 0.002f, 1.0f, 2.0f};
      st.values.amaxPerHead = {57344.0f * 0.003f};
      st.keys.formatMax = st.values.formatMax = 57344.0f;
    }
    w_->onRunUpdated(r);
    auto* plot = w_->scalesDock()->plot();
    QCOMPARE(plot->graphCount(), 6);
    QVERIFY(!plot->graph(4)->visible());  // no run B
    const QString key = w_->findChild<QLabel*>("scalesKey")->text();
    QVERIFY2(key.contains("K scale") && key.contains("V amax / 57344") && !key.contains("B: "), qPrintable(key));
    QVERIFY2(plot->graph(2)->name().contains("57344 (e5m2 max)"), qPrintable(plot->graph(2)->name()));
    QVERIFY(!plot->graph(2)->name().contains("448"));
    QCOMPARE(plot->graph(2)->data()->size(), 2);
    QVERIFY(std::abs(plot->graph(2)->data()->at(0)->value - 0.002) < 1e-9);
    QVERIFY(std::abs(plot->graph(3)->data()->at(1)->value - 0.003) < 1e-9);
    const QCPRange y = plot->yAxis->range();
    QVERIFY2(std::abs(y.lower - 1e-3) < 1e-12 && std::abs(y.upper - 1e-2) < 1e-12,
             qPrintable(QString("%1..%2").arg(y.lower).arg(y.upper)));
    QVERIFY(!plot->legend->visible());  // the key is a label that wraps: a legend cut its entries on a narrow dock
    // Scales over five decades: each decade has its label (the overlay's log axis labelled only 10^0).
    w_->findChild<QDockWidget*>("scalesDock")->raise();
    QApplication::processEvents();
    auto wide = std::make_shared<ui::RunSnapshot>(*r);
    wide->runId = 902;
    wide->cache.stats[0].keys.scales = {1e-5f};
    wide->cache.stats[1].keys.scales = {0.5f};
    w_->onRunUpdated(wide);
    plot->replot();
    const QVector<double> ticks = plot->yAxis->tickVector();
    QVERIFY2(plot->axisRect()->height() >= 5 * 16, qPrintable(QString::number(plot->axisRect()->height())));
    for (int e = -5; e <= 0; ++e)
      QVERIFY2(std::any_of(ticks.begin(), ticks.end(), [e](double t) { return std::abs(std::log10(t) - e) < 1e-6; }),
               qPrintable(QString("no tick at 1e%1 (%2 ticks)").arg(e).arg(ticks.size())));
  }

  void scalesDockShowsBlockScalesAndCentroidOccupancy() {
    // A TurboQuant run: layer 1 holds 40 rows of real codec output (TurboQuant's 4-bit keys and values), layer 0 is
    // a boundary layer (nothing stored in blocks).
    auto r = std::make_shared<ui::RunSnapshot>();
    r->runId = 905;
    r->spec = "vllm:kv=turboquant_4bit_nc";
    r->config = cache::parseSpec(r->spec.toStdString());
    r->finished = true;
    r->cache.memory.resize(3);
    r->cache.stats.resize(3);
    auto& st = r->cache.stats[1];
    for (cache::TensorStats* t : {&st.keys, &st.values}) {
      t->scaleHistogram.assign(256, 0);
      t->codeHistogram.assign(16, 0);
    }
    std::vector<float> x(64);
    std::vector<std::uint8_t> row(64);
    for (int i = 0; i < 40; ++i) {
      for (int j = 0; j < 64; ++j) x[static_cast<std::size_t>(j)] = std::sin(0.37f * (i * 64 + j)) * (1 + i % 4);
      kernels::quantizeKvRow(kernels::kTypeTqKey4, x.data(), 64, row.data());
      st.keys.scaleKind = kernels::kvRowHistogram(kernels::kTypeTqKey4, row.data(), 64, st.keys.scaleHistogram.data(),
                                                  st.keys.codeHistogram.data());
      kernels::quantizeKvRow(kernels::kTypeTqValue4, x.data(), 64, row.data());
      st.values.scaleKind = kernels::kvRowHistogram(kernels::kTypeTqValue4, row.data(), 64,
                                                    st.values.scaleHistogram.data(), st.values.codeHistogram.data());
    }
    w_->onRunUpdated(r);
    w_->selection()->setLayer(1);
    auto* dock = w_->scalesDock();
    QVERIFY(dock->plot()->isHidden());  // no FP8 scales: the histograms take its room
    QVERIFY(!dock->blockPlot()->parentWidget()->isHidden());
    const QString title = w_->findChild<QLabel*>("blockScalesTitle")->text();
    QVERIFY2(title.contains("layer 1") && title.contains("fp16 key norms / fp16 value scales") &&
                 title.contains("centroid occupancy"),
             qPrintable(title));
    // Every key code's share, summing to 100%, the centroids near 0 used most (rotated unit vectors are ~N(0, 1/64)).
    auto* codes = qobject_cast<QCPBars*>(dock->codePlot()->plottable(0));
    QCOMPARE(codes->data()->size(), 16);
    double sum = 0;
    for (auto it = codes->data()->constBegin(); it != codes->data()->constEnd(); ++it) sum += it->value;
    QVERIFY(std::abs(sum - 100.0) < 1e-9);
    QVERIFY(codes->data()->at(7)->value > codes->data()->at(0)->value);
    // The norms: rows of scale 1..4 over 64 values, norms between 2^2 and 2^5.
    auto* norms = qobject_cast<QCPBars*>(dock->blockPlot()->plottable(0));
    for (auto it = norms->data()->constBegin(); it != norms->data()->constEnd(); ++it)
      if (it->value > 0) QVERIFY2(it->key > 1.5 && it->key < 5.5, qPrintable(QString::number(it->key)));
    const QString counters = w_->findChild<QLabel*>("fp8Counters")->text();
    QVERIFY2(counters.contains("stores block scales"), qPrintable(counters));
    // The boundary layer stores nothing in blocks: no histograms.
    w_->selection()->setLayer(0);
    QVERIFY(dock->blockPlot()->parentWidget()->isHidden());
  }

  void memoryDockSaysWhichLayersReadAnothersKv() {
    // Gemma 4's shared-KV layers: layers 2 and 3 store nothing and read layers 0 (sliding over 16) and 1 (full). The
    // note names the sliding layers that hold a cache and the readers; selecting a reader (no statistics) is safe.
    auto r = std::make_shared<ui::RunSnapshot>();
    r->runId = 906;
    r->spec = "dynamic";
    r->config = cache::parseSpec(r->spec.toStdString());
    r->finished = true;
    r->cache.seqLength = 30;
    r->cache.memory.resize(4);
    r->cache.stats.resize(4);
    r->cache.windows = {16, 0, 16, 0};
    r->cache.dropped = {0, 0, 0, 0};
    r->cache.kvSources = {-1, -1, 0, 1};
    w_->onRunUpdated(r);
    // All of it on a tall dock; its first sentence and the rest in the tooltip on a short one.
    const auto* totals = w_->findChild<QLabel*>("memoryTotals");
    const QString note = totals->text() + totals->toolTip();
    QVERIFY2(note.contains("sliding window 16 on layers 0 (layer 0 holds 30 of 30 tokens)"), qPrintable(note));
    QVERIFY2(note.contains("layers 2-3 store no KV: they read the KV of layers 0-1"), qPrintable(note));
    // A short dock (a 768 px screen) keeps the first sentence on screen, the rest in the tooltip; a tall one all.
    w_->memoryDock()->resize(420, 300);
    QVERIFY2(!totals->text().contains("sliding window") && totals->text().contains("stored"),
             qPrintable(totals->text()));
    QVERIFY(totals->toolTip().contains("layers 2-3 store no KV"));
    w_->memoryDock()->resize(420, 600);
    QVERIFY(totals->text().contains("layers 2-3 store no KV") && totals->toolTip().isEmpty());
    for (int l : {3, 2, 0}) w_->selection()->setLayer(l);
    // Which layers each engine quantizes with the run's config as exported: vLLM skips the sliding layers this
    // config keeps in the model's dtype, llama.cpp's one type reaches them, nobody stores for the shared layers.
    r->runId = 907;
    r->spec = "layers=0:dynamic;*:fp8";
    r->config = cache::parseSpec(r->spec.toStdString());
    w_->onRunUpdated(r);
    auto* label = w_->findChild<QLabel*>("memoryEngines");
    QCOMPARE(w_->memoryDock()->enginesLine(), QString("Quantized as exported: vLLM 0.33 1 · llama.cpp all 2"));
    QVERIFY(w_->memoryDock()->enginesLine().startsWith(label->text().chopped(1)));  // elided to the dock's width
    const QString engines = label->toolTip();  // in full: each engine's flags and what it does with each layer
    QVERIFY2(engines.contains("vLLM 0.33") &&
                 engines.contains("--kv-cache-dtype fp8_e4m3 --kv-cache-dtype-skip-layers 0") &&
                 engines.contains("quantizes 1, keeps 0 unquantized; 2-3 store nothing"),
             qPrintable(engines));
    QVERIFY2(engines.contains("llama.cpp") && engines.contains("(nearest): quantizes all 2; 2-3 store nothing"),
             qPrintable(engines));
    QVERIFY2(!engines.contains("transformers"), qPrintable(engines));  // no QuantizedCache for a per-layer config
    r->runId = 908;
    r->spec = "quanto:nbits=4";
    r->config = cache::parseSpec(r->spec.toStdString());
    w_->onRunUpdated(r);
    QVERIFY2(w_->memoryDock()->enginesLine().endsWith("transformers refuses"),
             qPrintable(w_->memoryDock()->enginesLine()));
    const QString tf = label->toolTip();
    QVERIFY2(tf.contains("transformers") &&
                 tf.contains("refuses all 4 (QuantizedCache takes models with full-attention layers only)"),
             qPrintable(tf));
    r->runId = 909;
    r->spec = "llamacpp:type_k=q8_0,type_v=f16";
    r->config = cache::parseSpec(r->spec.toStdString());
    w_->onRunUpdated(r);
    QCOMPARE(w_->memoryDock()->enginesLine(),
             QString("Quantized as exported: vLLM 0.33 all 2 · llama.cpp keys of all 2"));
  }

  void exportWritesEveryTargetAndSaysWhatDoesNotCarryOver() {
    QTemporaryDir dir;
    QVERIFY(w_->configPanel()->setSpec("quanto:nbits=4"));
    auto read = [](const QString& p) {
      QFile f(p);
      return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()) : QString();
    };
    using T = ui::MainWindow::ExportTarget;
    QVERIFY(w_->exportConfigTo(dir.filePath("hf.json"), T::Transformers));
    const QJsonObject hf = QJsonDocument::fromJson(read(dir.filePath("hf.json")).toUtf8()).object();
    QCOMPARE(hf.value("backend").toString(), QString("quanto"));
    QCOMPARE(hf.value("nbits").toInt(), 4);
    // vLLM has no integer KV cache: the nearest FP8 flag, and the bar says so.
    QVERIFY(w_->exportConfigTo(dir.filePath("vllm.txt"), T::Vllm));
    const QString vllm = read(dir.filePath("vllm.txt"));
    QVERIFY2(vllm.contains("--kv-cache-dtype") && vllm.contains("# note: "), qPrintable(vllm));
    QVERIFY(bar()->isVisible() && barKind() == ui::MessageBar::Kind::Warning);
    QVERIFY2(barText().contains("What the target does not express"), qPrintable(barText()));
    QVERIFY(w_->exportConfigTo(dir.filePath("llama.txt"), T::LlamaCpp));
    QVERIFY2(read(dir.filePath("llama.txt")).contains("-ctk"), qPrintable(read(dir.filePath("llama.txt"))));
    QVERIFY(w_->exportConfigTo(dir.filePath("own.json"), T::Kvscope));
    QVERIFY(read(dir.filePath("own.json")).contains("quanto"));
    // transformers needs no cache_config for the unquantized cache: an error in the bar, no file.
    QVERIFY(w_->configPanel()->setSpec("dynamic"));
    QVERIFY(!w_->exportConfigTo(dir.filePath("dyn.json"), T::Transformers));
    QVERIFY(barKind() == ui::MessageBar::Kind::Error);
    QVERIFY(!QFileInfo::exists(dir.filePath("dyn.json")));
  }

  void autosaveIsOfferedAndReopensWithTheFormOnItsRun() {
    const QString path = ui::MainWindow::autosavePath();
    QDir().mkpath(QFileInfo(path).absolutePath());
    QFile::remove(path);
    w_->offerAutosave();
    QVERIFY(bar()->isHidden());  // nothing to offer
    auto run = std::make_shared<ui::RunSnapshot>();
    run->runId = 3;
    run->spec = "quanto:nbits=2,q_group_size=32";
    run->finished = true;
    run->stopReason = "max_new";
    ui::TokenView t;
    t.text = "hi";
    run->tokens.push_back(t);
    ui::saveSession(ui::Session{"model.gguf", {run}}, path);
    QVERIFY(w_->configPanel()->setSpec("fp8"));
    w_->offerAutosave();
    QVERIFY(bar()->isVisible() && barKind() == ui::MessageBar::Kind::Info);
    QVERIFY2(barText().contains(path), qPrintable(barText()));
    QTest::mouseClick(bar()->findChild<QPushButton*>("reopenAutosave"), Qt::LeftButton);
    QVERIFY(bar()->isHidden());
    QCOMPARE(w_->runsModel()->rowCount(), 1);
    // The form shows the reopened run's config, not the one it held before.
    QCOMPARE(w_->configPanel()->spec(), QString("quanto:nbits=2,q_group_size=32"));
    QFile::remove(path);
  }

  void textViewKeySaysWhatItsColoursMean() {
    auto* text = w_->findChild<ui::TextView*>();
    QVERIFY(text);
    auto run = std::make_shared<ui::RunSnapshot>();
    run->runId = 910;
    run->spec = "fp8 (3 beams)";
    run->shadow = false;  // beam search runs without a reference
    ui::TokenView t;
    t.text = "x";
    t.logprob = -0.1f;
    run->tokens.push_back(t);
    text->show(run);
    // "KL vs reference" is chosen, but this run has none: the key says what the colours are instead.
    QVERIFY2(text->colourKey().contains("no shadow reference") && text->colourKey().contains("log-prob"),
             qPrintable(text->colourKey()));
    auto withRef = std::make_shared<ui::RunSnapshot>(*run);
    withRef->runId = 911;
    withRef->shadow = true;
    text->show(withRef);
    QVERIFY2(text->colourKey().contains("KL 0") && text->colourKey().contains("NaN/inf"),
             qPrintable(text->colourKey()));
    text->setMetric(ui::TextView::Top1);
    QVERIFY(text->colourKey().contains("same top-1"));
  }

  void runsAreNamedByWhatTellsThemApart() {
    auto mk = [](const char* spec) {
      auto r = std::make_shared<ui::RunSnapshot>();
      r->config = cache::parseSpec(spec);
      r->spec = QString::fromStdString(cache::toSpec(*r->config));
      return ui::RunSnapshotPtr(r);
    };
    QString common;
    const auto names =
        ui::configNames({mk("quanto"), mk("quanto:nbits=2"), mk("quanto:nbits=2,q_group_size=32")}, &common);
    QCOMPARE(names, QStringList({"quanto: nbits=4, q_group_size=64", "quanto: nbits=2, q_group_size=64",
                                 "quanto: nbits=2, q_group_size=32"}));
    QCOMPARE(common, QString("quanto: axis_key=0, axis_value=0, residual_length=128, sink=0, attention=fused"));
    // One run: all of it; a per-layer config: its rules.
    QCOMPARE(ui::configNames({mk("kivi")}),
             QStringList({"kivi: nbits=2, q_group_size=32, residual_length=128, sink=0, attention=fused"}));
    QCOMPARE(ui::configNames({mk("fp8"), mk("layers=0:dynamic;*:fp8")}).back(), QString("layers=0:dynamic;*:fp8"));
    ui::RunsModel model;
    new QAbstractItemModelTester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest, &model);
    model.append(mk("fp8"));
    model.append(mk("fp8:overflow=saturate"));
    QCOMPARE(model.index(0, ui::RunsModel::Config).data().toString(), QString("fp8: overflow=nan"));
    QVERIFY(model.csv().startsWith("run,config,kv_mib,"));
    QVERIFY(model.csv().contains("\"fp8:overflow=saturate\""));  // the CSV keeps each run's own label
  }

  void beamSequenceFollowsTheReorders() {
    ui::RunSnapshot r;
    // Step 0: both beams from the prompt; step 1: beam 1 takes beam 0's rows; step 2: beam 0 takes beam 1's.
    const QVector<QVector<float>> scores{{-0.5f, -1.0f}, {-1.5f, -2.0f}, {-2.5f, -1.75f}};
    for (const auto& [parents, tokens] : std::vector<std::pair<QVector<qint64>, QStringList>>{
             {{0, 0}, {"a", "b"}}, {{0, 0}, {"c", "d"}}, {{1, 0}, {"e", "f"}}}) {
      ui::BeamStepView st;
      st.step = static_cast<int>(r.beamSteps.size());
      st.parents = parents;
      st.tokens = tokens;
      st.ids = {1, 2};
      st.scores = scores[st.step];
      r.beamSteps << st;
    }
    auto text = [&](int beam) {
      QString s;
      for (const auto& t : ui::beamSequence(r, beam)) s += t.text;
      return s;
    };
    QCOMPARE(text(0), QString("ade"));  // beam 0 at step 2 continues beam 1, which continued beam 0 at step 1
    QCOMPARE(text(1), QString("acf"));
    QVERIFY(ui::beamSequence(r, 2).isEmpty());
    // Each token's log-prob is its beam's score less its parent's; its candidates are what the step kept after the
    // same parent, best first (the hover showed "log-prob 0.000" and none).
    const auto seq = ui::beamSequence(r, 0);
    QCOMPARE(seq[2].logprob, -0.5f);  // e: -2.5 after d's -2.0
    QCOMPARE(seq[1].logprob, -1.5f);  // d: -2.0 after a's -0.5
    QCOMPARE(seq[1].top.size(), 2);
    QCOMPARE(seq[1].top[0].first, QString("c"));
    QCOMPARE(seq[1].top[0].second, -1.0f);
    QCOMPARE(seq[0].logprob, -0.5f);
    r.beamSteps[2].scores[0] = -1e9f;  // transformers' mark of a finished beam: no log-prob to show
    QVERIFY(std::isnan(ui::beamSequence(r, 0)[2].logprob));
  }

  void compareDockPutsTheOverlayBesideOnlyWhenThereIsRoom() {
    ui::CompareDock dock;
    auto* tabs = dock.findChild<QTabWidget*>("compareTabs");
    dock.resize(1300, 400);
    dock.show();
    QVERIFY(QTest::qWaitForWindowExposed(&dock));
    // Runs (with the overlay beside the table), Text evaluation, Tuner, Doctor, Long context, Capacity
    QCOMPARE(tabs->count(), 6);
    QVERIFY(dock.overlay()->isVisible());
    dock.resize(640, 400);
    QTRY_COMPARE(tabs->count(), 7);
    QCOMPARE(tabs->tabText(1), QString("Overlay"));
    QVERIFY(!dock.overlay()->isVisible());  // a tab page, not over the table
    tabs->setCurrentIndex(1);
    QVERIFY(dock.overlay()->isVisible());
    dock.resize(1300, 400);
    QTRY_COMPARE(tabs->count(), 6);
    QVERIFY(dock.overlay()->isVisible());
  }

  void doctorVerdictsOfferTheirConfig() {
    // A report with a bias spike (its config a SPEC: Use loads it) and an fp8 overflow (a command: no Use).
    ui::DoctorPage page;
    ui::DoctorResultView v;
    v.textPath = "t.txt";
    v.report.arch = "qwen2";
    v.report.layers = 2;
    v.report.heads = 28;
    v.report.kvHeads = 4;
    v.report.headDim = 128;
    v.report.tokens = 512;
    v.report.llamaCppRotation = true;
    v.report.boundaryLayers = {0, 1};
    v.report.sides.resize(2);
    v.report.sides[0][0].hasBias = true;
    v.report.sides[0][0].biasMax = 312.0f;
    v.report.verdicts.push_back({"bias_spikes",
                                 "keys",
                                 {0},
                                 "the k projection's bias reaches 312 at layer 0",
                                 "layers=0:llamacpp:type_v=q4_0;*:llamacpp:type_k=q4_0,type_v=q4_0"});
    v.report.verdicts.push_back({"fp8_overflow",
                                 "keys",
                                 {1},
                                 "fp8 with scale 1.0 overflows",
                                 "kvscope-cli calibrate --cache fp8 --text t.txt -o fp8.json"});
    page.showResult(v);
    QVERIFY(page.findChild<QLabel*>("doctorFacts")->text().contains("GQA 7:1"));
    QCOMPARE(page.findChild<QTableWidget*>("doctorTable")->item(0, 4)->text(), QString("312"));
    QCOMPARE(page.findChild<QTableWidget*>("doctorTable")->item(1, 4)->text(), QString("-"));
    QCOMPARE(page.findChildren<QLabel*>("doctorVerdict").size(), 2);
    const auto uses = page.findChildren<QPushButton*>("doctorUse");
    QCOMPARE(uses.size(), 1);
    QSignalSpy chosen(&page, &ui::DoctorPage::configChosen);
    QTest::mouseClick(uses[0], Qt::LeftButton);
    QCOMPARE(chosen.size(), 1);
    QCOMPARE(cache::toSpec(chosen[0][0].value<cache::CacheConfig>()),
             std::string("layers=0:llamacpp:type_v=q4_0;*:llamacpp:type_k=q4_0,type_v=q4_0"));
    // A second report replaces the verdicts.
    v.report.verdicts.clear();
    page.showResult(v);
    QCOMPARE(page.findChildren<QPushButton*>("doctorUse").size(), 0);
    QVERIFY(page.findChildren<QLabel*>("doctorVerdict")[0]->text().startsWith("Nothing alarming"));
  }

  void tunerDrawsTheScanAndPicksIntoTheForm() {
    // A scan of 4 layers and two candidates with known figures: 4-bit saves 700 bytes a side, 2-bit 850 and loses
    // more; layer 2's keys are the sensitive ones.
    ui::TuneResultView v;
    v.textPath = "t.txt";
    v.ctx = 64;
    v.windows = 1;
    v.scored = 32;
    v.dtype = "fp32";
    v.scan.plan = cache::planScan({cache::parseSpec("quanto:nbits=4"), cache::parseSpec("quanto:nbits=2")}, 4);
    v.scan.referenceBytes = 8000;
    for (const auto& it : v.scan.plan.items) {
      const double base = (it.layer == 2 && it.side == cache::KvSide::Keys ? 0.02 : 0.001) * (it.candidate + 1);
      v.scan.points.push_back({it, base, 8000 - (it.candidate == 0 ? 700 : 850)});
    }
    ui::TunePage page;
    page.resize(1000, 420);
    page.show();
    QVERIFY(QTest::qWaitForWindowExposed(&page));
    QSignalSpy layer(&page, &ui::TunePage::layerClicked), chosen(&page, &ui::TunePage::configChosen);
    page.showResult(v);
    auto* bars = page.findChild<QCustomPlot*>("tuneLayerPlot");
    QCOMPARE(bars->plottableCount(), 2);  // K and V of the shown candidate
    QCOMPARE(qobject_cast<QCPBars*>(bars->plottable(0))->data()->size(), 4);
    QCOMPARE(qobject_cast<QCPBars*>(bars->plottable(0))->data()->at(2)->value, 0.02);
    auto* front = page.findChild<QCustomPlot*>("tuneFrontPlot");
    QCOMPARE(front->graphCount(), 5);  // one front per target
    QCOMPARE(front->graph(0)->dataCount(),
             static_cast<int>(cache::paretoFront(v.scan, cache::TuneTarget::Kvscope).size()));
    // The budget's pick: every side but layer 2's keys quantized (4-bit, two of them 2-bit: 0.009).
    auto* budget = page.findChild<QDoubleSpinBox*>("tuneBudget");
    budget->setValue(0.0095);
    auto* pick = page.findChild<QLabel*>("tunePick");
    QVERIFY2(pick->text().startsWith("Pick for kvscope"), qPrintable(pick->text()));
    QVERIFY2(pick->text().contains("2:K=dynamic"), qPrintable(pick->text()));
    // Effective bits per value: fp32's 32 times the pick's share of the 8000 unquantized bytes.
    const QRegularExpressionMatch bits =
        QRegularExpression(R"(\(([0-9.]+)x, ([0-9.]+) bits/value\))").match(pick->text());
    QVERIFY2(bits.hasMatch(), qPrintable(pick->text()));
    QVERIFY(std::abs(bits.captured(2).toDouble() - 32.0 / bits.captured(1).toDouble()) < 0.02);
    page.findChild<QComboBox*>("tuneTarget")->setCurrentText("llamacpp");
    QVERIFY2(pick->text().contains("-ctk"), qPrintable(pick->text()));
    budget->setValue(0.0);
    QVERIFY2(pick->text().contains("-ctk f16 -ctv f16") || pick->text().contains("0 MiB") ||
                 pick->text().contains("predicted 0"),
             qPrintable(pick->text()));
    budget->setValue(0.0095);
    // A click on layer 2's bars selects layer 2; a click on a front point loads that point's config.
    bars->replot();
    QTest::mouseClick(
        bars, Qt::LeftButton, {},
        QPoint(static_cast<int>(bars->xAxis->coordToPixel(2)), static_cast<int>(bars->yAxis->coordToPixel(0.01))));
    QCOMPARE(layer.count(), 1);
    QCOMPARE(layer.at(0).at(0).toInt(), 2);
    page.findChild<QTabWidget*>("tuneTabs")->setCurrentIndex(1);
    front->replot();
    const auto kv = cache::paretoFront(v.scan, cache::TuneTarget::Kvscope);
    const auto& a = kv.front();  // the fewest bytes: everything at 2-bit, one config for all
    QTest::mouseClick(front, Qt::LeftButton, {},
                      QPoint(static_cast<int>(front->xAxis->coordToPixel(a.storedBytes / 1048576.0)),
                             static_cast<int>(front->yAxis->coordToPixel(a.predictedKl))));
    QCOMPARE(chosen.count(), 1);
    QCOMPARE(chosen.at(0).at(0).value<cache::CacheConfig>(), cache::parseSpec("quanto:nbits=2"));
    page.findChild<QPushButton*>("tuneUsePick")->click();
    QCOMPARE(chosen.count(), 2);
    const auto llama = cache::solve(cache::paretoFront(v.scan, cache::TuneTarget::LlamaCpp),
                                    {cache::SweepBudget::Kind::MaxMeanKl, 0.0095});
    QVERIFY(llama);
    QCOMPARE(chosen.at(1).at(0).value<cache::CacheConfig>(), cache::assignmentConfig(v.scan, *llama));
    // The bars' selector names each candidate with its options; the SPEC is its tooltip.
    auto* shown = page.findChild<QComboBox*>("tuneShown");
    QVERIFY2(shown->itemText(1).startsWith("quanto: nbits=2"), qPrintable(shown->itemText(1)));
    QCOMPARE(shown->itemData(1, Qt::ToolTipRole).toString(), QString("quanto:nbits=2"));
    // Priced at a context (tune --context): layer 0 global, layers 1-3 sliding over 32 tokens; at 4096 tokens the
    // reference is priced up as cache::pricedAt says and the summary names the context; "as scanned" puts it back.
    {
      ui::TuneResultView priced = v;
      priced.layerWindows = {0, 32, 32, 32};
      priced.prompt = 32;
      priced.step = 16;
      page.showResult(priced);
      auto* context = page.findChild<QSpinBox*>("tuneContext");
      QVERIFY(context);
      context->setValue(4096);
      auto* summary = page.findChild<QLabel*>("tuneSummary");
      const cache::Scan want = cache::pricedAt(v.scan, {64, 32, 16}, 4096, {0, 32, 32, 32});
      QVERIFY2(summary->text().contains(
                   QString("unquantized KV %1 MiB at 4096 tokens").arg(want.referenceBytes / 1048576.0, 0, 'f', 2)),
               qPrintable(summary->text()));
      QCOMPARE(front->graph(0)->dataCount(),
               static_cast<int>(cache::paretoFront(want, cache::TuneTarget::Kvscope).size()));
      context->setValue(0);
      QVERIFY2(summary->text().contains(QString("unquantized KV %1 MiB;").arg(8000 / 1048576.0, 0, 'f', 2)) ||
                   summary->text().endsWith(QString("unquantized KV %1 MiB").arg(8000 / 1048576.0, 0, 'f', 2)),
               qPrintable(summary->text()));
      page.showResult(v);
    }
    // A scan still going: the bars fill in per layer, the fronts come from the candidates scanned whole, and the
    // summary says how far it is and the time left; stopped, it keeps what was scanned.
    ui::TuneResultView partial = v;
    partial.complete = false;
    partial.secondsLeft = 42;
    partial.scan.points.resize(8 + 3);  // the 4-bit candidate whole, the 2-bit one on layers 0 and half of 1
    shown->setCurrentIndex(1);
    page.showResult(partial);
    QCOMPARE(shown->currentIndex(), 1);  // the choice stays as points come
    const auto* kBars = qobject_cast<QCPBars*>(bars->plottable(0))->data().data();
    QCOMPARE(kBars->at(1)->value, 0.002);  // layer 1's 2-bit keys are scanned
    QCOMPARE(kBars->at(3)->value, 0.0);    // layer 3's are not yet
    auto* summary = page.findChild<QLabel*>("tuneSummary");
    QVERIFY2(summary->text().contains("scanning: 11 of 16") && summary->text().contains("about 42 s left") &&
                 summary->text().contains("fronts from 1 of 2 candidates"),
             qPrintable(summary->text()));
    QCOMPARE(front->graph(0)->dataCount(),
             static_cast<int>(
                 cache::paretoFront(cache::completedCandidates(partial.scan), cache::TuneTarget::Kvscope).size()));
    page.findChild<QPushButton*>("tuneUsePick")->click();  // a pick from the whole candidate only
    QCOMPARE(chosen.count(), 3);
    QVERIFY(chosen.at(2).at(0).value<cache::CacheConfig>().mixed() ||
            chosen.at(2).at(0).value<cache::CacheConfig>() == cache::parseSpec("quanto:nbits=4"));
    QVERIFY(cache::toSpec(chosen.at(2).at(0).value<cache::CacheConfig>()).find("nbits=2") == std::string::npos);
    partial.stopped = true;
    page.showResult(partial);
    QVERIFY2(summary->text().startsWith("stopped after 11 of 16"), qPrintable(summary->text()));
    // A bad candidate is an error before anything runs.
    page.findChild<QLineEdit*>("tuneCandidates")->setText("fp8 dynamic");
    QVERIFY_THROWS_EXCEPTION(cache::ConfigError, page.request());
  }

  void configPanelKeepsPerLayerRulesUntilEdited() {
    ui::ConfigPanel p;
    QVERIFY(p.setSpec("layers=0-1:dynamic;*:quanto:nbits=2"));
    QCOMPARE(p.spec(), QString("layers=0-1:dynamic;*:quanto:nbits=2"));
    QVERIFY(p.isValid() && p.config().mixed());
    QVERIFY(p.findChild<QLabel*>("configKept")->isVisibleTo(&p));
    QCOMPARE(p.findChild<QComboBox*>("opt_nbits")->currentText(), QString("2"));  // the form shows the `*` rule
    p.findChild<QSpinBox*>("opt_q_group_size")->setValue(32);  // an edit: the form's config from now on
    QCOMPARE(p.spec(), QString("quanto:nbits=2,q_group_size=32"));
    QVERIFY(!p.config().mixed());
    QVERIFY(!p.findChild<QLabel*>("configKept")->isVisibleTo(&p));
    // Tiers by age: kept whole, the form showing the oldest tier's format.
    QVERIFY(p.setSpec("tiers=256:bf16,4096:fp8,*:nvfp4"));
    QCOMPARE(p.spec(), QString("tiers=256:bf16,4096:fp8,*:nvfp4"));
    QVERIFY(p.isValid() && p.config().tiered());
    QVERIFY(p.findChild<QLabel*>("configKept")->text().startsWith("Tiers by age"));
    QCOMPARE(p.findChild<QComboBox*>("opt_kv")->currentText(), QString("nvfp4"));
  }

  // A long run's token x channel map arrives as the engine's bounded summary: a column per row of tokens, each its
  // tokens' largest error; the title says how many tokens a column holds; a saved session coarsens it to fit and
  // keeps every token's own mean.
  void longRunsTokenMapIsDrawnFromItsSummary() {
    auto run = std::make_shared<ui::RunSnapshot>();
    run->runId = 990;
    run->spec = "quanto:nbits=4";
    run->config = cache::parseSpec("quanto:nbits=4");
    run->finished = true;
    auto te = std::make_shared<ui::TokenErrorView>();
    te->runId = 990;
    te->tokens = 40000;
    te->tokensPerRow = 32;
    te->heads = 2;
    te->channels = 64;
    for (qint64 r = 0; r < te->rows(); ++r)
      for (int i = 0; i < 128; ++i) te->keys.push_back(float(r % 10) / 100.0f + float(i) * 1e-4f);
    te->keys[(std::size_t{1000} * 2 + 0) * 64 + 3] = 7.0f;  // row 1000 (tokens 32000-32031), head 0, channel 3
    for (qint64 t = 0; t < te->tokens; ++t) te->tokenMeanK.push_back(float(t % 3));
    run->tokenErrors = te;
    w_->onRunUpdated(run);
    auto* dock = w_->tokenErrorDock();
    auto* map = qobject_cast<QCPColorMap*>(dock->plot()->plottable(0));
    QCOMPARE(dock->shownTokensPerColumn(), qint64{32});
    QCOMPARE(map->data()->keySize(), 1250);  // 40,000 tokens drawn as 1,250 columns
    QCOMPARE(dock->shownCell(32017, 3), 7.0f);
    QCOMPARE(dock->shownCell(31999, 3), float(999 % 10) / 100.0f + 3e-4f);
    const QString title = dock->findChild<QLabel*>("tokenErrorTitle")->text();
    QVERIFY2(title.contains("40000 tokens") && title.contains("32 tokens per column") && title.contains("max 7"),
             qPrintable(title));
    QCOMPARE(te->tokenMean(5), 2.0);  // the text's colour: the token's own mean, not its row's
    // Saved: 1,250 rows x 128 exceed what a session keeps; 313 rows of 128 tokens do not.
    const ui::Session back = ui::parseSession(ui::sessionJson(ui::Session{"m.gguf", {run}}), "s.json");
    const auto& saved = back.runs.front()->tokenErrors;
    QVERIFY(saved);
    QCOMPARE(saved->tokensPerRow, qint64{128});
    QCOMPARE(saved->keys, cache::ErrorHistory::merged(te->keys, 128, te->rows(), 2));
    QCOMPARE(saved->at(saved->keys, 32017, 0, 3), 7.0f);
    QCOMPARE(saved->tokenMeanK, te->tokenMeanK);
    QVERIFY(saved->values.empty());
    // A saved map whose width is no power of two is refused, naming the key.
    QByteArray bad = ui::sessionJson(ui::Session{"m.gguf", {run}});
    bad.replace("\"tokens_per_row\": 128", "\"tokens_per_row\": 100");
    try {
      ui::parseSession(bad, "s.json");
      QFAIL("a map width of 100 was accepted");
    } catch (const ui::SessionError& e) {
      QVERIFY2(QString(e.what()).contains("tokens_per_row"), e.what());
    }
  }

  void sessionKeepsConfigsScalesAndErrorMaps() {
    auto run = std::const_pointer_cast<ui::RunSnapshot>(nanRun("fp8", 3, "fp8 [calibrated]"));
    cache::CacheConfig cfg = cache::parseSpec("fp8:overflow=saturate");
    cfg.keyScales = cfg.valueScales = {{0.5f}, {0.25f}};
    run->config = cfg;
    run->headErrorK = {{0.1f, 0.2f, std::nanf("")}, {}};
    run->headErrorV = {{0.3f, 0.4f, 0.5f}, {0.6f, 0.7f, 0.8f}};
    auto te = std::make_shared<ui::TokenErrorView>();
    te->layer = 1;
    te->tokens = 2;
    te->heads = 1;
    te->channels = 2;
    te->keys = {0.1f, 0.2f, 0.3f, std::nanf("")};
    run->tokenErrors = te;
    const ui::Session back = ui::parseSession(ui::sessionJson(ui::Session{"m.gguf", {run}}), "s.json");
    const auto& r = *back.runs.front();
    QVERIFY(r.config && *r.config == cfg);  // calibrated scales too, which no SPEC holds
    QCOMPARE(r.headErrorK.size(), 2);
    QCOMPARE(r.headErrorK[0][1], 0.2f);
    QVERIFY(std::isnan(r.headErrorK[0][2]));
    QCOMPARE(r.headErrorV[1], QVector<float>({0.6f, 0.7f, 0.8f}));
    QCOMPARE(r.cache.stats.size(), std::size_t{2});
    QCOMPARE(r.cache.stats[1].values.nonFiniteTotal, 3);
    QCOMPARE(r.cache.stats[0].keys.scales, std::vector<float>({0.01f}));
    QVERIFY(r.tokenErrors && r.tokenErrors->layer == 1 && r.tokenErrors->keys.size() == 4 &&
            r.tokenErrors->values.empty());
    // A map whose size is not tokens x heads x channels is refused, naming the key.
    QByteArray bad = ui::sessionJson(ui::Session{"m.gguf", {run}});
    bad.replace("\"tokens\": 2", "\"tokens\": 3");
    try {
      ui::parseSession(bad, "s.json");
      QFAIL("a token map of the wrong size was accepted");
    } catch (const ui::SessionError& e) {
      QVERIFY2(QString(e.what()).contains("token_errors"), e.what());
    }
  }

 private:
  /// Within 1366x768 less a 40 px panel and a window manager's title bar and borders.
  static bool fits1366(const QSize& s) { return s.width() <= 1366 - 16 && s.height() <= 768 - 40 - 40; }
};

int kvscope::guitest::runWindowTests(int argc, char** argv) {
  WindowTest t;
  return QTest::qExec(&t, argc, argv);
}

#include "test_window.moc"
