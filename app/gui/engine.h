// The engine: one object living in its own QThread that owns the model, the caches and the tokenizer. Commands
// arrive as queued slot calls with small value objects; results leave as immutable snapshots, at most 10 per second,
// each superseding the last. requestStop() is the one call that may come from any thread.
#pragma once

#include <QElapsedTimer>
#include <QObject>
#include <QStringList>
#include <atomic>
#include <memory>
#include <vector>

#include "snapshots.h"
#include "util/cancel.h"

namespace kvscope::cache {
struct CacheConfig;
class KvCache;
}  // namespace kvscope::cache

namespace kvscope::app {

class Engine : public QObject {
  Q_OBJECT
 public:
  Engine();
  ~Engine() override;
  /// Thread-safe: run `serial` (RunRequest::serial; default: every run, as at shutdown) stops at its next step or
  /// layer, or as soon as it starts when the engine has not reached it yet. A stop for an older run never stops a
  /// newer one.
  void requestStop(quint64 serial = ~quint64{0}) {
    quint64 cur = stopSerial_.load();
    while (cur < serial && !stopSerial_.compare_exchange_weak(cur, serial)) {
    }
    if (serial >= runningSerial_.load()) cancel_.request();
  }
  /// Thread-safe: which layer's token x channel error the snapshots carry from now on.
  void setInspectedLayer(int layer) { inspect_ = layer; }

 public Q_SLOTS:
  /// Loads a model (runtime::Session, as the CLI does); the request's serial (shared with runs) lets Stop cancel it
  /// while it loads. A failure keeps the model that was loaded.
  void load(const kvscope::ui::LoadRequest& request);
  void run(const kvscope::ui::RunRequest& request);
  /// Evaluates configs on a text (progress, then evalFinished or failed); Stop cancels it like a run.
  void evaluate(const kvscope::ui::EvalRequest& request);
  /// Long-context probes (the Long context page): progress through probeProgress, the answers so far on Stop.
  void probe(const kvscope::ui::ProbeRequest& request);
  /// Scans each layer side with the request's candidates (progress as evalProgress and tuneProgress, then
  /// tuneFinished, also when stopped with points scanned, or failed);
  /// Stop cancels it like a run.
  void tune(const kvscope::ui::TuneRequest& request);
  /// Diagnoses the loaded model on a text (generate::diagnose; doctorFinished or failed).
  void doctor(const kvscope::ui::DoctorRequest& request);
  /// Emits inspectionUpdated for the inspected layer of the latest run (after it, or between runs).
  void publishInspection();

 Q_SIGNALS:
  void loadProgress(int done, int total);
  void modelLoaded(const kvscope::ui::ModelInfo& info);
  void runUpdated(const kvscope::ui::RunSnapshotPtr& run);
  void inspectionUpdated(const kvscope::ui::TokenErrorViewPtr& view);
  void evalProgress(int done, int total);
  void evalFinished(const kvscope::ui::EvalResultView& result);
  void probeProgress(int done, int total);
  void probeFinished(const kvscope::ui::ProbeResultView& result);
  /// A scan's points so far (TuneResultView::complete false): its first point at once, then at most twice a second.
  void tuneProgress(const kvscope::ui::TuneResultView& partial);
  void tuneFinished(const kvscope::ui::TuneResultView& result);
  void doctorFinished(const kvscope::ui::DoctorResultView& result);
  /// Request `serial` (a load, a run or an evaluation) failed or was cancelled: one line for the user.
  void failed(quint64 serial, const QString& message);

 private:
  void runBeams(const ui::RunRequest& r, const cache::CacheConfig& cfg, const std::vector<std::int64_t>& prompt,
                cache::KvCache& kv);
  struct Impl;
  std::unique_ptr<Impl> d_;
  void fillHeadErrors(ui::RunSnapshot& snap) const;
  /// The run's perplexity on the reference continuation (ui::RunSnapshot::refPerplexity): the unquantized cache's
  /// greedy answer to the same prompt (generated once per prompt and length), teacher-forced through `cfg`.
  void scoreOnReference(ui::RunSnapshot& snap, const ui::RunRequest& r, const std::vector<std::int64_t>& prompt);
  ui::TokenErrorViewPtr inspection() const;
  ui::TokenErrorViewPtr inspectionIfDue(QElapsedTimer& since) const;
  void beginRun(quint64 serial);
  /// A text file's tokens in windows of `ctx` (at most `windows`; 0: all). Throws Error naming the file.
  std::vector<std::vector<std::int64_t>> textWindows(const QString& path, int ctx, int windows) const;
  /// The model's CUDA memory (zero on the CPU or without a model).
  ui::DeviceMemoryView deviceMemory() const;
  CancelToken cancel_;
  std::atomic<quint64> stopSerial_{0}, runningSerial_{0};
  std::atomic<int> inspect_{0};
};

/// Devices a model can run on here (device::availableDevices): "cpu", then "cuda:0", ... where LibTorch sees CUDA
/// devices.
QStringList availableDevices();
/// The model the app starts on when none is named: where the CLI looks too (runtime::defaultModelPath). Empty when
/// there is none.
QString defaultModelPath();

/// Registers the snapshot types for queued connections (call once before connecting).
void registerMetaTypes();

}  // namespace kvscope::app
