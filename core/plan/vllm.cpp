// vLLM's KV cache for a model, as 0.24, 0.33 and 0.34 plan it (v1/kv_cache_interface.py, v1/core/kv_cache_planning.py
// and kv_cache_utils.py, platforms/interface.py; docs/capacity.md): each layer's page per --kv-cache-dtype, the
// block size (the version's default, raised for a hybrid's state page and for unquantized skip layers), the cache
// groups, num_blocks = available // bytes per block, the blocks one request needs, and the capacity line.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "plan/plan.h"

namespace kvscope::plan::detail {

namespace {

std::int64_t cdiv(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

std::string thousands(std::int64_t v) {  // Python's f"{v:,}"
  std::string s = std::to_string(v), out;
  const std::size_t lead = s.size() % 3 == 0 ? 3 : s.size() % 3;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (i - lead) % 3 == 0 && i >= lead) out += ',';
    out += s[i];
  }
  return out;
}

// The --kv-cache-dtype a config is, or empty with `why` said.
std::string vllmDtype(const cache::CacheConfig& c, std::string& why) {
  switch (c.backend) {
    case cache::Backend::Dynamic:
      return "auto";
    case cache::Backend::Fp8:
      return c.fp8Format == cache::Fp8Format::E5M2 ? "fp8_e5m2" : "fp8";
    case cache::Backend::Vllm:
      if (c.vllmKv == cache::VllmKv::Ultraquant4Bit) {
        why = "ultraquant_4bit is a ROCm cache in vLLM (no CUDA backend stores it)";
        return "";
      }
      return std::string(cache::vllmKvName(c.vllmKv));
    default:
      why = fmt::format(
          "vLLM has no `{}` cache: its --kv-cache-dtype values are auto, fp8, fp8_e5m2, nvfp4, "
          "nvfp4_4over6, the per-token-head int8/fp8/int4 caches and the TurboQuant presets",
          cache::backendName(c.backend));
      return "";
  }
}

// TurboQuant's slot (turboquant/config.py): packed keys and values of one head and token, rounded to even.
std::int64_t tqSlot(const std::string& d, std::int64_t hd) {
  int kb = 4, vb = 4;
  bool k8 = false;
  if (d == "turboquant_k8v4") k8 = true;
  if (d == "turboquant_k3v4_nc") kb = 3;
  if (d == "turboquant_3bit_nc") kb = 3, vb = 3;
  const std::int64_t key = k8 ? hd : cdiv(hd * kb, 8) + 2;
  const std::int64_t value = cdiv(hd * vb, 8) + 4;
  const std::int64_t slot = key + value;
  return slot + slot % 2;
}

// Bytes of one token in one attention layer (kv heads on this rank), or 0 when the dtype has no form for it.
double attentionToken(const std::string& n, std::int64_t h, std::int64_t hk, std::int64_t hv) {
  if (n == "auto") return static_cast<double>(h * (hk + hv)) * kAutoCacheBytes;
  if (n == "fp8" || n == "fp8_e4m3" || n == "fp8_e5m2") return static_cast<double>(h * (hk + hv));
  if (n == "int8_per_token_head" || n == "fp8_per_token_head") return static_cast<double>(h * (hk + hv + 8));
  if (n == "int4_per_token_head") return static_cast<double>(h * (quot(hk, 2) + quot(hv, 2) + 8));
  if (n == "nvfp4" || n == "nvfp4_4over6")
    return static_cast<double>(h * (quot(hk, 2) + quot(hk, 16) + quot(hv, 2) + quot(hv, 16)));
  if (n.starts_with("turboquant_")) return static_cast<double>(h * tqSlot(n, hk));
  return 0;
}

// Bytes of one token in one MLA layer (replicated on every rank), or 0 when vLLM has no MLA form of the dtype.
double mlaToken(const std::string& n, std::int64_t width, bool sparse) {
  if (n == "auto") return static_cast<double>(width) * kAutoCacheBytes;
  if (sparse && (n == "fp8" || n == "fp8_e4m3" || n.ends_with("per_token_head")))
    return 656;  // FLASHMLA_SPARSE rewrites every quantized dtype to fp8_ds_mla (mla_attention.py)
  if (n == "fp8" || n == "fp8_e4m3" || n == "fp8_e5m2") return static_cast<double>(width);
  if (n == "int8_per_token_head" || n == "fp8_per_token_head") return static_cast<double>(width + 8);
  if (n == "int4_per_token_head") return static_cast<double>(quot(width, 2) + 8);
  return 0;
}

struct Spec {
  enum Kind { Attention, Sliding, Mamba } kind = Attention;
  int layer = 0;
  double token = 0;       // attention: bytes per token
  std::int64_t page = 0;  // mamba: the state's bytes (padded to the attention page later)
  int window = 0;
  std::int64_t block = 0;  // its block size, once unified
  std::string key() const { return fmt::format("{}/{}/{}", static_cast<int>(kind), token, window); }
};

}  // namespace

ConfigPlan planVllm(const ModelLayout& m, const cache::CacheConfig& cfg, const PlanOptions& o, double kvBytes,
                    const std::string& version) {
  ConfigPlan p;
  p.spec = cache::toSpec(cfg);
  const bool v024 = version == "0.24", v034 = version == "0.34";

  // The dtype, and the layers a per-layer config leaves unquantized (--kv-cache-dtype-skip-layers).
  std::string why, dtype;
  std::vector<bool> skip(m.layers.size(), false);
  if (cfg.tiered()) {
    why = "vLLM keeps one dtype per layer for every token: tiers by age have no vLLM form";
  } else if (cfg.mixed()) {
    for (const LayerSpec& s : m.layers) {
      const auto [k, v] = cache::layerConfigs(cfg, s.index, static_cast<int>(m.layers.size()));
      std::string kw, vw;
      const std::string kd = vllmDtype(k, kw), vd = vllmDtype(v, vw);
      if (kd.empty() || vd.empty()) {
        why = !kw.empty() ? kw : vw;
        break;
      }
      if (kd != vd) {
        why = fmt::format("layer {}: vLLM stores K and V in one dtype ({} and {} here)", s.index, kd, vd);
        break;
      }
      if (kd == "auto") {
        skip[static_cast<std::size_t>(s.index)] = true;
      } else if (dtype.empty() || dtype == kd) {
        dtype = kd;
      } else {
        why = fmt::format("vLLM has one --kv-cache-dtype per run: this config names {} and {}", dtype, kd);
        break;
      }
    }
    if (why.empty() && dtype.empty()) dtype = "auto", std::fill(skip.begin(), skip.end(), false);
  } else {
    dtype = vllmDtype(cfg, why);
  }
  if (!why.empty()) {
    p.expressible = false;
    p.notes.push_back(why);
    return p;
  }
  const int n = static_cast<int>(m.layers.size());
  const bool hybrid = m.count(LayerKind::Linear) > 0;
  const bool mla = m.count(LayerKind::Mla) > 0;
  if (dtype.starts_with("turboquant_") && !hybrid && !mla) {  // TurboQuantConfig.get_boundary_skip_layers
    const int edge = cache::vllmBoundaryEdge(n);
    for (int i = 0; i < edge; ++i) skip[static_cast<std::size_t>(i)] = skip[static_cast<std::size_t>(n - 1 - i)] = true;
    p.notes.push_back(
        fmt::format("TurboQuant leaves the first and last {} layers in the model's dtype (vLLM's "
                    "boundary skip layers)",
                    edge));
  }
  std::vector<int> skipped;
  for (int i = 0; i < n; ++i)
    if (skip[static_cast<std::size_t>(i)] && dtype != "auto") skipped.push_back(i);
  p.engineType = dtype;
  if (!skipped.empty() && !dtype.starts_with("turboquant_"))
    p.engineType += fmt::format(" --kv-cache-dtype-skip-layers {}", fmt::join(skipped, ","));

  // Each layer's spec on one rank.
  const int tp = o.tp;
  const bool sparse =
      mla && std::any_of(m.layers.begin(), m.layers.end(), [](const LayerSpec& s) { return s.indexDim > 0; });
  std::vector<Spec> specs;
  double primaryToken = 0, skipToken = 0;
  for (const LayerSpec& s : m.layers) {
    const bool unq = skip[static_cast<std::size_t>(s.index)];
    const std::string ld = unq ? std::string("auto") : dtype;
    Spec sp;
    sp.layer = s.index;
    switch (s.kind) {
      case LayerKind::Shared:
        continue;  // kv_sharing_target_layer_name: no spec of its own
      case LayerKind::Linear: {
        if (s.convChannels % tp != 0 || s.stateHeads % tp != 0) {
          p.expressible = false;
          p.notes.push_back(
              fmt::format("--tensor-parallel-size {} does not divide layer {}'s state ({} conv channels, "
                          "{} heads)",
                          tp, s.index, s.convChannels, s.stateHeads));
          return p;
        }
        const double ssm = m.ssmDtype.empty() ? kAutoCacheBytes : dtypeBytes(m.ssmDtype);
        sp.kind = Spec::Mamba;
        sp.page = static_cast<std::int64_t>(
            static_cast<double>(std::int64_t{s.convKernel - 1} * quot(s.convChannels, tp)) * kAutoCacheBytes +
            std::int64_t{s.stateHeads / tp} * s.stateDimK * s.stateDimV * ssm);
        break;
      }
      case LayerKind::Mla:
        sp.token = mlaToken(ld, s.latent + s.ropeDim, sparse);
        if (sp.token == 0) {
          p.expressible = false;
          p.notes.push_back(
              fmt::format("vLLM has no MLA cache in {} (its MLA caches: auto, fp8, fp8_ds_mla and "
                          "the per-token-head caches)",
                          dtype));
          return p;
        }
        if (s.indexDim > 0)
          sp.token +=
              static_cast<double>(s.indexDim + quot(s.indexDim, 128) * 4);  // the indexer's uint8 keys and scales
        break;
      case LayerKind::Full:
      case LayerKind::Sliding: {
        const std::int64_t h = std::max(1, s.kvHeads / tp);
        sp.token = attentionToken(ld, h, s.headDimK, s.headDimV);
        if (s.kind == LayerKind::Sliding) sp.kind = Spec::Sliding, sp.window = s.window;
        break;
      }
    }
    if (sp.kind != Spec::Mamba) (unq ? skipToken : primaryToken) = sp.token;
    specs.push_back(sp);
  }
  if (sparse && dtype != "auto")
    p.notes.push_back(
        "DeepSeek's sparse MLA stores a quantized cache as fp8_ds_mla (656 "
        "bytes per token and layer) and its indexer keys in 132 bytes");

  // The block size: the version's default, a backend's fixed size, then raised for a hybrid's state and for
  // unquantized skip layers (platforms/interface.py).
  std::int64_t block = o.blockSize.value_or(v034 ? 64 : 16);
  if (!o.blockSize && mla && (sparse || dtype != "auto")) block = 64;  // FlashMLA / FlashMLA-sparse: blocks of 64
  std::int64_t mambaPadded = 0;
  const auto raise = [&](std::int64_t to, const char* why) {  // vLLM only ever raises the block size, and says so
    if (block >= to) return;
    block = to;
    p.log.push_back(fmt::format("Setting attention block size to {} tokens {}", block, why));
  };
  if (hybrid) {
    double attn1 = 0;
    for (const Spec& s : specs)
      if (s.kind != Spec::Mamba) attn1 = std::max(attn1, s.token);
    std::int64_t mambaPage = 0;
    for (const Spec& s : specs)
      if (s.kind == Spec::Mamba) mambaPage = std::max(mambaPage, s.page);
    std::int64_t align = std::max<std::int64_t>(16, block);
    if (mla) align = std::max<std::int64_t>(align, 128);
    if (o.prefixCaching && !v024) align = std::lcm(align, std::int64_t{64});  // the GDN prefill checkpoints (SM90)
    const auto a1 = static_cast<std::int64_t>(attn1);
    std::int64_t attnBlock = align * cdiv(mambaPage, align * a1);
    attnBlock = 16 * cdiv(attnBlock, 16);
    raise(attnBlock, "to ensure that attention page size is >= mamba page size.");
    mambaPadded = block * a1;
    if (mambaPadded != mambaPage)
      p.log.push_back(
          fmt::format("Padding mamba page size by {}% to ensure that mamba page size and attention page "
                      "size are exactly equal.",
                      fixed2(100.0 * static_cast<double>(mambaPadded - mambaPage) / static_cast<double>(mambaPage))));
  }
  if (skipToken > primaryToken && primaryToken > 0) {  // _align_heterogeneous_kv_block_size
    const std::int64_t align = std::max<std::int64_t>(16, block);
    const auto required = std::max(static_cast<std::int64_t>(skipToken) * 16, mambaPadded);
    const std::int64_t primaryBlock = align * cdiv(required, align * static_cast<std::int64_t>(primaryToken));
    raise(primaryBlock, "so the quantized primary KV page covers the higher-precision padded-spec page.");
  }
  for (Spec& s : specs) s.block = block;

  // The groups and the bytes of one block across them (kv_cache_planning.py).
  const std::int64_t L = o.maxModelLen.value_or(m.contextLength);
  std::int64_t mnbt = o.maxNumBatchedTokens.value_or(8192);
  mnbt = std::min<std::int64_t>(mnbt, std::int64_t{o.maxNumSeqs} * L);
  const std::int64_t inFlight = v024 ? mnbt : 2 * mnbt;
  double bytesPerBlock = 0;
  std::int64_t perRequest = 0;
  const bool anySliding =
      std::any_of(specs.begin(), specs.end(), [](const Spec& s) { return s.kind == Spec::Sliding; });
  if (!hybrid && !anySliding) {
    // One group (uniform, or one UniformTypeKVCacheSpecs of mixed pages: skip layers, the indexer).
    for (const Spec& s : specs) bytesPerBlock += static_cast<double>(block) * s.token;
    perRequest = cdiv(L, block);
  } else {
    // Pages unified to the largest: a page that divides it scales its block, another is padded.
    double largest = 0;
    for (const Spec& s : specs)
      largest = std::max(largest, s.kind == Spec::Mamba ? static_cast<double>(mambaPadded) : s.token * block);
    std::map<std::string, std::vector<const Spec*>> buckets;
    std::vector<std::string> order;
    for (Spec& s : specs) {
      if (s.kind != Spec::Mamba) {
        const double page = s.token * block;
        const double ratio = largest / page;
        if (ratio > 1 && std::floor(ratio) == ratio) s.block = block * static_cast<std::int64_t>(ratio);
      }
      if (!buckets.count(s.key())) order.push_back(s.key());
      buckets[s.key()].push_back(&s);
    }
    std::size_t minN = SIZE_MAX, maxN = 0;
    for (const auto& [k, v] : buckets) minN = std::min(minN, v.size()), maxN = std::max(maxN, v.size());
    const std::size_t groupSize = static_cast<double>(maxN) < 1.5 * static_cast<double>(minN) ? maxN : minN;
    std::size_t widest = 0;
    for (const std::string& k : order) {
      const auto& layers = buckets[k];
      const std::size_t pad = groupSize - layers.size() % groupSize;
      if (pad != groupSize)
        p.log.push_back(fmt::format("Add {} padding layers, may waste at most {}% KV cache memory", pad,
                                    fixed2(100.0 * static_cast<double>(pad) / static_cast<double>(layers.size()))));
      const std::size_t groups = (layers.size() + groupSize - 1) / groupSize;
      widest = std::max(widest, (layers.size() + groups - 1) / groups);
      const Spec& s = *layers.front();
      std::int64_t need = 0;
      if (s.kind == Spec::Mamba)
        need = o.prefixCaching ? (v024 ? 2 : 3) : 1;
      else if (s.kind == Spec::Sliding)
        need = cdiv(std::min<std::int64_t>(s.window - 1 + inFlight, L), s.block) + 1;
      else
        need = cdiv(L, s.block);
      perRequest += need * static_cast<std::int64_t>(groups);
    }
    bytesPerBlock = largest * static_cast<double>(widest);
  }
  if (bytesPerBlock <= 0) {
    p.notes.push_back("no layer of this model has a KV cache");
    return p;
  }
  const auto blocks = static_cast<std::int64_t>(std::floor(kvBytes / bytesPerBlock));
  const double conc = static_cast<double>(blocks) / static_cast<double>(perRequest);
  const auto tokens = static_cast<std::int64_t>(conc * static_cast<double>(L));
  if (v024) {
    p.log.push_back(fmt::format("GPU KV cache size: {} tokens", thousands(tokens)));
    p.log.push_back(fmt::format("Maximum concurrency for {} tokens per request: {}x", thousands(L), fixed2(conc)));
  } else {
    p.log.push_back(fmt::format("GPU KV cache size: {} tokens, Maximum concurrency for {} tokens per request: {}x",
                                thousands(tokens), thousands(L), fixed2(conc)));
  }
  if (v034)
    p.notes.push_back(
        "0.34 sizes the cache after warmup by default (extensible KV cache): these are its rules with "
        "--no-enable-extensible-kv-cache; a default run's block count is in its \"Memory after warmup\" "
        "line");
  // check_enough_kv_cache_memory: one request of max_model_len must fit beside the null block.
  const auto needed = [&](std::int64_t len) {
    double bytes = 0;
    for (const Spec& s : specs) {
      if (s.kind == Spec::Mamba) {
        bytes += static_cast<double>((o.prefixCaching ? (v024 ? 2 : 3) : 1) * mambaPadded);
        continue;
      }
      const double page = s.token * static_cast<double>(s.block);
      const std::int64_t span = s.kind == Spec::Sliding ? std::min<std::int64_t>(s.window - 1 + inFlight, len) : len;
      bytes += page * static_cast<double>(cdiv(span, s.block) + (s.kind == Spec::Sliding ? 1 : 0));
    }
    return bytes;
  };
  const double check = kvBytes - bytesPerBlock;
  if (needed(L) > check) {
    std::int64_t lo = 1, hi = L, best = 0;
    while (lo <= hi) {
      const std::int64_t mid = (lo + hi) / 2;
      if (needed(mid) <= check)
        best = mid, lo = mid + 1;
      else
        hi = mid - 1;
    }
    p.log.push_back(
        fmt::format("ValueError: To serve at least one request with the model's max seq len ({}), ({} GiB "
                    "KV cache is needed, which is larger than the available KV cache memory ({} GiB). {}",
                    L, formatGib(needed(L)), formatGib(check),
                    best > 0 ? fmt::format("Based on the available memory, the estimated maximum model "
                                           "length is {}.",
                                           best)
                             : ""));
    p.notes.push_back("vLLM refuses to start: one request of max_model_len does not fit");
  }
  p.blockSize = block;
  p.blocks = blocks;
  p.kvTokens = tokens;
  p.maxConcurrency = conc;
  p.kvMib = static_cast<double>(blocks) * bytesPerBlock / (1024.0 * 1024.0);
  double perToken = 0;
  for (const Spec& s : specs)
    if (s.kind == Spec::Attention) perToken += s.token;
  p.bytesPerToken = perToken;
  return p;
}

}  // namespace kvscope::plan::detail
