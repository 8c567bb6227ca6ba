// The workbench window: composes the run panel, the views and the compare dock, posts commands to the engine thread
// and hands the snapshots it sends back to the views. It never waits on the engine.
#pragma once

#include <QMainWindow>
#include <functional>

#include "exports.h"
#include "snapshots.h"

class QLabel;
class QPlainTextEdit;
class QSpinBox;
class QTableView;

namespace kvscope::ui {

class BeamDock;
class CompareDock;
class ConfigPanel;
class ElidedLabel;
class ErrorDock;
class MemoryDock;
class MessageBar;
class OverlayPlot;
class RunPanel;
class RunsModel;
class ScalesDock;
class Selection;
class TextView;
class TokenErrorDock;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  using ExportTarget = ui::ExportTarget;
  /// What the engine is doing for the window: one request at a time. Run, Stop, Sweep, Evaluate and Scan follow it
  /// (updateActions()).
  enum class Busy { Idle, Loading, Running, Evaluating, Tuning, Diagnosing, Probing };
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  /// Called (from the GUI thread) to stop run `serial` (RunRequest::serial); it must not block.
  void setStopHandler(std::function<void(quint64 serial)> stop) { stop_ = std::move(stop); }
  /// Called (from the GUI thread, must not block) when the selected layer changes: the engine then sends that
  /// layer's token x channel errors with each snapshot, and once through onInspection() when idle.
  void setInspectHandler(std::function<void(int layer)> inspect) { inspect_ = std::move(inspect); }
  /// Devices the engine can run on ("cpu", "cuda:0", ...); the first is the default.
  void setDevices(const QStringList& devices);
  /// Selects `device` for the next load (a name the list lacks is added: the load then says why it cannot be used).
  void setDevice(const QString& device);

  RunPanel* runPanel() const { return runPanel_; }
  ConfigPanel* configPanel() const;
  QPlainTextEdit* promptEdit() const;
  QSpinBox* maxNewBox() const;
  void setShadow(bool on);
  TextView* textView() const { return text_; }
  CompareDock* compareDock() const { return compare_; }
  QTableView* runsTable() const;
  RunsModel* runsModel() const;
  OverlayPlot* overlay() const;
  MemoryDock* memoryDock() const { return memory_; }
  ScalesDock* scalesDock() const { return scales_; }
  ErrorDock* errorDock() const { return errors_; }
  TokenErrorDock* tokenErrorDock() const { return tokenErrors_; }
  BeamDock* beamDock() const { return beamDock_; }
  Selection* selection() const { return selection_; }
  /// Errors and run advice, above the generated text.
  MessageBar* messageBar() const { return messageBar_; }
  Busy busy() const { return busy_; }
  bool hasModel() const { return !model_.path.isEmpty(); }
  RunSnapshotPtr lastRun() const { return last_; }

 public Q_SLOTS:
  void run();
  /// Loads `cfg` into the form and runs it.
  void runConfig(const kvscope::cache::CacheConfig& cfg);
  void stop();
  void openModel(const QString& path);
  /// No model yet: says so in the model card and opens the file dialog.
  void askForModel();
  void onLoadProgress(int done, int total);
  void onModelLoaded(const kvscope::ui::ModelInfo& info);
  void onRunUpdated(const kvscope::ui::RunSnapshotPtr& run);
  void onInspection(const kvscope::ui::TokenErrorViewPtr& view);
  /// The current request failed (or a sweep could not start): the message shown, the window idle again.
  void onFailed(const QString& message);
  /// Request `serial` failed (the engine's `failed`): a failure of an earlier request than the latest is shown but
  /// leaves the latest one's state alone.
  void onRequestFailed(quint64 serial, const QString& message);
  /// Back to the dock arrangement the window was built with (View > Reset layout): every dock shown and docked.
  void resetLayout();
  /// Writes the form's config for `target` to `path` (atomically); what the target cannot express is said in the
  /// message bar (and, for flag files, as comments in the file). False, with the error in the bar, on failure.
  bool exportConfigTo(const QString& path, ExportTarget target);
  /// Every plot (KV memory and per step, FP8 scales, layer x head error, token x channel error, the runs overlay) as
  /// PNG and PDF in `dir`; false (and the error in the bar) when a file cannot be written.
  bool exportPlotsTo(const QString& dir);
  bool exportRunsTo(const QString& path);
  void saveSessionTo(const QString& path);
  void openSession(const QString& path);
  /// Chooses the runs numbered `ids` (one, or two: A and B) in the compare table, as a user's selection does; false
  /// when one of them is not in the table.
  bool showRuns(const QList<int>& ids);
  /// Runs every config of a grid (`quanto:nbits=2,4;q_group_size=32,64`) on the current prompt, then names the best
  /// under the budget. Stop cancels the running config and the rest of the grid.
  void startSweep(const QString& grid);
  /// Evaluates `configs` on a text file (perplexity, KL and top-1 against the unquantized cache); results go to the
  /// "Text evaluation" tab. Stop cancels it.
  void startEval(const QString& textPath, const std::vector<cache::CacheConfig>& configs);
  void onEvalProgress(int done, int total);
  void onEvalFinished(const kvscope::ui::EvalResultView& result);
  /// Scans each layer side with the tuner tab's candidates on its text; results go to the "Tuner" tab. Stop cancels it.
  void startTune();
  void onTuneFinished(const kvscope::ui::TuneResultView& result);
  /// A scan's points so far: the Tuner tab draws them as they come.
  void onTuneProgress(const kvscope::ui::TuneResultView& partial);
  /// Diagnoses the loaded model on the Doctor tab's text (generate::diagnose); the report goes to that tab.
  void startDoctor();
  /// Long-context probes of `configs` (the Long context tab); Stop keeps the probes answered.
  void startProbe(const std::vector<cache::CacheConfig>& configs);
  void onProbeProgress(int done, int total);
  void onProbeFinished(const kvscope::ui::ProbeResultView& result);
  /// Opens a probe as a run: the form takes its text (no chat template), answer tokens and config, then runs.
  void runProbe(const cache::CacheConfig& config, const QString& prompt, int maxNew);
  void onDoctorFinished(const kvscope::ui::DoctorResultView& result);
  /// Where every finished run is saved as it finishes (a session file).
  static QString autosavePath();
  /// When an earlier session left an autosave, offers it in the message bar (Reopen). The app calls it at start.
  void offerAutosave();

 Q_SIGNALS:
  void loadRequested(const kvscope::ui::LoadRequest& request);
  void evalRequested(const kvscope::ui::EvalRequest& request);
  void tuneRequested(const kvscope::ui::TuneRequest& request);
  void doctorRequested(const kvscope::ui::DoctorRequest& request);
  void probeRequested(const kvscope::ui::ProbeRequest& request);
  /// The selected layer changed while no run is going: the engine answers with onInspection().
  void inspectionRequested();
  void runRequested(const kvscope::ui::RunRequest& request);
  /// A run finished (any stop reason); carries its final snapshot.
  void runFinished(const kvscope::ui::RunSnapshotPtr& run);
  /// An evaluation finished (its table is filled).
  void evalDone();
  /// A tuner scan finished (its plots are drawn).
  void tuneDone();
  /// A diagnosis finished (the Doctor tab shows it).
  void doctorDone();
  /// The probes finished (their map is drawn).
  void probeDone();

 protected:
  void closeEvent(QCloseEvent* e) override;
  void dragEnterEvent(QDragEnterEvent* e) override;
  void dropEvent(QDropEvent* e) override;

 private:
  void buildDocks();
  /// Every view shows `run` (with against_ as run B when two are chosen); the docks' titles name them.
  void showRun(const RunSnapshotPtr& run);
  /// The runs chosen in the compare table: one (shown instead of the live run), two (A and B side by side), or none
  /// (the views follow the latest run again).
  void inspectRuns(const RunSnapshotPtr& a, const RunSnapshotPtr& b);
  /// The docks' titles name `run` (and `b`, run B); the window is kept within the screen as the views settle.
  void nameTheRunsShown(const RunSnapshotPtr& run, const RunSnapshotPtr& b);
  /// The engine's new state; the actions follow it.
  void setBusy(Busy busy);
  /// Enables what depends on the busy state, the model and the form: Run, Stop, Sweep, Evaluate, Scan.
  void updateActions();
  /// `message` in the message bar and the status bar; the busy state stays (the window's own errors: an export, the
  /// autosave, a session file).
  void showError(const QString& message);
  void updateStatus();
  void autosave();
  /// An export's result in the status bar, its notes in the message bar, or its error; its `ok`.
  bool report(const ExportResult& r);

  RunPanel* runPanel_;
  TextView* text_;
  MemoryDock* memory_;
  ScalesDock* scales_;
  ErrorDock* errors_;
  TokenErrorDock* tokenErrors_;
  BeamDock* beamDock_;
  CompareDock* compare_;
  Selection* selection_;
  MessageBar* messageBar_;
  ElidedLabel* status_;
  ElidedLabel* message_;
  QByteArray defaultLayout_;  ///< saveState() of the arrangement built in the constructor
  std::function<void(quint64)> stop_;
  std::function<void(int)> inspect_;
  quint64 runSerial_ = 0;
  int nextRunId_ = 1;  ///< the next run's number: after every run in the table, reopened ones included
  ModelInfo model_;
  RunSnapshotPtr last_;        ///< the latest run the engine reported (the status line's)
  RunSnapshotPtr pinned_;      ///< chosen in the compare table: the views keep it while other runs go on
  RunSnapshotPtr against_;     ///< run B, when two runs are chosen
  QPair<int, int> titledFor_;  ///< the runs (A, B or 0) the docks' titles name
  int beamsRaisedFor_ = 0;     ///< the beam-search run whose Beams tab was brought to the front
  Busy busy_ = Busy::Idle;
};

}  // namespace kvscope::ui
