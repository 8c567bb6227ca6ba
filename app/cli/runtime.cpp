#include "cli/runtime.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cache/kv_cache.h"
#include "cli/commands.h"
#include "model/gguf.h"
#include <CLI/CLI.hpp>

#include "runtime/model_loader.h"
#include "util/metrics.h"

namespace kvscope::cli {

std::string defaultModelPath() { return runtime::defaultModelPath(); }


Loaded loadModel(const std::string& path, const ModelChoice& how) {
  const at::ScalarType dt = runtime::parseDtype(how.dtype);  // usage errors before anything is read
  const model::Activations act = model::parseActivations(how.activations);  // Errors (BadInput) naming the choices
  const std::uint32_t requantize = model::parseWeightFormat(how.weights);
  const device::ExecutionContext ctx = device::makeContext(how.device, dt);
  runtime::LoadedModel r = runtime::loadModel(path, ctx, {}, requantize);
  Loaded m;
  m.path = std::move(r.path);
  m.model = std::move(r.model);
  m.model->setActivations(act);
  m.tok = std::move(r.tokenizer);
  return m;
}

nlohmann::json modelChoiceJson(const ModelChoice& how) {
  return {{"dtype", how.dtype}, {"activations", how.activations}, {"device", how.device}, {"weights", how.weights}};
}

void addModelOptions(CLI::App* cmd, ModelChoice& how) {
  cmd->add_option("--dtype", how.dtype, "activations, norms and biases (weights keep their file's format)")
      ->check(CLI::IsMember(runtime::dtypeNames()));
  cmd->add_option("--activations", how.activations,
                  "how decode steps multiply block-format weights: f32 (transformers' numbers) or q8 (8-bit "
                  "activations per 32 values, as llama.cpp computes; faster with AVX-512 VNNI)")
      ->check(CLI::IsMember({"f32", "q8"}));
  cmd->add_option("--device", how.device,
                  "where the model and its caches run: cpu, or cuda / cuda:N where LibTorch sees a CUDA device "
                  "(weights then in --dtype on the device)");
  cmd->add_option("--weights", how.weights,
                  "stored: every matrix as its file stores it; q8_0, q5_1, q5_0, q4_1, q4_0: float matrices (F32/F16/BF16, e.g. "
                  "a Hugging Face model) quantized at load as llama.cpp's formats, the output matrix kept")
      ->check(CLI::IsMember(model::weightFormatNames()));
}

std::string promptText(const std::string& prompt, const std::string& file) {
  if (!file.empty()) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw UsageError(fmt::format("cannot read prompt file `{}`", file));
    std::stringstream ss;
    ss << in.rdbuf();
    if (ss.str().empty()) throw UsageError(fmt::format("prompt file `{}` is empty", file));
    return ss.str();
  }
  if (prompt.empty()) throw UsageError("empty prompt (give --prompt or --prompt-file)");
  return prompt;
}

std::vector<std::int64_t> encodePrompt(const Loaded& m, const std::string& text, bool chat) {
  const std::string t = chat ? tokenizer::applyChatML({{"user", text}}, true) : text;
  const auto ids = m.tok->encode(t, /*addSpecial=*/true, /*parseSpecial=*/chat);
  if (ids.empty()) throw UsageError("the prompt encodes to no tokens");
  return {ids.begin(), ids.end()};
}

void checkContext(const Loaded& m, std::size_t promptTokens, int maxNew) {
  const auto ctx = m.model->config().contextLength;
  if (ctx > 0 && static_cast<std::int64_t>(promptTokens) + maxNew > ctx)
    throw UsageError(fmt::format("prompt ({} tokens) + {} new tokens exceed the model's context of {}", promptTokens,
                                 maxNew, ctx));
}

std::vector<std::int64_t> stopIds(const Loaded& m) {
  std::vector<std::int64_t> s{m.tok->eosId()};
  if (const auto e = m.tok->tokenId("<|im_end|>"); e && *e != m.tok->eosId()) s.push_back(*e);
  return s;
}

double perplexity(const model::LlamaModel& model, const cache::CacheConfig& cfg, const std::vector<std::int64_t>& ids,
                  int chunk) {
  if (ids.size() < 2) return 0.0;
  cache::StatsOptions quiet;
  quiet.enabled = false;
  auto kv = model.makeCache(cfg, quiet);
  double nll = 0.0;
  std::int64_t counted = 0;
  const std::int64_t n = static_cast<std::int64_t>(ids.size());
  for (std::int64_t start = 0; start < n - 1; start += chunk) {
    const std::int64_t len = std::min<std::int64_t>(chunk, n - 1 - start);
    const at::Tensor logp =
        model.forward(model::idsTensor(ids, static_cast<std::size_t>(start), static_cast<std::size_t>(len)), *kv)[0]
            .log_softmax(-1);
    const at::Tensor next = model.context().place(
        at::tensor(std::vector<std::int64_t>(ids.begin() + start + 1, ids.begin() + start + 1 + len), at::kLong));
    nll -= logp.gather(1, next.view({-1, 1})).sum().item<double>();
    counted += len;
  }
  return kvscope::perplexity(nll, counted);
}

RunFigures measure(const Loaded& m, const cache::CacheConfig& cfg, const std::vector<std::int64_t>& prompt, int maxNew,
                   int pplChunk, bool shadow) {
  RunFigures f;
  f.spec = cache::toSpec(cfg);
  auto kv = m.model->makeCache(cfg);
  generate::GenerateOptions o;
  o.maxNew = maxNew;
  o.shadow = shadow;
  o.stopIds = {};  // the same number of steps for every config
  o.topCandidates = 0;
  const auto r = generate::generate(*m.model, *kv, prompt, o, [&](const generate::StepEvent& ev) {
    f.peakHeld = std::max(f.peakHeld, ev.memory.held());
    return true;
  });
  f.memory = kv->totalMemory();
  f.newTokens = static_cast<int>(r.tokens.size());
  f.prefillTokS = r.prefillSeconds > 0 ? r.promptTokens / r.prefillSeconds : 0;
  f.decodeTokS = r.decodeSeconds > 0 ? (r.tokens.size() - 1) / r.decodeSeconds : 0;
  f.meanKl = r.meanKl;
  f.maxKl = r.maxKl;
  f.top1 = r.top1Agreement;
  f.firstDivergence = r.firstDivergence;
  const cache::OverflowTotals totals = kv->overflowTotals();
  f.overflow = totals.overflow;
  f.nonFinite = totals.nonFinite;
  f.perplexity = perplexity(*m.model, cfg, prompt, pplChunk);
  return f;
}

}  // namespace kvscope::cli
