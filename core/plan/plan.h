// The capacity planner: from a model's layout (plan/layout.h) and a cache config, the memory each engine gives its
// KV cache and the figures it logs — llama.cpp's `llama_kv_cache:` lines, vLLM's "GPU KV cache size" and "Maximum
// concurrency", SGLang's "KV Cache is allocated" — per engine version, before the user rents the GPU. The rules and
// the sources they rest on: docs/capacity.md. No torch, no Qt.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/config.h"
#include "plan/layout.h"

namespace kvscope::plan {

enum class Engine { LlamaCpp, Vllm, Sglang };
std::string_view engineName(Engine e);  ///< "llamacpp", "vllm", "sglang"
/// Throws cache::ConfigError naming the engines.
Engine parseEngine(std::string_view name);
/// The versions whose rules the planner knows, oldest first; the last is the default.
const std::vector<std::string>& engineVersions(Engine e);

/// A GPU of the table the planner knows (memory as the driver reports it).
struct Gpu {
  std::string name;      ///< "H100-80GB"
  double memoryGib = 0;  ///< torch.cuda.mem_get_info's total, GiB
};
const std::vector<Gpu>& knownGpus();
/// Throws cache::ConfigError naming the known GPUs.
const Gpu& findGpu(std::string_view name);

/// The engines' options (each engine reads its own; the defaults are the engines' own).
struct PlanOptions {
  Engine engine = Engine::LlamaCpp;
  std::string engineVersion;  ///< empty: the newest known

  // llama.cpp (llama-server / llama-cli flags)
  std::int64_t ctx = 0;  ///< -c: the total context (0: the model's trained context)
  int parallel = 1;      ///< -np: sequences (slots)
  int batch = 2048, ubatch = 512;
  bool kvUnified = false, swaFull = false;

  // vLLM and SGLang
  std::optional<std::int64_t> maxModelLen;  ///< default: the model's trained context
  std::optional<std::int64_t> maxNumBatchedTokens;
  std::optional<int> blockSize;  ///< vLLM --block-size (default: the version's)
  int maxNumSeqs = 256;
  int tp = 1;
  bool prefixCaching = true;  ///< vLLM's default: on
  int pageSize = 1;           ///< SGLang --page-size

  // The memory the KV cache gets: given directly, or from a GPU minus the weights and a reserve.
  std::optional<double> kvMemoryGib;
  std::string gpu;
  /// vLLM's --gpu-memory-utilization (default 0.92) or SGLang's --mem-fraction-static (default: its rule per GPU).
  std::optional<double> gpuMemoryUtilization;
  /// What vLLM's profile run and CUDA graphs take beside the weights when the budget comes from --gpu (stated).
  double activationReserveGib = 2.0;
};

/// One cache config planned for one engine. A figure the engine would not print for this model is empty.
struct ConfigPlan {
  std::string spec;                     ///< kvscope's SPEC
  std::string engineType;               ///< what the engine calls it: "q8_0/q4_0" (-ctk/-ctv), "fp8" (--kv-cache-dtype)
  bool expressible = true;              ///< false: the engine cannot store this config (notes say why); no figures
  std::optional<double> bytesPerToken;  ///< one more token of context, in every layer whose cache grows with it
  std::optional<double> kMib, vMib, kvMib, stateMib;
  std::optional<std::int64_t> cells, swaCells, blockSize, kvTokens, blocks;
  std::optional<double> maxConcurrency;
  /// What fits the budget: the tokens the cache holds (vLLM, SGLang; llama.cpp: the largest -c whose cache fits the
  /// KV memory, with a budget given) and the requests of the chosen length (max_model_len, or the trained context)
  /// they make.
  std::optional<std::int64_t> fitTokens;
  std::optional<double> fitRequests;
  std::vector<std::string> log;    ///< the engine's own lines, as it prints them
  std::vector<std::string> notes;  ///< what the planner assumed or the engine cannot do, said plainly
};

struct Plan {
  Engine engine = Engine::LlamaCpp;
  std::string engineVersion;
  ModelLayout model;
  PlanOptions options;
  std::optional<double> kvMemoryGib;     ///< the KV budget used (vLLM, SGLang), given or derived from the GPU
  std::vector<std::string> memoryNotes;  ///< how the budget was derived
  std::vector<ConfigPlan> configs;
};

/// Plans every config for the engine in `opt`. Throws cache::ConfigError for options the engine refuses (an
/// unknown version or GPU, a budget that leaves nothing for the cache).
Plan makePlan(const ModelLayout& model, const std::vector<std::string>& specs, const PlanOptions& opt);

/// The default configs compared when the user names none: the engine's unquantized cache and its common formats.
std::vector<std::string> defaultSpecs(Engine e);

/// `plan --json` (docs/capacity.md has the schema).
std::string planJson(const Plan& p);

/// vLLM's format_gib: Python's repr of round(bytes / 2^30, 2) ("58.2", "60.0", "12.35").
std::string formatGib(double bytes);

/// printf's "%.2f" of `v` (the engines print their MiB and GiB with the C library's rounding: ties to even).
std::string fixed2(double v);

namespace detail {
/// Bytes of a value in vLLM's and SGLang's `auto` cache: the model's 16-bit dtype (a float32 checkpoint runs in
/// bfloat16 on CUDA, vLLM's config/model.py).
constexpr double kAutoCacheBytes = 2;
/// The engines' integer divisions (a head's halves, a page's rows), kept integral on purpose.
constexpr std::int64_t quot(std::int64_t a, std::int64_t b) {
  return a / b;
}

// Each engine's rules (plan/llamacpp.cpp, vllm.cpp, sglang.cpp).
ConfigPlan planLlamaCpp(const ModelLayout& m, const cache::CacheConfig& cfg, const PlanOptions& o);
ConfigPlan planVllm(const ModelLayout& m, const cache::CacheConfig& cfg, const PlanOptions& o, double kvBytes,
                    const std::string& version);
ConfigPlan planSglang(const ModelLayout& m, const cache::CacheConfig& cfg, const PlanOptions& o, double kvBytes);
}  // namespace detail

}  // namespace kvscope::plan
