// What a decoder model is made of (read from GGUF metadata or a Hugging Face config.json): the shared shape and a
// list of layer specs, one per layer, that the forward composes its blocks from. No torch here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvscope::model {

/// A layer's feed-forward block: a dense gated MLP, a mixture of gated experts behind a top-k router, or both side
/// by side with their own norms, their outputs summed (Gemma 4's MoE layers: Gemma4TextDecoderLayer with
/// enable_moe_block).
enum class FfnKind : std::uint8_t { Dense, Moe, DenseAndMoe };

/// The FFN's gate activation: SiLU (Llama, Qwen), GELU with the tanh approximation (Gemma's gelu_pytorch_tanh), or
/// gpt-oss's clamped SwiGLU (ModelConfig::swigluLimit): gate clamped to at most the limit, up to [-limit, limit], then
/// gate * sigmoid(1.702 gate) * (up + 1) (transformers' GptOssExperts, llama.cpp's swiglu_oai).
enum class FfnAct : std::uint8_t { Silu, GeluTanh, SwigluOai };

/// What a layer is made of: causal attention over its cache, over the `window` newest positions (its own included)
/// where window > 0 (a sliding-window layer), rotated by the model's global RoPE or, with localRope, by its local one
/// (Gemma's sliding layers: ropeLocalTheta, unscaled); with `sinks`, a learned logit per query head that joins
/// each softmax's denominator (gpt-oss's attention sinks); and its FFN kind. Gemma 4 adds per-layer shapes: the
/// layer's own head size and KV heads (0: the model's), values projected by the key projection (kEqV: no v_proj; V
/// is the projection before the key norm and RoPE), the dense MLP's own width (0: the model's; Gemma 4's double-wide
/// MLP on shared-KV layers), and shared KV: with kvFrom >= 0 the layer stores nothing and its queries attend over
/// layer kvFrom's cache as that layer attended it in the same step (transformers' num_kv_shared_layers, llama.cpp's
/// n_layer_kv_from_start).
struct LayerSpec {
  std::int64_t window = 0;
  bool localRope = false;
  FfnKind ffn = FfnKind::Dense;
  bool sinks = false;
  int headDim = 0, kvHeads = 0;
  bool kEqV = false;
  int kvFrom = -1;
  int intermediate = 0;
};

/// How the router weighs the experts it picks: Softmax, the softmax over every expert's logit, then the top k
/// (Qwen3-MoE; llama.cpp's gating softmax); TopKSoftmax, the top k logits, then the softmax over those k (gpt-oss;
/// llama.cpp's softmax_weight).
enum class MoeGating : std::uint8_t { Softmax, TopKSoftmax };

/// The experts of the MoE layers (Qwen3-MoE, gpt-oss, Gemma 4): `experts` gated experts of `intermediate` units (the
/// model's FfnAct), each token routed to `used` of them as `gating` says; normTopK renormalizes the chosen weights to
/// sum to 1. The router and the experts may carry biases (gpt-oss).
struct MoeConfig {
  int experts = 0, used = 0, intermediate = 0;
  bool normTopK = false;
  MoeGating gating = MoeGating::Softmax;
  /// Gemma 4's router: it reads the layer's input RMS-normed without a scale, times a learned scale and
  /// 1/sqrt(hidden); the renormalized top-k weights are then multiplied by a learned per-expert scale.
  bool gemmaRouter = false;
};

struct ModelConfig {
  /// llama, mistral, qwen2, qwen3, qwen3_moe, gemma3, gemma4, gpt_oss (HF) / qwen3moe, gemma3, gpt-oss (GGUF)
  std::string arch = "llama";
  std::string name;
  int layers = 0, hidden = 0, heads = 0, kvHeads = 0, headDim = 0, vocab = 0;
  int intermediate = 0;  ///< the dense MLP's units (0 where every layer is MoE and the file gives none)
  double rmsEps = 1e-5, ropeTheta = 10000.0;
  // llama3 rope scaling (factor 0: none)
  double ropeFactor = 0.0, ropeLowFreq = 1.0, ropeHighFreq = 4.0;
  std::int64_t ropeOriginalMax = 8192;
  double ropeLinear = 1.0;      ///< linear RoPE scaling of the global layers (positions divided by it)
  double ropeLocalTheta = 0.0;  ///< the RoPE base of layers with LayerSpec::localRope
  /// The share of the global layers' rotary pairs that rotate (Gemma 4's proportional RoPE: the first
  /// partial * headDim / 2 frequencies as usual over the full head size, the rest 0, so those channels keep still).
  double ropePartial = 1.0;
  // YaRN (yarnFactor 0: none; gpt-oss): frequencies blended between interpolated (divided by the factor) and the
  // original ones over the dimensions between the correction range of betaFast and betaSlow rotations within
  // ropeOriginalMax positions (its ends floored and ceiled where yarnTruncate); cos and sin scaled by yarnAttnFactor.
  double yarnFactor = 0.0, yarnBetaFast = 32.0, yarnBetaSlow = 1.0, yarnAttnFactor = 1.0;
  bool yarnTruncate = true;
  double swigluLimit = 0.0;  ///< FfnAct::SwigluOai's clamp
  // Gemma's blocks: the embeddings scaled by sqrt(hidden); norms kept in float32 and applied after the attention and
  // the FFN too (sandwich norms); the attention scores scaled by attnScale instead of 1/sqrt(headDim) where it is
  // non-zero; the logits soft-capped to (-cap, cap) by cap * tanh(logits / cap) where finalSoftcap > 0.
  bool gemmaBlocks = false;
  /// Norm weights kept in float32 and applied before the cast back (Gemma; gpt-oss's _keep_in_fp32_modules): in the
  /// activations' dtype otherwise, applied after it (Llama).
  bool floatNorms = false;
  double attnScale = 0.0, finalSoftcap = 0.0;
  /// Gemma 4: values RMS-normed (without a scale) per head before they are stored; norms as transformers'
  /// Gemma4RMSNorm, pow(mean + eps, -0.5) with the weight as stored (no 1 + w); each layer's output times its
  /// layer_scalar.
  bool gemma4Blocks = false;
  /// Gemma 4's per-layer embeddings (PLE; 0: none): a second embedding of pleVocab rows of layers x pleDim, mixed with
  /// a projection of the token's embedding, feeding each layer a pleDim-wide input through a gate after its FFN.
  int pleDim = 0, pleVocab = 0;
  FfnAct act = FfnAct::Silu;
  std::int64_t contextLength = 0;
  bool tiedEmbeddings = false, qkvBias = false, qkNorm = false;
  MoeConfig moe;
  std::vector<LayerSpec> layerSpecs;     ///< one per layer
  std::vector<std::string> weightTypes;  ///< "Q4_1 x210", ... for the model card

  /// Layer l's head size, KV heads and dense MLP width (its spec's, or the model's).
  int headDimOf(int l) const;
  int kvHeadsOf(int l) const;
  int intermediateOf(int l) const;
  /// Layer l's K and V values a token (2 x KV heads x head size), 0 where it reads another's KV.
  double kvValuesOf(int l) const;
  /// Whether any layer reads another's KV (LayerSpec::kvFrom), and each layer's kvFrom.
  bool sharesKv() const;
  std::vector<int> kvSources() const;
};

/// The feed-forward blocks in a line for a model card: "dense SwiGLU" or "MoE: 128 experts of 768, top 8 (weights
/// renormalized) on layers 0-47".
std::string describeFfn(const ModelConfig& c);
/// The attention layers in a line: "full attention" or "sliding window 4096 on layers 0-31" (and the full ones), with
/// the head sizes where layers differ and the layers that share another's KV.
std::string describeAttention(const ModelConfig& c);

}  // namespace kvscope::model
