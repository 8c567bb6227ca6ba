// kvscope: the workbench. Starts on the embedded model (or the one given), ready to press Run.
//   kvscope [--model PATH] [--autorun SPEC ...] [--max-new N] [--no-shadow] [--beams N] [--screenshot FILE | --quit]
//           [--memory-cap MIB]
// --autorun runs each SPEC in turn on the default prompt (greedy, --max-new tokens, with a shadow reference unless
// --no-shadow) and prints one line per finished run; --screenshot saves the window after the last run and quits;
// --quit quits after the last run.
#include <sys/resource.h>

#include <QApplication>
#include <QComboBox>
#include <QCommandLineParser>
#include <QFile>
#include <QPlainTextEdit>
#include <QScreen>
#include <QSpinBox>
#include <QThread>
#include <QTimer>
#include <cstdio>
#include <cstdlib>

#include "config_panel.h"
#include "engine.h"
#include "main_window.h"
#include "util/process_memory.h"
#include "wiring.h"

namespace {
// The model to start on: where the CLI looks too (runtime::defaultModelPath: $KVSCOPE_MODEL, the one
// packaging/setup.sh fetched, the one an installed package ships). Empty when there is none: the window then asks.
QString defaultModel() {
  return kvscope::app::defaultModelPath();
}
}  // namespace

int main(int argc, char** argv) {
  kvscope::util::setAllocatorPolicy();  // resident memory follows what the cache holds (util/process_memory.h)
  QApplication app(argc, argv);
  QApplication::setApplicationName("kvscope");
  QApplication::setOrganizationName("kvscope");
  QApplication::setApplicationVersion("0.1.0");
  QCommandLineParser cli;
  cli.setApplicationDescription("kvscope: quantized KV-cache workbench");
  cli.addHelpOption();
  cli.addVersionOption();
  QCommandLineOption modelOpt("model", "GGUF file or Hugging Face directory (default: the embedded model).", "path");
  QCommandLineOption autorunOpt("autorun", "Run this cache SPEC after loading (repeatable).", "spec");
  QCommandLineOption shotOpt("screenshot", "Save the window to this PNG after the autoruns, then quit.", "file");
  QCommandLineOption newOpt("max-new", "New tokens per run.", "n", "64");
  QCommandLineOption noShadowOpt("no-shadow", "Run without the shadow reference.");
  QCommandLineOption beamsOpt("beams", "Run the autoruns as beam search with this many beams.", "n");
  QCommandLineOption quitOpt("quit", "Quit after the autoruns.");
  QCommandLineOption promptOpt("prompt-file", "Start with this UTF-8 text file as the prompt (e.g. a long context).",
                               "path");
  QCommandLineOption compareOpt("compare",
                                "After the autoruns, show these runs (numbers, as in the table): one run alone, or "
                                "two side by side (A,B) with their difference.",
                                "a[,b]");
  QCommandLineOption capOpt("memory-cap",
                            "Cap the process's address space at this many MiB (setrlimit RLIMIT_AS): loads and runs "
                            "that need more fail with an out-of-memory message and the window keeps what it had.",
                            "mib");
  QCommandLineOption deviceOpt("device",
                               "Load the model on this device: cpu, cuda or cuda:N (default: cpu; the device selector "
                               "lists the devices here).",
                               "device");
  QCommandLineOption activationsOpt("activations",
                                    "How block-format weights are multiplied: auto (default: 8-bit activations on a "
                                    "GGUF's block weights, as llama.cpp), f32 or q8 (the run panel's Activations).",
                                    "choice");
  QCommandLineOption weightsOpt("weights",
                                "stored (default), or q8_0, q5_1, q5_0, q4_1, q4_0: float matrices quantized at load "
                                "(the run panel's Weights).",
                                "format");
  cli.addOptions({modelOpt, autorunOpt, shotOpt, newOpt, noShadowOpt, beamsOpt, quitOpt, capOpt, deviceOpt,
                  activationsOpt, weightsOpt, compareOpt, promptOpt});
  cli.process(app);
  QList<int> compared;
  if (cli.isSet(compareOpt)) {
    for (const QString& n : cli.value(compareOpt).split(',')) {
      bool ok = false;
      const int id = n.trimmed().toInt(&ok);
      if (ok && id > 0)
        compared << id;
      else
        compared.clear(), compared << -1;
      if (compared.contains(-1)) break;
    }
    if (compared.contains(-1) || compared.isEmpty() || compared.size() > 2) {
      std::fprintf(stderr, "kvscope: --compare takes one or two run numbers (e.g. 1,2), got `%s`\n",
                   qPrintable(cli.value(compareOpt)));
      return 2;
    }
  }
  if (cli.isSet(capOpt)) {
    bool ok = false;
    const qulonglong mib = cli.value(capOpt).toULongLong(&ok);
    rlimit lim{};
    getrlimit(RLIMIT_AS, &lim);
    lim.rlim_cur = static_cast<rlim_t>(mib) << 20;
    if (!ok || mib == 0 || setrlimit(RLIMIT_AS, &lim) != 0) {
      std::fprintf(stderr, "kvscope: --memory-cap needs a positive number of MiB (at most the hard limit), got `%s`\n",
                   qPrintable(cli.value(capOpt)));
      return 2;
    }
  }

  QThread engineThread;
  engineThread.setObjectName("engine");
  auto* engine = new kvscope::app::Engine();
  kvscope::app::startEngine(engine, &engineThread);

  kvscope::ui::MainWindow w;
  kvscope::app::wire(engine, &w);

  if (cli.isSet(beamsOpt)) {
    bool ok = false;
    const int beams = cli.value(beamsOpt).toInt(&ok);
    if (!ok || beams < 1 || beams > 16) {
      std::fprintf(stderr, "kvscope: --beams takes 1 to 16, got `%s`\n", qPrintable(cli.value(beamsOpt)));
      return 2;
    }
    w.findChild<QComboBox*>("decoding")->setCurrentIndex(2);
    w.findChild<QSpinBox*>("beams")->setValue(beams);
  }
  QStringList autoruns = cli.values(autorunOpt);
  const QString shot = cli.value(shotOpt);
  auto next = [&] {
    if (!autoruns.isEmpty()) {
      w.configPanel()->setSpec(autoruns.takeFirst());
      w.run();
    } else if (!compared.isEmpty() && !w.showRuns(compared)) {
      qCritical("kvscope: --compare: no run numbered %s", qPrintable(QString::number(compared.back())));
      QApplication::exit(2);
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
    QObject::connect(engine, &kvscope::app::Engine::failed, &w, [&](quint64, const QString& m) {
      qCritical("kvscope: %s", qPrintable(m));
      if (!shot.isEmpty()) QApplication::exit(2);
    });
  }
  // The load choices the run panel offers, set before the first load (no model yet: no reload).
  for (const auto* opt : {&activationsOpt, &weightsOpt}) {
    if (!cli.isSet(*opt)) continue;
    auto* box = w.findChild<QComboBox*>(opt->names().front());
    if (box->findText(cli.value(*opt)) < 0) {
      QStringList choices;
      for (int i = 0; i < box->count(); ++i) choices << box->itemText(i);
      std::fprintf(stderr, "kvscope: unknown %s `%s` (%s)\n", qPrintable(opt->names().front()),
                   qPrintable(cli.value(*opt)), qPrintable(choices.join(", ")));
      kvscope::app::shutdownEngine(engine, &engineThread);
      return 2;
    }
    box->setCurrentText(cli.value(*opt));
  }
  if (cli.isSet(promptOpt)) {
    QFile f(cli.value(promptOpt));
    if (!f.open(QIODevice::ReadOnly | QIODevice::Text)) {
      std::fprintf(stderr, "kvscope: --prompt-file: cannot read `%s`: %s\n", qPrintable(cli.value(promptOpt)),
                   qPrintable(f.errorString()));
      kvscope::app::shutdownEngine(engine, &engineThread);
      return 2;
    }
    w.promptEdit()->setPlainText(QString::fromUtf8(f.readAll()));
  }
  w.maxNewBox()->setValue(cli.value(newOpt).toInt());
  if (cli.isSet(deviceOpt)) w.setDevice(cli.value(deviceOpt));
  if (cli.isSet(noShadowOpt)) w.setShadow(false);
  w.show();
  // Interactive starts only: batch runs (--autorun, --screenshot, --quit) leave the bar to their own runs.
  if (autoruns.isEmpty() && shot.isEmpty() && !cli.isSet(quitOpt)) w.offerAutosave();
  const QString model = cli.isSet(modelOpt) ? cli.value(modelOpt) : defaultModel();
  int rc = 2;
  if (!model.isEmpty()) {
    w.openModel(model);
    rc = app.exec();
  } else if (autoruns.isEmpty() && shot.isEmpty() && !cli.isSet(quitOpt)) {
    QTimer::singleShot(0, &w, [&w] { w.askForModel(); });  // an installed app without a model asks for one
    rc = app.exec();
  } else {
    std::fprintf(stderr, "kvscope: no model found (pass --model PATH or set KVSCOPE_MODEL)\n");
  }
  kvscope::app::shutdownEngine(engine, &engineThread);
  return rc;
}
