// kvscope: the workbench. Starts on the embedded model (or the one given), ready to press Run.
//   kvscope [--model PATH] [--autorun SPEC ...] [--max-new N] [--no-shadow] [--screenshot FILE | --quit]
// --autorun runs each SPEC in turn on the default prompt (greedy, --max-new tokens, with a shadow reference unless
// --no-shadow) and prints one line per finished run; --screenshot saves the window after the last run and quits;
// --quit quits after the last run.
#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QScreen>
#include <QSpinBox>
#include <QThread>
#include <QTimer>
#include <cstdio>
#include <cstdlib>

#include "config_panel.h"
#include "engine.h"
#include "main_window.h"
#include "wiring.h"

namespace {
QString defaultModel() {
  if (const char* p = std::getenv("KVSCOPE_MODEL"); p && *p) return QString::fromLocal8Bit(p);
  const char* cache = std::getenv("KVSCOPE_CACHE");
  const QString root = cache && *cache ? QString::fromLocal8Bit(cache) : QDir::homePath() + "/.cache/kvscope";
  return root + "/model/SmolLM2-135M-Instruct.Q4_1.gguf";
}
}  // namespace

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setApplicationName("kvscope");
  QApplication::setOrganizationName("kvscope");
  QApplication::setApplicationVersion("0.1.0");
  QCommandLineParser cli;
  cli.setApplicationDescription("kvscope: quantized KV-cache workbench");
  cli.addHelpOption();
  cli.addVersionOption();
  QCommandLineOption modelOpt("model", "GGUF file or Hugging Face directory.", "path", defaultModel());
  QCommandLineOption autorunOpt("autorun", "Run this cache SPEC after loading (repeatable).", "spec");
  QCommandLineOption shotOpt("screenshot", "Save the window to this PNG after the autoruns, then quit.", "file");
  QCommandLineOption newOpt("max-new", "New tokens per run.", "n", "64");
  QCommandLineOption noShadowOpt("no-shadow", "Run without the shadow reference.");
  QCommandLineOption quitOpt("quit", "Quit after the autoruns.");
  cli.addOptions({modelOpt, autorunOpt, shotOpt, newOpt, noShadowOpt, quitOpt});
  cli.process(app);

  QThread engineThread;
  engineThread.setObjectName("engine");
  auto* engine = new kvscope::app::Engine();
  engine->moveToThread(&engineThread);
  QObject::connect(&engineThread, &QThread::finished, engine, &QObject::deleteLater);
  engineThread.start();

  kvscope::ui::MainWindow w;
  kvscope::app::wire(engine, &w);

  QStringList autoruns = cli.values(autorunOpt);
  const QString shot = cli.value(shotOpt);
  auto next = [&] {
    if (!autoruns.isEmpty()) {
      w.configPanel()->setSpec(autoruns.takeFirst());
      w.run();
    } else if (!shot.isEmpty()) {
      QTimer::singleShot(300, &w, [&] {
        w.grab().save(shot);
        QApplication::quit();
      });
    } else if (cli.isSet(quitOpt)) {
      QApplication::quit();
    }
  };
  if (!autoruns.isEmpty() || !shot.isEmpty()) {
    QObject::connect(&w, &kvscope::ui::MainWindow::runFinished, &w, [&](const kvscope::ui::RunSnapshotPtr& r) {
      // One line per finished autorun, for scripts (tests/bench/bench_gui_vs_cli.sh).
      std::printf("[kvscope] %s: %d tokens, prefill %.2f tok/s, decode %.2f tok/s\n", qPrintable(r->spec),
                  static_cast<int>(r->tokens.size()), r->prefillTokS, r->decodeTokS);
      std::fflush(stdout);
      next();
    });
    QObject::connect(engine, &kvscope::app::Engine::modelLoaded, &w, [&] { QTimer::singleShot(0, &w, next); });
    QObject::connect(engine, &kvscope::app::Engine::failed, &w, [&](const QString& m) {
      qCritical("kvscope: %s", qPrintable(m));
      if (!shot.isEmpty()) QApplication::exit(2);
    });
  }
  w.maxNewBox()->setValue(cli.value(newOpt).toInt());
  if (cli.isSet(noShadowOpt)) w.setShadow(false);
  w.resize(1500, 950);
  w.show();
  w.openModel(cli.value(modelOpt));
  const int rc = app.exec();
  engine->requestStop();
  engineThread.quit();
  engineThread.wait();
  return rc;
}
