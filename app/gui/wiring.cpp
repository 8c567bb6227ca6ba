#include "wiring.h"

#include "engine.h"
#include "main_window.h"

namespace kvscope::app {

void wire(Engine* engine, ui::MainWindow* w) {
  registerMetaTypes();
  w->setStopHandler([engine](quint64 serial) { engine->requestStop(serial); });
  w->setInspectHandler([engine](int layer) { engine->setInspectedLayer(layer); });
  w->setDevices(availableDevices());
  QObject::connect(w, &ui::MainWindow::loadRequested, engine, &Engine::load);
  QObject::connect(w, &ui::MainWindow::runRequested, engine, &Engine::run);
  QObject::connect(engine, &Engine::loadProgress, w, &ui::MainWindow::onLoadProgress);
  QObject::connect(engine, &Engine::modelLoaded, w, &ui::MainWindow::onModelLoaded);
  QObject::connect(engine, &Engine::runUpdated, w, &ui::MainWindow::onRunUpdated);
  QObject::connect(w, &ui::MainWindow::inspectionRequested, engine, &Engine::publishInspection);
  QObject::connect(engine, &Engine::inspectionUpdated, w, &ui::MainWindow::onInspection);
  QObject::connect(w, &ui::MainWindow::evalRequested, engine, &Engine::evaluate);
  QObject::connect(engine, &Engine::evalProgress, w, &ui::MainWindow::onEvalProgress);
  QObject::connect(engine, &Engine::evalFinished, w, &ui::MainWindow::onEvalFinished);
  QObject::connect(engine, &Engine::failed, w, &ui::MainWindow::onFailed);
}

}  // namespace kvscope::app
