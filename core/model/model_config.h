// What a decoder model is made of (read from GGUF metadata or a Hugging Face config.json): the shared shape and a
// list of layer specs, one per layer, that the forward composes its blocks from. No torch here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvscope::model {

/// A layer's feed-forward block: a dense SwiGLU MLP, or a mixture of SwiGLU experts behind a softmax top-k router.
enum class FfnKind : std::uint8_t { Dense, Moe };

/// The FFN's gate activation: SiLU (Llama, Qwen) or GELU with the tanh approximation (Gemma's gelu_pytorch_tanh).
enum class FfnAct : std::uint8_t { Silu, GeluTanh };

/// What a layer is made of: causal attention over its cache, over the `window` newest positions (its own included)
/// where window > 0 (a sliding-window layer), rotated by the model's global RoPE or, with localRope, by its local one
/// (Gemma's sliding layers: ropeLocalTheta, unscaled); and its FFN kind.
struct LayerSpec {
  std::int64_t window = 0;
  bool localRope = false;
  FfnKind ffn = FfnKind::Dense;
};

/// The experts of the MoE layers (Qwen3-MoE): `experts` SwiGLU experts of `intermediate` units, each token routed to
/// `used` of them by softmax over the router's logits; normTopK renormalizes the chosen weights to sum to 1.
struct MoeConfig {
  int experts = 0, used = 0, intermediate = 0;
  bool normTopK = false;
};

struct ModelConfig {
  std::string arch = "llama";  ///< llama, mistral, qwen2, qwen3, qwen3_moe, gemma3 (HF) / qwen3moe, gemma3 (GGUF)
  std::string name;
  int layers = 0, hidden = 0, heads = 0, kvHeads = 0, headDim = 0, vocab = 0;
  int intermediate = 0;  ///< the dense MLP's units (0 where every layer is MoE and the file gives none)
  double rmsEps = 1e-5, ropeTheta = 10000.0;
  // llama3 rope scaling (factor 0: none)
  double ropeFactor = 0.0, ropeLowFreq = 1.0, ropeHighFreq = 4.0;
  std::int64_t ropeOriginalMax = 8192;
  double ropeLinear = 1.0;      ///< linear RoPE scaling of the global layers (positions divided by it)
  double ropeLocalTheta = 0.0;  ///< the RoPE base of layers with LayerSpec::localRope
  // Gemma's blocks: the embeddings scaled by sqrt(hidden); norms kept in float32 and applied after the attention and
  // the FFN too (sandwich norms); the attention scores scaled by attnScale instead of 1/sqrt(headDim) where it is
  // non-zero; the logits soft-capped to (-cap, cap) by cap * tanh(logits / cap) where finalSoftcap > 0.
  bool gemmaBlocks = false;
  double attnScale = 0.0, finalSoftcap = 0.0;
  FfnAct act = FfnAct::Silu;
  std::int64_t contextLength = 0;
  bool tiedEmbeddings = false, qkvBias = false, qkNorm = false;
  MoeConfig moe;
  std::vector<LayerSpec> layerSpecs;     ///< one per layer
  std::vector<std::string> weightTypes;  ///< "Q4_1 x210", ... for the model card
};

/// The feed-forward blocks in a line for a model card: "dense SwiGLU" or "MoE: 128 experts of 768, top 8 (weights
/// renormalized) on layers 0-47".
std::string describeFfn(const ModelConfig& c);
/// The attention layers in a line: "full attention" or "sliding window 4096 on layers 0-31" (and the full ones).
std::string describeAttention(const ModelConfig& c);

}  // namespace kvscope::model
