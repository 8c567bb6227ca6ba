#include "runtime/session.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cache/kv_cache.h"
#include "device/context.h"
#include "kernels/cpu/simd.h"
#include "runtime/model_loader.h"
#include "util/error.h"
#include "util/metrics.h"

namespace kvscope::runtime {

model::Activations resolveActivations(const std::string& choice, const model::LlamaModel& model) {
  if (choice == "auto") return model.blockWeights() ? model::Activations::Q8 : model::Activations::F32;
  return model::parseActivations(choice);
}

Session Session::open(const LoadOptions& o, const model::ProgressFn& progress) {
  checkLoadOptions(o);  // bad values are one line before the device is probed or anything is read
  const device::ExecutionContext ctx = device::makeContext(o.device, parseDtype(o.dtype));
  LoadedModel loaded = loadModel(o.path, ctx, progress, model::parseWeightFormat(o.weights));
  Session s;
  s.options_ = o;
  s.path_ = std::move(loaded.path);
  s.model_ = std::move(loaded.model);
  s.tokenizer_ = std::move(loaded.tokenizer);
  s.model_->setActivations(resolveActivations(o.activations, *s.model_));
  s.stopIds_ = {s.tokenizer_->eosId()};
  // ChatML's, Gemma's and harmony's ends of a turn (gpt-oss: <|return|> and <|call|>, not <|end|>, which closes its
  // analysis channel before the final one, as llama.cpp's end-of-generation list has it).
  for (const char* end : {"<|im_end|>", "<end_of_turn>", "<|return|>", "<|call|>"})
    if (const auto e = s.tokenizer_->tokenId(end); e && *e != s.tokenizer_->eosId()) s.stopIds_.push_back(*e);
  return s;
}

Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;
Session::~Session() = default;

std::string Session::arithmetic() const {
  return activations() == model::Activations::Q8 ? "q8 activations (llama.cpp's arithmetic)"
                                                 : "f32 activations (transformers' arithmetic)";
}

std::string Session::kernelsLine() const {
  return model_->context().device().is_cpu() ? "CPU kernels: " + kernels::isaSummary() : std::string();
}

nlohmann::json Session::runAs() const {
  return {{"dtype", options_.dtype},
          {"activations", model::activationsName(activations())},
          {"device", options_.device},
          {"weights", options_.weights}};
}

std::vector<std::int64_t> Session::encodePrompt(const std::string& text, bool chat) const {
  // Gemma's turns where its vocabulary has them (Gemma 3), harmony where its has those (gpt-oss), ChatML otherwise
  // (SmolLM2, Qwen).
  const bool gemma = tokenizer_->tokenId("<start_of_turn>").has_value();
  const bool harmony = tokenizer_->tokenId("<|channel|>").has_value() && tokenizer_->tokenId("<|start|>").has_value();
  const std::string t = !chat     ? text
                        : gemma   ? tokenizer::applyGemmaChat({{"user", text}}, true)
                        : harmony ? tokenizer::applyHarmonyChat({{"user", text}}, true)
                                  : tokenizer::applyChatML({{"user", text}}, true);
  const auto ids = tokenizer_->encode(t, /*addSpecial=*/true, /*parseSpecial=*/chat);
  if (ids.empty()) throw Error(ErrorCode::BadInput, "the prompt encodes to no tokens");
  return {ids.begin(), ids.end()};
}

std::vector<std::int64_t> Session::encodeText(const std::string& text, const std::string& what) const {
  const auto ids = tokenizer_->encode(text, /*addSpecial=*/true, /*parseSpecial=*/false);
  if (ids.size() < 2) throw Error(ErrorCode::BadInput, fmt::format("`{}` encodes to fewer than 2 tokens", what));
  return {ids.begin(), ids.end()};
}

void Session::checkContext(std::size_t promptTokens, int maxNew) const {
  const auto ctx = model_->config().contextLength;
  if (ctx > 0 && static_cast<std::int64_t>(promptTokens) + maxNew > ctx)
    throw Error(ErrorCode::BadInput, fmt::format("prompt ({} tokens) + {} new tokens exceed the model's context of {}",
                                                 promptTokens, maxNew, ctx));
}

double Session::perplexity(const cache::CacheConfig& cfg, const std::vector<std::int64_t>& ids, int chunk) const {
  if (ids.size() < 2) return 0.0;
  if (chunk < 1) throw Error(ErrorCode::BadInput, fmt::format("perplexity: chunk must be >= 1, got {}", chunk));
  cache::StatsOptions quiet;
  quiet.enabled = false;
  auto kv = model_->makeCache(cfg, quiet);
  double nll = 0.0;
  std::int64_t counted = 0;
  const std::int64_t n = static_cast<std::int64_t>(ids.size());
  for (std::int64_t start = 0; start < n - 1; start += chunk) {
    const std::int64_t len = std::min<std::int64_t>(chunk, n - 1 - start);
    const at::Tensor logp =
        model_->forward(model::idsTensor(ids, static_cast<std::size_t>(start), static_cast<std::size_t>(len)), *kv)[0]
            .log_softmax(-1);
    const at::Tensor next = model_->context().place(
        at::tensor(std::vector<std::int64_t>(ids.begin() + start + 1, ids.begin() + start + 1 + len), at::kLong));
    nll -= logp.gather(1, next.view({-1, 1})).sum().item<double>();
    counted += len;
  }
  return kvscope::perplexity(nll, counted);
}

}  // namespace kvscope::runtime
