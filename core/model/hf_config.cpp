#include "model/hf_config.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

#include "model/json_keys.h"
#include "model/safetensors.h"  // FormatError

namespace kvscope::model {

using nlohmann::json;

namespace {

// Which layers slide, and over how many positions, as transformers 5.23 decides it:
// - mistral: every layer, over sliding_window (the class default 4096 where the key is absent; null: none);
// - qwen2, qwen3, qwen3_moe: sliding_window (default 4096) only with use_sliding_window; then qwen3_moe slides every
//   layer, qwen2/qwen3 those that layer_types calls sliding_attention (by default the layers from
//   max_window_layers, default 28, on);
// - llama: none. A qwen2/qwen3 layer_types entry other than full_attention / sliding_attention is refused.
void readWindows(ModelConfig& c, const JsonKeys& k) {
  const json& j = k.object();
  std::int64_t window = 0;
  if (c.arch == "mistral") {
    const bool absent = !j.contains("sliding_window");
    window = absent ? 4096 : k.has("sliding_window") ? k.count("sliding_window") : 0;
  } else if (c.arch != "llama" && k.flag("use_sliding_window", false)) {
    const bool nulled = j.contains("sliding_window") && !k.has("sliding_window");
    window = nulled ? 0 : k.count("sliding_window", 4096);
  }
  std::vector<bool> sliding(static_cast<std::size_t>(c.layers), true);
  const bool typed = c.arch == "qwen2" || c.arch == "qwen3";  // the others' classes never read layer_types
  if (typed && k.has("layer_types")) {
    const json& lt = j.at("layer_types");
    if (!lt.is_array() || lt.size() != static_cast<std::size_t>(c.layers))
      k.fail("layer_types", fmt::format("must be a list of {} layer types", c.layers));
    for (std::size_t l = 0; l < lt.size(); ++l) {
      if (lt[l] != "full_attention" && lt[l] != "sliding_attention")
        k.fail("layer_types",
               fmt::format("has {}: only full_attention and sliding_attention layers are supported", lt[l].dump()));
      sliding[l] = lt[l] == "sliding_attention";
    }
  } else if (typed) {
    const int from = k.count0("max_window_layers", 28);
    for (int l = 0; l < c.layers; ++l) sliding[static_cast<std::size_t>(l)] = l >= from;
  }
  for (int l = 0; l < c.layers; ++l)
    if (sliding[static_cast<std::size_t>(l)]) c.layerSpecs[static_cast<std::size_t>(l)].window = window;
}

// The FFN kind of each layer. Qwen3-MoE (transformers' Qwen3MoeDecoderLayer): a layer is sparse unless listed in
// mlp_only_layers, when num_experts > 0 and (layer + 1) is a multiple of decoder_sparse_step; the rest keep a dense
// MLP of intermediate_size. Class defaults: 128 experts of 768, top 8, norm_topk_prob false, sparse step 1.
void readLayerSpecs(ModelConfig& c, const JsonKeys& k) {
  c.layerSpecs.assign(static_cast<std::size_t>(c.layers), LayerSpec{});
  readWindows(c, k);
  if (c.arch == "qwen3_moe") {
    // v5 writes num_local_experts (num_experts is its alias); checkpoints carry num_experts.
    const char* expertsKey = k.has("num_experts") ? "num_experts" : "num_local_experts";
    c.moe.experts = k.count0(expertsKey, 128);
    c.moe.used = k.count("num_experts_per_tok", 8);
    c.moe.intermediate = k.count("moe_intermediate_size", 768);
    c.moe.normTopK = k.flag("norm_topk_prob", false);
    if (c.moe.experts > 0 && c.moe.used > c.moe.experts)
      k.fail("num_experts_per_tok", fmt::format("= {} exceeds the {} experts", c.moe.used, c.moe.experts));
    const int step = k.count("decoder_sparse_step", 1);
    std::vector<bool> mlpOnly(static_cast<std::size_t>(c.layers), false);
    if (k.has("mlp_only_layers") && !k.object().at("mlp_only_layers").is_null()) {
      const json& list = k.object().at("mlp_only_layers");
      if (!list.is_array()) k.fail("mlp_only_layers", fmt::format("must be a list, found {}", list.type_name()));
      for (const json& e : list) {
        if (!e.is_number_integer() || e.get<std::int64_t>() < 0 || e.get<std::int64_t>() >= c.layers)
          k.fail("mlp_only_layers", fmt::format("has {}: not a layer index below {}", e.dump(), c.layers));
        mlpOnly[e.get<std::size_t>()] = true;
      }
    }
    for (int l = 0; l < c.layers; ++l)
      if (!mlpOnly[static_cast<std::size_t>(l)] && c.moe.experts > 0 && (l + 1) % step == 0)
        c.layerSpecs[static_cast<std::size_t>(l)].ffn = FfnKind::Moe;
  }
  bool dense = false;
  for (const LayerSpec& s : c.layerSpecs) dense = dense || s.ffn == FfnKind::Dense;
  // Every layer MoE: intermediate_size sizes nothing, and a config may leave it out.
  c.intermediate = dense || k.has("intermediate_size") ? k.count("intermediate_size") : 0;
}

}  // namespace

ModelConfig hfConfigFromJson(std::string_view text, const std::string& where) {
  const ConfigJson cj = parseConfigJson(text, where);
  const json& j = *cj.text;
  const JsonKeys k(j, where, cj.prefix);
  ModelConfig c;
  c.arch = k.str("model_type", "llama");
  if (c.arch != "llama" && c.arch != "mistral" && c.arch != "qwen2" && c.arch != "qwen3" && c.arch != "qwen3_moe") {
    k.fail("model_type", fmt::format("`{}` is not supported (llama, mistral, qwen2, qwen3, qwen3_moe)", c.arch));
  }
  c.layers = k.count("num_hidden_layers");
  c.hidden = k.count("hidden_size");
  c.heads = k.count("num_attention_heads");
  c.kvHeads = k.count("num_key_value_heads", c.heads);
  c.vocab = k.count("vocab_size");
  if (!k.has("head_dim") && c.hidden % c.heads != 0)
    k.fail("hidden_size", fmt::format("= {} is not a multiple of num_attention_heads = {} (and no head_dim is given)",
                                      c.hidden, c.heads));
  c.headDim = k.count("head_dim", c.hidden / c.heads);
  if (c.headDim % 2 != 0) k.fail("head_dim", fmt::format("= {} must be even (rotary embedding)", c.headDim));
  c.rmsEps = k.positiveNum("rms_norm_eps", 1e-6);
  c.contextLength = k.count("max_position_embeddings", 2048);
  if (c.heads % c.kvHeads != 0)
    k.fail("num_key_value_heads", fmt::format("= {} does not divide num_attention_heads = {}", c.kvHeads, c.heads));
  c.tiedEmbeddings = k.flag("tie_word_embeddings", false);
  readLayerSpecs(c, k);

  // v5: rope_parameters {rope_theta, rope_type, ...}; v4: rope_theta + rope_scaling.
  const char* ropeKey = nullptr;
  for (const char* key : {"rope_parameters", "rope_scaling"})
    if (!ropeKey && k.has(key)) {
      if (!j.at(key).is_object()) k.fail(key, fmt::format("must be an object, found {}", j.at(key).type_name()));
      ropeKey = key;
    }
  const json none = json::object();
  const json& rope = ropeKey ? j.at(ropeKey) : none;
  const JsonKeys r(rope, where, cj.prefix + (ropeKey ? ropeKey : "rope") + ".");
  c.ropeTheta = r.has("rope_theta") ? r.positiveNum("rope_theta", 10000.0) : k.positiveNum("rope_theta", 10000.0);
  const std::string ropeType = r.has("rope_type") ? r.str("rope_type", "default") : r.str("type", "default");
  if (ropeType == "llama3") {
    c.ropeFactor = r.positiveNum("factor", 8.0);
    c.ropeLowFreq = r.positiveNum("low_freq_factor", 1.0);
    c.ropeHighFreq = r.positiveNum("high_freq_factor", 4.0);
    if (c.ropeHighFreq <= c.ropeLowFreq)
      r.fail("high_freq_factor", fmt::format("= {} must exceed low_freq_factor = {}", c.ropeHighFreq, c.ropeLowFreq));
    c.ropeOriginalMax = r.count("original_max_position_embeddings", 8192);
  } else if (ropeType != "default") {
    r.fail(r.has("rope_type") ? "rope_type" : "type", fmt::format("`{}` is not supported (default, llama3)", ropeType));
  }
  return c;
}

}  // namespace kvscope::model
