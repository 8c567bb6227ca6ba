// What a model keeps in its cache, layer by layer, read from its config alone (a GGUF header, a Hugging Face
// config.json or the directory holding one): never the weights, so it answers for any model size and for families
// kvscope cannot run yet. The capacity planner (plan/plan.h) turns a layout into each engine's figures. No torch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope::model {
class GgufFile;
}

namespace kvscope::plan {

/// What a layer keeps for the tokens it has seen.
enum class LayerKind {
  Full,     ///< full attention: K and V of every token
  Sliding,  ///< sliding-window attention: K and V of the last `window` tokens (what an engine keeps varies)
  Shared,   ///< reads another layer's K and V (Gemma 3n / 4's last layers): nothing of its own
  Linear,   ///< linear attention (Gated DeltaNet): a convolution state and a recurrent state per sequence
  Mla,      ///< multi-head latent attention: one compressed latent and one RoPE key per token
};
/// "full", "sliding", "shared", "linear", "mla".
std::string_view layerKindName(LayerKind k);

struct LayerSpec {
  int index = 0;
  LayerKind kind = LayerKind::Full;
  /// Attention layers (Full, Sliding, and Shared: its source's shape): KV heads and the K and V head sizes.
  int kvHeads = 0, headDimK = 0, headDimV = 0;
  int window = 0;       ///< Sliding: the window in tokens (the config's sliding_window)
  int sharedFrom = -1;  ///< Shared: the layer whose cache it reads
  /// Mla: the latent's width (kv_lora_rank) and the RoPE key's (qk_rope_head_dim); the DSA indexer's key width
  /// (DeepSeek-V3.2's index_head_dim; 0 without an indexer).
  int latent = 0, ropeDim = 0, indexDim = 0;
  /// Linear (Gated DeltaNet): the causal convolution's kernel and channels (2 × key heads × key size + value heads ×
  /// value size), and the recurrent state's heads × key size × value size.
  int convKernel = 0, convChannels = 0;
  int stateHeads = 0, stateDimK = 0, stateDimV = 0;
};

struct ModelLayout {
  std::string arch;    ///< as the file names it: config.json's model_type or GGUF's general.architecture
  std::string name;    ///< general.name, or config.json's _name_or_path; may be empty
  std::string source;  ///< "gguf" or "config.json"
  std::vector<LayerSpec> layers;
  int heads = 0, hidden = 0;
  std::int64_t contextLength = 0;  ///< the trained context (max_position_embeddings, context_length)
  /// The model's dtype (config.json's dtype or torch_dtype; "bfloat16" when it names none): what vLLM's and
  /// SGLang's `auto` cache stores. A GGUF says "float16" (llama.cpp's f16 cache).
  std::string dtype = "bfloat16";
  /// The weights' bytes: a GGUF's tensors (every shard of a split file that is beside it), an HF directory's
  /// safetensors index total or files. Empty for a bare config.json.
  std::optional<std::uint64_t> weightBytes;
  /// The recurrent state's dtype when the config names one (Qwen3.5's `mamba_ssm_dtype`); empty: the engine's
  /// default.
  std::string ssmDtype;
  /// A legacy DeepSeek GGUF converted before llama.cpp's MLA cache: its MLA layers are cached as full K and V.
  bool mlaExpanded = false;

  int count(LayerKind k) const;
  /// The number of layers with a cache of their own (every kind but Shared).
  int cachedLayers() const;
};

/// Reads a config.json's text (`where` names it in messages). Families: llama, mistral, mixtral, qwen2, qwen2_moe,
/// qwen3, qwen3_moe, gemma, gemma2, gemma3(_text), gemma3n(_text), gemma4(_text), gpt_oss, qwen3_next,
/// qwen3_5(_moe)(_text), deepseek_v2, deepseek_v3, deepseek_v32, kimi_k2, kimi_k25, glm4_moe, glm4_moe_lite, and any
/// config with the standard attention keys. Throws model::FormatError naming the key.
ModelLayout layoutFromHfConfig(std::string_view text, const std::string& where);
/// Reads a GGUF's metadata as llama.cpp's hparams do. Throws model::FormatError naming the key.
ModelLayout layoutFromGguf(const model::GgufFile& file);
/// A .gguf file, a config.json, or a directory holding a config.json. Throws model::FormatError.
ModelLayout loadLayout(const std::string& path);

/// Bytes of one element of a dtype name ("bfloat16", "float16", "float32", "fp8", ...); 0 when unknown.
double dtypeBytes(std::string_view dtype);

}  // namespace kvscope::plan
