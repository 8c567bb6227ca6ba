// `doctor`: what is risky about quantizing a model's KV cache, from one unquantized forward over a calibration text
// (generate/doctor.h): per layer and side the largest |x| against the median channel, the projection biases, fp8
// overflow at vLLM's default scale; the GQA ratio, the rotations that apply, the boundary layers; verdicts with their
// evidence and the config to try first.
#include <ATen/Parallel.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "cli/runtime.h"
#include "cli/text_windows.h"
#include "generate/doctor.h"

namespace kvscope::cli {
namespace {

// The shipped calibration text: an installed package's share/kvscope/eval, else the source tree's.
std::string shippedText() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  std::vector<std::filesystem::path> candidates;
  if (!ec) candidates.push_back(exe.parent_path() / "../share/kvscope/eval/coriolanus.txt");
  candidates.push_back(std::filesystem::path(KVSCOPE_RESOURCE_DIR) / "eval/coriolanus.txt");
  for (const auto& p : candidates)
    if (std::filesystem::is_regular_file(p, ec)) return p.lexically_normal().string();
  throw UsageError("doctor: the shipped calibration text was not found: give one with --text");
}

}  // namespace

Runner addDoctor(CLI::App& app) {
  struct Opts : TextOpts {
    bool json = false;
    generate::DoctorOptions doctor;
  };
  auto o = std::make_shared<Opts>();
  o->ctx = 512;
  o->windows = 1;
  CLI::App* cmd = app.add_subcommand(
      "doctor",
      "what is risky about quantizing a model's KV cache, in seconds: outlier channels, projection biases, fp8 "
      "overflow at vLLM's default scale, the rotations that apply, the boundary layers; verdicts with the config to "
      "try first");
  addTextOpts(cmd, *o, /*textRequired=*/false);
  cmd->get_option("--text")->description("calibration text (default: the shipped one)");
  cmd->get_option("--windows")->description("windows of the text to run (default 1; 0: every whole window)");
  cmd->add_flag("--json", o->json, "one JSON document: the model, every layer's figures and the verdicts");
  cmd->add_option("--outlier-ratio", o->doctor.outlierRatio,
                  "a channel this many times the median channel's max |x| is an outlier")
      ->capture_default_str();
  cmd->add_option("--bias-ratio", o->doctor.biasRatio,
                  "a layer's largest |bias| this many times the median layer's is a spike")
      ->capture_default_str();
  cmd->add_option("--base", o->doctor.base, "the llamacpp config the suggested configs keep for the other layers")
      ->capture_default_str();
  cmd->add_flag(
      "--no-fp8-kl", [o](std::int64_t) { o->doctor.fp8Kl = false; },
      "skip the fp8 runs (unit scale against calibrated scales: about three more forwards over the text)");
  cmd->add_flag(
      "--no-key-kl", [o](std::int64_t) { o->doctor.keyKl = false; },
      "skip the q8_0-key runs of a key-fragile model (sinks, head size 64: two forwards, and a scan over the layers "
      "where it pays)");
  cmd->add_flag("--key-layers", o->doctor.keyLayers,
                "scan q8_0 keys layer by layer on a key-fragile model whatever they cost on every layer");
  return [o, cmd]() {
    if (!*cmd) return -1;
    generate::checkDoctorOptions(o->doctor);
    if (o->text.empty()) o->text = shippedText();
    o->doctor.text = o->text;
    if (o->threads > 0) at::set_num_threads(o->threads);
    runtime::Session m = openSession(o->model, o->how);
    const auto windows = windowsOf(m, *o);
    const generate::DoctorReport r = generate::diagnose(m.model(), windows, o->doctor);
    std::cout << (o->json ? generate::doctorJson(r) : generate::doctorText(r));
    return 0;
  };
}

}  // namespace kvscope::cli
