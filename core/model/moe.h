// A mixture-of-experts feed-forward block (Qwen3-MoE's sparse MLP): a router scores every expert, each token runs
// through the `topK` best by softmax probability, and their SwiGLU outputs are summed with those probabilities
// (renormalized to sum to 1 with normTopK). As transformers' Qwen3MoeSparseMoeBlock computes it, expert by expert in
// ascending order, and as llama.cpp's build_moe_ffn (softmax gating, silu, weights normalized) does.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "model/weight.h"

namespace kvscope::model {

struct MoeFfn {
  Weight router;                       ///< [experts, hidden]
  std::vector<Weight> gate, up, down;  ///< per expert: [ff, hidden], [ff, hidden], [hidden, ff]
  int topK = 0;
  bool normTopK = false;

  /// x [..., hidden] -> [..., hidden] in x's dtype. The chosen experts' indices come to the host (one counted copy,
  /// device::toHost) to decide which matrices run.
  at::Tensor forward(const at::Tensor& x, Activations a) const;
};

}  // namespace kvscope::model
