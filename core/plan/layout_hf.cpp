// A Hugging Face config.json -> ModelLayout, with transformers 5.23's defaults and layer-type rules per family
// (models/<family>/configuration_*.py): which layers slide, which are linear attention, which read another layer's
// KV, and the head sizes of each.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <set>

#include "model/json_keys.h"
#include "plan/layout.h"

namespace kvscope::plan {

namespace {

using model::FormatError;
using model::JsonKeys;
using nlohmann::json;

bool in(const std::string& s, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (s == n) return true;
  return false;
}

// The text model's family with the multimodal wrapper and _text suffixes folded ("gemma3_text" -> "gemma3").
std::string family(std::string type) {
  for (const char* suffix : {"_text"})
    if (type.size() > std::string(suffix).size() && type.ends_with(suffix))
      type.resize(type.size() - std::string(suffix).size());
  if (type == "kimi_k2" || type == "kimi_k25") return "deepseek_v3";  // remote code: a DeepseekV3Config
  if (type == "qwen3_5_moe") return "qwen3_5";
  return type;
}

// The class defaults of keys a published config may leave out, per family (configuration_*.py).
struct Defaults {
  std::optional<int> headDim;  // none: hidden_size / num_attention_heads
  int slidingWindow = 4096;
  int pattern = 0;                    // sliding window pattern (gemma*): every pattern-th layer is full
  std::optional<int> heads, kvHeads;  // Gemma's published text_configs leave them out
};

Defaults defaultsOf(const std::string& fam) {
  Defaults d;
  if (fam == "qwen3") d.headDim = 128;
  if (in(fam, {"gemma", "gemma2", "gemma3", "gemma3n", "gemma4", "qwen3_next", "qwen3_5"})) d.headDim = 256;
  if (fam == "gpt_oss") d.headDim = 64, d.slidingWindow = 128;
  if (in(fam, {"gemma2", "gemma3", "gemma4"})) d.heads = 8, d.kvHeads = 4;
  if (fam == "gemma3n") d.heads = 8, d.kvHeads = 2;
  if (fam == "gemma2") d.pattern = 2;
  if (fam == "gemma3" || fam == "gemma4") d.pattern = 6;
  if (fam == "gemma3n") d.pattern = 5, d.slidingWindow = 512;
  if (fam == "gemma4") d.slidingWindow = 512;
  return d;
}

// The layer types as transformers derives them when config.json has no layer_types.
std::vector<std::string> derivedLayerTypes(const std::string& fam, const JsonKeys& k, int layers, const Defaults& d) {
  std::vector<std::string> t(static_cast<std::size_t>(layers), "full_attention");
  auto each = [&](auto sliding) {
    for (int i = 0; i < layers; ++i)
      if (sliding(i)) t[static_cast<std::size_t>(i)] = "sliding_attention";
  };
  if (fam == "qwen3_next" || fam == "qwen3_5") {
    const int interval = k.count("full_attention_interval", 4);
    for (int i = 0; i < layers; ++i)
      if ((i + 1) % interval != 0) t[static_cast<std::size_t>(i)] = "linear_attention";
  } else if (d.pattern > 0) {
    int pattern = d.pattern;
    for (const char* key : {"sliding_window_pattern", "_sliding_window_pattern"})
      if (k.has(key)) {
        pattern = k.count(key);
        break;
      }
    each([&](int i) { return (i + 1) % pattern != 0; });
    if (fam == "gemma4") t.back() = "full_attention";  // transformers forces the last layer to full attention
  } else if (fam == "gpt_oss") {
    each([](int i) { return (i + 1) % 2 != 0; });
  } else if (in(fam, {"qwen2", "qwen2_moe", "qwen3", "qwen3_moe"})) {
    // use_sliding_window with sliding_window (the class default 4096 where absent; none where null): Qwen3-MoE's
    // attention slides on every layer, the others from max_window_layers on.
    const bool nulled = k.object().contains("sliding_window") && !k.has("sliding_window");
    if (k.flag("use_sliding_window", false) && !nulled) {
      const int from = fam == "qwen3_moe" ? 0 : k.count0("max_window_layers", 28);
      each([&](int i) { return i >= from; });
    }
  } else if (k.has("sliding_window") || (fam == "mistral" && !k.object().contains("sliding_window"))) {
    // mistral, mixtral and the rest: every layer slides (cache_utils.py); MistralConfig's default window is 4096
    each([](int) { return true; });
  }
  return t;
}

}  // namespace

ModelLayout layoutFromHfConfig(std::string_view text, const std::string& where) {
  const model::ConfigJson cj = model::parseConfigJson(text, where);
  const json& j = *cj.text;
  const JsonKeys k(j, where, cj.prefix), t(cj.top, where);

  ModelLayout m;
  m.source = "config.json";
  m.arch = k.has("model_type") ? k.str("model_type", "") : t.str("model_type", "");
  if (m.arch.empty()) k.fail("model_type", "is missing: the planner needs the model's family");
  m.name = t.str("_name_or_path", "");
  const std::string fam = family(m.arch);
  const Defaults d = defaultsOf(fam);
  // The dtype: the text model's, else the wrapper's; `dtype` before the older `torch_dtype`.
  for (const JsonKeys* src : {&k, &t}) {
    const char* key = src->has("dtype") ? "dtype" : src->has("torch_dtype") ? "torch_dtype" : nullptr;
    if (!key) continue;
    m.dtype = src->str(key, "bfloat16");
    if (dtypeBytes(m.dtype) == 0)
      src->fail(key, fmt::format("= `{}` is not a dtype the engines store (bfloat16, float16, float32)", m.dtype));
    break;
  }

  const int layers = k.count("num_hidden_layers");
  m.hidden = k.count("hidden_size");
  m.heads = d.heads ? k.count("num_attention_heads", *d.heads) : k.count("num_attention_heads");
  const int kvHeads = k.count("num_key_value_heads", d.kvHeads.value_or(m.heads));
  if (!d.headDim && !k.has("head_dim") && m.hidden % m.heads != 0)
    k.fail("hidden_size", fmt::format("= {} is not a multiple of num_attention_heads = {} (and no head_dim is given)",
                                      m.hidden, m.heads));
  const int headDim = k.count("head_dim", d.headDim.value_or(m.hidden / m.heads));
  m.contextLength = k.count("max_position_embeddings", 2048);
  const int window = k.has("sliding_window") ? k.count("sliding_window") : d.slidingWindow;

  std::vector<std::string> types;
  if (k.has("layer_types")) {
    const json& lt = j.at("layer_types");
    if (!lt.is_array()) k.fail("layer_types", fmt::format("must be a list, found {}", lt.type_name()));
    if (lt.size() != static_cast<std::size_t>(layers))
      k.fail("layer_types", fmt::format("has {} entries for num_hidden_layers = {}", lt.size(), layers));
    for (const auto& e : lt) {
      if (!e.is_string()) k.fail("layer_types", fmt::format("has {}: every entry must be a string", e.dump()));
      std::string s = e.get<std::string>();
      if (s == "attention") s = "full_attention";  // transformers' legacy names (configuration_utils.py)
      if (s == "mamba") s = "linear_attention";
      if (s == "deepseek_sparse_attention") s = "indexed_attention";
      if (!in(s, {"full_attention", "sliding_attention", "linear_attention", "indexed_attention"}))
        k.fail("layer_types", fmt::format("has `{}`: the planner knows full_attention, sliding_attention, "
                                          "linear_attention and indexed_attention layers",
                                          s));
      types.push_back(s);
    }
  } else {
    types = derivedLayerTypes(fam, k, layers, d);
  }

  // MLA (DeepSeek-V2/V3/V3.2, Kimi K2/K2.5, GLM-4.7-Flash): the latent and the RoPE key per token.
  const bool mla = k.has("kv_lora_rank");
  int latent = 0, rope = 0, indexDim = 0;
  if (mla) {
    latent = k.count("kv_lora_rank");
    rope = k.count("qk_rope_head_dim");
    if (fam == "deepseek_v32" || k.has("index_head_dim")) indexDim = k.count("index_head_dim", 128);
  }
  // Gated DeltaNet (Qwen3-Next, Qwen3.5/3.6).
  int convKernel = 0, convChannels = 0, vHeads = 0, kDim = 0, vDim = 0;
  if (std::find(types.begin(), types.end(), "linear_attention") != types.end()) {
    convKernel = k.count("linear_conv_kernel_dim", 4);
    const int kHeads = k.count("linear_num_key_heads", 16);
    vHeads = k.count("linear_num_value_heads", 32);
    kDim = k.count("linear_key_head_dim", 128);
    vDim = k.count("linear_value_head_dim", 128);
    convChannels = 2 * kHeads * kDim + vHeads * vDim;
    if (k.has("mamba_ssm_dtype")) {
      m.ssmDtype = k.str("mamba_ssm_dtype", "");
      if (dtypeBytes(m.ssmDtype) == 0)
        k.fail("mamba_ssm_dtype", fmt::format("= `{}` is not a dtype (bfloat16, float16, float32)", m.ssmDtype));
    }
  }
  // Gemma 4: full layers have their own head size and, with K = V, their own KV heads.
  int fullHeadDim = headDim, fullKvHeads = kvHeads;
  if (fam == "gemma4") {
    fullHeadDim = k.count("global_head_dim", 512);
    if (k.flag("attention_k_eq_v", false) && k.has("num_global_key_value_heads"))
      fullKvHeads = k.count("num_global_key_value_heads");
  }
  // Gemma 3n / 4: the last num_kv_shared_layers layers read the last earlier layer of their own type.
  const int shared = k.count0("num_kv_shared_layers", 0);
  if (shared >= layers)
    k.fail("num_kv_shared_layers",
           fmt::format("= {} leaves no layer of num_hidden_layers = {} with a cache of its own", shared, layers));

  for (int i = 0; i < layers; ++i) {
    const std::string& type = types[static_cast<std::size_t>(i)];
    LayerSpec s;
    s.index = i;
    if (type == "linear_attention") {
      s.kind = LayerKind::Linear;
      s.convKernel = convKernel, s.convChannels = convChannels;
      s.stateHeads = vHeads, s.stateDimK = kDim, s.stateDimV = vDim;
    } else if (mla) {
      s.kind = LayerKind::Mla;
      s.latent = latent, s.ropeDim = rope;
      s.indexDim = type == "indexed_attention" || fam == "deepseek_v32" ? indexDim : 0;
      s.kvHeads = 1, s.headDimK = latent + rope, s.headDimV = latent;
    } else {
      const bool sliding = type == "sliding_attention";
      s.kind = sliding ? LayerKind::Sliding : LayerKind::Full;
      s.kvHeads = sliding ? kvHeads : fullKvHeads;
      s.headDimK = s.headDimV = sliding ? headDim : fullHeadDim;
      if (sliding) s.window = window;
    }
    m.layers.push_back(s);
  }
  if (shared > 0) {
    const int first = layers - shared;
    for (int i = first; i < layers; ++i) {
      LayerSpec& s = m.layers[static_cast<std::size_t>(i)];
      for (int src = first - 1; src >= 0; --src)
        if (m.layers[static_cast<std::size_t>(src)].kind == s.kind) {
          s.sharedFrom = src;
          break;
        }
      if (s.sharedFrom < 0)
        k.fail("num_kv_shared_layers", fmt::format("= {}: layer {} ({}) has no earlier {} layer to share", shared, i,
                                                   layerKindName(s.kind), layerKindName(s.kind)));
      const LayerSpec& src = m.layers[static_cast<std::size_t>(s.sharedFrom)];
      s.kvHeads = src.kvHeads, s.headDimK = src.headDimK, s.headDimV = src.headDimV, s.window = src.window;
      s.kind = LayerKind::Shared;
    }
  }
  return m;
}

}  // namespace kvscope::plan
