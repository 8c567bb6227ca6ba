// kvscope-cli subcommands. Each registers itself on the app and runs when chosen; errors are thrown as
// kvscope::cli::UsageError (exit 2) or propagate as ConfigError/CacheError (exit 2 as well: bad input).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <stdexcept>
#include <string>

#include "util/error.h"

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

/// Writes `text` to `path` atomically (temporary file + rename); "-" is stdout.
void writeOutput(const std::string& path, const std::string& text);

}  // namespace kvscope::cli
