// kvscope-cli: the headless face of kvscope. Bad input gives one clear line on stderr and exit code 2.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <vector>

#include "cli/commands.h"
#include "kernels/cpu/simd.h"
#include "runtime/errors.h"
#include "util/process_memory.h"

namespace {

int run(int argc, char** argv) {
  kvscope::util::setAllocatorPolicy();  // resident memory follows what the cache holds (util/process_memory.h)
  kvscope::runtime::installOutOfMemoryType();
  CLI::App app{"kvscope-cli: quantized KV-cache workbench, headless", "kvscope-cli"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kvscope-cli 0.1.0");
  std::vector<kvscope::cli::Runner> runners{
      kvscope::cli::addExport(app),   kvscope::cli::addBackends(app),  kvscope::cli::addCacheSim(app),
      kvscope::cli::addGenerate(app), kvscope::cli::addCompare(app),   kvscope::cli::addSweep(app),
      kvscope::cli::addBench(app),    kvscope::cli::addCalibrate(app), kvscope::cli::addEval(app),
      kvscope::cli::addTune(app),     kvscope::cli::addMerge(app),     kvscope::cli::addDoctor(app),
      kvscope::cli::addPlan(app),     kvscope::cli::addProbe(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  // KVSCOPE_ISA (kernels/cpu/simd.h): a name that is not a path is bad input; a path this CPU lacks is said, and the
  // best it has runs.
  bool unknownIsa = false;
  if (const std::string isa = kvscope::kernels::isaRequestProblem(&unknownIsa); !isa.empty()) {
    if (unknownIsa) {
      std::cerr << "kvscope-cli: error: " << isa << "\n";
      return 2;
    }
    std::cerr << "kvscope-cli: " << isa << "; running " << kvscope::kernels::isaName(kvscope::kernels::isa()) << "\n";
  }
  try {
    for (auto& run : runners)
      if (const int rc = run(); rc >= 0) return rc;
  } catch (...) {
    // Bad input (a SPEC, a file, an option) is exit 2 with one line; a broken invariant of kvscope's own is exit 1,
    // one line that says so.
    const auto f = kvscope::runtime::currentFailure();
    const int rc = kvscope::exitStatus(f.code);
    const bool internal = f.code == kvscope::ErrorCode::Internal;
    const char* kind = rc == 2 ? "error: " : internal ? "internal error: " : "";
    std::cerr << "kvscope-cli: " << kind << (f.code == kvscope::ErrorCode::OutOfMemory ? "out of memory: " : "")
              << f.message << (internal ? std::string(" (") + kvscope::runtime::kReportHint + ")" : std::string())
              << "\n";
    return rc;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (...) {  // only setting up the command line can get here: the commands' own errors are caught in run()
    std::fputs("kvscope-cli: internal error while setting up the command line\n", stderr);
    return 1;
  }
}
