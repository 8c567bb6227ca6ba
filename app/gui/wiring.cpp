#include "wiring.h"

#include <QThread>

#include "engine.h"
#include "main_window.h"
#include "thread_handoff.h"
#include "thread_link.h"

namespace kvscope::app {

void wire(Engine* engine, ui::MainWindow* w) {
  registerMetaTypes();
  w->setStopHandler([engine](quint64 serial) { engine->requestStop(serial); });
  w->setInspectHandler([engine](int layer) { engine->setInspectedLayer(layer); });
  w->setDevices(availableDevices());
  link(w, &ui::MainWindow::loadRequested, engine, &Engine::load);
  link(w, &ui::MainWindow::runRequested, engine, &Engine::run);
  link(w, &ui::MainWindow::inspectionRequested, engine, &Engine::publishInspection);
  link(w, &ui::MainWindow::evalRequested, engine, &Engine::evaluate);
  link(w, &ui::MainWindow::probeRequested, engine, &Engine::probe);
  link(w, &ui::MainWindow::tuneRequested, engine, &Engine::tune);
  link(w, &ui::MainWindow::doctorRequested, engine, &Engine::doctor);
  link(engine, &Engine::loadProgress, w, &ui::MainWindow::onLoadProgress);
  link(engine, &Engine::modelLoaded, w, &ui::MainWindow::onModelLoaded);
  link(engine, &Engine::runUpdated, w, &ui::MainWindow::onRunUpdated);
  link(engine, &Engine::inspectionUpdated, w, &ui::MainWindow::onInspection);
  link(engine, &Engine::evalProgress, w, &ui::MainWindow::onEvalProgress);
  link(engine, &Engine::evalFinished, w, &ui::MainWindow::onEvalFinished);
  link(engine, &Engine::probeProgress, w, &ui::MainWindow::onProbeProgress);
  link(engine, &Engine::probeFinished, w, &ui::MainWindow::onProbeFinished);
  link(engine, &Engine::tuneFinished, w, &ui::MainWindow::onTuneFinished);
  link(engine, &Engine::tuneProgress, w, &ui::MainWindow::onTuneProgress);
  link(engine, &Engine::doctorFinished, w, &ui::MainWindow::onDoctorFinished);
  link(engine, &Engine::failed, w, &ui::MainWindow::onRequestFailed);
}

void startEngine(Engine* engine, QThread* thread) {
  engine->moveToThread(thread);
  // The engine thread's last act; shutdownEngine() acquires after waiting for it (ui/thread_handoff.h).
  if constexpr (ui::handoff::enabled)
    QObject::connect(
        thread, &QThread::finished, thread, [] { ui::handoff::release(); }, Qt::DirectConnection);
  thread->start();
}

void shutdownEngine(Engine* engine, QThread* thread) {
  engine->requestStop();
  ui::handoff::release();
  thread->quit();
  thread->wait();
  ui::handoff::acquire();
  delete engine;
}

}  // namespace kvscope::app
