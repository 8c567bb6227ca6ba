// `merge`: the shard files of one `sweep`, `eval` or `tune` run (each run with --shard I/N) joined into what the
// unsharded run gives: sweep's and eval's table (or JSON lines, CSV) and sweep's best under a budget; tune's scan file,
// to solve with `tune --scan-in`.
#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.h"

namespace kvscope::cli {

Runner addMerge(CLI::App& app) {
  struct Opts {
    std::vector<std::string> files;
    std::string out;
    SweepPrint how;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "merge",
      "Join the shard files of one sweep, eval, probe or tune run (--shard I/N) into the unsharded run's output");
  cmd->add_option("shards", o->files, "the N shard files, in any order")->required();
  auto* json = cmd->add_flag("--json", o->how.json, "sweep, eval: JSON lines, as the command's --json prints them");
  cmd->add_flag("--csv", o->how.csv, "sweep, eval: CSV, as the command's --csv prints it")->excludes(json);
  auto* kl = cmd->add_option("--max-kl", o->how.maxKl, "sweep: the smallest cache whose mean KL stays under this");
  cmd->add_option("--max-bytes", o->how.maxBytes, "sweep: the lowest mean KL whose stored KV bytes stay under this")
      ->excludes(kl);
  cmd->add_option("--out", o->out, "tune: write the merged scan file here (default: standard output)");
  return [o, cmd]() {
    if (!*cmd) return -1;
    std::vector<std::pair<std::string, std::string>> texts;
    for (const auto& f : o->files) {
      std::ifstream in(f, std::ios::binary);
      if (!in) throw UsageError(fmt::format("cannot read shard file `{}`", f));
      std::stringstream ss;
      ss << in.rdbuf();
      texts.emplace_back(f, ss.str());
    }
    const ShardSet set = mergeShards(texts);
    if (set.command != "sweep" && set.command != "eval" && set.command != "tune" && set.command != "probe")
      throw UsageError(fmt::format("`{}` shards are not kvscope's (sweep, eval, tune, probe)", set.command));
    auto refuse = [&](const char* opt, const char* why) {
      if (cmd->count(opt)) throw UsageError(fmt::format("merge {}: these are `{}` shards, {}", opt, set.command, why));
    };
    std::cerr << fmt::format("merge: {} shards of one `{}` run, {} items\n", set.count, set.command,
                             set.records.size());
    if (set.command == "tune") {
      for (const char* opt : {"--json", "--csv", "--max-kl", "--max-bytes"})
        refuse(opt, "merged into a scan file (solve it with tune --scan-in)");
      writeOutput(o->out, mergedScan(set));
      return 0;
    }
    refuse("--out", "printed to standard output");
    try {
      if (set.command == "probe") {
        refuse("--max-kl", "without a budget");
        refuse("--max-bytes", "without a budget");
        return printProbe(set.run, set.records, o->how.json, o->how.csv);
      }
      if (set.command == "eval") {
        refuse("--max-kl", "without a budget");
        refuse("--max-bytes", "without a budget");
        return printEval(set.run, set.records, o->how.json, o->how.csv);
      }
      return printSweep(set.run, set.records, o->how);
    } catch (const nlohmann::json::exception& e) {
      throw UsageError(fmt::format("the `{}` shards' records lack a figure ({})", set.command, e.what()));
    }
  };
}

}  // namespace kvscope::cli
