// Quality of cache configs on a text: perplexity, and KL / top-1 agreement against the unquantized cache, in windows
// of tokens (each through fresh caches: a prompt as the first update, then teacher-forced steps that read the
// quantized states). What `kvscope-cli eval` prints and the GUI's evaluation table shows.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cache/config.h"
#include "cache/stats.h"
#include "util/error.h"
#include "util/metrics.h"

namespace kvscope::model {
class LlamaModel;
}

namespace kvscope::generate {

/// The tokens cut into whole windows of `ctx` (a shorter remainder is dropped unless it is the only piece), at most
/// `maxWindows` of them (0: all).
std::vector<std::vector<std::int64_t>> textWindows(const std::vector<std::int64_t>& ids, int ctx, int maxWindows = 0);

struct EvalOptions {
  int prompt = 64;  ///< tokens of each window given as the prompt (the caches' first update)
  int step = 16;    ///< tokens per forward after the prompt (1: token by token)
};

struct EvalFigures {
  std::string spec;
  double nll = 0, klSum = 0, klMax = 0;
  std::int64_t scored = 0, agree = 0, nonFinitePositions = 0, overflow = 0, nonFinite = 0;
  /// Scored tokens whose forward read states the config held in quantized form (KvCache::quantizedLength before the
  /// forward): the tokens the figures say anything about the quantization for. 0 for the reference.
  std::int64_t quantizedReads = 0;
  cache::TensorMemory memory;  ///< at the end of the first window
  double seconds = 0;
  /// Per scored token, window after window: the negative log-likelihood of the text's token, and (configs only)
  /// KL(reference || config) in nats. KldReport is computed from them.
  std::vector<double> tokenNll, tokenKl;
  /// KL summed over the finite positions at each context length (index: tokens before the scored one in its
  /// window), and how many positions each sum holds: the KL against token position.
  std::vector<double> klAtPosition;
  std::vector<std::int64_t> tokensAtPosition;
  double ppl() const { return perplexity(nll, std::max<std::int64_t>(scored, 1)); }
  double ratio() const { return memory.compressionRatio(); }
  double meanKl() const { return klSum / static_cast<double>(std::max<std::int64_t>(scored, 1)); }
  double top1() const { return static_cast<double>(agree) / static_cast<double>(std::max<std::int64_t>(scored, 1)); }
};

/// What llama-perplexity --kl-divergence reports for a config against the reference, from the same per-token
/// values: mean KLD with its standard error, median, 99% and 99.9% KLD and the maximum (over the positions whose
/// figures are all finite), the same top token, the RMS of the change in the text token's probability (Δp), and
/// PPL(config) / PPL(reference); each estimate with llama-perplexity's standard error.
struct KldReport {
  std::int64_t tokens = 0;  ///< positions counted (finite KL and NLLs)
  Estimate meanKl, sameTop, rmsDeltaP, pplRatio;
  double medianKl = std::nan(""), kl99 = std::nan(""), kl999 = std::nan(""), maxKl = std::nan("");
};
KldReport kldReport(const EvalFigures& config, const EvalFigures& reference);

/// The mean KL at each context length (NaN where no position was scored), from klAtPosition.
std::vector<double> klByPosition(const EvalFigures& f);

/// Called before each (window, config) pair, the reference being config 0; returning false cancels (evaluate then
/// throws EvalCancelled).
using EvalProgress =
    std::function<bool(std::size_t window, std::size_t windows, std::size_t config, std::size_t configs)>;

/// What a cancelled evaluation throws: a kvscope::Cancelled (callers catch that, as for every cancel).
struct EvalCancelled : Cancelled {
  EvalCancelled() : Cancelled("evaluation cancelled") {}
};

/// Called after each (window, config) pair with that config's figures so far (whole after the last window): what a
/// caller shows while an evaluation goes (the tuner's partial fronts).
using EvalFiguresFn = std::function<void(std::size_t window, std::size_t config, const EvalFigures& figures)>;

/// Figures for the unquantized reference (first, spec "dynamic (reference)") and then each config.
/// Throws an Error (BadInput) for windows of fewer than 2 tokens or a step below 1.
std::vector<EvalFigures> evaluate(const model::LlamaModel& model, const std::vector<std::vector<std::int64_t>>& windows,
                                  const std::vector<cache::CacheConfig>& configs, const EvalOptions& o = {},
                                  const EvalProgress& progress = {}, const EvalFiguresFn& figures = {});

/// One run of the tuner's scan: `config` quantizes layer `layer` and leaves every other layer unquantized
/// (cache::ScanPlan::config).
struct LayerRun {
  int layer = 0;
  cache::CacheConfig config;
};

/// How evaluateLayerRuns computes a run's figures.
enum class ScanMethod {
  /// From the unquantized run: a run starts at its layer from the reference's residual stream there (the layers below
  /// are the reference's), and a forward whose stream after that layer equals the reference's bit for bit (a prompt
  /// that attends over its own unquantized states, as transformers' caches do) takes the reference's logits, its
  /// states reaching the later layers only when a forward first differs. The same figures as Full.
  Resume,
  /// Each run from the first layer, as evaluate() runs a config: the slow way, kept to check Resume against.
  Full,
};

/// What evaluate(model, windows, the runs' configs, ...) gives (the reference first, then each run, with the same
/// callbacks), computed by `method`. Throws ConfigError for a layer outside the model.
std::vector<EvalFigures> evaluateLayerRuns(const model::LlamaModel& model,
                                           const std::vector<std::vector<std::int64_t>>& windows,
                                           const std::vector<LayerRun>& runs, const EvalOptions& o = {},
                                           const EvalProgress& progress = {}, const EvalFiguresFn& figures = {},
                                           ScanMethod method = ScanMethod::Resume);

/// The arithmetic a tuner scan measures in: float32 activations, whatever the model computes in otherwise. A scan run
/// changes one layer side of the cache. On 8-bit activations (llama.cpp's arithmetic), any change to the stream, even
/// that layer's states stored in f16, re-rounds the activations of every layer above it: a mean KL of its own, about
/// 0.004 on the embedded model from layer 0, that hides the layer's own cost (q8_0 keys on one layer: about 1e-6 in
/// float32) and that the scan's sum would count once per layer side. In float32 the per-layer KLs are the cache's
/// and add up (docs/cache-configs.md). Holds `model` in float32 activations for its scope (the scan, and the full
/// runs that check its picks), then gives it back its own arithmetic.
///
/// For the scope it also gives the weights float32 copies (LlamaModel::setFloatCopies), where they take at most half
/// the machine's available memory: the scan multiplies every weight thousands of times, and its products then skip
/// dequantizing the weights, with the same values bit for bit.
class ScanArithmetic {
 public:
  explicit ScanArithmetic(model::LlamaModel& model);
  ~ScanArithmetic();
  ScanArithmetic(const ScanArithmetic&) = delete;
  ScanArithmetic& operator=(const ScanArithmetic&) = delete;
  /// Whether the model computes in 8-bit activations outside the scope (the scope switched it).
  bool switched() const { return switched_; }
  /// Bytes of the float32 weight copies the scope holds (0: none, for want of memory, or dense weights).
  std::uint64_t floatCopyBytes() const { return floatCopyBytes_; }

 private:
  model::LlamaModel& model_;
  bool switched_ = false;
  std::uint64_t floatCopyBytes_ = 0;
};

}  // namespace kvscope::generate
