// `kvscope-cli generate`: the embedded (or any GGUF) model, a cache SPEC, streamed text, and what the cache did.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/runtime.h"
#include "generate/generate.h"
#include "model/gguf.h"
#include "model/llama.h"
#include "runtime/model_loader.h"
#include "tokenizer/tokenizer.h"

namespace kvscope::cli {

namespace {

CancelToken gInterrupted;  // Ctrl-C

struct GenOpts {
  std::string model, spec = "dynamic", prompt, promptFile;
  ModelChoice how;
  bool chat = false, sample = false, json = false, shadow = false;
  int maxNew = 64, topK = 0, threads = 0, beams = 0;
  std::int64_t prefillChunk = -1;
  double lengthPenalty = 1.0;
  std::string earlyStopping = "false";
  double temperature = 1.0, topP = 1.0;
  std::uint64_t seed = 0;
};

}  // namespace

Runner addGenerate(CLI::App& app) {
  auto o = std::make_shared<GenOpts>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text with a quantized KV cache and report what it did");
  cmd->add_option("--model", o->model, "GGUF model (default: the embedded SmolLM2-135M-Instruct)");
  cmd->add_option("--cache", o->spec, "cache SPEC or JSON config (default: dynamic)");
  auto* p = cmd->add_option("--prompt", o->prompt, "prompt text");
  cmd->add_option("--prompt-file", o->promptFile, "read the prompt from a file")->excludes(p);
  cmd->add_flag("--chat", o->chat, "wrap the prompt in the model's chat template (user turn)");
  cmd->add_option("--max-new", o->maxNew, "tokens to generate")->check(CLI::Range(0, 1 << 20));
  auto* sample = cmd->add_flag("--sample", o->sample, "sample instead of greedy decoding");
  cmd->add_option("--beams", o->beams, "beam search with this many beams (transformers' algorithm)")
      ->check(CLI::Range(1, 64))
      ->excludes(sample);
  cmd->add_option("--length-penalty", o->lengthPenalty, "beam search: score / generated_length ** penalty");
  cmd->add_option("--early-stopping", o->earlyStopping, "beam search: true, false or never")
      ->check(CLI::IsMember({"true", "false", "never"}));
  cmd->add_option("--temperature", o->temperature, "sampling temperature (> 0)");
  cmd->add_option("--top-k", o->topK, "sampling: keep the k best tokens (0: all)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", o->topP, "sampling: nucleus mass (0, 1]");
  cmd->add_option("--seed", o->seed, "sampling seed (same seed, same text)");
  addModelOptions(cmd, o->how);
  cmd->add_option("--threads", o->threads, "CPU threads (0: LibTorch's default)")->check(CLI::NonNegativeNumber);
  cmd->add_option(
         "--prefill-chunk", o->prefillChunk,
         "prompt tokens per forward pass (0: one shot; default: 512 in fused mode, one shot in reference mode)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 20));
  cmd->add_flag("--shadow", o->shadow,
                "also run an unquantized cache on the same tokens: per-step KL, top-1 agreement");
  cmd->add_flag("--json", o->json, "one JSON object per step, then a summary object");
  return [o, cmd]() {
    if (!*cmd) return -1;
    const cache::CacheConfig cfg = cache::parseSpec(o->spec);  // a bad SPEC fails before the model loads
    const std::string text = promptText(o->prompt, o->promptFile);
    if (o->threads > 0) at::set_num_threads(o->threads);
    std::signal(SIGINT, [](int) { gInterrupted.request(); });
    const runtime::Session m = openSession(o->model, o->how);
    const tokenizer::Tokenizer& tok = m.tokenizer();
    const std::vector<std::int64_t> prompt = m.encodePrompt(text, o->chat);
    auto kv = m.model().makeCache(cfg);

    if (o->beams > 0) {
      if (o->shadow) throw UsageError("--shadow applies to greedy and sampled decoding, not to --beams");
      generate::BeamOptions bo;
      bo.numBeams = o->beams;
      bo.lengthPenalty = o->lengthPenalty;
      bo.earlyStopping = o->earlyStopping;
      bo.prefillChunk = o->prefillChunk;
      const auto br = generate::beamSearch(
          m.model(), *kv, prompt, o->maxNew, bo, m.stopIds(),
          [&](const generate::BeamStepEvent& ev) {
            if (o->json)
              std::cout << nlohmann::json{{"step", ev.step},         {"parents", ev.parents},
                                          {"tokens", ev.tokens},     {"scores", ev.scores},
                                          {"finished", ev.finished}, {"kv_stored_bytes", ev.memory.stored()}}
                               .dump()
                        << "\n";
            return true;
          },
          &gInterrupted);
      for (std::size_t b = 0; b < br.sequences.size(); ++b) {
        const std::vector<std::int32_t> ids(br.sequences[b].begin(), br.sequences[b].end());
        const std::string t = tok.decode(ids, true);
        if (o->json)
          std::cout << nlohmann::json{{"beam", b}, {"score", br.scores[b]}, {"tokens", br.sequences[b]}, {"text", t}}
                           .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                    << "\n";
        else if (b == 0)
          std::cout << t << "\n";
        else
          std::cerr << fmt::format("[beam {} score {:.4f}] {}\n", b, br.scores[b], t);
      }
      const auto mem = kv->totalMemory();
      if (!o->json)
        std::cerr << fmt::format("[{}] {} beams, {:.2f}s; best score {:.4f}; KV stored {:.2f} MiB ({:.2f}x)\n",
                                 cache::toSpec(cfg), o->beams, br.seconds, br.scores.empty() ? 0.0f : br.scores[0],
                                 mem.stored() / 1048576.0, mem.compressionRatio());
      return br.stopReason == generate::StopReason::Cancelled ? 130 : 0;
    }
    generate::GenerateOptions go;
    go.maxNew = o->maxNew;
    go.sampling.greedy = !o->sample;
    go.sampling.temperature = o->temperature;
    go.sampling.topK = o->topK;
    go.sampling.topP = o->topP;
    go.sampling.seed = o->seed;
    go.stopIds = m.stopIds();
    go.shadow = o->shadow;
    go.prefillChunk = o->prefillChunk;

    std::vector<std::int32_t> out;
    std::string printed;
    const auto r = generate::generate(
        m.model(), *kv, prompt, go,
        [&](const generate::StepEvent& ev) {
          out.push_back(static_cast<std::int32_t>(ev.token));
          if (o->json) {
            nlohmann::json top = nlohmann::json::array();
            for (const auto& [id, lp] : ev.top)
              top.push_back({{"id", id}, {"text", tok.tokenText(static_cast<std::int32_t>(id))}, {"logprob", lp}});
            std::cout << nlohmann::json{{"step", ev.step},
                                        {"token", ev.token},
                                        {"text", tok.tokenText(static_cast<std::int32_t>(ev.token))},
                                        {"logprob", ev.logprob},
                                        {"top", top},
                                        {"kv_stored_bytes", ev.memory.stored()},
                                        {"kv_held_bytes", ev.memory.held()},
                                        {"seconds", ev.seconds},
                                        {"kl", o->shadow ? nlohmann::json(ev.kl) : nlohmann::json()},
                                        {"top1_agrees", o->shadow ? nlohmann::json(ev.top1Agrees) : nlohmann::json()}}
                             .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                      << "\n";
          } else {
            // Print what the whole decode adds, so multi-byte characters split over tokens come out whole.
            const std::string now = tok.decode(out, /*skipSpecial=*/true);
            if (now.size() > printed.size() && now.compare(0, printed.size(), printed) == 0) {
              std::cout << now.substr(printed.size()) << std::flush;
              printed = now;
            }
          }
          return true;
        },
        &gInterrupted);

    const auto [overflow, nonFinite] = kv->overflowTotals();
    const cache::TensorMemory mem = kv->totalMemory();
    const double decodeTps = r.tokens.size() > 1 ? (r.tokens.size() - 1) / r.decodeSeconds : 0.0;
    const double prefillTps = r.prefillSeconds > 0 ? r.promptTokens / r.prefillSeconds : 0.0;
    if (o->json) {
      std::cout << nlohmann::json{{"summary", true},
                                  {"cache", cache::toSpec(cfg)},
                                  {"run_as", m.runAs()},
                                  {"prompt_tokens", r.promptTokens},
                                  {"new_tokens", r.tokens.size()},
                                  {"stop_reason", generate::stopReasonName(r.stopReason)},
                                  {"prefill_tok_s", prefillTps},
                                  {"decode_tok_s", decodeTps},
                                  {"kv_bytes",
                                   {{"payload", mem.payload},
                                    {"metadata", mem.metadata},
                                    {"residual", mem.residual},
                                    {"transient", mem.transient},
                                    {"reserved", mem.reserved},
                                    {"unquantized", mem.unquantized}}},
                                  {"overflow", overflow},
                                  {"mean_kl", o->shadow ? nlohmann::json(r.meanKl) : nlohmann::json()},
                                  {"max_kl", o->shadow ? nlohmann::json(r.maxKl) : nlohmann::json()},
                                  {"top1_agreement", o->shadow ? nlohmann::json(r.top1Agreement) : nlohmann::json()},
                                  {"first_divergence",
                                   o->shadow ? nlohmann::json(r.firstDivergence) : nlohmann::json()},
                                  {"non_finite", nonFinite},
                                  {"text", tok.decode(out, true)}}
                       .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                << "\n";
    } else {
      std::cout << "\n";
      std::cerr << fmt::format(
          "[{}] {} prompt + {} new tokens ({}); prefill {:.1f} tok/s, decode {:.1f} tok/s; KV stored {:.2f} MiB vs "
          "{:.2f} MiB unquantized ({:.2f}x), held {:.2f} MiB; overflow {}, NaN/inf {}; {}{}\n",
          cache::toSpec(cfg), r.promptTokens, r.tokens.size(), generate::stopReasonName(r.stopReason), prefillTps,
          decodeTps, mem.stored() / 1048576.0, mem.unquantized / 1048576.0, mem.compressionRatio(),
          mem.held() / 1048576.0, overflow, nonFinite, m.arithmetic(),
          m.kernelsLine().empty() ? "" : "; " + m.kernelsLine());
      if (o->shadow)
        std::cerr << fmt::format(
            "[shadow] mean KL {:.4g}, max KL {:.4g}, top-1 agreement {:.1f}%, first divergence {}\n", r.meanKl, r.maxKl,
            100.0 * r.top1Agreement,
            r.firstDivergence < 0 ? std::string("none") : fmt::format("at step {}", r.firstDivergence));
    }
    return r.stopReason == generate::StopReason::Cancelled ? 130 : 0;
  };
}

}  // namespace kvscope::cli
