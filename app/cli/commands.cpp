#include "cli/commands.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>

#include "cache/config.h"
#include "model/safetensors.h"

namespace kvscope::cli {

nlohmann::json jsonNumber(double x) {
  return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr);
}

double jsonNumberOf(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() || !it->is_number() ? std::numeric_limits<double>::quiet_NaN() : it->get<double>();
}

void writeOutput(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::cout << text;
    std::cout.flush();
    return;
  }
  const std::filesystem::path target(path);
  std::error_code statEc;
  const auto status = std::filesystem::status(target, statEc);
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    // A device or a pipe (/dev/null, /dev/stdout, a FIFO): written in place; renaming a file over it would replace
    // the device node itself.
    if (std::filesystem::is_directory(status))
      throw UsageError(fmt::format("cannot write `{}`: it is a directory", path));
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) throw UsageError(fmt::format("cannot write `{}`: {}", path, std::strerror(errno)));
    const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if (std::fclose(f) != 0 || !ok) throw UsageError(fmt::format("cannot write `{}`: {}", path, std::strerror(errno)));
    return;
  }
  const std::filesystem::path tmp = target.string() + fmt::format(".tmp{}", ::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw UsageError(fmt::format("cannot write `{}`: {}", path, std::strerror(errno)));
  const bool ok =
      std::fwrite(text.data(), 1, text.size(), f) == text.size() && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const bool closed = std::fclose(f) == 0;
  std::error_code ec;
  if (!ok || !closed) {
    const int err = errno;
    std::filesystem::remove(tmp, ec);
    throw UsageError(fmt::format("cannot write `{}`: {}", path, std::strerror(err)));
  }
  std::filesystem::rename(tmp, target, ec);
  if (ec) {
    const std::string why = ec.message();
    std::filesystem::remove(tmp, ec);
    throw UsageError(fmt::format("cannot write `{}`: {}", path, why));
  }
  // The rename itself is durable once the directory is synced.
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : std::string(".");
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

Runner addExport(CLI::App& app) {
  struct Opts {
    std::string spec, format = "hf", output = "-", scales, model;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("export", "Print a cache config for another tool");
  cmd->add_option("--cache", o->spec, "cache SPEC (fp8, quanto:nbits=2,q_group_size=32, ...) or a JSON config file")
      ->required();
  cmd->add_option("--format", o->format,
                  "hf: transformers cache_config JSON; kvscope: kvscope's own config file; vllm / llamacpp: flags; "
                  "modelopt: Model-Optimizer 0.47.0's hf_quant_config.json (and config.json's quantization_config "
                  "on stderr)")
      ->check(CLI::IsMember({"hf", "kvscope", "vllm", "llamacpp", "modelopt"}));
  cmd->add_option("-o,--output", o->output, "write to this file (atomically) instead of stdout");
  cmd->add_option("--model", o->model,
                  "the model it is for (GGUF or HF directory; only its layer kinds are read): with --format vllm / "
                  "llamacpp, the engine's rules for its sliding-window layers");
  cmd->add_option("--scales", o->scales,
                  "with --format vllm and a calibrated fp8 config: write its k/v scales to this safetensors file, "
                  "named as vLLM loads them from a checkpoint");
  return [o, cmd]() {
    if (!*cmd) return -1;
    const cache::CacheConfig cfg = cache::parseSpec(o->spec);
    if (!o->scales.empty() && o->format != "vllm")
      throw UsageError("--scales writes vLLM's checkpoint k/v scales: use it with --format vllm");
    if (o->scales == "-") throw UsageError("--scales needs a file name (a safetensors file is binary)");
    if (!o->scales.empty()) {
      const cache::VllmScales vs = cache::toVllmScales(cfg);
      std::vector<model::SafetensorsTensor> tensors;
      for (const auto& t : vs.tensors)
        tensors.push_back(
            {t.name, "F32", t.shape,
             std::string(reinterpret_cast<const char*>(t.values.data()), t.values.size() * sizeof(float))});
      writeOutput(o->scales, model::safetensorsImage(tensors, {{"format", "pt"}, {"producer", "kvscope-cli export"}}));
      for (const auto& n : vs.notes) std::cerr << "kvscope-cli: note: " << n << "\n";
      std::cerr << fmt::format(
          "kvscope-cli: wrote {} scale tensors to {}; merge: copy it into the checkpoint "
          "directory, list its tensors in model.safetensors.index.json's weight_map when there "
          "is one, and add to config.json\n  \"quantization_config\": {}\n",
          vs.tensors.size(), o->scales, vs.quantizationConfig);
    }
    if (o->format == "hf") {
      const cache::HfExport e = cache::toHfCacheConfig(cfg);
      writeOutput(o->output, e.json + "\n");
      for (const auto& n : e.notes) std::cerr << "kvscope-cli: note: " << n << "\n";
      std::cerr << "kvscope-cli: use: model.generate(**inputs, cache_implementation=\"quantized\", cache_config="
                << nlohmann::json::parse(e.json).dump() << ")\n";
    } else if (o->format == "vllm" || o->format == "llamacpp") {
      const cache::LayerWindows windows = o->model.empty() ? cache::LayerWindows{} : layerWindows(o->model);
      const cache::FlagExport e =
          o->format == "vllm" ? cache::toVllmFlags(cfg, windows) : cache::toLlamaCppFlags(cfg, windows);
      writeOutput(o->output, e.flags + "\n");
      for (const auto& n : e.notes) std::cerr << "kvscope-cli: note: " << n << "\n";
      if (!e.env.empty()) std::cerr << "kvscope-cli: run it with " << e.env << " in its environment\n";
    } else if (o->format == "modelopt") {
      const cache::ModelOptExport e = cache::toModelOptConfig(cfg);
      writeOutput(o->output, e.hfQuantConfig + "\n");
      for (const auto& n : e.notes) std::cerr << "kvscope-cli: note: " << n << "\n";
      std::cerr << "kvscope-cli: use: hf_quant_config.json in the checkpoint directory, and in config.json\n"
                << "  \"quantization_config\": " << e.quantizationConfig << "\n";
    } else {
      writeOutput(o->output, cache::toKvscopeJson(cfg) + "\n");
    }
    return 0;
  };
}

Runner addBackends(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("backends", "List the cache backends and their options");
  return [cmd]() {
    if (!*cmd) return -1;
    for (cache::Backend b : cache::allBackends()) {
      std::cout << fmt::format("{}: {}\n", cache::backendName(b), cache::backendSummary(b));
      for (const auto& opt : cache::backendOptions(b)) {
        std::string allowed;
        for (const auto& c : opt.choices) allowed += (allowed.empty() ? "" : "|") + c;
        std::cout << fmt::format("  {:<16} {:<8} default {:<8} {}{}{}\n", opt.name, opt.kind, opt.defaultValue,
                                 allowed.empty() ? "" : "[" + allowed + "] ", opt.help,
                                 opt.transformersKey ? "" : " (kvscope)");
      }
    }
    std::cout << "\nper-layer and K/V configs (docs/cache-configs.md):\n"
                 "  layers=RANGE:CONFIG;RANGE:CONFIG;...\n"
                 "  RANGE   * (every layer no other range names), N, or N-M (inclusive, from 0)\n"
                 "  CONFIG  a SPEC for keys and values alike, or K=SPEC,V=SPEC\n"
                 "  e.g.    layers=0-1:dynamic;*:K=fp8:granularity=head,V=quanto:nbits=4\n";
    return 0;
  };
}

void addShardOption(CLI::App* cmd, std::string& shard, const std::string& outName) {
  cmd->add_option("--shard", shard,
                  fmt::format("run shard I of N only (e.g. 2/3) and write its records to {} as JSON lines; "
                              "kvscope-cli merge joins the N files",
                              outName));
}

std::optional<Shard> shardOf(const std::string& shard, const std::string& out, const std::string& outName) {
  if (shard.empty()) return std::nullopt;
  const Shard s = Shard::parse(shard);
  if (out.empty() || out == "-")
    throw UsageError(fmt::format("--shard {} writes a shard file: give {} FILE", shard, outName));
  return s;
}

ShardOut::ShardOut(std::string path, std::string_view command, const Shard& shard, std::size_t items,
                   const nlohmann::json& run)
    : path_(std::move(path)), text_(shardHeader(command, shard, items, run) + "\n") {
  writeOutput(path_, text_);
}

void ShardOut::add(std::size_t item, const nlohmann::json& record) {
  text_ += shardRecord(item, record) + "\n";
  writeOutput(path_, text_);
}

}  // namespace kvscope::cli
