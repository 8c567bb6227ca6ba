// Connects the engine (in its thread) and the main window: commands go as queued calls, snapshots come back.
#pragma once

class QThread;

namespace kvscope::ui {
class MainWindow;
}

namespace kvscope::app {
class Engine;
void wire(Engine* engine, ui::MainWindow* window);
/// Moves `engine` into `thread` and starts it.
void startEngine(Engine* engine, QThread* thread);
/// Stops whatever the engine runs, ends its thread and waits for it, then deletes the engine here: its thread is
/// gone, so nothing touches it while it is torn down.
void shutdownEngine(Engine* engine, QThread* thread);
}  // namespace kvscope::app
