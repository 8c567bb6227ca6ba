// A random 2-layer llama GGUF for the tests of the execution context (unit: the CPU's device path; gpu: CUDA),
// written once per process into the temporary folder; and what those tests read of it.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

#include "gguf_writer.h"
#include "model/llama.h"

namespace kvscope::testutil {

// A random 2-layer llama in F32: hidden 64, 4 heads of 16, 2 KV heads (GQA), FFN 96, vocab 96.
inline std::string randomModel() {
  static const std::string path = [] {
    at::manual_seed(7);
    const std::vector<std::pair<std::string, std::vector<std::uint64_t>>> plan = {
        {"token_embd.weight", {64, 96}},        {"output_norm.weight", {64}},
        {"blk.0.attn_norm.weight", {64}},       {"blk.0.attn_q.weight", {64, 64}},
        {"blk.0.attn_k.weight", {64, 32}},      {"blk.0.attn_v.weight", {64, 32}},
        {"blk.0.attn_output.weight", {64, 64}}, {"blk.0.ffn_norm.weight", {64}},
        {"blk.0.ffn_gate.weight", {64, 96}},    {"blk.0.ffn_up.weight", {64, 96}},
        {"blk.0.ffn_down.weight", {96, 64}},    {"blk.1.attn_norm.weight", {64}},
        {"blk.1.attn_q.weight", {64, 64}},      {"blk.1.attn_k.weight", {64, 32}},
        {"blk.1.attn_v.weight", {64, 32}},      {"blk.1.attn_output.weight", {64, 64}},
        {"blk.1.ffn_norm.weight", {64}},        {"blk.1.ffn_gate.weight", {64, 96}},
        {"blk.1.ffn_up.weight", {64, 96}},      {"blk.1.ffn_down.weight", {96, 64}},
    };
    const std::vector<std::pair<std::string, std::uint32_t>> ints = {
        {"block_count", 2},          {"embedding_length", 64},
        {"attention.head_count", 4}, {"attention.head_count_kv", 2},
        {"feed_forward_length", 96}, {"context_length", 512}};
    GgufWriter g;
    g.header(plan.size(), 1 + ints.size());
    g.kvStr("general.architecture", "llama");
    for (const auto& [k, v] : ints) g.kvU32("llama." + k, v);
    g.f32Infos(plan);
    g.f32Data(plan, [](const std::string& name, std::int64_t n) {
      // Norms around 1, matrices with std 0.25: logits spread widely enough that greedy picks are not near-ties.
      const bool norm = name.find("norm") != std::string::npos;
      const at::Tensor v = (norm ? 1 + 0.1 * at::randn({n}) : 0.25 * at::randn({n})).contiguous();
      return std::vector<float>(v.data_ptr<float>(), v.data_ptr<float>() + n);
    });
    // One file per process: ctest runs the tests of a binary as processes side by side.
    return g.write("random_model.gguf");
  }();
  return path;
}

/// n token ids of the random model's vocabulary, spread over it.
inline std::vector<std::int64_t> prompt(int n) {
  std::vector<std::int64_t> p;
  for (int i = 0; i < n; ++i) p.push_back((i * 37 + 11) % 96);
  return p;
}

/// Every logit vector of a greedy run: the prefill's last and each decode step's, through `cfg`.
inline std::vector<at::Tensor> stepLogits(const model::LlamaModel& m, const cache::CacheConfig& cfg,
                                          const std::vector<std::int64_t>& ids, int steps) {
  auto kv = m.makeCache(cfg);
  std::vector<at::Tensor> out;
  at::Tensor x = model::idsTensor(ids, 0, ids.size());
  for (int s = 0; s <= steps; ++s) {
    model::ForwardOptions o;
    o.lastLogitsOnly = true;
    const at::Tensor l = m.forward(x, *kv, o).select(0, 0).select(0, -1);
    out.push_back(l);
    x = at::full({1, 1}, l.argmax().item<std::int64_t>(), at::kLong);
  }
  return out;
}

}  // namespace kvscope::testutil
