#include "model/hf_config.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "model/json_keys.h"
#include "model/safetensors.h"  // FormatError

namespace kvscope::model {

using nlohmann::json;

namespace {

// layer_types: which layers are sliding_attention (the others full_attention; any other type is refused).
std::vector<bool> layerTypes(const ModelConfig& c, const JsonKeys& k) {
  const json& lt = k.object().at("layer_types");
  if (!lt.is_array() || lt.size() != static_cast<std::size_t>(c.layers))
    k.fail("layer_types", fmt::format("must be a list of {} layer types", c.layers));
  std::vector<bool> sliding(lt.size());
  for (std::size_t l = 0; l < lt.size(); ++l) {
    if (lt[l] != "full_attention" && lt[l] != "sliding_attention")
      k.fail("layer_types",
             fmt::format("has {}: only full_attention and sliding_attention layers are supported", lt[l].dump()));
    sliding[l] = lt[l] == "sliding_attention";
  }
  return sliding;
}

// sliding_window where a family's class defaults it to 4096: the key's value, 4096 where absent, none (0) where null.
std::int64_t slidingWindowOr4096(const JsonKeys& k) {
  const bool nulled = k.object().contains("sliding_window") && !k.has("sliding_window");
  return nulled ? 0 : k.count("sliding_window", 4096);
}

// Which layers slide, and over how many positions, as transformers 5.23 decides it:
// - mistral: every layer, over sliding_window (the class default 4096 where the key is absent; null: none);
// - qwen2, qwen3, qwen3_moe: sliding_window (default 4096) only with use_sliding_window; then qwen3_moe slides every
//   layer, qwen2/qwen3 those that layer_types calls sliding_attention (by default the layers from
//   max_window_layers, default 28, on);
// - llama: none. A qwen2/qwen3 layer_types entry other than full_attention / sliding_attention is refused.
void readWindows(ModelConfig& c, const JsonKeys& k) {
  const bool slides = c.arch == "mistral" || (c.arch != "llama" && k.flag("use_sliding_window", false));
  const std::int64_t window = slides ? slidingWindowOr4096(k) : 0;
  std::vector<bool> sliding(static_cast<std::size_t>(c.layers), true);
  const bool typed = c.arch == "qwen2" || c.arch == "qwen3";  // the others' classes never read layer_types
  if (typed && k.has("layer_types")) {
    sliding = layerTypes(c, k);
  } else if (typed) {
    const int from = k.count0("max_window_layers", 28);
    for (int l = 0; l < c.layers; ++l) sliding[static_cast<std::size_t>(l)] = l >= from;
  }
  for (int l = 0; l < c.layers; ++l)
    if (sliding[static_cast<std::size_t>(l)]) c.layerSpecs[static_cast<std::size_t>(l)].window = window;
}

// Gemma 3 (transformers' Gemma3TextConfig, whose class defaults fill what the published text_configs leave out):
// the scaled embeddings, sandwich norms, GELU-tanh, query_pre_attn_scalar, final soft-capping; layers slide over
// sliding_window (default 4096) as layer_types says, by default all but every sliding_window_pattern-th (6), and the
// sliding layers rotate with the local RoPE base.
void readGemma3(ModelConfig& c, const JsonKeys& k) {
  c.gemmaBlocks = c.floatNorms = true;
  const std::string act = k.str("hidden_activation", "gelu_pytorch_tanh");
  if (act != "gelu_pytorch_tanh" && act != "gelu")
    k.fail("hidden_activation", fmt::format("`{}` is not supported (gelu_pytorch_tanh)", act));
  c.act = FfnAct::GeluTanh;  // transformers maps Gemma's "gelu" to the tanh approximation too
  c.attnScale = 1.0 / std::sqrt(k.positiveNum("query_pre_attn_scalar", 256));
  if (k.has("attn_logit_softcapping"))
    k.fail("attn_logit_softcapping", "is set: attention-score soft-capping (Gemma 2) is not supported");
  if (k.flag("use_bidirectional_attention", false))
    k.fail("use_bidirectional_attention", "is true: only causal attention is supported");
  c.finalSoftcap = k.has("final_logit_softcapping") ? k.positiveNum("final_logit_softcapping", 0) : 0.0;
  const std::int64_t window = slidingWindowOr4096(k);
  std::vector<bool> sliding(static_cast<std::size_t>(c.layers));
  if (k.has("layer_types")) {
    sliding = layerTypes(c, k);
  } else {
    const int pattern =
        k.count(k.has("_sliding_window_pattern") ? "_sliding_window_pattern" : "sliding_window_pattern", 6);
    for (int l = 0; l < c.layers; ++l) sliding[static_cast<std::size_t>(l)] = (l + 1) % pattern != 0;
  }
  for (int l = 0; l < c.layers; ++l)
    if (sliding[static_cast<std::size_t>(l)]) {
      c.layerSpecs[static_cast<std::size_t>(l)].window = window;
      c.layerSpecs[static_cast<std::size_t>(l)].localRope = true;
    }
}

// Gemma 4 (transformers' Gemma4TextConfig, whose class defaults fill what a config leaves out): Gemma 3's blocks with
// attention scaled by 1 (the q/k norms do it), values RMS-normed, norms as stored (no 1 + w) and a scalar per layer;
// layers slide over sliding_window (default 512) as layer_types says, by default all but every 6th, the last layer
// always full. Full layers take their own head size and, with attention_k_eq_v, their own KV heads and values from
// the key projection: per_layer_config where the config carries it (what transformers 5.23 writes), else
// global_head_dim (512) and num_global_key_value_heads. The last num_kv_shared_layers layers read the KV of the last
// earlier layer of their type (kv_sharing_modes), with a double-wide MLP under use_double_wide_mlp. Per-layer
// embeddings of hidden_size_per_layer_input (default 256; 0: none). enable_moe_block: every layer runs its dense
// MLP and a routed MoE side by side.
void readGemma4(ModelConfig& c, const JsonKeys& k) {
  c.gemmaBlocks = c.floatNorms = c.gemma4Blocks = true;
  const std::string act = k.str("hidden_activation", "gelu_pytorch_tanh");
  if (act != "gelu_pytorch_tanh" && act != "gelu")
    k.fail("hidden_activation", fmt::format("`{}` is not supported (gelu_pytorch_tanh)", act));
  c.act = FfnAct::GeluTanh;
  c.attnScale = 1.0;
  if (k.has("use_bidirectional_attention") && k.str("use_bidirectional_attention", "") == "all")
    k.fail("use_bidirectional_attention", "is `all`: only causal attention is supported");
  c.finalSoftcap = k.has("final_logit_softcapping") ? k.positiveNum("final_logit_softcapping", 0) : 0.0;
  const std::int64_t window = k.count("sliding_window", 512);
  std::vector<bool> sliding(static_cast<std::size_t>(c.layers));
  if (k.has("layer_types")) {
    sliding = layerTypes(c, k);
  } else {
    for (int l = 0; l < c.layers; ++l) sliding[static_cast<std::size_t>(l)] = (l + 1) % 6 != 0;
  }
  sliding.back() = false;  // transformers forces the last layer to full attention
  const bool kEqV = k.flag("attention_k_eq_v", false);
  int globalDim = 0, globalKv = 0;
  std::map<int, std::pair<int, int>> overrides;  // per_layer_config: layer -> (head_dim, num_key_value_heads)
  if (k.has("per_layer_config")) {
    const json& per = k.object().at("per_layer_config");
    if (!per.is_object()) k.fail("per_layer_config", "must be an object of layer indices");
    for (const auto& [key, value] : per.items()) {
      int l = -1;
      try {
        std::size_t used = 0;
        l = std::stoi(key, &used);
        if (used != key.size()) l = -1;
      } catch (const std::exception&) {
        l = -1;
      }
      if (l < 0 || l >= c.layers || !value.is_object())
        k.fail("per_layer_config", fmt::format("has `{}`: not a layer index below {} with an object", key, c.layers));
      const JsonKeys o(value, k.where(), fmt::format("per_layer_config.{}.", key));
      for (const auto& [name, v] : value.items())
        if (name != "head_dim" && name != "num_key_value_heads")
          o.fail(name.c_str(), "is not supported per layer (head_dim, num_key_value_heads)");
      overrides[l] = {o.has("head_dim") ? o.count("head_dim") : 0,
                      o.has("num_key_value_heads") ? o.count("num_key_value_heads") : 0};
    }
  } else {
    globalDim = k.count("global_head_dim", 512);
    if (kEqV && k.has("num_global_key_value_heads")) globalKv = k.count("num_global_key_value_heads");
  }
  for (int l = 0; l < c.layers; ++l) {
    LayerSpec& s = c.layerSpecs[static_cast<std::size_t>(l)];
    const bool slides = sliding[static_cast<std::size_t>(l)];
    s.window = slides ? window : 0;
    s.localRope = slides;
    s.kEqV = kEqV && !slides;
    if (const auto it = overrides.find(l); it != overrides.end())
      s.headDim = it->second.first, s.kvHeads = it->second.second;
    else if (!slides)
      s.headDim = globalDim, s.kvHeads = globalKv;
    if (s.headDim == c.headDim) s.headDim = 0;
    if (s.kvHeads == c.kvHeads) s.kvHeads = 0;
    if (c.heads % c.kvHeadsOf(l) != 0)
      k.fail("num_attention_heads",
             fmt::format("= {} is not a multiple of layer {}'s {} KV heads", c.heads, l, c.kvHeadsOf(l)));
    if (c.headDimOf(l) % 2 != 0) k.fail("head_dim", fmt::format("of layer {} = {} must be even", l, c.headDimOf(l)));
  }
  // kv_sharing_modes: from num_layers - shared on, each layer reads the last earlier layer of its own type.
  const int shared = k.count0("num_kv_shared_layers", 0);
  if (shared >= c.layers)
    k.fail("num_kv_shared_layers", fmt::format("= {} leaves no layer of {} with a cache of its own", shared, c.layers));
  const int first = c.layers - shared;
  const bool wide = k.flag("use_double_wide_mlp", false);
  for (int l = first; l < c.layers; ++l) {
    LayerSpec& s = c.layerSpecs[static_cast<std::size_t>(l)];
    for (int src = first - 1; src >= 0 && s.kvFrom < 0; --src)
      if (sliding[static_cast<std::size_t>(src)] == sliding[static_cast<std::size_t>(l)]) s.kvFrom = src;
    if (s.kvFrom < 0)
      k.fail("num_kv_shared_layers",
             fmt::format("= {}: shared layer {} ({}) has no earlier layer of its type to read", shared, l,
                         sliding[static_cast<std::size_t>(l)] ? "sliding_attention" : "full_attention"));
    if (wide) s.intermediate = 2 * k.count("intermediate_size", 9216);
  }
  c.pleDim = k.count0("hidden_size_per_layer_input", 256);
  if (c.pleDim > 0) c.pleVocab = k.count("vocab_size_per_layer_input", 262144);
  if (k.flag("enable_moe_block", false)) {
    c.moe.experts = k.count("num_experts");
    c.moe.used = k.count("top_k_experts");
    c.moe.intermediate = k.count("moe_intermediate_size");
    c.moe.normTopK = c.moe.gemmaRouter = true;
    if (c.moe.used > c.moe.experts)
      k.fail("top_k_experts", fmt::format("= {} exceeds the {} experts", c.moe.used, c.moe.experts));
    for (LayerSpec& s : c.layerSpecs) s.ffn = FfnKind::DenseAndMoe;
  }
}

// gpt-oss (transformers' GptOssConfig, whose class defaults are gpt-oss-20b's but 36 layers and 128 experts): every
// layer MoE (a biased router, the top k logits softmaxed, experts with biases and the clamped SwiGLU), attention with
// biases and a learned sink per head, layers sliding over sliding_window (default 128) as layer_types says, by
// default the even ones; norms kept in float32.
void readGptOss(ModelConfig& c, const JsonKeys& k) {
  c.floatNorms = true;
  c.act = FfnAct::SwigluOai;
  c.swigluLimit = k.positiveNum("swiglu_limit", 7.0);
  if (const double alpha = k.num("swiglu_alpha", 1.702); alpha != 1.702)
    k.fail("swiglu_alpha", fmt::format("= {} is not supported (1.702, gpt-oss's)", alpha));
  const char* expertsKey = k.has("num_experts") ? "num_experts" : "num_local_experts";
  c.moe.experts = k.count(expertsKey, 128);
  c.moe.used = k.count("num_experts_per_tok", 4);
  c.moe.intermediate = k.count("intermediate_size", 2880);
  c.moe.gating = MoeGating::TopKSoftmax;
  if (c.moe.used > c.moe.experts)
    k.fail("num_experts_per_tok", fmt::format("= {} exceeds the {} experts", c.moe.used, c.moe.experts));
  const bool nulled = k.object().contains("sliding_window") && !k.has("sliding_window");
  const std::int64_t window = nulled ? 0 : k.count("sliding_window", 128);
  std::vector<bool> sliding(static_cast<std::size_t>(c.layers));
  if (k.has("layer_types")) {
    sliding = layerTypes(c, k);
  } else {
    for (int l = 0; l < c.layers; ++l) sliding[static_cast<std::size_t>(l)] = (l + 1) % 2 != 0;
  }
  for (int l = 0; l < c.layers; ++l) {
    LayerSpec& s = c.layerSpecs[static_cast<std::size_t>(l)];
    s.window = sliding[static_cast<std::size_t>(l)] ? window : 0;
    s.ffn = FfnKind::Moe;
    s.sinks = true;
  }
}

// The FFN kind of each layer. Qwen3-MoE (transformers' Qwen3MoeDecoderLayer): a layer is sparse unless listed in
// mlp_only_layers, when num_experts > 0 and (layer + 1) is a multiple of decoder_sparse_step; the rest keep a dense
// MLP of intermediate_size. Class defaults: 128 experts of 768, top 8, norm_topk_prob false, sparse step 1.
void readLayerSpecs(ModelConfig& c, const JsonKeys& k) {
  c.layerSpecs.assign(static_cast<std::size_t>(c.layers), LayerSpec{});
  if (c.arch == "gemma3")
    readGemma3(c, k);
  else if (c.arch == "gemma4")
    readGemma4(c, k);
  else if (c.arch == "gpt_oss")
    readGptOss(c, k);
  else
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
  for (const LayerSpec& s : c.layerSpecs) dense = dense || s.ffn != FfnKind::Moe;
  if (c.arch == "gpt_oss") return;  // its intermediate_size sizes the experts
  // Every layer MoE: intermediate_size sizes nothing, and a config may leave it out.
  const auto dflt = c.arch == "gemma3" || c.arch == "gemma4" ? std::optional<double>(9216) : std::nullopt;
  c.intermediate = dense || k.has("intermediate_size") ? k.count("intermediate_size", dflt) : 0;
}

// One RoPE object ({rope_theta, rope_type, factor, ...}): its base, and the global layers' scaling (linear or llama3)
// into c. `local`: a Gemma sliding layers' RoPE, whose base goes to ropeLocalTheta and which must be unscaled.
void readRopeObject(ModelConfig& c, const JsonKeys& r, double theta, bool local) {
  const std::string type = r.has("rope_type") ? r.str("rope_type", "default") : r.str("type", "default");
  const char* typeKey = r.has("rope_type") ? "rope_type" : "type";
  (local ? c.ropeLocalTheta : c.ropeTheta) = r.positiveNum("rope_theta", theta);
  if (type == "default") return;
  if (local) r.fail(typeKey, fmt::format("`{}` is not supported on sliding layers (default only)", type));
  if (type == "linear") {
    c.ropeLinear = r.positiveNum("factor", 1.0);
  } else if (type == "llama3") {
    c.ropeFactor = r.positiveNum("factor", 8.0);
    c.ropeLowFreq = r.positiveNum("low_freq_factor", 1.0);
    c.ropeHighFreq = r.positiveNum("high_freq_factor", 4.0);
    if (c.ropeHighFreq <= c.ropeLowFreq)
      r.fail("high_freq_factor", fmt::format("= {} must exceed low_freq_factor = {}", c.ropeHighFreq, c.ropeLowFreq));
    c.ropeOriginalMax = r.count("original_max_position_embeddings", 8192);
  } else if (type == "proportional") {
    // transformers' _compute_proportional_rope_parameters (Gemma 4's full layers): the first partial * headDim / 2
    // frequencies over the whole head size, the rest 0; the frequencies divided by factor.
    c.ropePartial = r.num("partial_rotary_factor", 1.0);
    if (!(c.ropePartial > 0 && c.ropePartial <= 1))
      r.fail("partial_rotary_factor", fmt::format("= {} must lie in (0, 1]", c.ropePartial));
    c.ropeLinear = r.positiveNum("factor", 1.0);
    return;
  } else if (type == "yarn") {
    // transformers' _compute_yarn_parameters: the factor (default: max_position_embeddings over the original), the
    // correction range's betas, truncate, and the attention factor (given, or 0.1 ln(factor) + 1, or the ratio of
    // the mscale terms where mscale and mscale_all_dim are both set).
    c.ropeOriginalMax = r.count("original_max_position_embeddings");
    c.yarnFactor = r.has("factor") ? r.positiveNum("factor", 1.0)
                                   : static_cast<double>(c.contextLength) / static_cast<double>(c.ropeOriginalMax);
    c.yarnBetaFast = r.has("beta_fast") && r.num("beta_fast") != 0 ? r.num("beta_fast") : 32.0;
    c.yarnBetaSlow = r.has("beta_slow") && r.num("beta_slow") != 0 ? r.num("beta_slow") : 1.0;
    c.yarnTruncate = r.flag("truncate", true);
    const auto mscale = [&](double m) { return c.yarnFactor <= 1 ? 1.0 : 0.1 * m * std::log(c.yarnFactor) + 1.0; };
    if (r.has("attention_factor"))
      c.yarnAttnFactor = r.positiveNum("attention_factor", 1.0);
    else if (r.has("mscale") && r.has("mscale_all_dim") && r.num("mscale") != 0 && r.num("mscale_all_dim") != 0)
      c.yarnAttnFactor = mscale(r.num("mscale")) / mscale(r.num("mscale_all_dim"));
    else
      c.yarnAttnFactor = mscale(1.0);
  } else {
    r.fail(typeKey, fmt::format("`{}` is not supported (default, linear, llama3, yarn, proportional)", type));
  }
  if (r.has("partial_rotary_factor") && r.num("partial_rotary_factor") != 1.0)
    r.fail("partial_rotary_factor", "is not 1: partial rotary embeddings are not supported");
}

// v5: rope_parameters {rope_theta, rope_type, ...}, for Gemma 3 one such object per layer type (full_attention,
// sliding_attention); v4: rope_theta + rope_scaling (+ Gemma 3's rope_local_base_freq).
void readRope(ModelConfig& c, const JsonKeys& k, const std::string& prefix) {
  const json& j = k.object();
  const bool gemma = c.arch == "gemma3" || c.arch == "gemma4";
  const double globalTheta = gemma ? 1e6 : c.arch == "gpt_oss" ? 150000.0 : 10000.0;
  const char* ropeKey = nullptr;
  for (const char* key : {"rope_parameters", "rope_scaling"})
    if (!ropeKey && k.has(key)) {
      if (!j.at(key).is_object()) k.fail(key, fmt::format("must be an object, found {}", j.at(key).type_name()));
      ropeKey = key;
    }
  const json none = json::object();
  // GptOssConfig's default: YaRN by 32 over 4096 positions, untruncated.
  const json gptOssYarn = {{"rope_type", "yarn"}, {"factor", 32.0},    {"beta_fast", 32.0},
                           {"beta_slow", 1.0},    {"truncate", false}, {"original_max_position_embeddings", 4096}};
  // Gemma4TextConfig's default: default RoPE on sliding layers, proportional over a quarter on full ones.
  const json gemma4Rope = {
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
      {"full_attention", {{"rope_type", "proportional"}, {"partial_rotary_factor", 0.25}, {"rope_theta", 1e6}}}};
  const json& rope = ropeKey               ? j.at(ropeKey)
                     : c.arch == "gpt_oss" ? gptOssYarn
                     : c.arch == "gemma4"  ? gemma4Rope
                                           : none;
  const std::string where = prefix + (ropeKey ? ropeKey : "rope") + ".";
  if (gemma && (rope.contains("full_attention") || rope.contains("sliding_attention"))) {
    for (const char* type : {"full_attention", "sliding_attention"}) {
      const json& sub = rope.contains(type) && !rope.at(type).is_null() ? rope.at(type) : none;
      if (!sub.is_object()) JsonKeys(rope, k.where(), where).fail(type, "must be an object");
      const bool local = std::string(type) == "sliding_attention";
      readRopeObject(c, JsonKeys(sub, k.where(), where + type + "."), local ? 10000.0 : globalTheta, local);
    }
    return;
  }
  const JsonKeys r(rope, k.where(), where);
  readRopeObject(c, r, r.has("rope_theta") ? 0 : k.positiveNum("rope_theta", globalTheta), false);
  if (c.arch == "gemma4") r.fail("rope_type", "needs an object per layer type (full_attention, sliding_attention)");
  if (gemma) c.ropeLocalTheta = k.positiveNum("rope_local_base_freq", 10000.0);
}

}  // namespace

ModelConfig hfConfigFromJson(std::string_view text, const std::string& where) {
  const ConfigJson cj = parseConfigJson(text, where);
  const json& j = *cj.text;
  const JsonKeys k(j, where, cj.prefix);
  ModelConfig c;
  // Gemma 3's multimodal wrapper may leave its text_config's model_type out: the wrapper's names the family then.
  const json wrapperType = cj.text != &cj.top ? cj.top.value("model_type", json()) : json();
  const bool gemmaWrapper = wrapperType == "gemma3" || wrapperType == "gemma4";
  c.arch = k.str("model_type", gemmaWrapper ? wrapperType.get<std::string>() : "llama");
  if (c.arch == "gemma3_text") c.arch = "gemma3";
  if (c.arch == "gemma4_text") c.arch = "gemma4";
  if (c.arch != "llama" && c.arch != "mistral" && c.arch != "qwen2" && c.arch != "qwen3" && c.arch != "qwen3_moe" &&
      c.arch != "gemma3" && c.arch != "gemma4" && c.arch != "gpt_oss") {
    k.fail("model_type", fmt::format("`{}` is not supported (llama, mistral, qwen2, qwen3, qwen3_moe, gemma3, "
                                     "gemma3_text, gemma4, gemma4_text, gpt_oss)",
                                     c.arch));
  }
  // Gemma 3's published text_configs leave out what Gemma3TextConfig's defaults give (the 1B's shape); gpt-oss's
  // what GptOssConfig's give.
  const bool gemma4 = c.arch == "gemma4", gemma = c.arch == "gemma3" || gemma4, oss = c.arch == "gpt_oss";
  auto dflt = [gemma, oss](double g, double o) {
    return gemma ? std::optional<double>(g) : oss ? std::optional<double>(o) : std::nullopt;
  };
  c.layers = k.count("num_hidden_layers", dflt(gemma4 ? 30 : 26, 36));
  c.hidden = k.count("hidden_size", dflt(2304, 2880));
  c.heads = k.count("num_attention_heads", dflt(8, 64));
  c.kvHeads = k.count("num_key_value_heads", gemma ? 4 : oss ? 8 : c.heads);
  c.vocab = k.count("vocab_size", dflt(gemma4 ? 262144 : 262208, 201088));
  if (!k.has("head_dim") && !gemma && !oss && c.hidden % c.heads != 0)
    k.fail("hidden_size", fmt::format("= {} is not a multiple of num_attention_heads = {} (and no head_dim is given)",
                                      c.hidden, c.heads));
  c.headDim = k.count("head_dim", gemma ? 256 : oss ? 64 : c.hidden / c.heads);
  if (c.headDim % 2 != 0) k.fail("head_dim", fmt::format("= {} must be even (rotary embedding)", c.headDim));
  c.rmsEps = k.positiveNum("rms_norm_eps", oss ? 1e-5 : 1e-6);
  c.contextLength = k.count("max_position_embeddings", gemma || oss ? 131072 : 2048);
  if (c.heads % c.kvHeads != 0)
    k.fail("num_key_value_heads", fmt::format("= {} does not divide num_attention_heads = {}", c.kvHeads, c.heads));
  c.tiedEmbeddings = k.flag("tie_word_embeddings", gemma);
  readLayerSpecs(c, k);

  readRope(c, k, cj.prefix);
  return c;
}

}  // namespace kvscope::model
