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

// A random 2-layer llama in F32 of the given shape (head size hidden / heads), written once per process and shape into
// the temporary folder as `name`.
struct RandomShape {
  std::uint64_t hidden = 64, heads = 4, kvHeads = 2, ffn = 96, vocab = 96;
  std::uint32_t context = 512;
};
inline std::string writeRandomModel(const RandomShape& s, const std::string& name) {
  at::manual_seed(7);
  const std::uint64_t d = s.hidden / s.heads, kv = d * s.kvHeads;
  std::vector<std::pair<std::string, std::vector<std::uint64_t>>> plan = {{"token_embd.weight", {s.hidden, s.vocab}},
                                                                          {"output_norm.weight", {s.hidden}}};
  for (int l = 0; l < 2; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    for (auto& [n, shape] :
         std::vector<std::pair<std::string, std::vector<std::uint64_t>>>{{"attn_norm.weight", {s.hidden}},
                                                                         {"attn_q.weight", {s.hidden, s.hidden}},
                                                                         {"attn_k.weight", {s.hidden, kv}},
                                                                         {"attn_v.weight", {s.hidden, kv}},
                                                                         {"attn_output.weight", {s.hidden, s.hidden}},
                                                                         {"ffn_norm.weight", {s.hidden}},
                                                                         {"ffn_gate.weight", {s.hidden, s.ffn}},
                                                                         {"ffn_up.weight", {s.hidden, s.ffn}},
                                                                         {"ffn_down.weight", {s.ffn, s.hidden}}})
      plan.emplace_back(b + n, shape);
  }
  const std::vector<std::pair<std::string, std::uint32_t>> ints = {
      {"block_count", 2},
      {"embedding_length", static_cast<std::uint32_t>(s.hidden)},
      {"attention.head_count", static_cast<std::uint32_t>(s.heads)},
      {"attention.head_count_kv", static_cast<std::uint32_t>(s.kvHeads)},
      {"feed_forward_length", static_cast<std::uint32_t>(s.ffn)},
      {"context_length", s.context}};
  GgufWriter g;
  g.header(plan.size(), 1 + ints.size());
  g.kvStr("general.architecture", "llama");
  for (const auto& [k, v] : ints) g.kvU32("llama." + k, v);
  g.f32Infos(plan);
  g.f32Data(plan, [](const std::string& n, std::int64_t count) {
    // Norms around 1, matrices with std 0.25: logits spread widely enough that greedy picks are not near-ties.
    const bool norm = n.find("norm") != std::string::npos;
    const at::Tensor v = (norm ? 1 + 0.1 * at::randn({count}) : 0.25 * at::randn({count})).contiguous();
    return std::vector<float>(v.data_ptr<float>(), v.data_ptr<float>() + count);
  });
  // One file per process: ctest runs the tests of a binary as processes side by side.
  return g.write(name);
}

// A random 2-layer llama in F32: hidden 64, 4 heads of 16, 2 KV heads (GQA), FFN 96, vocab 96.
inline std::string randomModel() {
  static const std::string path = writeRandomModel({}, "random_model.gguf");
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
