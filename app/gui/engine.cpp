#include "engine.h"

#include <ATen/ATen.h>

#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <tuple>

#include "cache/config.h"
#include "cache/recorder.h"
#include "device/context.h"
#include "generate/doctor.h"
#include "generate/eval.h"
#include "generate/generate.h"
#include "generate/probe.h"
#include "model/gguf.h"
#include "model/llama.h"
#include "runtime/errors.h"
#include "runtime/model_loader.h"
#include "runtime/session.h"
#include "tokenizer/tokenizer.h"

namespace kvscope::app {

namespace {
// One line for the user, for the exception in flight (runtime::currentFailure: LibTorch's backtrace dropped); out
// of memory says during what and what is kept; kvscope's own failure says so and asks for a report.
QString describeCurrent(const QString& during, bool modelKept) {
  const runtime::Failure f = runtime::currentFailure();
  QString what = QString::fromStdString(f.message);
  if (f.code == ErrorCode::Cancelled)
    return QString("%1 cancelled%2").arg(during, modelKept ? "; the loaded model is kept" : "");
  if (f.code == ErrorCode::Internal)
    return QString("internal error during %1: %2 (%3)").arg(during, what, QString(runtime::kReportHint));
  if (f.code != ErrorCode::OutOfMemory) return what;
  return QString("out of memory during %1 (%2)%3")
      .arg(during, what, modelKept ? "; the loaded model is kept" : QString());
}

// Snapshots at most every 100 ms (10 Hz): smooth enough to watch, and on a 2-core machine the GUI's redraws then take
// little from the engine (tests/bench/bench_gui_vs_cli.sh measures it).
constexpr qint64 kEmitMs = 100;
// The token x channel errors (a copy of a layer's whole history) ride along at most twice a second while a run goes;
// the final snapshot always carries them.
constexpr qint64 kInspectionMs = 500;
// Runs up to this many tokens (prompt + new) are scored on the reference continuation as they finish: the prompt and
// the continuation once more through the run's config (its own cache freed first), and once per prompt the reference's
// own generation through an unquantized cache (the size of the shadow reference a run holds by default). Longer ones
// say so; the Text evaluation tab scores long texts.
constexpr std::size_t kReferenceScoreTokens = 4096;
}  // namespace

struct Engine::Impl {
  std::optional<runtime::Session> session;  // the loaded model, its tokenizer and what runs ask of them
  // The current (or latest) run's error history and per-head errors, per layer, keys and values.
  cache::CacheRecorder recorder;
  int runId = 0;  // the current run's number (its snapshots' and its token x channel errors')
  // The unquantized cache's greedy continuation of the latest prompt: what every run on it is scored on.
  struct Reference {
    std::vector<std::int64_t> prompt;
    int maxNew = 0;
    std::vector<std::int64_t> tokens;
  };
  std::optional<Reference> reference;
};

void Engine::scoreOnReference(ui::RunSnapshot& snap, const ui::RunRequest& r, const std::vector<std::int64_t>& prompt) {
  if (snap.cancelled || snap.tokens.isEmpty()) return;
  if (prompt.size() + static_cast<std::size_t>(r.maxNew) > kReferenceScoreTokens) {
    snap.refPerplexityNote = QString(
                                 "not scored: prompt + new tokens exceed %1 (the Text evaluation tab scores long "
                                 "texts)")
                                 .arg(kReferenceScoreTokens);
    return;
  }
  const model::LlamaModel& model = d_->session->model();
  cache::StatsOptions quiet;
  quiet.enabled = false;
  auto& ref = d_->reference;
  if (!ref || ref->prompt != prompt || ref->maxNew != r.maxNew) {
    ref.reset();
    generate::GenerateOptions o;
    o.maxNew = r.maxNew;
    o.stopIds = d_->session->stopIds();
    auto kv = model.makeCache(cache::parseSpec("dynamic"), quiet);
    const auto g = generate::generate(model, *kv, prompt, o, {}, &cancel_);
    if (g.stopReason == generate::StopReason::Cancelled) return;
    ref = Impl::Reference{prompt, r.maxNew, g.tokens};
  }
  auto kv = model.makeCache(*snap.config, quiet);
  const auto s = generate::scoreContinuation(model, *kv, prompt, ref->tokens, r.prefillChunk, &cancel_);
  if (s.cancelled) return;
  snap.refPerplexity = s.ppl();
  snap.refTokens = static_cast<int>(s.scored);
}

void Engine::fillHeadErrors(ui::RunSnapshot& snap) const {
  snap.headErrorK.clear();
  snap.headErrorV.clear();
  const cache::CacheRecorder& r = d_->recorder;
  for (int l = 0; l < r.layers(); ++l) {
    const auto& k = r.headError(l, cache::CacheRecorder::Keys);
    const auto& v = r.headError(l, cache::CacheRecorder::Values);
    snap.headErrorK.append(QVector<float>(k.begin(), k.end()));
    snap.headErrorV.append(QVector<float>(v.begin(), v.end()));
  }
}

ui::TokenErrorViewPtr Engine::inspection() const {
  const int layer = inspect_;
  if (layer < 0 || layer >= d_->recorder.layers()) return nullptr;
  const cache::ErrorHistory& k = d_->recorder.history(layer, cache::CacheRecorder::Keys);
  const cache::ErrorHistory& v = d_->recorder.history(layer, cache::CacheRecorder::Values);
  auto view = std::make_shared<ui::TokenErrorView>();
  view->runId = d_->runId;
  view->layer = layer;
  view->tokens = std::max(k.tokens(), v.tokens());
  view->heads = static_cast<int>(std::max(k.heads(), v.heads()));
  view->channels = static_cast<int>(std::max(k.channels(), v.channels()));
  // Both sides on the coarser side's rows: the view holds the bounded summaries, never a value per token.
  view->tokensPerRow = std::max(k.tokensPerRow(), v.tokensPerRow());
  const auto size = static_cast<std::size_t>(view->rows() * view->heads * view->channels);
  for (auto [src, dst, means] :
       {std::tuple{&k, &view->keys, &view->tokenMeanK}, std::tuple{&v, &view->values, &view->tokenMeanV}}) {
    if (src->tokens() == 0) continue;
    *dst = src->valuesAt(view->tokensPerRow);
    dst->resize(size, std::nanf(""));
    *means = src->tokenMeans();
  }
  return view;
}

ui::TokenErrorViewPtr Engine::inspectionIfDue(QElapsedTimer& since) const {
  if (since.isValid() && since.elapsed() < kInspectionMs) return nullptr;
  since.restart();
  return inspection();
}

void Engine::publishInspection() {
  Q_EMIT inspectionUpdated(inspection());
}

void Engine::runBeams(const ui::RunRequest& r, const cache::CacheConfig& cfg, const std::vector<std::int64_t>& prompt,
                      cache::KvCache& kv) {
  auto snap = std::make_shared<ui::RunSnapshot>();
  snap->runId = d_->runId;
  snap->spec = QString::fromStdString(cache::toSpec(cfg)) + QString(" (%1 beams)").arg(r.beams);
  snap->request = r;
  snap->config = cfg;
  snap->promptTokens = static_cast<int>(prompt.size());
  generate::BeamOptions bo;
  bo.numBeams = r.beams;
  bo.prefillChunk = r.prefillChunk;
  bo.onPrefillChunk = [&](int layer) { d_->recorder.recordLayer(kv, layer); };  // as in a generation
  QElapsedTimer sinceEmit, sinceInspection;
  sinceEmit.start();
  std::vector<cache::TensorMemory> stepMemory;  // the whole cache (every beam) after each step
  const auto result = generate::beamSearch(
      d_->session->model(), kv, prompt, r.maxNew, bo, d_->session->stopIds(),
      [&](const generate::BeamStepEvent& ev) {
        ui::BeamStepView v;
        v.step = ev.step;
        for (auto p : ev.parents) v.parents << p;
        for (auto t : ev.tokens) {
          v.ids << t;
          v.tokens << QString::fromStdString(d_->session->tokenizer().tokenText(static_cast<std::int32_t>(t)));
        }
        for (auto sc : ev.scores) v.scores << sc;
        if (ev.snapshot && !ev.snapshot->stats.empty())
          for (auto row : ev.snapshot->stats[0].storeRows) v.storeRows << row;
        snap->beamSteps.append(v);
        if (ev.snapshot) snap->cache = *ev.snapshot, stepMemory.push_back(ev.snapshot->total());
        d_->recorder.record(kv);
        if (sinceEmit.elapsed() >= kEmitMs) {
          snap->tokenErrors = inspectionIfDue(sinceInspection);
          fillHeadErrors(*snap);
          Q_EMIT runUpdated(std::make_shared<const ui::RunSnapshot>(*snap));
          sinceEmit.restart();
        }
        return true;
      },
      &cancel_);
  for (std::size_t b = 0; b < result.sequences.size(); ++b) {
    const std::vector<std::int32_t> ids(result.sequences[b].begin(), result.sequences[b].end());
    snap->beamTexts << QString::fromStdString(d_->session->tokenizer().decode(ids, true));
    snap->beamScores << result.scores[b];
  }
  if (!result.sequences.empty())
    for (auto id : result.sequences[0]) {
      ui::TokenView t;
      t.id = id;
      t.text = QString::fromStdString(d_->session->tokenizer().tokenText(static_cast<std::int32_t>(id)));
      // Step i's bytes: every beam's rows, as the cache holds them (the KV-per-step plot and the overlay).
      if (const auto i = static_cast<std::size_t>(snap->tokens.size()); i < stepMemory.size()) {
        t.kvStored = stepMemory[i].stored();
        t.kvUnquantized = stepMemory[i].unquantized;
        for (const std::int64_t b : stepMemory[i].tiers) t.kvTiers << b;
      }
      snap->tokens.append(t);
    }
  // The first step runs the prompt (once per beam, as transformers does); the steps after it decode.
  const double decodeSeconds = result.seconds - result.prefillSeconds;
  snap->prefillTokS = result.prefillSeconds > 0 ? snap->promptTokens / result.prefillSeconds : 0.0;
  snap->decodeTokS =
      decodeSeconds > 0 && snap->beamSteps.size() > 1 ? (snap->beamSteps.size() - 1) / decodeSeconds : 0.0;
  snap->finished = true;
  snap->stopReason = QString::fromUtf8(generate::stopReasonName(result.stopReason));
  snap->cancelled = result.stopReason == generate::StopReason::Cancelled;
  snap->cache = kv.snapshot();
  snap->tokenErrors = inspection();
  snap->deviceMemory = deviceMemory();
  fillHeadErrors(*snap);
  Q_EMIT runUpdated(std::make_shared<const ui::RunSnapshot>(*snap));
}

void registerMetaTypes() {
  qRegisterMetaType<kvscope::ui::LoadRequest>();
  qRegisterMetaType<kvscope::ui::ModelInfo>();
  qRegisterMetaType<kvscope::ui::RunRequest>();
  qRegisterMetaType<kvscope::ui::RunSnapshotPtr>();
  qRegisterMetaType<kvscope::ui::TokenErrorViewPtr>();
  qRegisterMetaType<kvscope::ui::EvalRequest>();
  qRegisterMetaType<kvscope::ui::EvalResultView>();
  qRegisterMetaType<kvscope::ui::ProbeRequest>();
  qRegisterMetaType<kvscope::ui::ProbeResultView>();
  qRegisterMetaType<kvscope::ui::TuneRequest>();
  qRegisterMetaType<kvscope::ui::TuneResultView>();
  qRegisterMetaType<kvscope::ui::DoctorRequest>();
  qRegisterMetaType<kvscope::ui::DoctorResultView>();
}

Engine::Engine() : d_(std::make_unique<Impl>()) {
  runtime::installOutOfMemoryType();
}
Engine::~Engine() = default;

QString defaultModelPath() {
  return QString::fromStdString(runtime::defaultModelPath());
}

QStringList availableDevices() {
  QStringList out;
  for (const auto& d : device::availableDevices()) out << QString::fromStdString(d);
  return out;
}

ui::DeviceMemoryView Engine::deviceMemory() const {
  ui::DeviceMemoryView v;
  if (!d_->session || d_->session->model().context().device().is_cpu()) return v;
  const device::DeviceMemory m = d_->session->model().context().memory();
  v.used = m.used;
  v.total = m.total;
  return v;
}

void Engine::load(const ui::LoadRequest& r) {
  beginRun(r.serial);
  const QString path = QString::fromStdString(r.options.path);
  try {
    // The CLI's session: the same lookup, options, readers and messages; a device that is not here is one line.
    runtime::Session m = runtime::Session::open(r.options, [this](std::int64_t done, std::int64_t total) {
      Q_EMIT loadProgress(static_cast<int>(done), static_cast<int>(total));
      return !cancel_.requested();  // false: the loader throws LoadCancelled
    });
    // Only a complete load replaces the previous model: a failure keeps what was there.
    d_->session.emplace(std::move(m));
    d_->reference.reset();  // another model: another reference continuation
    const auto& c = d_->session->model().config();
    ui::ModelInfo info;
    info.path = QString::fromStdString(d_->session->path());
    info.arch = QString::fromStdString(c.arch);
    info.name = QString::fromStdString(c.name);
    info.dtype = QString::fromStdString(r.options.dtype);
    info.device = QString::fromStdString(r.options.device);
    info.activations = QString::fromStdString(r.options.activations);
    const std::string kernels = d_->session->kernelsLine();
    info.arithmetic = QString::fromStdString(d_->session->arithmetic() + (kernels.empty() ? "" : "; " + kernels));
    info.weights = QString::fromStdString(r.options.weights);
    info.deviceLabel = QString::fromStdString(device::describeDevice(r.options.device));
    info.memory = deviceMemory();
    info.layers = c.layers;
    info.hidden = c.hidden;
    info.heads = c.heads;
    info.kvHeads = c.kvHeads;
    info.headDim = c.headDim;
    info.vocab = c.vocab;
    info.contextLength = c.contextLength;
    for (const auto& w : c.weightTypes) info.weightTypes << QString::fromStdString(w);
    info.layerKinds = QString::fromStdString(model::describeAttention(c) + "; " + model::describeFfn(c));
    for (const model::LayerSpec& s : c.layerSpecs) info.windows.push_back(s.window);
    Q_EMIT modelLoaded(info);
  } catch (...) {
    Q_EMIT failed(r.serial, describeCurrent(QString("loading `%1`").arg(path), d_->session.has_value()));
  }
}

void Engine::beginRun(quint64 serial) {
  // Order matters against requestStop() on the GUI thread (both sequentially consistent): publish the serial, clear
  // the flag, then look for a stop that came before the engine reached this run.
  runningSerial_ = serial;
  cancel_.reset();
  if (serial != 0 && stopSerial_.load() >= serial) cancel_.request();  // 0: a request no stop can name
}

std::vector<std::vector<std::int64_t>> Engine::textWindows(const QString& path, int ctx, int windows) const {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly))
    throw Error(ErrorCode::BadFile,
                "cannot read text file `" + path.toStdString() + "`: " + f.errorString().toStdString());
  const QByteArray text = f.readAll();
  return generate::textWindows(d_->session->encodeText(text.toStdString(), path.toStdString()), ctx, windows);
}

void Engine::tune(const ui::TuneRequest& r) {
  beginRun(r.serial);
  ui::TuneResultView out;  // outside the try: a stopped scan keeps its points
  try {
    if (!d_->session) throw Error(ErrorCode::BadInput, "no model is loaded");
    // The scan measures in float32 activations, and the model computes as it did once the scan ends.
    const generate::ScanArithmetic arithmetic(d_->session->model());
    out.floatScanOfQ8 = arithmetic.switched();
    out.textPath = r.textPath;
    out.modelPath = r.modelPath;
    out.complete = false;
    cache::Scan& scan = out.scan;
    scan.plan = cache::planScan(r.candidates, d_->session->model().config().layers);
    out.dtype = QString::fromStdString(d_->session->options().dtype);
    const model::ModelConfig& mc = d_->session->model().config();
    for (const model::LayerSpec& s : mc.layerSpecs) out.layerWindows.push_back(s.window);
    for (int l = 0; l < mc.layers; ++l) out.layerValues.push_back(mc.kvValuesOf(l));
    const auto windows = textWindows(r.textPath, r.ctx, r.windows);
    generate::EvalOptions o;
    o.prompt = std::min<int>(r.prompt, static_cast<int>(windows[0].size()) - 1);
    o.step = r.step;
    out.windows = static_cast<int>(windows.size());
    out.ctx = static_cast<int>(windows[0].size());
    out.prompt = o.prompt;
    out.step = o.step;
    std::vector<generate::LayerRun> runs;
    for (const auto& it : scan.plan.items) runs.push_back({it.layer, scan.plan.config(it)});
    const int total = static_cast<int>(windows.size() * (runs.size() + 1));
    // A config's figures are whole after the last window that has tokens to score (evaluate skips a short one).
    std::size_t lastWindow = 0;
    for (std::size_t w = 0; w < windows.size(); ++w)  // (evaluate scores after at least one token)
      if (windows[w].size() > static_cast<std::size_t>(std::max(o.prompt, 1))) lastWindow = w;
    QElapsedTimer clock, sinceEmit;  // sinceEmit starts invalid: the first point is sent at once
    clock.start();
    // The time estimate's pace: a run resumes at its layer, so it costs the layers from there up (the reference:
    // every layer); the work done so far in those units against the work left.
    const int layers = d_->session->model().config().layers;
    double work = 0, worked = 0;
    for (const auto& run : runs) work += layers - run.layer;
    work = static_cast<double>(windows.size()) * (work + layers);
    generate::evaluateLayerRuns(
        d_->session->model(), windows, runs, o,
        [&](std::size_t wi, std::size_t, std::size_t ci, std::size_t nc) {
          Q_EMIT evalProgress(static_cast<int>(wi * nc + ci), total);
          return !cancel_.requested();
        },
        [&](std::size_t wi, std::size_t ci, const generate::EvalFigures& f) {
          worked += ci == 0 ? layers : layers - runs[ci - 1].layer;
          if (wi != lastWindow) return;
          if (ci == 0) {
            scan.referenceBytes = f.memory.stored();
            out.scored = f.scored;
            return;
          }
          scan.points.push_back({scan.plan.items[ci - 1], f.meanKl(), f.memory.stored()});
          if ((sinceEmit.isValid() && sinceEmit.elapsed() < kInspectionMs) || ci == runs.size()) return;
          out.secondsLeft = clock.elapsed() / 1000.0 / worked * (work - worked);
          Q_EMIT tuneProgress(out);
          sinceEmit.start();
        });
    out.complete = true;
    out.secondsLeft = 0;
    Q_EMIT evalProgress(total, total);
    Q_EMIT tuneFinished(out);
  } catch (const generate::EvalCancelled&) {
    if (out.scan.points.empty()) {
      Q_EMIT failed(r.serial, describeCurrent("the tuner's scan", false));
      return;
    }
    out.stopped = true;  // Stop keeps what was scanned: the fronts of the candidates scanned whole
    out.secondsLeft = -1;
    Q_EMIT tuneFinished(out);
  } catch (...) {
    Q_EMIT failed(r.serial, describeCurrent("the tuner's scan", false));
  }
}

void Engine::evaluate(const ui::EvalRequest& r) {
  beginRun(r.serial);
  try {
    if (!d_->session) throw Error(ErrorCode::BadInput, "no model is loaded");
    const std::vector<cache::CacheConfig>& cfgs = r.configs;
    for (const auto& c : cfgs) cache::validate(c);
    const auto windows = textWindows(r.textPath, r.ctx, r.windows);
    generate::EvalOptions o;
    o.prompt = std::min<int>(r.prompt, static_cast<int>(windows[0].size()) - 1);
    o.step = r.step;
    const int total = static_cast<int>(windows.size() * (cfgs.size() + 1));
    const auto figs = generate::evaluate(d_->session->model(), windows, cfgs, o,
                                         [&](std::size_t wi, std::size_t, std::size_t ci, std::size_t nc) {
                                           Q_EMIT evalProgress(static_cast<int>(wi * nc + ci), total);
                                           return !cancel_.requested();
                                         });
    ui::EvalResultView out;
    out.textPath = r.textPath;
    out.windows = static_cast<int>(windows.size());
    out.ctx = static_cast<int>(windows[0].size());
    for (std::size_t i = 0; i < figs.size(); ++i) {
      const auto& g = figs[i];
      ui::EvalRowView row;
      row.spec = QString::fromStdString(g.spec);
      row.reference = i == 0;
      row.ratio = g.ratio();
      row.ppl = g.ppl();
      row.meanKl = g.meanKl();
      row.maxKl = g.klMax;
      row.top1 = g.top1();
      row.scored = g.scored;
      row.nonFinitePositions = g.nonFinitePositions;
      if (i > 0) {
        const generate::KldReport k = generate::kldReport(g, figs[0]);
        row.klStderr = k.meanKl.error;
        row.medianKl = k.medianKl;
        row.kl99 = k.kl99;
        row.kl999 = k.kl999;
        row.rmsDeltaP = k.rmsDeltaP.value;
        row.rmsDeltaPStderr = k.rmsDeltaP.error;
        row.pplRatio = k.pplRatio.value;
        row.pplRatioStderr = k.pplRatio.error;
        for (double x : generate::klByPosition(g)) row.klByPosition << x;
      }
      out.rows << row;
    }
    Q_EMIT evalProgress(total, total);
    Q_EMIT evalFinished(out);
  } catch (...) {
    Q_EMIT failed(r.serial, describeCurrent("the evaluation", false));
  }
}

void Engine::probe(const ui::ProbeRequest& r) {
  beginRun(r.serial);
  try {
    if (!d_->session) throw Error(ErrorCode::BadInput, "no model is loaded");
    const runtime::Session& s = *d_->session;
    for (const auto& c : r.configs) cache::validate(c);
    probe::SuiteOptions so;
    so.tasks = probe::parseTasks(r.tasks.toStdString());
    so.lengths = probe::parseLengths(r.lengths.toStdString());
    so.depths = probe::parseDepths(r.depths.toStdString());
    so.samples = std::max(r.samples, 1);
    so.seed = r.seed;
    if (so.lengths.empty() || so.depths.empty()) throw Error(ErrorCode::BadInput, "give at least one length and depth");
    const std::int64_t ctx = s.model().config().contextLength;
    for (std::int64_t l : so.lengths)
      if (ctx > 0 && l > ctx)
        throw Error(ErrorCode::BadInput,
                    std::to_string(l) + " tokens is past the model's trained context of " + std::to_string(ctx));
    auto encode = [&](const std::string& text) { return s.encodePrompt(text, false); };
    const std::vector<probe::Probe> probes =
        probe::makeSuite(so, [&](const std::string& t) { return static_cast<std::int64_t>(encode(t).size()); });
    ui::ProbeResultView out;
    out.specs << QStringLiteral("dynamic (reference)");
    for (const auto& c : r.configs) out.specs << QString::fromStdString(cache::toSpec(c));
    generate::AnswerRules rules;
    rules.stopIds = s.stopIds();
    rules.decode = [&](const std::vector<std::int64_t>& ids) {
      return s.tokenizer().decode(std::vector<std::int32_t>(ids.begin(), ids.end()), true);
    };
    const int total = static_cast<int>(probes.size());
    Q_EMIT probeProgress(0, total);
    try {
      generate::answerProbes(
          s.model(), probes, r.configs, encode, rules,
          [&](std::size_t k, const generate::ProbeAnswers& as) {
            const probe::Probe& p = probes[k];
            ui::ProbeView v;
            v.id = QString::fromStdString(p.id());
            v.task = QString::fromUtf8(probe::info(p.task).name.data(),
                                       static_cast<qsizetype>(probe::info(p.task).name.size()));
            v.length = p.length;
            v.depth = p.depth;
            v.prompt = QString::fromStdString(p.prompt);
            v.maxNew = probe::info(p.task).answerTokens;
            v.promptTokens = as.front().promptTokens;
            for (const auto& a : p.answers) v.answers << QString::fromStdString(a);
            for (const generate::ProbeAnswer& a : as) {
              ui::ProbeAnswerView av;
              av.text = QString::fromStdString(a.text);
              av.score = probe::score(p, a.text);
              av.sameAnswer = a.sameAnswer();
              av.quantizedReads = a.quantizedReads;
              av.tokens = static_cast<qint64>(a.tokens.size());
              if (!a.kl.empty()) {
                double sum = 0, mx = 0;
                for (double x : a.kl) sum += x, mx = std::isnan(x) ? x : std::max(mx, x);
                av.meanKl = sum / static_cast<double>(a.kl.size());
                av.maxKl = mx;
              }
              v.results << av;
            }
            out.probes << v;
            Q_EMIT probeProgress(static_cast<int>(k) + 1, total);
            return true;
          },
          &cancel_);
    } catch (const kvscope::Cancelled&) {
      out.stopped = true;  // Stop keeps the probes answered
    }
    Q_EMIT probeFinished(out);
  } catch (...) {
    Q_EMIT failed(r.serial, describeCurrent("the probes", false));
  }
}

void Engine::doctor(const ui::DoctorRequest& r) {
  beginRun(r.serial);
  try {
    if (!d_->session) throw Error(ErrorCode::BadInput, "no model is loaded");
    const auto windows = textWindows(r.textPath, r.ctx, r.windows);
    ui::DoctorResultView out;
    out.textPath = r.textPath;
    generate::DoctorOptions o;
    o.text = r.textPath.toStdString();
    out.report = generate::diagnose(d_->session->model(), windows, o);
    Q_EMIT doctorFinished(out);
  } catch (...) {
    Q_EMIT failed(r.serial, describeCurrent("the diagnosis", false));
  }
}

void Engine::run(const ui::RunRequest& r) {
  beginRun(r.serial);
  try {
    if (!d_->session) throw Error(ErrorCode::BadInput, "no model is loaded");
    const cache::CacheConfig& cfg = r.config;
    cache::validate(cfg);
    const std::vector<std::int64_t> prompt = d_->session->encodePrompt(r.prompt.toStdString(), r.chat);
    cache::StatsOptions stats;
    stats.tokenBin = 1;  // the token x channel map needs every token's own error
    auto kv = d_->session->model().makeCache(cfg, stats);
    d_->recorder.reset();
    d_->runId = r.runId > 0 ? r.runId : d_->runId + 1;  // the run's number: the window's when it gives one
    if (r.beams > 0) {
      runBeams(r, cfg, prompt, *kv);
      return;
    }
    generate::GenerateOptions o;
    o.maxNew = r.maxNew;
    o.sampling.greedy = !r.sample;
    o.sampling.temperature = r.temperature;
    o.sampling.topK = r.topK;
    o.sampling.topP = r.topP;
    o.sampling.seed = r.seed;
    o.shadow = r.shadow;
    o.prefillChunk = r.prefillChunk;
    o.snapshots = false;  // the cache snapshot is taken only when a GUI update is due (below)
    o.stopIds = d_->session->stopIds();
    // Every prompt chunk's errors reach the token map, not only the last chunk's.
    o.onPrefillChunk = [&](int layer) { d_->recorder.recordLayer(*kv, layer); };

    auto snap = std::make_shared<ui::RunSnapshot>();
    snap->runId = d_->runId;
    snap->spec = QString::fromStdString(cache::toSpec(cfg));
    snap->request = r;
    snap->config = cfg;
    snap->shadow = r.shadow;
    snap->promptTokens = static_cast<int>(prompt.size());
    snap->dtypeBits = runtime::dtypeBits(d_->session->options().dtype);
    QElapsedTimer sinceEmit, sinceInspection;
    sinceEmit.start();
    double decodeSeconds = 0;
    int steps = 0;
    const auto result = generate::generate(
        d_->session->model(), *kv, prompt, o,
        [&](const generate::StepEvent& ev) {
          ui::TokenView t;
          t.id = ev.token;
          t.text = QString::fromStdString(d_->session->tokenizer().tokenText(static_cast<std::int32_t>(ev.token)));
          t.logprob = ev.logprob;
          t.kl = ev.kl;
          t.top1Agrees = ev.top1Agrees;
          for (const auto& [id, lp] : ev.top)
            t.top.append(
                {QString::fromStdString(d_->session->tokenizer().tokenText(static_cast<std::int32_t>(id))), lp});
          for (const auto& [id, lp] : ev.refTop)
            t.refTop.append(
                {QString::fromStdString(d_->session->tokenizer().tokenText(static_cast<std::int32_t>(id))), lp});
          t.kvStored = ev.memory.stored();
          t.kvUnquantized = ev.memory.unquantized;
          for (const std::int64_t b : ev.memory.tiers) t.kvTiers << b;
          snap->tokens.append(t);
          d_->recorder.record(*kv);
          if (ev.step == 0)
            snap->prefillTokS = snap->promptTokens / std::max(ev.seconds, 1e-9);
          else
            decodeSeconds += ev.seconds, ++steps;
          snap->decodeTokS = steps ? steps / decodeSeconds : 0.0;
          // Each snapshot is a copy the GUI can keep.
          if (sinceEmit.elapsed() >= kEmitMs) {
            snap->cache = kv->snapshot();
            snap->tokenErrors = inspectionIfDue(sinceInspection);
            snap->deviceMemory = deviceMemory();
            fillHeadErrors(*snap);
            Q_EMIT runUpdated(std::make_shared<const ui::RunSnapshot>(*snap));
            sinceEmit.restart();
          }
          return true;
        },
        &cancel_);
    snap->finished = true;
    snap->stopReason = QString::fromUtf8(generate::stopReasonName(result.stopReason));
    snap->cancelled = result.stopReason == generate::StopReason::Cancelled;
    snap->meanKl = result.meanKl;
    snap->maxKl = result.maxKl;
    snap->top1Agreement = result.top1Agreement;
    snap->firstDivergence = result.firstDivergence;
    snap->cache = kv->snapshot();
    snap->tokenErrors = inspection();
    snap->deviceMemory = deviceMemory();
    fillHeadErrors(*snap);
    kv.reset();  // the run's cache goes before the scoring cache comes (what the views need is in the snapshot)
    try {
      scoreOnReference(*snap, r, prompt);
    } catch (...) {  // the run itself finished: it is kept, and its figure says why it has none
      snap->refTokens = 0;
      snap->refPerplexityNote = QString("not scored: %1").arg(describeCurrent("the reference scoring", true));
    }
    Q_EMIT runUpdated(std::make_shared<const ui::RunSnapshot>(*snap));
  } catch (...) {
    Q_EMIT failed(r.serial, describeCurrent("the run", d_->session.has_value()));
  }
}

}  // namespace kvscope::app
