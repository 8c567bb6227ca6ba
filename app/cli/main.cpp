// kvscope-cli: the headless face of kvscope. Bad input gives one clear line on stderr and exit code 2.
#include <CLI/CLI.hpp>

#include <iostream>
#include <stdexcept>
#include <vector>

#include "util/process_memory.h"
#include "cache/config.h"
#include "cache/layer.h"
#include "cli/commands.h"
#include "model/safetensors.h"
#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  kvscope::util::setAllocatorPolicy();  // resident memory follows what the cache holds (util/process_memory.h)
  CLI::App app{"kvscope-cli: quantized KV-cache workbench, headless", "kvscope-cli"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kvscope-cli 0.1.0");
  std::vector<kvscope::cli::Runner> runners{kvscope::cli::addExport(app), kvscope::cli::addBackends(app),
                                           kvscope::cli::addCacheSim(app),
                                           kvscope::cli::addGenerate(app),
                                           kvscope::cli::addCompare(app), kvscope::cli::addSweep(app),
                                           kvscope::cli::addBench(app), kvscope::cli::addCalibrate(app),
                                           kvscope::cli::addEval(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    for (auto& run : runners)
      if (const int rc = run(); rc >= 0) return rc;
  } catch (const std::exception& e) {
    // Bad input (a SPEC, a file, an option) is exit 2 with one line; anything else is kvscope's own failure.
    const bool badInput = dynamic_cast<const std::invalid_argument*>(&e) ||  // ConfigError, option checks
                          dynamic_cast<const kvscope::cache::CacheError*>(&e) ||
                          dynamic_cast<const kvscope::model::FormatError*>(&e) ||
                          dynamic_cast<const kvscope::tokenizer::TokenizerError*>(&e) ||
                          dynamic_cast<const kvscope::cli::UsageError*>(&e);
    std::cerr << "kvscope-cli: " << (badInput ? "error: " : "internal error: ") << e.what() << "\n";
    return badInput ? 2 : 1;
  }
  return 0;
}
