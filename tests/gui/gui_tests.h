// What the GUI tests share: the includes of the window's and the workbench's fixtures, and how main() runs each.
#pragma once

#include <qcustomplot.h>
#include <sys/resource.h>
#include <unistd.h>

#include <QAbstractItemModelTester>
#include <QApplication>
#include <QComboBox>
#include <QDir>
#include <QDockWidget>
#include <QDoubleSpinBox>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QFileInfo>
#include <QHeaderView>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSaveFile>
#include <QScreen>
#include <QScrollArea>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QTabWidget>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTest>
#include <QTextBlock>
#include <QTextBrowser>
#include <QThread>
#include <QTimer>
#include <QToolButton>
#include <algorithm>
#include <cmath>

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
#include "engine.h"
#include "eval_page.h"
#include "main_window.h"
#include "message_bar.h"
#include "overflow_advice.h"
#include "runs_model.h"
#include "selection.h"
#include "session.h"
#include "thread_handoff.h"
#include "thread_link.h"
#include "tune_page.h"
#include "wiring.h"

namespace kvscope::guitest {
/// What the fixtures with a model share: the engine on its own thread and a window wired to it, as the app has them.
class EngineWindow : public QObject {
 protected:
  QThread thread_;
  app::Engine* engine_ = nullptr;
  ui::MainWindow* w_ = nullptr;
  void startEngine() {
    engine_ = new app::Engine();
    app::startEngine(engine_, &thread_);
    w_ = new ui::MainWindow();
    app::wire(engine_, w_);
  }
  void stopEngine() {
    if (engine_) app::shutdownEngine(engine_, &thread_);
    delete w_;
  }
};
/// Runs a QTest fixture.
template <class Fixture>
int runFixture(int argc, char** argv) {
  Fixture f;
  return QTest::qExec(&f, argc, argv);
}

/// The window alone (no engine, no model), fed synthetic snapshots: tests/gui/test_window.cpp.
int runWindowTests(int argc, char** argv);
/// The workbench on the embedded model, with its engine thread: tests/gui/test_workbench.cpp.
int runWorkbenchTests(int argc, char** argv);
/// The Long context tab on the embedded model: tests/gui/test_long_context.cpp.
int runLongContextTests(int argc, char** argv);
}  // namespace kvscope::guitest
