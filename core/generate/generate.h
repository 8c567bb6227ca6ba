// Token generation over a LlamaModel and a KvCache: greedy or sampling, a callback per step (token, log-prob,
// top candidates, the cache's memory), stop tokens, cancel at any step.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cache/kv_cache.h"
#include "model/llama.h"
#include "util/cancel.h"

namespace kvscope::generate {

struct SamplingOptions {
  bool greedy = true;
  double temperature = 1.0;  ///< > 0
  int topK = 0;              ///< 0: off
  double topP = 1.0;         ///< 1: off
  std::uint64_t seed = 0;    ///< same seed, same tokens
};

struct GenerateOptions {
  int maxNew = 64;
  SamplingOptions sampling;
  std::vector<std::int64_t> stopIds;  ///< e.g. the model's EOS; the stop token is kept in the output
  int topCandidates = 5;              ///< candidates reported per step
  /// Shadow run: the same steps through an unquantized (dynamic) cache fed the same tokens, giving per-step
  /// KL(reference || quantized), top-1 agreement and the first divergent step.
  bool shadow = false;
  /// Attach a CacheSnapshot (per-layer memory and statistics) to every StepEvent.
  bool snapshots = false;
  /// Prompt positions per forward pass (chunked prefill); 0: the whole prompt at once; -1: prefillChunkFor(cache).
  std::int64_t prefillChunk = -1;
  /// Run past the model's trained context length (speed and memory measurements; the text degrades there).
  bool beyondContext = false;
  /// Chunked prefill: called with a layer's index once that layer has stored a prompt chunk before the last, while
  /// its statistics (KvCache::layer(l).stats()) describe that chunk's update; a later chunk's update replaces them.
  /// The last chunk's are the first step's, as without chunks. A view that records every update's error (the GUI's
  /// recorder) reads them here, or it would see only the last chunk's.
  std::function<void(int layer)> onPrefillChunk;
};

/// The default prefill chunk for a cache: 512 when every layer attends in fused mode, else 0 (one shot, as
/// transformers, so that reference mode reproduces it exactly).
constexpr std::int64_t kDefaultPrefillChunk = 512;
std::int64_t prefillChunkFor(const cache::KvCache& cache, std::int64_t requested = -1);

struct StepEvent {
  int step = 0;  ///< 0 for the first generated token (after the prefill)
  std::int64_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<std::int64_t, float>> top;  ///< (id, log-prob), best first
  cache::TensorMemory memory;                       ///< the whole cache after this step's forward
  double seconds = 0.0;                             ///< this step's forward + sampling (not the shadow's)
  // With GenerateOptions::shadow:
  float kl = 0.0f;         ///< KL(reference || quantized) of this step's next-token distributions, in nats
  bool top1Agrees = true;  ///< the reference's argmax is the same token
  std::int64_t refToken = -1;
  float refLogprob = 0.0f;                               ///< the reference's log-prob of the chosen token
  std::vector<std::pair<std::int64_t, float>> refTop;    ///< the reference's best candidates (id, log-prob)
  std::shared_ptr<const cache::CacheSnapshot> snapshot;  ///< with GenerateOptions::snapshots
};

/// Return false to stop after this step.
using StepFn = std::function<bool(const StepEvent&)>;

/// Why a generation ended; stopReasonName() is its text in outputs and session files.
enum class StopReason { MaxNew, StopToken, Callback, Cancelled };
constexpr std::string_view stopReasonName(StopReason r) {
  switch (r) {
    case StopReason::MaxNew:
      return "max_new";
    case StopReason::StopToken:
      return "stop_token";
    case StopReason::Callback:
      return "callback";
    case StopReason::Cancelled:
      return "cancelled";
  }
  return "max_new";
}

struct GenerateResult {
  std::vector<std::int64_t> tokens;
  std::vector<float> logprobs;
  double prefillSeconds = 0.0, decodeSeconds = 0.0;
  int promptTokens = 0;
  StopReason stopReason = StopReason::MaxNew;
  // With GenerateOptions::shadow:
  double meanKl = 0.0, maxKl = 0.0;
  double top1Agreement = 1.0;  ///< fraction of steps whose argmax agrees
  int firstDivergence = -1;    ///< first step whose argmax differs (-1: none)
};

/// Runs the prompt (the cache must be empty) and then up to maxNew tokens. `cancel`: checked before each step and,
/// during the prompt, by the model between layers and chunks (StopReason::Cancelled). Throws an Error (BadInput) on bad
/// options, cache::CacheError from the cache.
GenerateResult generate(const model::LlamaModel& model, cache::KvCache& cache, const std::vector<std::int64_t>& prompt,
                        const GenerateOptions& options, const StepFn& onStep = {}, const CancelToken* cancel = nullptr);

/// Teacher forcing: how well a cache predicts given tokens after a prompt.
struct ContinuationScore {
  double nll = 0.0;         ///< sum of -log p(token) over the scored tokens (NaN/inf when the logits were)
  std::int64_t scored = 0;  ///< tokens scored
  bool cancelled = false;
  double ppl() const;  ///< exp(nll / scored); NaN when nothing was scored
};

/// Feeds `prompt` into `cache` (empty at the call) as generate() prefills it, then `continuation` one token per
/// forward pass as generate() decodes, and scores each continuation token under the logits before it: every scored
/// token attends to what the cache stored of the prompt and the tokens before it, as in a generation. The same
/// continuation through several configs is a perplexity on the same tokens. `cancel`: as generate().
ContinuationScore scoreContinuation(const model::LlamaModel& model, cache::KvCache& cache,
                                    const std::vector<std::int64_t>& prompt,
                                    const std::vector<std::int64_t>& continuation, std::int64_t prefillChunk = -1,
                                    const CancelToken* cancel = nullptr);

struct BeamOptions {
  int numBeams = 4;
  double lengthPenalty = 1.0;
  std::string earlyStopping = "false";            ///< "true", "false" or "never", as transformers
  int numReturn = 0;                              ///< sequences returned (0: numBeams)
  std::int64_t prefillChunk = -1;                 ///< as GenerateOptions::prefillChunk
  std::function<void(int layer)> onPrefillChunk;  ///< as GenerateOptions::onPrefillChunk (the prompt, every beam)
};

/// One beam-search step, for the views that show what the cache did: which old row each beam continues (the
/// reorder applied to the cache), the token it appended and its running score.
struct BeamStepEvent {
  int step = 0;
  std::vector<std::int64_t> parents;  ///< beam i continues old beam parents[i] (cache.reorder(parents))
  std::vector<std::int64_t> tokens;
  std::vector<float> scores;  ///< accumulated log-probs of the running beams
  int finished = 0;           ///< finished hypotheses so far
  cache::TensorMemory memory;
  std::shared_ptr<const cache::CacheSnapshot> snapshot;  ///< always: beam views show the cache rows
};
using BeamStepFn = std::function<bool(const BeamStepEvent&)>;

struct BeamResult {
  std::vector<std::vector<std::int64_t>> sequences;  ///< new tokens, best first
  std::vector<float> scores;                         ///< length-normalized, as transformers' sequences_scores
  double seconds = 0.0;                              ///< the whole search
  double prefillSeconds = 0.0;                       ///< its first step: the prompt, once per beam
  StopReason stopReason = StopReason::MaxNew;
};

/// transformers' beam search (its v5 vectorized algorithm: 2 x beams candidates per step, finished hypotheses
/// normalized by generated_length ** length_penalty, its early-stop heuristic), with the cache reordered by the
/// chosen parents every step. The prompt is run once per beam, as transformers does.
BeamResult beamSearch(const model::LlamaModel& model, cache::KvCache& cache, const std::vector<std::int64_t>& prompt,
                      int maxNew, const BeamOptions& options, const std::vector<std::int64_t>& stopIds = {},
                      const BeamStepFn& onStep = {}, const CancelToken* cancel = nullptr);

}  // namespace kvscope::generate
