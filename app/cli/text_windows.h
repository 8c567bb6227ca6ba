// What `eval` and `calibrate` share: a text file cut into windows of tokens.
#pragma once

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/runtime.h"
#include "generate/eval.h"

namespace kvscope::cli {

struct TextOpts {
  std::string model, text;
  ModelChoice how;
  int ctx = 512, windows = 0, threads = 0;
};

/// `textRequired` false: a command that can take its text from elsewhere (tune --scan-in) checks it itself.
inline void addTextOpts(CLI::App* cmd, TextOpts& o, bool textRequired = true) {
  cmd->add_option("--text", o.text, "the text file (e.g. resources/eval/coriolanus.txt)")->required(textRequired);
  cmd->add_option("--model", o.model, "GGUF file or Hugging Face directory (default: the embedded SmolLM2)");
  cmd->add_option("--ctx", o.ctx,
                  "tokens per window: the text is cut into windows of this many tokens, each run "
                  "through a fresh cache")
      ->check(CLI::Range(8, 1 << 20));
  cmd->add_option("--windows", o.windows, "use only the first N windows (0: every whole window)")
      ->check(CLI::NonNegativeNumber);
  addModelOptions(cmd, o.how);
  cmd->add_option("--threads", o.threads, "CPU threads (0: LibTorch's default)")->check(CLI::NonNegativeNumber);
}

inline std::string readText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(fmt::format("cannot read text file `{}`", path));
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().empty()) throw UsageError(fmt::format("text file `{}` is empty", path));
  return ss.str();
}

// The text's tokens cut into whole windows of `ctx` (the last, shorter piece is dropped unless it is the only one).
inline std::vector<std::vector<std::int64_t>> windowsOf(const runtime::Session& m, const TextOpts& o) {
  const std::vector<std::int64_t> ids = m.encodeText(readText(o.text), o.text);
  const std::size_t whole = generate::textWindows(ids, o.ctx).size();
  auto w = generate::textWindows(ids, o.ctx, o.windows);
  std::cerr << fmt::format("{}: {} tokens, {} whole window(s) of {}; using {}\n", o.text, ids.size(), whole,
                           w[0].size(), w.size());
  return w;
}

}  // namespace kvscope::cli
