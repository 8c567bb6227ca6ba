// Connects the engine (in its thread) and the main window: commands go as queued calls, snapshots come back.
#pragma once

namespace kvscope::ui {
class MainWindow;
}

namespace kvscope::app {
class Engine;
void wire(Engine* engine, ui::MainWindow* window);
}  // namespace kvscope::app
