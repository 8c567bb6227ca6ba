// kvscope-cli subcommands. Each registers itself on the app and runs when chosen; errors are thrown as
// kvscope::cli::UsageError (exit 2) or propagate as ConfigError/CacheError (exit 2 as well: bad input).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "util/error.h"
#include "util/shard.h"

namespace kvscope::cli {

/// A bad combination of the command line's options (ErrorCode::BadInput).
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& what) : Error(ErrorCode::BadInput, what) {}
};

/// Registers a subcommand; the returned function runs it after parsing.
using Runner = std::function<int()>;
Runner addExport(CLI::App& app);
Runner addBackends(CLI::App& app);
Runner addCacheSim(CLI::App& app);
Runner addGenerate(CLI::App& app);
Runner addCompare(CLI::App& app);
Runner addSweep(CLI::App& app);
Runner addBench(CLI::App& app);
Runner addCalibrate(CLI::App& app);
Runner addEval(CLI::App& app);
Runner addTune(CLI::App& app);
Runner addMerge(CLI::App& app);
Runner addDoctor(CLI::App& app);
Runner addPlan(CLI::App& app);
Runner addProbe(CLI::App& app);

/// Writes `text` to `path` atomically (temporary file + rename); "-" is stdout.
void writeOutput(const std::string& path, const std::string& text);

/// --shard I/N on a command whose shard file goes to the option `outName` (util/shard.h).
void addShardOption(CLI::App* cmd, std::string& shard, const std::string& outName);
/// The parsed --shard, nullopt without one; UsageError for a bad one or one without its output file.
std::optional<Shard> shardOf(const std::string& shard, const std::string& out, const std::string& outName);

/// A shard file written as its records arrive: the header, then a line per finished item, the file replaced
/// atomically after each (a crash keeps what finished; `merge` says the shard did not finish).
class ShardOut {
 public:
  ShardOut(std::string path, std::string_view command, const Shard& shard, std::size_t items,
           const nlohmann::json& run);
  void add(std::size_t item, const nlohmann::json& record);

 private:
  std::string path_, text_;
};

/// What `merge` prints of a run's rows: `eval`'s (the reference first) and `sweep`'s (the baseline first) own
/// output; `tune`'s scan file.
int printEval(const nlohmann::json& run, const std::vector<nlohmann::json>& rows, bool json, bool csv);
/// A figure for a record: the number, or null where it is not finite (NaN, inf).
nlohmann::json jsonNumber(double x);
/// A record's figure `key` back (NaN where it is null or absent).
double jsonNumberOf(const nlohmann::json& j, const char* key);
/// `probe`'s records (one per probe) as its table, JSON lines or CSV.
int printProbe(const nlohmann::json& run, const std::vector<nlohmann::json>& records, bool json, bool csv);
struct SweepPrint {
  bool json = false, csv = false;
  std::optional<double> maxKl;
  std::optional<std::int64_t> maxBytes;
};
int printSweep(const nlohmann::json& run, const std::vector<nlohmann::json>& rows, const SweepPrint& how);
std::string mergedScan(const ShardSet& set);

/// The sliding window of each layer (0: full attention) of the model at `path` (a GGUF or an HF directory), read from
/// its metadata or config.json alone (the planner's reading: no weights): what the exports' per-layer-kind rules
/// need (cache::LayerWindows). Throws kvscope::Error naming the problem.
std::vector<std::int64_t> layerWindows(const std::string& path);
/// Each layer's K and V values a token of the same model (0 where a layer reads another's KV): the weights of the
/// tuner's pricing at a context (cache::pricedAt). Throws kvscope::Error naming the problem.
std::vector<double> layerValues(const std::string& path);

}  // namespace kvscope::cli
