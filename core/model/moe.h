// A mixture-of-experts feed-forward block: a router scores every expert, each token runs through the `topK` best, and
// their gated outputs are summed with the router's weights. Qwen3-MoE's sparse MLP: softmax over every expert, the top
// k (renormalized to sum to 1 with normTopK), SwiGLU experts (transformers' Qwen3MoeSparseMoeBlock; llama.cpp's
// build_moe_ffn with softmax gating). gpt-oss's: a router with a bias, the top k logits softmaxed among themselves,
// experts with biases and the clamped SwiGLU (transformers' GptOssMLP; llama.cpp's softmax_weight gating and
// swiglu_oai). Expert by expert in ascending order, as transformers adds them.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "model/model_config.h"
#include "model/weight.h"

namespace kvscope::model {

struct MoeFfn {
  Weight router;                       ///< [experts, hidden]
  std::vector<Weight> gate, up, down;  ///< per expert: [ff, hidden], [ff, hidden], [hidden, ff]
  /// Biases (undefined where the model has none): the router's [experts], the experts' [experts, ff] (gate, up) and
  /// [experts, hidden] (down), in the activations' dtype.
  at::Tensor routerBias, gateBias, upBias, downBias;
  /// Gemma 4's router (MoeConfig::gemmaRouter; undefined otherwise): the scale [hidden] of its input, which is RMS
  /// normed over routerEps without a weight and multiplied by 1/sqrt(hidden), and each expert's scale [experts] of
  /// its renormalized weight.
  at::Tensor routerScale, expertScale;
  double routerEps = 1e-6;
  int topK = 0;
  bool normTopK = false;
  MoeGating gating = MoeGating::Softmax;
  FfnAct act = FfnAct::Silu;
  double swigluLimit = 0.0;

  /// x [..., hidden] -> [..., hidden] in x's dtype. The chosen experts' indices come to the host (one counted copy,
  /// device::toHost) to decide which matrices run. `routerInput` (defined): what the router reads instead of x
  /// (Gemma 4 routes on the layer's un-normed residual and feeds the experts its own norm of it).
  at::Tensor forward(const at::Tensor& x, Activations a, const at::Tensor& routerInput = {}) const;
};

/// A gated FFN's activation on its gate and up projections (biases added): silu(g) * u, gelu_tanh(g) * u, or
/// gpt-oss's clamped SwiGLU (FfnAct::SwigluOai, clamped at `limit`).
at::Tensor gatedActivation(const at::Tensor& g, const at::Tensor& u, FfnAct act, double limit);

}  // namespace kvscope::model
