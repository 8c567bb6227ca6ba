// The values the GUI receives from the engine thread: plain, copied, immutable. No torch here (ui/ never sees it).
#pragma once

#include <QMetaType>
#include <QPair>
#include <QString>
#include <QStringList>
#include <QVector>
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "cache/config.h"
#include "cache/stats.h"
#include "cache/tune.h"
#include "generate/doctor.h"
#include "runtime/load_options.h"

namespace kvscope::ui {

/// A CUDA device's memory as LibTorch's allocator holds it (bytes); total 0 on the CPU (the status line then shows the
/// process's resident memory).
struct DeviceMemoryView {
  qint64 used = 0, total = 0;
};

/// Load a model (runtime::Session::open): the run panel's device, dtype, activations and weights, the path from the
/// file dialog, the recent list or the command line.
struct LoadRequest {
  runtime::LoadOptions options;
  quint64 serial = 0;  ///< shares the runs' numbering: Stop cancels the load (0: not cancellable)
};

struct ModelInfo {
  QString path, arch, name, dtype, device;
  QString activations;      ///< as asked for ("auto", "f32", "q8")
  QString arithmetic;       ///< what runs: "q8 activations (llama.cpp's arithmetic)", ...
  QString weights;          ///< the --weights choice: "stored", or the format float matrices were quantized to
  QString deviceLabel;      ///< e.g. "cuda:0 — NVIDIA H200, 139.8 GiB" (the device name alone on the CPU)
  DeviceMemoryView memory;  ///< after the load
  int layers = 0, hidden = 0, heads = 0, kvHeads = 0, headDim = 0, vocab = 0;
  qint64 contextLength = 0;
  QStringList weightTypes;
  /// The layers' kinds: "full attention; dense SwiGLU FFN of 1536", "sliding window 4096 on layers 0-31; MoE: ..."
  QString layerKinds;
  std::vector<qint64> windows;  ///< each layer's sliding window (0: full attention)
};

struct RunRequest {
  cache::CacheConfig config;  ///< validated by the form; the engine validates it again
  QString prompt;
  bool chat = true;
  int maxNew = 64;
  bool sample = false;
  double temperature = 0.8, topP = 0.95;
  int topK = 0;
  quint64 seed = 0;
  bool shadow = true;
  int beams = 0;          ///< > 0: beam search with this many beams (no shadow)
  int prefillChunk = -1;  ///< prompt tokens per forward pass; 0: one shot; -1: the cache's default (generate.h)
  quint64 serial = 0;     ///< increases with every request; a stop names the run it is for
  int runId = 0;          ///< the run's number (the window's: it goes on after reopened runs); 0: the engine's next
};

/// Evaluate cache configs on a text file (generate::evaluate): perplexity, KL and top-1 against the unquantized cache.
struct EvalRequest {
  QString textPath;
  std::vector<cache::CacheConfig> configs;
  int ctx = 256, windows = 2, prompt = 64, step = 16;
  quint64 serial = 0;  ///< shares the runs' numbering: Stop names it
};

struct EvalRowView {
  QString spec;
  bool reference = false;
  double ratio = 0, ppl = 0, meanKl = 0, maxKl = 0, top1 = 0;
  qint64 scored = 0, nonFinitePositions = 0;
  /// llama-perplexity's KL figures (generate::KldReport; configs only), with standard errors where it gives them.
  double klStderr = 0, medianKl = 0, kl99 = 0, kl999 = 0, rmsDeltaP = 0, rmsDeltaPStderr = 0, pplRatio = 0,
         pplRatioStderr = 0;
  QVector<double> klByPosition;  ///< mean KL at each context length (NaN where none was scored)
};

struct EvalResultView {
  QString textPath;
  int windows = 0, ctx = 0;
  QVector<EvalRowView> rows;  ///< the reference first
};

/// Long-context probes of configs (probe::makeSuite, generate::answerProbe): the Long context page's grid.
struct ProbeRequest {
  std::vector<cache::CacheConfig> configs;
  QString tasks, lengths, depths;  ///< as typed (probe::parseTasks, parseLengths, parseDepths)
  int samples = 1;
  quint64 seed = 0;
  quint64 serial = 0;  ///< shares the runs' numbering: Stop names it
};

/// One probe's answer through one cache.
struct ProbeAnswerView {
  QString text;
  double score = 0;        ///< RULER's string_match_all
  bool sameAnswer = true;  ///< configs: the reference's tokens
  double meanKl = std::numeric_limits<double>::quiet_NaN(), maxKl = std::numeric_limits<double>::quiet_NaN();
  qint64 quantizedReads = 0, tokens = 0;
};

struct ProbeView {
  QString id, task;
  qint64 length = 0;
  int depth = -1;  ///< -1: the task has none
  QString prompt;  ///< the text, to open the probe as a run
  int maxNew = 0;
  qint64 promptTokens = 0;
  QStringList answers;
  QVector<ProbeAnswerView> results;  ///< the reference's first, then each config's (ProbeResultView::specs)
};

struct ProbeResultView {
  QStringList specs;  ///< "dynamic (reference)", then each config's SPEC
  QVector<ProbeView> probes;
  bool stopped = false;  ///< Stop ended it: the probes answered so far
};

/// Scan each layer side with candidate configs on a text (the tuner: cache::planScan, one evaluation per item).
struct TuneRequest {
  QString textPath;
  QString modelPath;  ///< the loaded model's (the window fills it): saved with the scan, for `tune --scan-in`
  std::vector<cache::CacheConfig> candidates;
  int ctx = 128, windows = 1, prompt = 64, step = 16;
  quint64 serial = 0;  ///< shares the runs' numbering: Stop names it
};

/// Diagnose the loaded model on a text's windows (generate::diagnose: `kvscope-cli doctor`).
struct DoctorRequest {
  QString textPath;
  int ctx = 512, windows = 1;
  quint64 serial = 0;  ///< shares the runs' numbering: Stop names it
};
struct DoctorResultView {
  QString textPath;
  generate::DoctorReport report;
};

struct TuneResultView {
  QString textPath, modelPath;
  int windows = 0, ctx = 0, prompt = 0, step = 0;
  QString dtype;      ///< the model's dtype (fp32, bf16, fp16): the reference cache's bits per value
  qint64 scored = 0;  ///< tokens scored per run
  cache::Scan scan;   ///< plain numbers: the fronts and picks are computed from it on the GUI thread
  /// A scan still going (its points so far, at most twice a second) or stopped: the fronts are those of the
  /// candidates scanned whole (cache::completedCandidates).
  bool complete = true;
  bool stopped = false;       ///< Stop ended it: what was scanned is kept
  double secondsLeft = -1.0;  ///< while it goes: the time left at the pace so far (-1: not known yet)
  /// The model computes in 8-bit activations and the scan ran in float32 (generate::ScanArithmetic says why).
  bool floatScanOfQ8 = false;
  std::vector<qint64> layerWindows;  ///< the model's sliding window per layer (0: full): the pricing at a context
  std::vector<double> layerValues;   ///< each layer's K/V values a token (0: it reads another's KV): the same
};

struct TokenView {
  qint64 id = 0;
  QString text;
  float logprob = 0.0f;
  float kl = 0.0f;  ///< against the shadow reference (when the run has one)
  bool top1Agrees = true;
  QVector<QPair<QString, float>> top;     ///< (text, log-prob) under the quantized cache
  QVector<QPair<QString, float>> refTop;  ///< the same under the shadow reference (when the run has one)
  qint64 kvStored = 0;                    ///< cache bytes stored after this step (payload + scales/zeros + residual)
  qint64 kvUnquantized = 0;               ///< the same tokens at the model dtype
  QVector<qint64> kvTiers;                ///< tiers by age (`tiers=`): the bytes each tier stores, newest first
};

/// Absolute quantization error |x̂ - x| per (token, head, channel) of one layer's keys and values over the run so far
/// (cache::ErrorHistory): a bounded summary, rows of tokensPerRow tokens holding their largest error (one token per
/// row until the context outgrows the budget); NaN where nothing quantized the token (a residual window).
struct TokenErrorView {
  int runId = 0;
  int layer = 0;
  qint64 tokens = 0;
  qint64 tokensPerRow = 1;  ///< a power of two
  int heads = 0, channels = 0;
  std::vector<float> keys, values;  ///< [rows][heads][channels] each (empty side: not quantized yet)
  /// [tokens] each: the token's own mean |error| over heads and channels (NaN: not quantized); empty side as above.
  std::vector<float> tokenMeanK, tokenMeanV;
  qint64 rows() const { return tokensPerRow > 0 ? (tokens + tokensPerRow - 1) / tokensPerRow : 0; }
  float cell(const std::vector<float>& side, qint64 row, int head, int channel) const {
    return side[static_cast<std::size_t>((row * heads + head) * channels + channel)];
  }
  /// The value of the row holding `token`.
  float at(const std::vector<float>& side, qint64 token, int head, int channel) const {
    return cell(side, token / tokensPerRow, head, channel);
  }
  /// Mean |error| of a token's keys and values over heads and channels; NaN when nothing quantized it. A view
  /// without per-token means (a session saved before them) has one token per row: its row's finite values.
  double tokenMean(qint64 token) const {
    double s = 0;
    int n = 0;
    for (auto [means, side] : {std::pair{&tokenMeanK, &keys}, std::pair{&tokenMeanV, &values}}) {
      if (token < 0 || token >= tokens) continue;
      if (!means->empty()) {
        if (token < qint64(means->size()))
          if (const float e = (*means)[static_cast<std::size_t>(token)]; std::isfinite(e)) s += e, ++n;
        continue;
      }
      if (side->empty() || tokensPerRow != 1) continue;
      double rs = 0;
      int rn = 0;
      for (int h = 0; h < heads; ++h)
        for (int c = 0; c < channels; ++c)
          if (const float e = cell(*side, token, h, c); std::isfinite(e)) rs += e, ++rn;
      if (rn) s += rs / rn, ++n;
    }
    return n ? s / n : std::nan("");
  }
};
using TokenErrorViewPtr = std::shared_ptr<const TokenErrorView>;

/// One beam-search step: which old beam each beam continues (the reorder applied to the cache), its new token and
/// running score, and which row of the quantized store each beam reads (layer 0).
struct BeamStepView {
  int step = 0;
  QVector<qint64> parents;
  QVector<qint64> ids;  ///< the token each beam appended
  QStringList tokens;   ///< their text
  QVector<float> scores;
  QVector<qint64> storeRows;
};

struct RunSnapshot {
  int runId = 0;
  QString spec;  ///< the run's label: its SPEC (cache::toSpec), " (N beams)" for beam search
  /// The run's config, calibrated scales included; absent only for a run reopened from a session that did not record
  /// it and whose label is no SPEC.
  std::optional<cache::CacheConfig> config;
  bool shadow = false;
  int promptTokens = 0;
  /// Bits per value of the model's dtype (the unquantized cache's: 32 for fp32, 16 for bf16 / fp16); 0: unknown (a
  /// run reopened from a session that did not record it).
  int dtypeBits = 0;
  QVector<TokenView> tokens;      ///< all generated so far
  cache::CacheSnapshot cache;     ///< per-layer memory and statistics after the latest step
  TokenErrorViewPtr tokenErrors;  ///< the inspected layer's token x channel error (see Selection)
  /// Per layer, per KV head: ||x̂ - x|| / ||x|| of the latest update that quantized anything (keys, values); empty for
  /// a layer nothing quantized yet. Kept in sessions (the layer x head map of a reopened run).
  QVector<QVector<float>> headErrorK, headErrorV;
  double prefillTokS = 0.0, decodeTokS = 0.0;
  double meanKl = 0.0, maxKl = 0.0, top1Agreement = 1.0;
  /// Perplexity on the reference continuation: the unquantized cache's greedy answer to the same prompt, teacher-
  /// forced through this run's config (the same tokens for every run on the prompt; NaN where the cache's logits
  /// were). refTokens 0: not scored (refPerplexityNote says why when known).
  double refPerplexity = std::numeric_limits<double>::quiet_NaN();
  int refTokens = 0;
  QString refPerplexityNote;
  int firstDivergence = -1;
  bool finished = false;
  QString stopReason;             ///< generate::stopReasonName(): "max_new", "stop_token", "callback", "cancelled"
  bool cancelled = false;         ///< stopped on request (its stopReason says so in words)
  DeviceMemoryView deviceMemory;  ///< the model's device at this snapshot (CUDA; zero on the CPU)
  // Beam search runs:
  QVector<BeamStepView> beamSteps;
  QStringList beamTexts;  ///< finished hypotheses, best first
  QVector<float> beamScores;
  /// What the run was asked: its prompt and generation options (its config equals `config` above; sessions write
  /// it once). Absent for a run reopened from a session that did not record it.
  std::optional<RunRequest> request;
};
using RunSnapshotPtr = std::shared_ptr<const RunSnapshot>;

/// The tokens beam `beam` holds after the run's latest step, traced back through each step's parents (the cache
/// reorder): what that beam's cache rows hold. Each token's log-prob is its beam's score minus its parent's (NaN where
/// transformers marks a finished beam with -1e9); its candidates (`top`) are the continuations of the same parent that
/// the step kept, best first. Empty for a run without beam steps or a beam it does not have.
inline QVector<TokenView> beamSequence(const RunSnapshot& run, int beam) {
  QVector<TokenView> out;
  if (run.beamSteps.isEmpty() || beam < 0 || beam >= run.beamSteps.back().parents.size()) return out;
  constexpr float kFinished = -1e8f;  // transformers' -1e9 for a beam that is no longer continued
  qint64 b = beam;
  for (auto s = run.beamSteps.size() - 1; s >= 0 && b >= 0; --s) {
    const BeamStepView& st = run.beamSteps[s];
    if (b >= st.parents.size()) break;
    const qint64 parent = st.parents[b];
    auto logprob = [&](qint64 j) {
      const float before = s > 0 ? run.beamSteps[s - 1].scores.value(st.parents.value(j), 0.0f) : 0.0f;
      const float after = st.scores.value(j, kFinished);
      return after <= kFinished || before <= kFinished ? std::numeric_limits<float>::quiet_NaN() : after - before;
    };
    TokenView t;
    t.id = st.ids.value(b);
    t.text = st.tokens.value(b);
    t.logprob = logprob(b);
    for (qint64 j = 0; j < st.parents.size(); ++j)
      if (st.parents[j] == parent) t.top.append({st.tokens.value(j), logprob(j)});
    auto rank = [](float lp) { return std::isnan(lp) ? -std::numeric_limits<float>::infinity() : lp; };
    std::stable_sort(t.top.begin(), t.top.end(),
                     [&](const auto& x, const auto& y) { return rank(x.second) > rank(y.second); });
    out.prepend(t);
    b = parent;
  }
  return out;
}

/// What a run's label (RunSnapshot::spec) says of its config: the label is the SPEC, then " [calibrated]" when the
/// scales were calibrated offline (cache::toSpec writes it; no SPEC holds such scales) and " (N beams)" for beam
/// search.
struct RunLabel {
  QString spec;             ///< the SPEC alone
  bool calibrated = false;  ///< offline-calibrated scales: `spec` lacks them, so it is not the run's config
};
inline RunLabel parseRunLabel(const QString& label) {
  RunLabel r;
  r.spec = label.section(" (", 0, 0);
  const QString tag = " [calibrated]";
  r.calibrated = r.spec.endsWith(tag);
  if (r.calibrated) r.spec.chop(tag.size());
  return r;
}

}  // namespace kvscope::ui

Q_DECLARE_METATYPE(kvscope::ui::LoadRequest)
Q_DECLARE_METATYPE(kvscope::ui::ModelInfo)
Q_DECLARE_METATYPE(kvscope::ui::RunRequest)
Q_DECLARE_METATYPE(kvscope::ui::RunSnapshotPtr)
Q_DECLARE_METATYPE(kvscope::ui::TokenErrorViewPtr)
Q_DECLARE_METATYPE(kvscope::ui::EvalRequest)
Q_DECLARE_METATYPE(kvscope::ui::EvalResultView)
Q_DECLARE_METATYPE(kvscope::ui::ProbeRequest)
Q_DECLARE_METATYPE(kvscope::ui::ProbeResultView)
Q_DECLARE_METATYPE(kvscope::ui::TuneRequest)
Q_DECLARE_METATYPE(kvscope::ui::TuneResultView)
Q_DECLARE_METATYPE(kvscope::ui::DoctorRequest)
Q_DECLARE_METATYPE(kvscope::ui::DoctorResultView)
