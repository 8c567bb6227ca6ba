// The sensitivity tuner (`kvscope-cli tune`, the GUI's tuner dock): a scan quantizes one side of one layer at a time
// with a candidate config (every other layer and side unquantized) and measures the mean KL against the unquantized
// run and the KV bytes it saves; a solve combines the scan's points into per-layer assignments, each target's shape
// of them (what transformers, vLLM and llama.cpp can express), their Pareto front and the best one under a budget.
// The combination assumes the layers' KL adds up; a full run of the chosen config checks it. No torch, no Qt.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/config.h"
#include "cache/sweep.h"

namespace kvscope::cache {

enum class KvSide { Keys, Values };
std::string_view sideName(KvSide s);  ///< "K" or "V"

/// One layer side quantized with a candidate.
struct ScanItem {
  int layer = 0;
  KvSide side = KvSide::Keys;
  std::size_t candidate = 0;
};

/// What a scan runs: every candidate on every layer's keys and values, in that order (candidate, layer, side).
struct ScanPlan {
  std::vector<CacheConfig> candidates;
  int numLayers = 0;
  std::vector<ScanItem> items;
  /// The config of one item: `layers=L:K=CANDIDATE,V=dynamic;*:dynamic` (or V quantized).
  CacheConfig config(const ScanItem& item) const;
};
/// Throws ConfigError for no candidate, a per-layer or dynamic candidate (a candidate is one side's config), a
/// duplicate, or numLayers < 1.
ScanPlan planScan(const std::vector<CacheConfig>& candidates, int numLayers);

/// The scan's figures: the unquantized run's stored KV bytes, and per item (the plan's order) the mean KL and the
/// stored bytes of its run.
struct Scan {
  ScanPlan plan;
  std::int64_t referenceBytes = 0;
  struct Point {
    ScanItem item;
    double meanKl = 0;
    std::int64_t storedBytes = 0;
    std::int64_t saved(std::int64_t referenceBytes) const { return referenceBytes - storedBytes; }
  };
  std::vector<Point> points;
  /// The point of (layer, side, candidate); throws ConfigError when the scan lacks it.
  const Point& at(int layer, KvSide side, std::size_t candidate) const;
  /// The same; nullptr when the scan lacks it (a scan still going, or stopped).
  const Point* find(int layer, KvSide side, std::size_t candidate) const;
};

/// How a scan's runs fed each window of the text: `tokens` in all, the first `prompt` in one step, then `step` at a
/// time (what a sliding-window layer holds at the end depends on it: KvCache drops its oldest down to window - 1
/// before a step once it holds window - 1 + KvCache::kWindowSlack).
struct ScanFeed {
  /// KvCache::kWindowSlack (kv_cache.cpp checks that they agree; this header stays torch-free).
  static constexpr std::int64_t kWindowSlack = 64;
  std::int64_t tokens = 0, prompt = 0, step = 1;
  /// The tokens a layer sliding over `window` (0: full attention) holds after the window's last step.
  std::int64_t held(std::int64_t window) const;
};

/// The scan's bytes priced at `context` tokens of one sequence instead of what its runs held (`feed`): each layer's
/// bytes scale by the tokens it would hold there (a sliding-window layer at most its window: `windows`, one per layer,
/// 0: full attention; empty: every layer full) over those it held in the scan. The reference's bytes split over the
/// layers by the tokens each held (kvscope's forward gives every layer one KV head shape); each point's saving is its
/// layer's. Throws ConfigError for a feed or context of no tokens, or windows not one per layer.
/// `values`: each layer's K and V values a token (kvHeads x (K + V head sizes); 0 for a layer that stores none, as
/// Gemma 4's shared-KV layers), weighing its share of the reference's bytes; empty: every layer the same shape.
Scan pricedAt(const Scan& scan, const ScanFeed& feed, std::int64_t context, const LayerWindows& windows,
              const std::vector<double>& values = {});

/// What a partial scan (still going, or stopped) can be solved from: the candidates whose every layer side has its
/// point, renumbered in their order, with those points. Equal to `scan` when it is complete.
Scan completedCandidates(const Scan& scan);

/// What the assignment must look like for a target to run it as tuned.
enum class TuneTarget {
  Kvscope,       ///< any candidate (or none) per layer and side: kvscope's per-layer configs
  LlamaCpp,      ///< one keys config and one values config for every layer (-ctk / -ctv), either may stay f16
  Vllm,          ///< one config for both sides of every layer, with layers skipped (--kv-cache-dtype-skip-layers)
  Transformers,  ///< one config for both sides of every layer (QuantizedCache has no per-layer configs)
  ModelOpt,      ///< one FP8 or NVFP4 config for both sides of every layer (Model-Optimizer 0.47.0's checkpoints)
};
std::string_view targetName(TuneTarget t);  ///< "kvscope", "llamacpp", "vllm", "transformers", "modelopt"
/// Throws ConfigError naming the targets.
TuneTarget parseTarget(std::string_view name);
std::vector<TuneTarget> allTargets();

/// Per layer, the candidate index of its keys and of its values; -1: unquantized.
struct Assignment {
  std::vector<int> keys, values;
  double predictedKl = 0;        ///< the scan's mean KLs summed
  std::int64_t storedBytes = 0;  ///< the reference's bytes less the scan's savings
  bool operator==(const Assignment&) const = default;
};

/// The assignments of `target`'s shape that no other beats on both stored bytes and predicted KL, by bytes
/// ascending (KL descending). The unquantized assignment is the last point.
std::vector<Assignment> paretoFront(const Scan& scan, TuneTarget target);
/// The front's best point under the budget (MaxMeanKl: the fewest bytes whose predicted KL is within it;
/// MaxStoredBytes: the lowest predicted KL within the bytes); nullopt when none is.
std::optional<Assignment> solve(const std::vector<Assignment>& front, const SweepBudget& budget);
/// The assignment as a config: a uniform one when every layer and side takes the same candidate, otherwise per-layer
/// rules (runs of equal layers merged, the most common pair that quantizes as the `*` rule).
CacheConfig assignmentConfig(const Scan& scan, const Assignment& a);

/// What a target takes for a pick, in its own terms (a SPEC, a cache_config, flags with their environment), and what
/// it cannot express; a config the target cannot export at all is "(not exported)" with the reason as its note.
struct TargetExport {
  std::string text;
  std::vector<std::string> notes;
};
/// `windows`: the model's sliding windows per layer (toVllmFlags / toLlamaCppFlags say what the engines do on those
/// layers); empty: not known.
TargetExport exportFor(TuneTarget target, const CacheConfig& cfg, const LayerWindows& windows = {});

/// A scan as kvscope's JSON file (`tune --scan-out`) and back; `settings` is what the scan ran on (model, text,
/// windows), kept as the file has it. fromJson throws ConfigError naming the problem.
std::string scanToJson(const Scan& scan, const std::string& settingsJson);
Scan scanFromJson(std::string_view text, std::string_view origin, std::string* settingsJson = nullptr);

}  // namespace kvscope::cache
