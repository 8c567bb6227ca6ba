// A GGUF header -> ModelLayout, as llama.cpp's hparams read it (src/llama-model.cpp, llama-hparams.cpp): the
// per-layer KV heads and head sizes, the sliding-window pattern per architecture, the layers that reuse another's
// KV, the recurrent layers of the Qwen3-Next / Qwen3.5 hybrids and DeepSeek's MLA latent.
#include <fmt/format.h>

#include <filesystem>
#include <regex>

#include "model/gguf.h"
#include "plan/layout.h"

namespace kvscope::plan {

namespace {

using model::FormatError;
using model::GgufFile;

class Meta {
 public:
  explicit Meta(const GgufFile& f) : f_(f), arch_(f.getString("general.architecture").value_or("")) {
    if (arch_.empty()) throw FormatError(fmt::format("{}: metadata `general.architecture` is missing", f.path()));
  }
  const std::string& arch() const { return arch_; }
  std::string key(const std::string& k) const { return arch_ + "." + k; }
  [[noreturn]] void fail(const std::string& k, const std::string& what) const {
    throw FormatError(fmt::format("{}: metadata `{}` {}", f_.path(), key(k), what));
  }
  bool has(const std::string& k) const { return f_.has(key(k)); }
  std::int64_t count(const std::string& k, std::optional<std::int64_t> dflt = std::nullopt) const {
    const auto v = f_.getInt(key(k));
    if (!v) {
      if (dflt) return *dflt;
      fail(k, "is missing");
    }
    if (*v < 0 || *v > (std::int64_t{1} << 40)) fail(k, fmt::format("= {} is out of range", *v));
    return *v;
  }
  // A per-layer integer: one value for every layer, or an array of n (llama.cpp's get_key_or_arr).
  std::vector<int> perLayer(const std::string& k, int n, std::optional<int> dflt) const {
    const auto it = f_.metadata().find(key(k));
    if (it == f_.metadata().end()) {
      if (!dflt) fail(k, "is missing");
      return std::vector<int>(static_cast<std::size_t>(n), *dflt);
    }
    if (std::holds_alternative<std::vector<std::int64_t>>(it->second)) {
      const auto& a = std::get<std::vector<std::int64_t>>(it->second);
      if (a.size() != static_cast<std::size_t>(n)) fail(k, fmt::format("has {} entries for {} layers", a.size(), n));
      std::vector<int> out;
      for (const auto v : a) {
        if (v < 0 || v > (1 << 24)) fail(k, fmt::format("has {}, out of range", v));
        out.push_back(static_cast<int>(v));
      }
      return out;
    }
    return std::vector<int>(static_cast<std::size_t>(n), static_cast<int>(count(k)));
  }
  // The sliding-window pattern as an array (gemma4: one bool per layer; some converters write 0/1 integers), or
  // nullopt when the key is a period or absent.
  std::optional<std::vector<bool>> boolArray(const std::string& k, int n) const {
    const auto it = f_.metadata().find(key(k));
    if (it == f_.metadata().end()) return std::nullopt;
    std::vector<bool> out;
    if (const auto* b = std::get_if<std::vector<bool>>(&it->second))
      out = *b;
    else if (const auto* i = std::get_if<std::vector<std::int64_t>>(&it->second))
      for (const auto v : *i) out.push_back(v != 0);
    else
      return std::nullopt;
    if (out.size() != static_cast<std::size_t>(n)) fail(k, fmt::format("has {} entries for {} layers", out.size(), n));
    return out;
  }

 private:
  const GgufFile& f_;
  std::string arch_;
};

// llama_hparams::set_swa_pattern: the last layer of every `period` is full attention (period 0: every layer slides).
std::vector<bool> swaPattern(int layers, int period) {
  std::vector<bool> swa(static_cast<std::size_t>(layers));
  for (int i = 0; i < layers; ++i) swa[static_cast<std::size_t>(i)] = period == 0 || (i % period < period - 1);
  return swa;
}

// The bytes of every tensor, in this file and in the other shards of a split GGUF beside it.
std::uint64_t weightBytes(const GgufFile& f) {
  std::uint64_t sum = 0;
  for (const auto& t : f.tensors()) sum += t.bytes;
  const auto count = f.getInt("split.count");
  if (!count || *count <= 1) return sum;
  static const std::regex shard(R"((.*)-(\d{5})-of-(\d{5})\.gguf)");
  std::smatch m;
  const std::string& path = f.path();
  if (!std::regex_match(path, m, shard)) return sum;
  for (std::int64_t i = 1; i <= *count; ++i) {
    const std::string other = fmt::format("{}-{:05d}-of-{}.gguf", m[1].str(), i, m[3].str());
    if (other == path) continue;
    if (!std::filesystem::exists(other))
      throw FormatError(fmt::format("{}: shard {} of {} ({}) is not beside it: the weights' size needs every shard",
                                    path, i, *count, other));
    const GgufFile s(other);
    for (const auto& t : s.tensors()) sum += t.bytes;
  }
  return sum;
}

}  // namespace

ModelLayout layoutFromGguf(const GgufFile& f) {
  const Meta m(f);
  const std::string& arch = m.arch();
  ModelLayout out;
  out.source = "gguf";
  out.arch = arch;
  out.name = f.getString("general.name").value_or("");
  out.dtype = "float16";
  out.weightBytes = weightBytes(f);

  const int all = static_cast<int>(m.count("block_count"));
  const int nextn = static_cast<int>(m.count("nextn_predict_layers", 0));
  if (all <= 0 || nextn >= all) m.fail("block_count", fmt::format("= {} leaves no layer", all));
  // llama.cpp's n_layer() leaves the MTP blocks out; deepseek2's and glm4moe's cache keeps them (create_memory
  // filters them only for other architectures).
  const int n = arch == "deepseek2" || arch == "glm4moe" ? all : all - nextn;
  out.hidden = static_cast<int>(m.count("embedding_length"));
  out.contextLength = m.count("context_length");
  const std::vector<int> heads = m.perLayer("attention.head_count", all, std::nullopt);
  out.heads = heads.front();
  const std::vector<int> kvHeads = m.perLayer("attention.head_count_kv", all, out.heads);
  if (out.heads <= 0) m.fail("attention.head_count", "is 0");
  const int keyLen = static_cast<int>(m.count("attention.key_length", out.hidden / out.heads));
  const int valLen = static_cast<int>(m.count("attention.value_length", out.hidden / out.heads));
  const int keyLenSwa = static_cast<int>(m.count("attention.key_length_swa", keyLen));
  const int valLenSwa = static_cast<int>(m.count("attention.value_length_swa", valLen));
  const int window = static_cast<int>(m.count("attention.sliding_window", 0));

  // Which layers slide, by architecture (llama-model.cpp's load_hparams).
  std::vector<bool> swa(static_cast<std::size_t>(all), false);
  int kvFromStart = -1;  // llama.cpp's n_layer_kv_from_start: later layers reuse an earlier layer's KV
  if (arch == "gemma2") {
    swa = swaPattern(all, 2);
  } else if (arch == "gemma3") {
    if (window > 0) swa = swaPattern(all, 6);
  } else if (arch == "gemma3n") {
    swa = swaPattern(all, 5);
    kvFromStart = 20;
  } else if (arch == "gemma4") {
    const auto pattern = m.boolArray("attention.sliding_window_pattern", all);
    if (!pattern) m.fail("attention.sliding_window_pattern", "is missing: Gemma 4 names its sliding layers");
    swa = *pattern;
    kvFromStart = all - static_cast<int>(m.count("attention.shared_kv_layers", 0));
  } else if (arch == "gpt-oss" || arch == "cohere2") {
    const int period = arch == "cohere2" ? 4 : 2;
    if (const auto pattern = m.boolArray("attention.sliding_window_pattern", all))
      swa = *pattern;
    else
      swa = swaPattern(all, static_cast<int>(m.count("attention.sliding_window_pattern", period)));
  } else if (window > 0 && m.has("attention.sliding_window_pattern")) {
    if (const auto pattern = m.boolArray("attention.sliding_window_pattern", all))
      swa = *pattern;
    else
      swa = swaPattern(all, static_cast<int>(m.count("attention.sliding_window_pattern")));
  }
  if (window == 0 && std::find(swa.begin(), swa.end(), true) != swa.end())
    m.fail("attention.sliding_window", "is missing or 0 for a model with sliding-window layers");

  // The hybrids' recurrent layers (Gated DeltaNet).
  const bool hybrid = arch == "qwen3next" || arch == "qwen35" || arch == "qwen35moe";
  int dConv = 0, dInner = 0, dState = 0, nGroup = 0, dtRank = 0;
  std::vector<bool> recurrent(static_cast<std::size_t>(all), false);
  if (hybrid) {
    if (const auto r = m.boolArray("attention.recurrent_layers", all)) {
      recurrent = *r;
    } else {
      const int interval = static_cast<int>(m.count("full_attention_interval", 4));
      if (interval <= 0) m.fail("full_attention_interval", "is 0");
      for (int i = 0; i < all; ++i) recurrent[static_cast<std::size_t>(i)] = (i + 1) % interval != 0;
    }
    dConv = static_cast<int>(m.count("ssm.conv_kernel"));
    dInner = static_cast<int>(m.count("ssm.inner_size"));
    dState = static_cast<int>(m.count("ssm.state_size"));
    nGroup = static_cast<int>(m.count("ssm.group_count"));
    dtRank = static_cast<int>(m.count("ssm.time_step_rank"));
    if (dConv < 1 || dtRank <= 0 || dInner % dtRank != 0)
      m.fail("ssm.inner_size",
             fmt::format("= {} is not a whole number of ssm.time_step_rank = {} heads", dInner, dtRank));
  }
  // MLA: only a GGUF converted with the MLA split (key_length_mla present) caches the latent.
  const bool mlaArch = arch == "deepseek2" || arch == "deepseek32" || arch == "glm-dsa";
  const bool mla = mlaArch && m.has("attention.key_length_mla");
  out.mlaExpanded = mlaArch && !mla;
  int latent = 0, rope = 0, indexDim = 0;
  if (mla) {
    latent = static_cast<int>(m.count("attention.kv_lora_rank"));
    rope = static_cast<int>(m.count("rope.dimension_count"));
    if (m.has("attention.indexer.key_length")) indexDim = static_cast<int>(m.count("attention.indexer.key_length"));
  }

  for (int i = 0; i < n; ++i) {
    const auto u = static_cast<std::size_t>(i);
    LayerSpec s;
    s.index = i;
    if (recurrent[u]) {
      s.kind = LayerKind::Linear;
      s.convKernel = dConv, s.convChannels = dInner + 2 * nGroup * dState;
      s.stateHeads = dtRank, s.stateDimK = dState, s.stateDimV = dInner / dtRank;
    } else if (mla) {
      s.kind = LayerKind::Mla;
      s.latent = latent, s.ropeDim = rope, s.indexDim = indexDim;
      s.kvHeads = kvHeads[u], s.headDimK = keyLen, s.headDimV = valLen;
      if (s.kvHeads != 1 || keyLen != latent + rope)
        m.fail("attention.key_length", fmt::format("= {} with head_count_kv = {}: an MLA cache is one head of "
                                                   "kv_lora_rank + rope.dimension_count = {}",
                                                   keyLen, s.kvHeads, latent + rope));
    } else {
      s.kind = swa[u] ? LayerKind::Sliding : LayerKind::Full;
      s.kvHeads = kvHeads[u];
      s.headDimK = swa[u] ? keyLenSwa : keyLen;
      s.headDimV = swa[u] ? valLenSwa : valLen;
      if (swa[u]) s.window = window;
      if (s.kvHeads == 0) m.fail("attention.head_count_kv", fmt::format("is 0 for attention layer {}", i));
    }
    if (kvFromStart >= 0 && i >= kvFromStart) {
      if (kvFromStart < 2) m.fail("attention.shared_kv_layers", "leaves fewer than two layers with a cache");
      s.sharedFrom = kvFromStart - (swa[u] ? 2 : 1);  // llama.cpp's reuse rule for Gemma 3n / 4
      s.kind = LayerKind::Shared;
    }
    out.layers.push_back(s);
  }
  return out;
}

}  // namespace kvscope::plan
