// Sharded runs (`sweep`, `eval` and `tune` with `--shard I/N`, joined by `kvscope-cli merge`): a run's items are
// numbered 0..items-1, item 0 being the unquantized run (the baseline or reference) and the others the configs or
// scan points in the unsharded run's order; shard I of N owns the items k with k mod N == I-1. A shard file is JSON
// lines: a header naming the command, the shard, the item count and the run's settings (what every shard of one run
// shares), then one record per item the shard finished, each with its "item". The merge checks that the files are the
// N shards of one run, each complete, and gives the records back in item order. No torch, no Qt.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvscope {

struct Shard {
  int index = 1;  ///< 1-based, as Slurm's --array=1-N and `--shard 2/3` count
  int count = 1;
  /// "I/N" with 1 <= I <= N; throws Error(BadInput) naming the text and the form.
  static Shard parse(std::string_view text);
  bool owns(std::size_t item) const { return static_cast<int>(item % static_cast<std::size_t>(count)) == index - 1; }
  std::string name() const;  ///< "2/3"
  /// Throws Error(BadInput) when there are fewer `what` (e.g. "configs") to share than shards: a shard would run
  /// nothing but the unquantized run.
  void check(std::size_t shared, std::string_view what) const;
};

/// The header line (no newline) of a shard file.
std::string shardHeader(std::string_view command, const Shard& shard, std::size_t items, const nlohmann::json& run);
/// One record line (no newline): `record` with "item" added.
std::string shardRecord(std::size_t item, nlohmann::json record);

/// The shards of one run, merged.
struct ShardSet {
  std::string command;
  nlohmann::json run;
  int count = 0;
  std::vector<nlohmann::json> records;  ///< by item, every item present ("item" removed)
};
/// `files`: (origin, text) of each shard file. Throws Error(BadInput) with one line naming the file and the problem:
/// not a shard file, shards of different runs (the first setting that differs), a shard given twice, a shard
/// missing, a record not the shard's, a shard that did not finish.
ShardSet mergeShards(const std::vector<std::pair<std::string, std::string>>& files);

}  // namespace kvscope
