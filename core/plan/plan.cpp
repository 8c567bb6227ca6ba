#include "plan/plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <nlohmann/json.hpp>

namespace kvscope::plan {

using cache::ConfigError;

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// What nvidia-smi reports as each GPU's total memory (MiB).
const std::vector<Gpu>& gpuTable() {
  static const std::vector<Gpu> t = [] {
    const std::pair<const char*, double> mib[] = {
        {"H100-80GB", 81559}, {"H200", 143771}, {"B200", 183359},    {"A100-80GB", 81920}, {"A100-40GB", 40960},
        {"L40S", 46068},      {"L4", 23034},    {"RTX-5090", 32607}, {"RTX-4090", 24564},  {"RTX-3090", 24576},
    };
    std::vector<Gpu> out;
    for (const auto& [name, m] : mib) out.push_back({name, m / 1024.0});
    return out;
  }();
  return t;
}

// SGLang v0.5.9's --mem-fraction-static default (server_args.py): what a GPU keeps back for activations and graphs.
double sglangMemFraction(double gpuGib, int tp) {
  const double mib = gpuGib * 1024.0;
  double chunked = 2048, graphBs = 8;
  if (gpuGib >= 160)
    chunked = 16384, graphBs = 512;
  else if (gpuGib >= 60)
    chunked = 8192, graphBs = tp >= 4 ? 512 : 256;
  else if (gpuGib >= 35)
    chunked = 4096, graphBs = tp >= 4 ? 160 : 32;
  else if (gpuGib >= 20)
    graphBs = tp >= 4 ? 80 : 24;
  double reserved = 512 + std::max(chunked, 2048.0) * 1.5 + graphBs * 2 + tp / 8.0 * 1024;
  if (gpuGib > 60) reserved = std::max(reserved, 10240.0);
  return std::round((mib - reserved) / mib * 1000.0) / 1000.0;
}

nlohmann::json opt(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}
nlohmann::json opt(const std::optional<std::int64_t>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

}  // namespace

std::string fixed2(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

std::string formatGib(double bytes) {
  std::string s = fixed2(bytes / kGiB);
  while (s.size() > 1 && s.back() == '0' && s[s.size() - 2] != '.') s.pop_back();
  return s;
}

std::string_view engineName(Engine e) {
  switch (e) {
    case Engine::LlamaCpp:
      return "llamacpp";
    case Engine::Vllm:
      return "vllm";
    case Engine::Sglang:
      return "sglang";
  }
  return "?";
}

Engine parseEngine(std::string_view name) {
  for (const Engine e : {Engine::LlamaCpp, Engine::Vllm, Engine::Sglang})
    if (name == engineName(e)) return e;
  throw ConfigError("engine", fmt::format("unknown engine `{}` (llamacpp, vllm, sglang)", name));
}

const std::vector<std::string>& engineVersions(Engine e) {
  static const std::vector<std::string> llama{"82bb485"}, vllm{"0.24", "0.33", "0.34"}, sglang{"0.5.9"};
  return e == Engine::Vllm ? vllm : e == Engine::Sglang ? sglang : llama;
}

const std::vector<Gpu>& knownGpus() {
  return gpuTable();
}

const Gpu& findGpu(std::string_view name) {
  for (const Gpu& g : gpuTable())
    if (name == g.name) return g;
  std::vector<std::string> names;
  for (const Gpu& g : gpuTable()) names.push_back(g.name);
  throw ConfigError("gpu", fmt::format("unknown GPU `{}` ({}); or give the KV memory with --kv-memory-gib", name,
                                       fmt::join(names, ", ")));
}

std::vector<std::string> defaultSpecs(Engine e) {
  switch (e) {
    case Engine::LlamaCpp:
      return {"dynamic", "llamacpp:type_k=q8_0,type_v=q8_0", "llamacpp:type_k=q4_0,type_v=q4_0"};
    case Engine::Vllm:
      return {"dynamic", "fp8", "vllm:kv=nvfp4", "vllm:kv=turboquant_k8v4"};
    case Engine::Sglang:
      return {"dynamic", "fp8"};
  }
  return {"dynamic"};
}

Plan makePlan(const ModelLayout& model, const std::vector<std::string>& specs, const PlanOptions& o) {
  Plan plan;
  plan.engine = o.engine;
  plan.model = model;
  plan.options = o;
  const auto& versions = engineVersions(o.engine);
  plan.engineVersion = o.engineVersion.empty() ? versions.back() : o.engineVersion;
  if (std::find(versions.begin(), versions.end(), plan.engineVersion) == versions.end())
    throw ConfigError("engine-version",
                      fmt::format("{} version `{}` is not one the planner knows ({})", engineName(o.engine),
                                  plan.engineVersion, fmt::join(versions, ", ")));
  if (o.parallel < 1 || o.parallel > 256)
    throw ConfigError("parallel", "--parallel must be 1 to 256 (llama.cpp's limit)");
  if (o.tp < 1) throw ConfigError("tp", "--tp must be at least 1");
  if (o.pageSize < 1) throw ConfigError("page-size", "--page-size must be at least 1");
  if (o.ctx < 0 || (o.maxModelLen && *o.maxModelLen < 1))
    throw ConfigError("ctx", "the context length must be positive");
  if (model.layers.empty()) throw ConfigError("model", "the model has no layers");

  // The KV budget: given, or the GPU's share less the weights and a reserve. vLLM and SGLang need one; llama.cpp
  // takes one to say what context fits.
  double kvBytes = 0;
  if (o.kvMemoryGib) {
    if (!(*o.kvMemoryGib > 0)) throw ConfigError("kv-memory-gib", "--kv-memory-gib must be positive");
    kvBytes = std::round(*o.kvMemoryGib * kGiB);
    plan.memoryNotes.push_back(fmt::format("KV memory per GPU: {} GiB (given)", *o.kvMemoryGib));
  } else if (!o.gpu.empty()) {
    const Gpu& g = findGpu(o.gpu);
    const double weights = model.weightBytes ? static_cast<double>(*model.weightBytes) / o.tp : 0;
    if (!model.weightBytes)
      plan.memoryNotes.push_back("the weights' size is unknown (a bare config.json): counted as 0");
    const double total = g.memoryGib * kGiB;
    if (o.engine == Engine::Vllm) {
      const double util = o.gpuMemoryUtilization.value_or(0.92);
      kvBytes = std::ceil(total * util) - weights - o.activationReserveGib * kGiB;
      plan.memoryNotes.push_back(fmt::format(
          "{}: {:.2f} GiB x {} utilization - weights {:.2f} GiB per GPU - {} GiB for activations and CUDA graphs (an "
          "estimate: vLLM's log line \"Available KV cache memory\" is the exact figure; give it with --kv-memory-gib)",
          g.name, g.memoryGib, util, weights / kGiB, o.activationReserveGib));
      plan.memoryNotes.push_back(fmt::format("Available KV cache memory: {} GiB", formatGib(kvBytes)));
    } else if (o.engine == Engine::Sglang) {
      const double mfs = o.gpuMemoryUtilization.value_or(sglangMemFraction(g.memoryGib, o.tp));
      kvBytes = total * mfs - weights;
      plan.memoryNotes.push_back(fmt::format(
          "{}: {:.2f} GiB x mem_fraction_static {} - weights {:.2f} GiB per GPU (SGLang measures free memory before "
          "and after loading: the planner takes the whole GPU as free)",
          g.name, g.memoryGib, mfs, weights / kGiB));
    } else {
      kvBytes = total - weights;
      plan.memoryNotes.push_back(
          fmt::format("{}: {:.2f} GiB - weights {:.2f} GiB for the cache (llama.cpp's compute "
                      "buffers not counted)",
                      g.name, g.memoryGib, weights / kGiB));
    }
    if (kvBytes <= 0)
      throw ConfigError("gpu", fmt::format("{} GiB on {} leave no memory for the KV cache after the weights "
                                           "({:.2f} GiB per GPU)",
                                           fixed2(g.memoryGib), g.name, weights / kGiB));
  } else if (o.engine != Engine::LlamaCpp) {
    throw ConfigError("kv-memory-gib", fmt::format("{} needs the KV cache's memory: --kv-memory-gib GIB (vLLM's "
                                                   "\"Available KV cache memory\") or --gpu NAME",
                                                   engineName(o.engine)));
  }
  if (kvBytes > 0) plan.kvMemoryGib = kvBytes / kGiB;
  const std::int64_t length = o.maxModelLen.value_or(model.contextLength);

  // vllm serve's --max-num-batched-tokens by GPU (engine/arg_utils.py): 16384 from 160 GiB, 8192 from 70 GiB but on
  // an A100, 2048 below; 8192 (an H100's) without a GPU named.
  PlanOptions vo = o;
  if (o.engine == Engine::Vllm && !o.maxNumBatchedTokens) {
    vo.maxNumBatchedTokens = 8192;
    if (!o.gpu.empty()) {
      const Gpu& g = findGpu(o.gpu);
      vo.maxNumBatchedTokens = g.memoryGib >= 160                                 ? 16384
                               : g.memoryGib >= 70 && !g.name.starts_with("A100") ? 8192
                                                                                  : 2048;
    }
  }
  for (const std::string& spec : specs) {
    const cache::CacheConfig cfg = cache::parseSpec(spec);
    ConfigPlan c = o.engine == Engine::LlamaCpp ? detail::planLlamaCpp(model, cfg, o)
                   : o.engine == Engine::Vllm   ? detail::planVllm(model, cfg, vo, kvBytes, plan.engineVersion)
                                                : detail::planSglang(model, cfg, o, kvBytes);
    c.spec = spec;
    if (c.expressible && o.engine != Engine::LlamaCpp && c.kvTokens) {
      c.fitTokens = c.kvTokens;
      c.fitRequests = c.maxConcurrency
                          ? *c.maxConcurrency
                          : static_cast<double>(*c.kvTokens) / static_cast<double>(std::max<std::int64_t>(1, length));
    }
    if (c.expressible && o.engine == Engine::LlamaCpp && kvBytes > 0) {
      // The largest -c (in steps of 256) whose cache and states fit the budget.
      const auto cacheBytes = [&](std::int64_t ctx) {
        PlanOptions q = o;
        q.ctx = ctx;
        const ConfigPlan r = detail::planLlamaCpp(model, cfg, q);
        return std::pair{(r.kvMib.value_or(0) + r.stateMib.value_or(0)) * 1024.0 * 1024.0, r.kvTokens.value_or(0)};
      };
      std::int64_t lo = 1, hi = std::int64_t{1} << 16, best = 0;
      while (lo <= hi) {
        const std::int64_t mid = (lo + hi) / 2;
        if (cacheBytes(mid * 256).first <= kvBytes)
          best = mid, lo = mid + 1;
        else
          hi = mid - 1;
      }
      c.fitTokens = best > 0 ? cacheBytes(best * 256).second : 0;
      c.fitRequests = static_cast<double>(*c.fitTokens) / static_cast<double>(std::max<std::int64_t>(1, length));
      c.notes.push_back(
          fmt::format("the largest context whose cache fits {} GiB: -c {}", fixed2(kvBytes / kGiB), *c.fitTokens));
    }
    plan.configs.push_back(std::move(c));
  }
  return plan;
}

std::string planJson(const Plan& p) {
  using nlohmann::json;
  json layers = json::array();
  for (const LayerSpec& s : p.model.layers) {
    json l{{"index", s.index}, {"kind", std::string(layerKindName(s.kind))}};
    const bool attn = s.kind != LayerKind::Linear;
    l["kv_heads"] = attn ? json(s.kvHeads) : json(nullptr);
    l["head_dim_k"] = attn ? json(s.headDimK) : json(nullptr);
    l["head_dim_v"] = attn && s.kind != LayerKind::Mla ? json(s.headDimV) : json(nullptr);
    l["window"] = s.window > 0 ? json(s.window) : json(nullptr);
    if (s.kind == LayerKind::Shared) l["shared_from"] = s.sharedFrom;
    if (s.kind == LayerKind::Mla) l["latent"] = s.latent, l["rope_dim"] = s.ropeDim;
    if (s.indexDim > 0) l["index_dim"] = s.indexDim;
    if (s.kind == LayerKind::Linear)
      l["conv_kernel"] = s.convKernel, l["conv_channels"] = s.convChannels, l["state_heads"] = s.stateHeads,
      l["state_dim_k"] = s.stateDimK, l["state_dim_v"] = s.stateDimV;
    layers.push_back(std::move(l));
  }
  json configs = json::array();
  for (const ConfigPlan& c : p.configs) {
    configs.push_back({{"spec", c.spec},
                       {"engine_type", c.engineType.empty() ? json(nullptr) : json(c.engineType)},
                       {"expressible", c.expressible},
                       {"bytes_per_token", opt(c.bytesPerToken)},
                       {"k_mib", opt(c.kMib)},
                       {"v_mib", opt(c.vMib)},
                       {"kv_mib", opt(c.kvMib)},
                       {"state_mib", opt(c.stateMib)},
                       {"cells", opt(c.cells)},
                       {"swa_cells", opt(c.swaCells)},
                       {"block_size", opt(c.blockSize)},
                       {"blocks", opt(c.blocks)},
                       {"kv_tokens", opt(c.kvTokens)},
                       {"max_concurrency", opt(c.maxConcurrency)},
                       {"fit_tokens", opt(c.fitTokens)},
                       {"fit_requests", opt(c.fitRequests)},
                       {"log", c.log},
                       {"notes", c.notes}});
  }
  json model{{"arch", p.model.arch},
             {"name", p.model.name},
             {"source", p.model.source},
             {"dtype", p.model.dtype},
             {"context_length", p.model.contextLength},
             {"weight_bytes", p.model.weightBytes ? json(*p.model.weightBytes) : json(nullptr)},
             {"layers", std::move(layers)}};
  json out{{"engine", std::string(engineName(p.engine))},
           {"engine_version", p.engineVersion},
           {"model", std::move(model)},
           {"kv_memory_gib", opt(p.kvMemoryGib)},
           {"memory_notes", p.memoryNotes},
           {"configs", std::move(configs)}};
  return out.dump(2) + "\n";
}

}  // namespace kvscope::plan
