// Loading a LlamaModel: GGUF and Hugging Face weight names, the checks on what a file holds, and the layers
// assembled from their layer specs (model_config.h).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>

#include "kernels/cpu/blocks.h"
#include "model/dequant.h"
#include "model/gguf.h"
#include "model/hf_config.h"
#include "model/llama.h"
#include "model/safetensors.h"
#include "util/error.h"
#include "util/process_memory.h"

namespace kvscope::model {

namespace {

// llama.cpp's converter permutes the rows of Q and K so that its RoPE rotates adjacent pairs; undo it to get the
// Hugging Face layout, whose RoPE rotates the two halves of each head (rotate_half): new row (h, j, i) is old row
// (h, i, j) of each head's [half, 2] rows.
Weight unpermuteQK(const Weight& w, int heads) {
  const std::int64_t per = w.rows() / heads, half = per / 2;
  std::vector<std::int64_t> order(static_cast<std::size_t>(w.rows()));
  for (std::int64_t h = 0; h < heads; ++h)
    for (std::int64_t j = 0; j < 2; ++j)
      for (std::int64_t i = 0; i < half; ++i)
        order[static_cast<std::size_t>(h * per + j * half + i)] = h * per + 2 * i + j;
  return w.permuteRows(order);
}

// Weights with NaN or infinity would only show up later as NaN logits: refused at load, with where they are.
void checkFinite(const Weight& w, const std::string& file, const std::string& name) {
  if (w.firstNonFinite() < 0) return;
  const at::Tensor x = w.dense();
  const at::Tensor bad = at::isfinite(x).logical_not().flatten();
  const auto count = bad.sum().item<std::int64_t>();
  const auto first = bad.nonzero().select(1, 0)[0].item<std::int64_t>();
  const float v = x.flatten()[first].item<float>();
  throw FormatError(
      fmt::format("{}: tensor `{}` holds NaN or infinite values ({} of {}; the first, {}, at flat index "
                  "{})",
                  file, name, count, x.numel(), v, first));
}

// A norm or bias vector as a tensor of the model's dtype.
at::Tensor vec(const Weight& w, at::ScalarType dtype) {
  return w.defined() ? w.dense().view({-1}).to(dtype) : at::Tensor();
}

// A matrix built at load (float32 values of a matrix stored in another order) as a weight of `type` (F32, F16 or
// BF16: the stored matrix's, so the values are those stored) in memory of its own.
Weight ownedWeight(const at::Tensor& values, std::uint32_t type) {
  const auto t = static_cast<kernels::GgmlType>(type);
  const at::ScalarType dtype = t == kernels::GgmlType::BF16  ? at::kBFloat16
                               : t == kernels::GgmlType::F16 ? at::kHalf
                                                             : at::kFloat;
  const auto held = std::make_shared<at::Tensor>(values.to(dtype).contiguous());
  return Weight(dtype == at::kFloat ? static_cast<std::uint32_t>(kernels::GgmlType::F32) : type, held->size(0),
                held->size(1), static_cast<const std::uint8_t*>(held->const_data_ptr()), held);
}

}  // namespace

// Where each weight lives in a file format: GGUF names or Hugging Face names.
struct WeightNames {
  std::string embed, finalNorm, lmHead;
  std::function<std::string(int, const char*)> layer;  // (layer, kind) with kinds as in GGUF: attn_q.weight, ...
  /// (layer, expert, kind) with kinds ffn_gate_exps.weight, ...: one expert's matrix. Empty: the file stacks each
  /// kind's experts in one [experts, rows, cols] tensor, named by `layer` (GGUF).
  std::function<std::string(int, int, const char*)> expert;
  /// Added to every norm weight as it is read: Gemma's checkpoints store w of its (1 + w) scale (llama.cpp's
  /// converter writes 1 + w).
  float normShift = 0.0F;
  /// transformers' gpt-oss experts: one [experts, hidden, 2 ff] matrix per layer (kind ffn_gate_up_exps.weight)
  /// multiplied from the left, gate and up in alternate columns, and the down projections as [experts, ff, hidden].
  bool fusedGateUp = false;
  /// The same experts as a checkpoint's MXFP4 `*_blocks` / `*_scales` (gpt-oss's published HF layout): the getter
  /// gives them as ggml MXFP4 rows, [experts, 2 ff, hidden] (gate and up in alternate rows) and [experts, hidden, ff].
  bool mxfp4Experts = false;
  /// transformers' Gemma 4 experts: one [experts, 2 ff, hidden] matrix per layer (ffn_gate_up_exps.weight), each
  /// expert's gate rows then its up rows, and the down projections as [experts, hidden, ff].
  bool stackedGateUp = false;
  /// Gemma 4's per-layer embeddings: the table, the model-wide projection and its norm.
  std::string pleEmbed, pleModelProj, pleNorm;
  /// llama.cpp's rope_freqs: each global frequency divided by its factor (Gemma 4: 1e30 where a pair keeps still).
  std::string ropeFreqs;
};

namespace {

// llama.cpp's names; gpt-oss's FFN norm is its post_attention_norm (the converter's ATTN_POST_NORM).
WeightNames ggufNames(const std::string& arch) {
  const bool oss = arch == "gpt-oss";
  return WeightNames{"token_embd.weight",
                     "output_norm.weight",
                     "output.weight",
                     [oss](int l, const char* kind) {
                       const std::string k =
                           oss && std::string(kind) == "ffn_norm.weight" ? "post_attention_norm.weight" : kind;
                       return fmt::format("blk.{}.{}", l, k);
                     },
                     {}};
}

// Hugging Face names, under `prefix` ("model." for a causal LM, "model.language_model." for v5's multimodal
// wrapper, "language_model.model." for v4's). Gemma's four norms per layer take other names than Llama's two;
// gpt-oss names its router, sinks and fused experts its own way; Gemma 4 adds its MoE side, PLE and layer scalar.
WeightNames hfNames(const std::string& arch, const std::string& prefix) {
  const bool gemma4 = arch == "gemma4", gemma = arch == "gemma3" || gemma4;
  std::map<std::string, std::string> kinds = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
      {"ffn_gate_inp.weight", "mlp.gate.weight"},
  };
  if (gemma) {
    kinds["post_attention_norm.weight"] = "post_attention_layernorm.weight";
    kinds["ffn_norm.weight"] = "pre_feedforward_layernorm.weight";
    kinds["post_ffw_norm.weight"] = "post_feedforward_layernorm.weight";
  }
  if (gemma4) {
    kinds["layer_output_scale.weight"] = "layer_scalar";
    kinds["inp_gate.weight"] = "per_layer_input_gate.weight";
    kinds["proj.weight"] = "per_layer_projection.weight";
    kinds["post_norm.weight"] = "post_per_layer_input_norm.weight";
    kinds["ffn_gate_inp.weight"] = "router.proj.weight";
    kinds["ffn_gate_inp.scale"] = "router.scale";
    kinds["ffn_down_exps.scale"] = "router.per_expert_scale";
    kinds["ffn_gate_up_exps.weight"] = "experts.gate_up_proj";
    kinds["ffn_down_exps.weight"] = "experts.down_proj";
    kinds["post_ffw_norm_1.weight"] = "post_feedforward_layernorm_1.weight";
    kinds["pre_ffw_norm_2.weight"] = "pre_feedforward_layernorm_2.weight";
    kinds["post_ffw_norm_2.weight"] = "post_feedforward_layernorm_2.weight";
  }
  const bool oss = arch == "gpt_oss";
  if (oss) {
    kinds["attn_output.bias"] = "self_attn.o_proj.bias";
    kinds["attn_sinks.weight"] = "self_attn.sinks";
    kinds["ffn_gate_inp.weight"] = "mlp.router.weight";
    kinds["ffn_gate_inp.bias"] = "mlp.router.bias";
    kinds["ffn_gate_up_exps.weight"] = "mlp.experts.gate_up_proj";
    kinds["ffn_gate_up_exps.bias"] = "mlp.experts.gate_up_proj_bias";
    kinds["ffn_down_exps.weight"] = "mlp.experts.down_proj";
    kinds["ffn_down_exps.bias"] = "mlp.experts.down_proj_bias";
  }
  static const std::map<std::string, std::string> expertKinds = {
      {"ffn_gate_exps.weight", "gate_proj.weight"},
      {"ffn_up_exps.weight", "up_proj.weight"},
      {"ffn_down_exps.weight", "down_proj.weight"},
  };
  WeightNames n{prefix + "embed_tokens.weight", prefix + "norm.weight", "lm_head.weight",
                [kinds, prefix](int l, const char* kind) {
                  const auto it = kinds.find(kind);
                  return it == kinds.end() ? std::string() : fmt::format("{}layers.{}.{}", prefix, l, it->second);
                },
                [prefix](int l, int e, const char* kind) {
                  return fmt::format("{}layers.{}.mlp.experts.{}.{}", prefix, l, e, expertKinds.at(kind));
                }};
  n.normShift = arch == "gemma3" ? 1.0F : 0.0F;  // Gemma 4's norms scale by w as stored
  n.fusedGateUp = oss;
  n.stackedGateUp = gemma4;
  if (oss || gemma4) n.expert = {};
  if (gemma4) {
    n.pleEmbed = prefix + "embed_tokens_per_layer.weight";
    n.pleModelProj = prefix + "per_layer_model_projection.weight";
    n.pleNorm = prefix + "per_layer_projection_norm.weight";
  }
  return n;
}

}  // namespace

void LlamaModel::assemble(const TensorGetter& get, const WeightNames& names, bool permutedQK, bool tiedEmbeddings,
                          std::uint32_t requantize) {
  ModelConfig& c = cfg_;
  const at::ScalarType dtype = ctx_.dtype();
  int requantized = 0;
  // --weights: a float matrix quantized at load (block formats stay as they are).
  auto quantize = [&](const Weight& w) {
    if (requantize == 0 || kernels::blockLayout(w.type()).quantized()) return w;
    ++requantized;
    return w.requantized(requantize);
  };
  const std::int64_t H = c.hidden;
  auto need = [&](const std::string& name, const std::vector<std::int64_t>& shape) { return get(name, shape, false); };
  auto maybe = [&](const std::string& name, const std::vector<std::int64_t>& shape) {
    return name.empty() ? Weight() : get(name, shape, true);
  };
  // Gemma's norms stay in float32 (its RMSNorm scales in float32 before the cast), shifted to 1 + w where stored as w.
  auto norm = [&](const Weight& w) {
    if (!c.floatNorms || !w.defined()) return vec(w, dtype);
    const at::Tensor f = vec(w, at::kFloat);
    return names.normShift != 0.0F ? f + names.normShift : f;
  };
  embed_ = need(names.embed, {c.vocab, H});
  finalNorm_ = norm(need(names.finalNorm, {H}));
  c.tiedEmbeddings = tiedEmbeddings;
  lmHead_ = tiedEmbeddings ? embed_ : need(names.lmHead, {c.vocab, H});
  if (!tiedEmbeddings) embed_ = quantize(embed_);
  if (c.pleDim > 0) {  // Gemma 4's per-layer embeddings
    if (c.pleVocab < c.vocab)
      throw FormatError(fmt::format("per-layer embeddings of {} rows for a vocabulary of {}", c.pleVocab, c.vocab));
    const std::int64_t LP = static_cast<std::int64_t>(c.layers) * c.pleDim;
    pleEmbed_ = need(names.pleEmbed, {c.pleVocab, LP});
    pleModelProj_ = quantize(need(names.pleModelProj, {LP, H}));
    pleNorm_ = norm(need(names.pleNorm, {c.pleDim}));
  }
  for (int l = 0; l < c.layers; ++l) {
    auto n = [&](const char* kind) { return names.layer(l, kind); };
    const LayerSpec& spec = c.layerSpecs[static_cast<std::size_t>(l)];
    const bool ownKv = spec.kvFrom < 0;
    const std::int64_t Dh = c.headDimOf(l), qDim = static_cast<std::int64_t>(c.heads) * Dh,
                       kvDim = static_cast<std::int64_t>(c.kvHeadsOf(l)) * Dh;
    Layer L;
    L.attnNorm = norm(need(n("attn_norm.weight"), {H}));
    L.wq = need(n("attn_q.weight"), {qDim, H});
    // A shared-KV layer has no K/V projections (a file may still hold them: transformers ignores them); with K = V
    // the key projection gives the values.
    if (ownKv) L.wk = need(n("attn_k.weight"), {kvDim, H});
    if (ownKv && !spec.kEqV) L.wv = need(n("attn_v.weight"), {kvDim, H});
    L.wo = need(n("attn_output.weight"), {H, qDim});
    if (permutedQK) {
      L.wq = unpermuteQK(L.wq, c.heads);
      L.wk = unpermuteQK(L.wk, c.kvHeads);
    }
    for (Weight* w : {&L.wq, &L.wk, &L.wv, &L.wo})
      if (w->defined()) *w = quantize(*w);
    L.bq = vec(maybe(n("attn_q.bias"), {qDim}), dtype);
    if (ownKv) L.bk = vec(maybe(n("attn_k.bias"), {kvDim}), dtype);
    if (ownKv && !spec.kEqV) L.bv = vec(maybe(n("attn_v.bias"), {kvDim}), dtype);
    L.qNorm = norm(maybe(n("attn_q_norm.weight"), {Dh}));
    if (ownKv) L.kNorm = norm(maybe(n("attn_k_norm.weight"), {Dh}));
    L.bo = vec(maybe(n("attn_output.bias"), {H}), dtype);
    if (spec.sinks) L.sinks = vec(need(n("attn_sinks.weight"), {c.heads}), at::kFloat);
    L.mlpNorm = norm(need(n("ffn_norm.weight"), {H}));
    if (c.gemmaBlocks) {
      L.postAttnNorm = norm(need(n("post_attention_norm.weight"), {H}));
      L.postFfnNorm = norm(need(n("post_ffw_norm.weight"), {H}));
    }
    if (c.gemma4Blocks) L.layerScalar = vec(maybe(n("layer_output_scale.weight"), {1}), dtype);
    if (c.pleDim > 0) {
      L.pleGate = quantize(need(n("inp_gate.weight"), {c.pleDim, H}));
      L.pleProj = quantize(need(n("proj.weight"), {H, c.pleDim}));
      L.plePostNorm = norm(need(n("post_norm.weight"), {H}));
    }
    if (spec.ffn == FfnKind::DenseAndMoe) {
      L.postFfnNorm1 = norm(need(n("post_ffw_norm_1.weight"), {H}));
      L.preFfnNorm2 = norm(need(n("pre_ffw_norm_2.weight"), {H}));
      L.postFfnNorm2 = norm(need(n("post_ffw_norm_2.weight"), {H}));
    }
    if (spec.ffn != FfnKind::Dense) {
      const int E = c.moe.experts;
      const std::int64_t F = c.moe.intermediate;
      L.moe.topK = c.moe.used;
      L.moe.normTopK = c.moe.normTopK;
      L.moe.gating = c.moe.gating;
      L.moe.act = c.act;
      L.moe.swigluLimit = c.swigluLimit;
      // The router stays as stored: llama.cpp keeps ffn_gate_inp in float, its converter never quantizes it.
      L.moe.router = need(n("ffn_gate_inp.weight"), {E, H});
      L.moe.routerBias = vec(maybe(n("ffn_gate_inp.bias"), {E}), dtype);
      if (c.moe.gemmaRouter) {
        L.moe.routerScale = vec(need(n("ffn_gate_inp.scale"), {H}), dtype);
        L.moe.expertScale = vec(need(n("ffn_down_exps.scale"), {E}), dtype);
        L.moe.routerEps = c.rmsEps;
      }
      auto biases = [&](const char* kind, std::int64_t rows) {
        const at::Tensor b = vec(maybe(n(kind), {E, rows}), dtype);
        return b.defined() ? b.view({E, rows}) : b;
      };
      if (names.fusedGateUp && names.mxfp4Experts) {  // MXFP4 rows: gate and up alternate, kept as stored blocks
        const Weight gu = need(n("ffn_gate_up_exps.weight"), {E, 2 * F, H});
        const Weight dn = need(n("ffn_down_exps.weight"), {E, H, F});
        std::vector<std::int64_t> evenThenOdd(static_cast<std::size_t>(2 * F));
        for (std::int64_t i = 0; i < F; ++i)
          evenThenOdd[static_cast<std::size_t>(i)] = 2 * i, evenThenOdd[static_cast<std::size_t>(F + i)] = 2 * i + 1;
        for (int e = 0; e < E; ++e) {
          const Weight rows = gu.rowBlock(2 * F * e, 2 * F).permuteRows(evenThenOdd);
          L.moe.gate.push_back(rows.rowBlock(0, F));
          L.moe.up.push_back(rows.rowBlock(F, F));
          L.moe.down.push_back(dn.rowBlock(e * H, H));
        }
        if (const at::Tensor b = biases("ffn_gate_up_exps.bias", 2 * F); b.defined()) {
          L.moe.gateBias = b.slice(1, 0, 2 * F, 2).contiguous();
          L.moe.upBias = b.slice(1, 1, 2 * F, 2).contiguous();
        }
        L.moe.downBias = biases("ffn_down_exps.bias", H);
      } else if (names.fusedGateUp) {  // transformers' gpt-oss: x @ W + b, gate and up in alternate columns
        const Weight gu = need(n("ffn_gate_up_exps.weight"), {E, H, 2 * F});
        const Weight dn = need(n("ffn_down_exps.weight"), {E, F, H});
        for (int e = 0; e < E; ++e) {
          const at::Tensor g = gu.rowBlock(e * H, H).dense();  // [H, 2F]
          L.moe.gate.push_back(quantize(ownedWeight(g.slice(1, 0, 2 * F, 2).t(), gu.type())));
          L.moe.up.push_back(quantize(ownedWeight(g.slice(1, 1, 2 * F, 2).t(), gu.type())));
          L.moe.down.push_back(quantize(ownedWeight(dn.rowBlock(e * F, F).dense().t(), dn.type())));
        }
        if (const at::Tensor b = biases("ffn_gate_up_exps.bias", 2 * F); b.defined()) {
          L.moe.gateBias = b.slice(1, 0, 2 * F, 2).contiguous();
          L.moe.upBias = b.slice(1, 1, 2 * F, 2).contiguous();
        }
        L.moe.downBias = biases("ffn_down_exps.bias", H);
      } else if (names.stackedGateUp) {  // transformers' Gemma 4: [E, 2F, H], each expert's gate rows then up rows
        const Weight gu = need(n("ffn_gate_up_exps.weight"), {E, 2 * F, H});
        const Weight dn = need(n("ffn_down_exps.weight"), {E, H, F});
        for (int e = 0; e < E; ++e) {
          L.moe.gate.push_back(quantize(gu.rowBlock(2 * F * e, F)));
          L.moe.up.push_back(quantize(gu.rowBlock(2 * F * e + F, F)));
          L.moe.down.push_back(quantize(dn.rowBlock(e * H, H)));
        }
      } else {
        auto experts = [&](const char* kind, std::int64_t rows, std::int64_t cols) {
          std::vector<Weight> ws;
          ws.reserve(static_cast<std::size_t>(E));
          if (names.expert) {
            for (int e = 0; e < E; ++e) ws.push_back(quantize(need(names.expert(l, e, kind), {rows, cols})));
          } else {
            const Weight all = need(n(kind), {E, rows, cols});
            for (int e = 0; e < E; ++e) ws.push_back(quantize(all.rowBlock(e * rows, rows)));
          }
          return ws;
        };
        L.moe.gateBias = biases("ffn_gate_exps.bias", F);
        L.moe.upBias = biases("ffn_up_exps.bias", F);
        L.moe.downBias = biases("ffn_down_exps.bias", H);
        L.moe.gate = experts("ffn_gate_exps.weight", F, H);
        L.moe.up = experts("ffn_up_exps.weight", F, H);
        L.moe.down = experts("ffn_down_exps.weight", H, F);
      }
    }
    if (spec.ffn != FfnKind::Moe) {
      const std::int64_t F = c.intermediateOf(l);
      L.wGate = need(n("ffn_gate.weight"), {F, H});
      L.wUp = need(n("ffn_up.weight"), {F, H});
      L.wDown = need(n("ffn_down.weight"), {H, F});
      for (Weight* w : {&L.wGate, &L.wUp, &L.wDown}) *w = quantize(*w);
    }
    c.qkvBias = c.qkvBias || L.bq.defined();
    c.qkNorm = c.qkNorm || L.qNorm.defined();
    layers_.push_back(std::move(L));
  }
  if (requantized > 0)
    c.weightTypes.push_back(fmt::format("{} x{} quantized at load", kernels::ggmlTypeName(requantize), requantized));
  // RoPE inverse frequencies (float32), with llama3 or linear scaling when the config asks for it; the local RoPE's
  // (Gemma's sliding layers) unscaled.
  // Each table as wide as its layers' heads (Gemma 4's full and sliding layers differ); Gemma 4's proportional RoPE
  // rotates only the first ropePartial of the global layers' pairs.
  int globalDim = c.headDim, localDim = c.headDim;
  for (int l = c.layers - 1; l >= 0; --l)
    (c.layerSpecs[static_cast<std::size_t>(l)].localRope ? localDim : globalDim) = c.headDimOf(l);
  auto inverseFrequencies = [&](double theta, std::int64_t dim) {
    return 1.0 / at::pow(theta, at::arange(0, dim, 2, at::kLong).to(at::kFloat) / dim);
  };
  at::Tensor inv = inverseFrequencies(c.ropeTheta, globalDim);
  if (c.ropePartial < 1.0) {  // transformers: int(partial * head_dim // 2) angles over head_dim, the rest 0
    const auto angles = static_cast<std::int64_t>(std::floor(c.ropePartial * globalDim / 2));
    inv = at::cat({inv.narrow(0, 0, angles), at::zeros({globalDim / 2 - angles}, at::kFloat)});
  }
  if (c.ropeLinear != 1.0) inv = inv / c.ropeLinear;
  if (c.ropeFactor > 0) {
    const double lowWave = c.ropeOriginalMax / c.ropeLowFreq, highWave = c.ropeOriginalMax / c.ropeHighFreq;
    const at::Tensor wave = 2 * M_PI / inv;
    at::Tensor scaled = at::where(wave > lowWave, inv / c.ropeFactor, inv);
    const at::Tensor smooth = (c.ropeOriginalMax / wave - c.ropeLowFreq) / (c.ropeHighFreq - c.ropeLowFreq);
    const at::Tensor mid = (1 - smooth) * scaled / c.ropeFactor + smooth * scaled;
    inv = at::where((wave >= highWave) & (wave <= lowWave), mid, scaled);
  }
  if (c.yarnFactor > 0) {  // transformers' _compute_yarn_parameters, in its float32 steps
    const double dim = c.headDim, base = c.ropeTheta, original = static_cast<double>(c.ropeOriginalMax);
    auto correction = [&](double rotations) {
      return dim * std::log(original / (rotations * 2 * M_PI)) / (2 * std::log(base));
    };
    double low = correction(c.yarnBetaFast), high = correction(c.yarnBetaSlow);
    if (c.yarnTruncate) low = std::floor(low), high = std::ceil(high);
    low = std::max(low, 0.0), high = std::min(high, dim - 1);
    if (low == high) high += 0.001;
    const at::Tensor pos = at::pow(c.ropeTheta, at::arange(0, c.headDim, 2, at::kLong).to(at::kFloat) / c.headDim);
    const at::Tensor ramp = ((at::arange(c.headDim / 2, at::kFloat) - low) / (high - low)).clamp(0, 1);
    const at::Tensor extrapolation = 1 - ramp;
    inv = (1.0 / (c.yarnFactor * pos)) * (1 - extrapolation) + (1.0 / pos) * extrapolation;
  }
  if (!names.ropeFreqs.empty()) {
    const Weight ff = need(names.ropeFreqs, {globalDim / 2});
    inv = inv / ff.dense().view({-1}).to(at::kFloat);
  }
  invFreq_ = inv;
  if (c.ropeLocalTheta > 0) invFreqLocal_ = inverseFrequencies(c.ropeLocalTheta, localDim);
  if (!ctx_.hostKernels()) placeOnDevice();
}

void LlamaModel::placeOnDevice() {
  const at::TensorOptions wo = ctx_.options(ctx_.dtype());
  embed_ = embed_.toDense(wo);
  lmHead_ = cfg_.tiedEmbeddings ? embed_ : lmHead_.toDense(wo);
  finalNorm_ = ctx_.place(finalNorm_);
  if (pleEmbed_.defined()) {
    pleEmbed_ = pleEmbed_.toDense(wo);
    pleModelProj_ = pleModelProj_.toDense(wo);
    pleNorm_ = ctx_.place(pleNorm_);
  }
  invFreq_ = ctx_.place(invFreq_);
  if (invFreqLocal_.defined()) invFreqLocal_ = ctx_.place(invFreqLocal_);
  for (Layer& L : layers_) {
    for (Weight* w : L.matrices()) *w = w->toDense(wo);
    for (at::Tensor* t : L.vectors()) *t = ctx_.place(*t);
  }
}

namespace {

// Gemma 3 as llama.cpp builds it (src/models/gemma3.cpp): the scaled embeddings, sandwich norms (stored as 1 + w),
// GELU FFN, Q scaled by 1/sqrt(head size), or by 1/sqrt(hidden / heads) for the 62-layer 27B; with a sliding
// window, layers slide by sliding_window_pattern (a per-layer list, or n: all but every n-th, default 6) and rotate
// with rope.freq_base_swa (default 10000), unscaled; rope.scaling.factor scales the global layers linearly.
void readGemma3(const GgufFile& f, const std::string& path, ModelConfig& c) {
  const std::string a = c.arch + ".";
  c.gemmaBlocks = c.floatNorms = true;
  c.act = FfnAct::GeluTanh;
  c.rmsEps = f.getFloat(a + "attention.layer_norm_rms_epsilon").value_or(1e-6);
  const int perHead = c.hidden / c.heads;  // llama.cpp divides in integers: n_embd / n_head
  if (c.layers == 62) c.attnScale = 1.0 / std::sqrt(static_cast<double>(perHead));
  c.finalSoftcap = f.getFloat(a + "final_logit_softcapping").value_or(0.0);
  if (const double factor = f.getFloat(a + "rope.scaling.factor").value_or(0.0); factor > 0) c.ropeLinear = factor;
  const std::int64_t window = f.getInt(a + "attention.sliding_window").value_or(0);
  if (window < 0) throw FormatError(fmt::format("{}: `{}attention.sliding_window` = {} is negative", path, a, window));
  if (window == 0) return;
  std::vector<bool> sliding(static_cast<std::size_t>(c.layers));
  const auto pattern = f.metadata().find(a + "attention.sliding_window_pattern");
  if (pattern != f.metadata().end() && std::holds_alternative<std::vector<bool>>(pattern->second)) {
    const auto& list = std::get<std::vector<bool>>(pattern->second);
    if (list.size() != sliding.size())
      throw FormatError(fmt::format("{}: `{}attention.sliding_window_pattern` lists {} layers, not {}", path, a,
                                    list.size(), c.layers));
    sliding = list;
  } else {
    const std::int64_t n = f.getInt(a + "attention.sliding_window_pattern").value_or(6);
    if (n < 0) throw FormatError(fmt::format("{}: `{}attention.sliding_window_pattern` = {} is negative", path, a, n));
    for (std::int64_t l = 0; l < c.layers; ++l) sliding[static_cast<std::size_t>(l)] = n == 0 || l % n < n - 1;
  }
  c.ropeLocalTheta = f.getFloat(a + "rope.freq_base_swa").value_or(10000.0);
  for (std::size_t l = 0; l < sliding.size(); ++l)
    if (sliding[l]) c.layerSpecs[l] = LayerSpec{window, true, c.layerSpecs[l].ffn};
}

// gpt-oss as llama.cpp builds it (src/models/openai-moe-iswa.cpp): every layer MoE (softmax_weight gating on the
// biased router's logits, experts with biases, swiglu_oai with alpha 1.702 and limit 7, both hard-coded there),
// attention with biases and sinks, layers sliding over attention.sliding_window by sliding_window_pattern (default 2:
// the even layers), one RoPE for all with YaRN as llama.cpp applies it (correction range floored and ceiled, betas 32
// and 1, cos and sin times 1 + 0.1 ln(factor)).
void readGptOss(const GgufFile& f, const std::string& path, ModelConfig& c) {
  const std::string a = c.arch + ".";
  c.floatNorms = true;
  c.act = FfnAct::SwigluOai;
  c.swigluLimit = 7.0;
  c.moe.gating = MoeGating::TopKSoftmax;
  const std::int64_t window = f.getInt(a + "attention.sliding_window").value_or(0);
  if (window <= 0) throw FormatError(fmt::format("{}: missing or bad `{}attention.sliding_window`", path, a));
  const std::int64_t n = f.getInt(a + "attention.sliding_window_pattern").value_or(2);
  if (n < 0) throw FormatError(fmt::format("{}: `{}attention.sliding_window_pattern` = {} is negative", path, a, n));
  for (std::int64_t l = 0; l < c.layers; ++l) {
    LayerSpec& s = c.layerSpecs[static_cast<std::size_t>(l)];
    s.window = n == 0 || l % n < n - 1 ? window : 0;
    s.sinks = true;
  }
  const std::string scaling = f.getString(a + "rope.scaling.type").value_or("none");
  if (scaling == "yarn") {
    c.yarnFactor = f.getFloat(a + "rope.scaling.factor").value_or(0.0);
    if (!(c.yarnFactor > 0)) throw FormatError(fmt::format("{}: YaRN without `{}rope.scaling.factor`", path, a));
    c.ropeOriginalMax = f.getInt(a + "rope.scaling.original_context_length").value_or(c.contextLength);
    c.yarnTruncate = true;
    c.yarnAttnFactor = c.yarnFactor <= 1 ? 1.0 : 0.1 * std::log(c.yarnFactor) + 1.0;
  } else if (scaling != "none") {
    throw FormatError(
        fmt::format("{}: `{}rope.scaling.type` = {} is not supported for gpt-oss (yarn)", path, a, scaling));
  }
}

// A per-layer integer as llama.cpp's loader reads it (get_key_or_arr): a scalar for every layer, or one entry each.
// nullopt when absent.
std::optional<std::vector<std::int64_t>> perLayerInts(const GgufFile& f, const std::string& path,
                                                      const std::string& key, int layers) {
  const auto it = f.metadata().find(key);
  if (it == f.metadata().end()) return std::nullopt;
  if (const auto* list = std::get_if<std::vector<std::int64_t>>(&it->second)) {
    if (list->size() != static_cast<std::size_t>(layers))
      throw FormatError(fmt::format("{}: `{}` lists {} layers, not {}", path, key, list->size(), layers));
    for (const std::int64_t v : *list)
      if (v < 0 || v > (1 << 24)) throw FormatError(fmt::format("{}: `{}` has {}", path, key, v));
    return *list;
  }
  const std::int64_t v = f.getInt(key).value_or(0);
  if (v < 0 || v > (1 << 24)) throw FormatError(fmt::format("{}: `{}` = {} is out of range", path, key, v));
  return std::vector<std::int64_t>(static_cast<std::size_t>(layers), v);
}

// Gemma 4 as llama.cpp builds it (src/models/gemma4.cpp): Gemma's blocks with attention scaled by 1, values RMS-normed
// without a weight, norms as stored; sliding layers as sliding_window_pattern (a bool per layer) says, of head size
// key_length_swa rotating with rope.freq_base_swa, the full ones of key_length with rope.freq_base divided by the
// rope_freqs tensor (1e30 where a pair keeps still: the proportional RoPE); head_count_kv and feed_forward_length per
// layer where arrays; K = V where a layer has no attn_v; the last shared_kv_layers layers reading layer
// n_layer_kv_from_start - 1 (full) or - 2 (sliding), as llama.cpp hard-codes it; per-layer embeddings of
// embedding_length_per_layer_input; the MoE side on layers with ffn_gate_inp; final soft-capping at 30 unless given.
void readGemma4(const GgufFile& f, const std::string& path, ModelConfig& c, const std::vector<std::int64_t>& kvHeads,
                const std::vector<std::int64_t>& ff) {
  const std::string a = c.arch + ".";
  c.gemmaBlocks = c.floatNorms = c.gemma4Blocks = true;
  c.act = FfnAct::GeluTanh;
  c.attnScale = 1.0;
  const auto need = [&](const std::string& key) {
    const auto v = f.getInt(a + key);
    if (!v || *v <= 0 || *v > (1 << 24)) throw FormatError(fmt::format("{}: missing or bad `{}{}`", path, a, key));
    return static_cast<int>(*v);
  };
  const auto epsilon = f.getFloat(a + "attention.layer_norm_rms_epsilon");
  if (!epsilon) throw FormatError(fmt::format("{}: missing `{}attention.layer_norm_rms_epsilon`", path, a));
  c.rmsEps = *epsilon;
  c.finalSoftcap = f.getFloat(a + "final_logit_softcapping").value_or(30.0);
  const int fullDim = c.headDim, swaDim = need("attention.key_length_swa");
  if (f.getInt(a + "attention.value_length").value_or(fullDim) != fullDim ||
      f.getInt(a + "attention.value_length_swa").value_or(swaDim) != swaDim)
    throw FormatError(fmt::format("{}: value and key head sizes differ (Gemma 4 needs them equal)", path));
  if (f.getInt(a + "rope.dimension_count").value_or(fullDim) != fullDim ||
      f.getInt(a + "rope.dimension_count_swa").value_or(swaDim) != swaDim)
    throw FormatError(fmt::format("{}: rotary dimensions other than the head sizes are not supported", path));
  const std::int64_t window = need("attention.sliding_window");
  const auto pattern = f.metadata().find(a + "attention.sliding_window_pattern");
  if (pattern == f.metadata().end() || !std::holds_alternative<std::vector<bool>>(pattern->second))
    throw FormatError(fmt::format("{}: `{}attention.sliding_window_pattern` must list each layer (Gemma 4)", path, a));
  const auto& sliding = std::get<std::vector<bool>>(pattern->second);
  if (sliding.size() != static_cast<std::size_t>(c.layers))
    throw FormatError(fmt::format("{}: `{}attention.sliding_window_pattern` lists {} layers, not {}", path, a,
                                  sliding.size(), c.layers));
  c.ropeLocalTheta = f.getFloat(a + "rope.freq_base_swa").value_or(10000.0);
  c.headDim = swaDim;  // the model's head size is the sliding layers'; full layers carry their own
  c.kvHeads = static_cast<int>(kvHeads.front());
  for (std::size_t l = 0; l < sliding.size(); ++l)
    if (sliding[l]) c.kvHeads = static_cast<int>(kvHeads[l]);
  const auto shared = f.getInt(a + "attention.shared_kv_layers").value_or(0);
  if (shared < 0 || shared >= c.layers)
    throw FormatError(
        fmt::format("{}: `{}attention.shared_kv_layers` = {} leaves no layer with a cache", path, a, shared));
  const int fromStart = c.layers - static_cast<int>(shared);
  for (int l = 0; l < c.layers; ++l) {
    LayerSpec& s = c.layerSpecs[static_cast<std::size_t>(l)];
    const bool slides = sliding[static_cast<std::size_t>(l)];
    s.window = slides ? window : 0;
    s.localRope = slides;
    s.headDim = slides ? 0 : fullDim;
    if (kvHeads[static_cast<std::size_t>(l)] <= 0 || c.heads % kvHeads[static_cast<std::size_t>(l)] != 0)
      throw FormatError(fmt::format("{}: layer {}'s {} KV heads do not divide its {} heads", path, l,
                                    kvHeads[static_cast<std::size_t>(l)], c.heads));
    s.kvHeads = static_cast<int>(kvHeads[static_cast<std::size_t>(l)]);
    s.intermediate = static_cast<int>(ff[static_cast<std::size_t>(l)]);
    s.kEqV = !slides && !f.find(fmt::format("blk.{}.attn_v.weight", l));
    if (l >= fromStart) {
      s.kvFrom = fromStart - (slides ? 2 : 1);
      if (s.kvFrom < 0 || sliding[static_cast<std::size_t>(s.kvFrom)] != slides)
        throw FormatError(
            fmt::format("{}: shared layer {} would read layer {} (llama.cpp's rule), which is not a {} "
                        "layer",
                        path, l, s.kvFrom, slides ? "sliding" : "full"));
    }
    if (c.moe.experts > 0 && f.find(fmt::format("blk.{}.ffn_gate_inp.weight", l))) s.ffn = FfnKind::DenseAndMoe;
  }
  c.intermediate = static_cast<int>(ff.front());
  c.pleDim = static_cast<int>(f.getInt(a + "embedding_length_per_layer_input").value_or(0));
  if (c.pleDim < 0) throw FormatError(fmt::format("{}: negative `{}embedding_length_per_layer_input`", path, a));
  if (c.pleDim > 0) {
    const GgufFile::Tensor* t = f.find("per_layer_token_embd.weight");
    if (!t || t->dims.size() != 2)
      throw FormatError(fmt::format("{}: missing tensor `per_layer_token_embd.weight`", path));
    c.pleVocab = static_cast<int>(t->dims[1]);
  }
}

// A checkpoint's MXFP4 tensor (transformers' gpt-oss layout: `*_blocks` U8 [..., rows, groups, 16], two E2M1 codes a
// byte, the even element in the low nibble; `*_scales` U8 [..., rows, groups], E8M0 exponents with bias 127) as
// ggml's MXFP4 rows of groups * 32 values: each block its exponent byte, then element i's code at byte i % 16, in
// the low nibble for i < 16 (dequantize_row_mxfp4: doubled E2M1 values times 2^(e - 128), the same numbers). `shape`:
// [..., rows, groups * 32], as the float tensor would be.
Weight mxfp4FromBlocks(const SafetensorsFile& bf, const std::string& bname, const SafetensorsFile& sf,
                       const std::string& sname, const std::vector<std::int64_t>& shape) {
  const auto& b = bf.at(bname);
  const auto& s = sf.at(sname);
  if (b.dtype != "U8" || s.dtype != "U8")
    throw FormatError(fmt::format("{}: MXFP4 tensors `{}` / `{}` must be U8, found {} / {}", bf.path(), bname, sname,
                                  b.dtype, s.dtype));
  std::vector<std::int64_t> want(shape.begin(), shape.end() - 1);
  want.push_back(shape.back() / 32);
  std::vector<std::int64_t> wantBlocks = want;
  wantBlocks.push_back(16);
  if (shape.back() % 32 != 0 || b.shape != wantBlocks || s.shape != want)
    throw FormatError(fmt::format("{}: MXFP4 tensors `{}` {} / `{}` {} do not hold the {} values the config needs",
                                  bf.path(), bname, fmt::join(b.shape, "x"), sname, fmt::join(s.shape, "x"),
                                  fmt::join(shape, "x")));
  std::int64_t rows = 1;
  for (std::size_t d = 0; d + 1 < shape.size(); ++d) rows *= shape[d];
  const std::int64_t groups = shape.back() / 32, n = rows * groups;
  const auto held = std::make_shared<at::Tensor>(at::empty({n * 17}, at::kByte));
  std::uint8_t* out = held->mutable_data_ptr<std::uint8_t>();
  const std::uint8_t* codes = b.data;
  const std::uint8_t* exps = s.data;
  at::parallel_for(0, n, 4096, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t g = begin; g < end; ++g) {
      std::uint8_t* o = out + g * 17;
      const std::uint8_t* in = codes + g * 16;
      o[0] = exps[g];
      for (int j = 0; j < 16; ++j) {
        const auto code = [&](int i) { return (in[i / 2] >> (4 * (i % 2))) & 0x0F; };
        o[1 + j] = static_cast<std::uint8_t>(code(j) | (code(j + 16) << 4));
      }
    }
  });
  return Weight(static_cast<std::uint32_t>(kernels::GgmlType::MXFP4), rows, shape.back(), out, held);
}

}  // namespace

std::unique_ptr<LlamaModel> LlamaModel::fromGguf(const std::string& path, const device::ExecutionContext& ctx,
                                                 const ProgressFn& progress, std::uint32_t requantize) {
  // Shared with the weights, which point into its mapping.
  const auto file = std::make_shared<const GgufFile>(path);
  const GgufFile& f = *file;
  auto m = std::unique_ptr<LlamaModel>(new LlamaModel());
  m->ctx_ = ctx;
  ModelConfig& c = m->cfg_;
  const auto arch = f.getString("general.architecture");
  if (!arch) throw FormatError(fmt::format("{}: no general.architecture", path));
  c.arch = *arch;
  if (c.arch != "llama" && c.arch != "qwen2" && c.arch != "qwen3" && c.arch != "qwen3moe" && c.arch != "gemma3" &&
      c.arch != "gemma4" && c.arch != "gpt-oss")
    throw FormatError(
        fmt::format("{}: architecture `{}` is not supported (llama, qwen2, qwen3, qwen3moe, gemma3, gemma4, gpt-oss)",
                    path, c.arch));
  c.name = f.getString("general.name").value_or("");
  auto req = [&](const std::string& key) {
    const auto v = f.getInt(c.arch + "." + key);
    if (!v || *v <= 0 || *v > (1 << 24))
      throw FormatError(fmt::format("{}: missing or bad `{}.{}`", path, c.arch, key));
    return static_cast<int>(*v);
  };
  c.layers = req("block_count");
  c.hidden = req("embedding_length");
  c.heads = req("attention.head_count");
  const bool gemma4 = c.arch == "gemma4";
  // Gemma 4 gives head_count_kv and feed_forward_length per layer (arrays) where its layers differ.
  const auto kvPerLayer = gemma4 ? perLayerInts(f, path, c.arch + ".attention.head_count_kv", c.layers) : std::nullopt;
  const auto ffPerLayer = gemma4 ? perLayerInts(f, path, c.arch + ".feed_forward_length", c.layers) : std::nullopt;
  if (gemma4 && !ffPerLayer) throw FormatError(fmt::format("{}: missing `gemma4.feed_forward_length`", path));
  c.kvHeads = gemma4 ? (kvPerLayer ? static_cast<int>(kvPerLayer->front()) : c.heads)
              : f.getInt(c.arch + ".attention.head_count_kv") ? req("attention.head_count_kv")
                                                              : c.heads;
  // Layer specs as llama.cpp builds them: qwen3moe's layers are all MoE (softmax gating, weights renormalized:
  // build_moe_ffn with norm_w on), each with its router blk.N.ffn_gate_inp.
  c.layerSpecs.assign(static_cast<std::size_t>(c.layers), LayerSpec{});
  if (c.arch == "qwen3moe" || c.arch == "gpt-oss") {
    c.moe.experts = req("expert_count");
    c.moe.used = req("expert_used_count");
    c.moe.intermediate = req("expert_feed_forward_length");
    c.moe.normTopK = c.arch == "qwen3moe";
    if (c.moe.used > c.moe.experts)
      throw FormatError(fmt::format("{}: `{}.expert_used_count` = {} exceeds the {} experts", path, c.arch, c.moe.used,
                                    c.moe.experts));
    for (LayerSpec& s : c.layerSpecs) s.ffn = FfnKind::Moe;
  }
  if (gemma4 && f.getInt(c.arch + ".expert_count").value_or(0) > 0) {  // the MoE side beside each MLP
    c.moe.experts = req("expert_count");
    c.moe.used = req("expert_used_count");
    c.moe.intermediate = req("expert_feed_forward_length");
    c.moe.normTopK = c.moe.gemmaRouter = true;
    if (c.moe.used > c.moe.experts)
      throw FormatError(fmt::format("{}: `{}.expert_used_count` = {} exceeds the {} experts", path, c.arch, c.moe.used,
                                    c.moe.experts));
  }
  const bool anyDense = c.moe.experts == 0;
  if (!gemma4) c.intermediate = anyDense || f.getInt(c.arch + ".feed_forward_length") ? req("feed_forward_length") : 0;
  if (!f.getInt(c.arch + ".attention.key_length") && c.hidden % c.heads != 0)
    throw FormatError(fmt::format("{}: `{}.embedding_length` = {} is not a multiple of the {} attention heads", path,
                                  c.arch, c.hidden, c.heads));
  c.headDim = f.getInt(c.arch + ".attention.key_length") ? req("attention.key_length") : c.hidden / c.heads;
  if (c.headDim % 2 != 0)
    throw FormatError(fmt::format("{}: head dimension {} must be even (rotary embedding)", path, c.headDim));
  c.rmsEps = f.getFloat(c.arch + ".attention.layer_norm_rms_epsilon").value_or(1e-5);
  c.ropeTheta = f.getFloat(c.arch + ".rope.freq_base").value_or(10000.0);
  c.contextLength = f.getInt(c.arch + ".context_length").value_or(2048);
  if (c.arch == "gemma3") {
    readGemma3(f, path, c);
  } else if (gemma4) {
    const std::vector<std::int64_t> kv =
        kvPerLayer ? *kvPerLayer : std::vector<std::int64_t>(static_cast<std::size_t>(c.layers), c.heads);
    readGemma4(f, path, c, kv, *ffPerLayer);
  } else if (c.arch == "gpt-oss") {
    readGptOss(f, path, c);
  } else if (f.has(c.arch + ".rope.scaling.factor")) {
    c.ropeFactor = f.getFloat(c.arch + ".rope.scaling.factor").value_or(0.0);
    c.ropeLowFreq = f.getFloat(c.arch + ".rope.scaling.low_freq_factor").value_or(1.0);
    c.ropeHighFreq = f.getFloat(c.arch + ".rope.scaling.high_freq_factor").value_or(4.0);
    c.ropeOriginalMax = f.getInt(c.arch + ".rope.scaling.original_context_length").value_or(8192);
  }
  if (c.heads % c.kvHeads != 0)
    throw FormatError(
        fmt::format("{}: {} attention heads are not a multiple of {} KV heads", path, c.heads, c.kvHeads));
  std::map<std::string, int> types;
  for (const auto& t : f.tensors()) ++types[kernels::ggmlTypeName(t.type)];
  for (const auto& [name, n] : types) c.weightTypes.push_back(fmt::format("{} x{}", name, n));
  const GgufFile::Tensor& emb = f.at("token_embd.weight");
  if (emb.dims.size() != 2 || emb.dims[0] != c.hidden)
    throw FormatError(fmt::format("{}: token_embd.weight does not have {} columns", path, c.hidden));
  c.vocab = static_cast<int>(emb.dims[1]);

  const std::int64_t total = static_cast<std::int64_t>(f.tensors().size());
  std::int64_t done = 0;
  const TensorGetter get = [&](const std::string& name, const std::vector<std::int64_t>& shape, bool optional) {
    const GgufFile::Tensor* t = f.find(name);
    if (!t) {
      if (optional) return Weight();
      throw FormatError(fmt::format("{}: missing tensor `{}`", path, name));
    }
    // ggml order: dims[0] is the row length.
    const std::vector<std::int64_t> got(t->dims.rbegin(), t->dims.rend());
    if (got != shape)
      throw FormatError(fmt::format("{}: tensor `{}` has shape {} but the {} architecture needs {}", path, name,
                                    fmt::join(got, "x"), c.arch, fmt::join(shape, "x")));
    try {
      checkReadable(t->type);
    } catch (const FormatError& e) {  // names the type; the file and the tensor are added here
      throw FormatError(fmt::format("{}: tensor `{}`: {}", path, name, e.what()));
    }
    const std::int64_t cols = t->dims[0], rows = t->numel() / std::max<std::int64_t>(cols, 1);
    Weight w(t->type, rows, cols, t->data, file, &file->mapping());
    checkFinite(w, path, name);
    if (progress && !progress(++done, total)) throw LoadCancelled();
    return w;
  };
  // llama.cpp permutes Q/K of llama-architecture models only.
  WeightNames names = ggufNames(c.arch);
  if (gemma4) {
    names.pleEmbed = "per_layer_token_embd.weight";
    names.pleModelProj = "per_layer_model_proj.weight";
    names.pleNorm = "per_layer_proj_norm.weight";
    names.ropeFreqs = "rope_freqs.weight";
    for (const auto& t : f.tensors())
      if (t.name.size() > 24 && t.name.compare(t.name.size() - 24, 24, ".ffn_gate_up_exps.weight") == 0)
        names.stackedGateUp = true;
  }
  m->assemble(get, names, c.arch == "llama", f.find("output.weight") == nullptr, requantize);
  return m;
}

std::unique_ptr<LlamaModel> LlamaModel::fromHfDir(const std::string& dir, const device::ExecutionContext& ctx,
                                                  const ProgressFn& progress, std::uint32_t requantize) {
  namespace fs = std::filesystem;
  const fs::path root(dir);
  const fs::path cfgPath = root / "config.json";
  std::ifstream in(cfgPath, std::ios::binary);
  if (!in) throw FormatError(fmt::format("{}: no config.json", dir));
  const std::string cfgText((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto m = std::unique_ptr<LlamaModel>(new LlamaModel());
  m->ctx_ = ctx;
  ModelConfig& c = m->cfg_;
  c = hfConfigFromJson(cfgText, cfgPath.string());
  c.name = root.filename().string();

  // Weights: one file or a sharded index.
  std::vector<std::shared_ptr<const SafetensorsFile>> files;  // shared with the weights, which point into them
  std::map<std::string, std::shared_ptr<const SafetensorsFile>> where_;
  const fs::path single = root / "model.safetensors", index = root / "model.safetensors.index.json";
  if (fs::exists(index)) {
    std::ifstream ii(index, std::ios::binary);
    if (!ii) throw FormatError(fmt::format("{}: cannot open", index.string()));
    const std::string text((std::istreambuf_iterator<char>(ii)), std::istreambuf_iterator<char>());
    std::map<std::string, std::shared_ptr<const SafetensorsFile>> byShard;
    for (const auto& [name, s] : readSafetensorsIndex(text, index.string())) {
      if (!byShard.count(s)) {
        files.push_back(std::make_shared<const SafetensorsFile>((root / s).string()));
        byShard[s] = files.back();
      }
      where_[name] = byShard[s];
    }
  } else if (fs::exists(single)) {
    files.push_back(std::make_shared<const SafetensorsFile>(single.string()));
    for (const auto& e : files.back()->entries()) where_[e.name] = files.back();
  } else {
    throw FormatError(fmt::format("{}: neither model.safetensors nor model.safetensors.index.json", dir));
  }
  const std::int64_t total = static_cast<std::int64_t>(where_.size());
  std::int64_t done = 0;
  const TensorGetter get = [&](const std::string& name, const std::vector<std::int64_t>& shape, bool optional) {
    if (where_.count(name + "_blocks") && where_.count(name + "_scales")) {
      if (progress && !progress(done += 2, total)) throw LoadCancelled();
      return mxfp4FromBlocks(*where_.at(name + "_blocks"), name + "_blocks", *where_.at(name + "_scales"),
                             name + "_scales", shape);
    }
    const auto it = where_.find(name);
    if (it == where_.end() || !it->second->contains(name)) {
      if (optional) return Weight();
      throw FormatError(fmt::format("{}: missing tensor `{}`", dir, name));
    }
    const auto& e = it->second->at(name);
    kernels::GgmlType type;
    if (e.dtype == "F32")
      type = kernels::GgmlType::F32;
    else if (e.dtype == "BF16")
      type = kernels::GgmlType::BF16;
    else if (e.dtype == "F16")
      type = kernels::GgmlType::F16;
    else
      throw FormatError(
          fmt::format("{}: tensor `{}` has dtype {} (fp32, bf16, fp16 only)", it->second->path(), name, e.dtype));
    if (e.shape != shape)
      throw FormatError(fmt::format("{}: tensor `{}` has shape {} but the {} config needs {}", it->second->path(), name,
                                    fmt::join(e.shape, "x"), c.arch, fmt::join(shape, "x")));
    std::int64_t rows = 1;
    for (std::size_t d = 0; d + 1 < shape.size(); ++d) rows *= shape[d];
    Weight w(static_cast<std::uint32_t>(type), rows, shape.back(), e.data, it->second, &it->second->mapping());
    checkFinite(w, it->second->path(), name);
    if (progress && !progress(++done, total)) throw LoadCancelled();
    return w;
  };
  std::map<std::string, int> types;
  for (const auto& f : files)
    for (const auto& e : f->entries()) ++types[e.dtype];
  for (const auto& [name, n] : types) c.weightTypes.push_back(fmt::format("{} x{}", name, n));
  const bool tied = c.tiedEmbeddings || !where_.count("lm_head.weight");
  // The text model's names: a causal LM's, or under a multimodal wrapper (v5 and v4 checkpoints).
  std::string prefix = "model.";
  for (const char* p : {"model.", "model.language_model.", "language_model.model."})
    if (where_.count(std::string(p) + "embed_tokens.weight")) {
      prefix = p;
      break;
    }
  WeightNames names = hfNames(c.arch, prefix);
  names.mxfp4Experts = c.arch == "gpt_oss" && where_.count(prefix + "layers.0.mlp.experts.gate_up_proj_blocks") > 0;
  if (names.mxfp4Experts) c.weightTypes.push_back("MXFP4 experts (kept as ggml's MXFP4 blocks)");
  m->assemble(get, names, false, tied, requantize);
  return m;
}

std::unique_ptr<LlamaModel> LlamaModel::load(const std::string& path, const device::ExecutionContext& ctx,
                                             const ProgressFn& progress, std::uint32_t requantize) {
  if (std::filesystem::is_directory(path)) return fromHfDir(path, ctx, progress, requantize);
  return fromGguf(path, ctx, progress, requantize);
}

}  // namespace kvscope::model
