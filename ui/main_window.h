// The workbench window: composes the panels and docks, posts commands to the engine thread and shows the
// snapshots it sends back. It never waits on the engine.
#pragma once

#include <QMainWindow>
#include <functional>

#include "snapshots.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QMenu;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTableWidget;

namespace kvscope::ui {

class ConfigPanel;
class BeamDock;
class ElidedLabel;
class ErrorDock;
class MemoryDock;
class MessageBar;
class OverlayPlot;
class ScalesDock;
class Selection;
class TextView;
class TokenErrorDock;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  /// Where File > Export cache config writes for: the flags and files each deployment target reads.
  enum class ExportTarget { Transformers, Kvscope, Vllm, LlamaCpp };
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  /// Called (from the GUI thread) to stop run `serial` (RunRequest::serial); it must not block.
  void setStopHandler(std::function<void(quint64 serial)> stop) { stop_ = std::move(stop); }
  /// Called (from the GUI thread, must not block) when the selected layer changes: the engine then sends that
  /// layer's token x channel errors with each snapshot, and once through onInspection() when idle.
  void setInspectHandler(std::function<void(int layer)> inspect) { inspect_ = std::move(inspect); }
  /// Devices the engine can run on ("cpu", "cuda:0", ...); the first is the default.
  void setDevices(const QStringList& devices);

  ConfigPanel* configPanel() const { return config_; }
  TextView* textView() const { return text_; }
  QPlainTextEdit* promptEdit() const { return prompt_; }
  QSpinBox* maxNewBox() const { return maxNew_; }
  QTableWidget* runsTable() const { return runs_; }
  MemoryDock* memoryDock() const { return memory_; }
  ScalesDock* scalesDock() const { return scales_; }
  ErrorDock* errorDock() const { return errors_; }
  TokenErrorDock* tokenErrorDock() const { return tokenErrors_; }
  BeamDock* beamDock() const { return beamDock_; }
  OverlayPlot* overlay() const { return overlay_; }
  Selection* selection() const { return selection_; }
  /// Errors and run advice, above the generated text.
  MessageBar* messageBar() const { return messageBar_; }
  bool isRunning() const { return running_; }
  void setShadow(bool on);
  bool hasModel() const { return !model_.path.isEmpty(); }
  RunSnapshotPtr lastRun() const { return last_; }

 public Q_SLOTS:
  void run();
  void stop();
  void openModel(const QString& path);
  /// No model yet: says so in the model card and opens the file dialog.
  void askForModel();
  void onLoadProgress(int done, int total);
  void onModelLoaded(const kvscope::ui::ModelInfo& info);
  void onRunUpdated(const kvscope::ui::RunSnapshotPtr& run);
  void onInspection(const kvscope::ui::TokenErrorViewPtr& view);
  void onFailed(const QString& message);
  /// Back to the dock arrangement the window was built with (View > Reset layout): every dock shown and docked.
  void resetLayout();
  void exportConfig();
  /// Writes the form's config for `target` to `path` (atomically); what the target cannot express is said in the
  /// message bar (and, for flag files, as comments in the file). False, with the error in the bar, on failure.
  bool exportConfigTo(const QString& path, ExportTarget target);
  void exportRuns();
  void exportPlots();
  /// Every plot (KV memory and per step, FP8 scales, layer x head error, token x channel error, the runs overlay) as
  /// PNG and PDF in `dir`; false (and one line in the status bar) when a file cannot be written.
  bool exportPlotsTo(const QString& dir);
  void saveSessionTo(const QString& path);
  /// Runs every config of a grid (`quanto:nbits=2,4;q_group_size=32,64`) on the current prompt, then names the best
  /// under the budget. Stop cancels the running config and the rest of the grid.
  void startSweep(const QString& grid);
  void openSession(const QString& path);
  /// Evaluates `specs` on a text file (perplexity, KL and top-1 against the unquantized cache); results go to the
  /// "Text evaluation" tab. Stop cancels it.
  void startEval(const QString& textPath, const QStringList& specs);
  void onEvalProgress(int done, int total);
  void onEvalFinished(const kvscope::ui::EvalResultView& result);
  /// Where every finished run is saved as it finishes (a session file).
  static QString autosavePath();
  /// When an earlier session left an autosave, offers it in the message bar (Reopen). The app calls it at start.
  void offerAutosave();

 Q_SIGNALS:
  void loadRequested(const QString& path, const QString& dtype, const QString& device, quint64 serial);
  void evalRequested(const kvscope::ui::EvalRequest& request);
  /// The selected layer changed while no run is going: the engine answers with onInspection().
  void inspectionRequested();
  void runRequested(const kvscope::ui::RunRequest& request);
  /// A run finished (any stop reason); carries its final snapshot.
  void runFinished(const kvscope::ui::RunSnapshotPtr& run);
  /// An evaluation finished (its table is filled).
  void evalDone();

 protected:
  void closeEvent(QCloseEvent* e) override;
  void dragEnterEvent(QDragEnterEvent* e) override;
  void dropEvent(QDropEvent* e) override;

 private:
  void buildMenus();
  /// Dock sizes for the window's current size: run panel left, plots right, runs and token map below.
  void sizeDocks();
  void offerOverflowFix(const RunSnapshot& run);
  void updateActions();
  void addRunRow(const RunSnapshotPtr& run);

  ConfigPanel* config_;
  QPlainTextEdit* prompt_;
  QCheckBox* chat_;
  QCheckBox* shadow_;
  QSpinBox* maxNew_;
  QSpinBox* prefillChunk_;
  QComboBox* decoding_;
  QComboBox* dtype_;
  QMenu* recent_ = nullptr;
  void rememberModel(const QString& path);
  void rebuildRecent();
  QDoubleSpinBox* temperature_;
  QDoubleSpinBox* topP_;
  QSpinBox* topK_;
  QSpinBox* seed_;
  QSpinBox* beams_;
  BeamDock* beamDock_;
  QPushButton* runButton_;
  QPushButton* stopButton_;
  TextView* text_;
  MemoryDock* memory_;
  ScalesDock* scales_;
  ErrorDock* errors_;
  TokenErrorDock* tokenErrors_;
  OverlayPlot* overlay_;
  Selection* selection_;
  QComboBox* device_;
  std::function<void(int)> inspect_;
  void updateOverlay();
  QStringList evalSpecs() const;
  QLineEdit* evalText_ = nullptr;
  QSpinBox* evalCtx_ = nullptr;
  QSpinBox* evalWindows_ = nullptr;
  QTableWidget* evalTable_ = nullptr;
  QLabel* evalSummary_ = nullptr;
  bool evaluating_ = false;
  void autosave();
  void updateStatus();
  QTableWidget* runs_;
  QLabel* modelCard_;
  ElidedLabel* status_;
  ElidedLabel* message_;
  MessageBar* messageBar_;
  QByteArray defaultLayout_;  ///< saveState() of the arrangement built in the constructor
  QProgressBar* progress_;
  std::function<void(quint64)> stop_;
  quint64 runSerial_ = 0;
  ModelInfo model_;
  RunSnapshotPtr last_;
  QVector<RunSnapshotPtr> finished_;  ///< every finished run, in order (session files)
  // Sweep
  void runNextInSweep();
  void finishSweep();
  QLineEdit* sweepGrid_ = nullptr;
  QComboBox* budgetKind_ = nullptr;
  QDoubleSpinBox* budget_ = nullptr;
  QLabel* best_ = nullptr;
  QProgressBar* sweepProgress_ = nullptr;
  QStringList sweepQueue_;
  QVector<RunSnapshotPtr> sweepRuns_;
  int sweepTotal_ = 0;
  bool sweeping_ = false;
  bool running_ = false;
  bool loading_ = false;
};

}  // namespace kvscope::ui
