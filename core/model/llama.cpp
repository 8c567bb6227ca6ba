#include "model/llama.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <map>

#include "model/dequant.h"
#include "model/gguf.h"

namespace kvscope::model {

namespace {

// llama.cpp's converter permutes the rows of Q and K so that its RoPE rotates adjacent pairs; undo it to get the
// Hugging Face layout, whose RoPE rotates the two halves of each head (rotate_half).
at::Tensor unpermuteQK(const at::Tensor& w, int heads) {
  const auto rows = w.size(0);
  std::vector<std::int64_t> shape{heads, rows / heads / 2, 2};
  for (std::int64_t d = 1; d < w.dim(); ++d) shape.push_back(w.size(d));
  return w.reshape(shape).transpose(1, 2).reshape(w.sizes()).contiguous();
}

}  // namespace

std::unique_ptr<LlamaModel> LlamaModel::fromGguf(const std::string& path, at::ScalarType dtype,
                                                 const ProgressFn& progress) {
  GgufFile f(path);
  auto m = std::unique_ptr<LlamaModel>(new LlamaModel());
  ModelConfig& c = m->cfg_;
  m->dtype_ = dtype;
  const auto arch = f.getString("general.architecture");
  if (!arch) throw FormatError(fmt::format("{}: no general.architecture", path));
  c.arch = *arch;
  if (c.arch != "llama" && c.arch != "qwen2" && c.arch != "qwen3")
    throw FormatError(fmt::format("{}: architecture `{}` is not supported (llama, qwen2, qwen3)", path, c.arch));
  c.name = f.getString("general.name").value_or("");
  auto req = [&](const std::string& key) {
    const auto v = f.getInt(c.arch + "." + key);
    if (!v || *v <= 0 || *v > (1 << 24)) throw FormatError(fmt::format("{}: missing or bad `{}.{}`", path, c.arch, key));
    return static_cast<int>(*v);
  };
  c.layers = req("block_count");
  c.hidden = req("embedding_length");
  c.heads = req("attention.head_count");
  c.kvHeads = f.getInt(c.arch + ".attention.head_count_kv") ? req("attention.head_count_kv") : c.heads;
  c.intermediate = req("feed_forward_length");
  c.headDim = f.getInt(c.arch + ".attention.key_length") ? req("attention.key_length") : c.hidden / c.heads;
  c.rmsEps = f.getFloat(c.arch + ".attention.layer_norm_rms_epsilon").value_or(1e-5);
  c.ropeTheta = f.getFloat(c.arch + ".rope.freq_base").value_or(10000.0);
  c.contextLength = f.getInt(c.arch + ".context_length").value_or(2048);
  if (f.getString(c.arch + ".rope.scaling.type").value_or("none") == "llama3" ||
      f.has(c.arch + ".rope.scaling.factor")) {
    c.ropeFactor = f.getFloat(c.arch + ".rope.scaling.factor").value_or(0.0);
    c.ropeLowFreq = f.getFloat(c.arch + ".rope.scaling.low_freq_factor").value_or(1.0);
    c.ropeHighFreq = f.getFloat(c.arch + ".rope.scaling.high_freq_factor").value_or(4.0);
    c.ropeOriginalMax = f.getInt(c.arch + ".rope.scaling.original_context_length").value_or(8192);
  }
  if (c.heads % c.kvHeads != 0)
    throw FormatError(fmt::format("{}: {} attention heads are not a multiple of {} KV heads", path, c.heads, c.kvHeads));
  std::map<std::string, int> types;
  for (const auto& t : f.tensors()) ++types[ggmlTypeName(t.type)];
  for (const auto& [name, n] : types) c.weightTypes.push_back(fmt::format("{} x{}", name, n));

  const std::int64_t total = static_cast<std::int64_t>(f.tensors().size());
  std::int64_t done = 0;
  auto load = [&](const std::string& name, std::vector<std::int64_t> shape) {
    const GgufFile::Tensor& t = f.at(name);
    at::Tensor x = toTensor(t, at::kFloat);
    if (x.sizes() != at::IntArrayRef(shape)) {
      throw FormatError(fmt::format("{}: tensor `{}` has shape {} but the {} architecture needs {}", path, name,
                                    fmt::join(x.sizes(), "x"), c.arch, fmt::join(shape, "x")));
    }
    if (progress && !progress(++done, total)) throw LoadCancelled();
    return x;
  };
  auto optional = [&](const std::string& name, std::vector<std::int64_t> shape) {
    return f.find(name) ? load(name, std::move(shape)) : at::Tensor();
  };
  const std::int64_t H = c.hidden, qDim = static_cast<std::int64_t>(c.heads) * c.headDim,
                     kvDim = static_cast<std::int64_t>(c.kvHeads) * c.headDim;
  const GgufFile::Tensor& emb = f.at("token_embd.weight");
  if (emb.dims.size() != 2 || emb.dims[0] != H)
    throw FormatError(fmt::format("{}: token_embd.weight does not have {} columns", path, H));
  c.vocab = static_cast<int>(emb.dims[1]);
  m->embed_ = load("token_embd.weight", {c.vocab, H}).to(dtype);
  m->finalNorm_ = load("output_norm.weight", {H}).to(dtype);
  c.tiedEmbeddings = f.find("output.weight") == nullptr;
  m->lmHead_ = c.tiedEmbeddings ? m->embed_ : load("output.weight", {c.vocab, H}).to(dtype);
  const bool permuted = c.arch == "llama";  // llama.cpp permutes Q/K of llama-architecture models only
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    Layer L;
    L.attnNorm = load(p + "attn_norm.weight", {H});
    L.wq = load(p + "attn_q.weight", {qDim, H});
    L.wk = load(p + "attn_k.weight", {kvDim, H});
    L.wv = load(p + "attn_v.weight", {kvDim, H});
    L.wo = load(p + "attn_output.weight", {H, qDim});
    if (permuted) {
      L.wq = unpermuteQK(L.wq, c.heads);
      L.wk = unpermuteQK(L.wk, c.kvHeads);
    }
    L.bq = optional(p + "attn_q.bias", {qDim});
    L.bk = optional(p + "attn_k.bias", {kvDim});
    L.bv = optional(p + "attn_v.bias", {kvDim});
    L.qNorm = optional(p + "attn_q_norm.weight", {c.headDim});
    L.kNorm = optional(p + "attn_k_norm.weight", {c.headDim});
    L.mlpNorm = load(p + "ffn_norm.weight", {H});
    L.wGate = load(p + "ffn_gate.weight", {c.intermediate, H});
    L.wUp = load(p + "ffn_up.weight", {c.intermediate, H});
    L.wDown = load(p + "ffn_down.weight", {H, c.intermediate});
    for (at::Tensor* t : {&L.attnNorm, &L.wq, &L.wk, &L.wv, &L.wo, &L.bq, &L.bk, &L.bv, &L.qNorm, &L.kNorm, &L.mlpNorm,
                          &L.wGate, &L.wUp, &L.wDown})
      if (t->defined()) *t = t->to(dtype);
    c.qkvBias = c.qkvBias || L.bq.defined();
    c.qkNorm = c.qkNorm || L.qNorm.defined();
    m->layers_.push_back(std::move(L));
  }
  // RoPE inverse frequencies (float32), with llama3 scaling when the file asks for it.
  at::Tensor inv = 1.0 / at::pow(c.ropeTheta, at::arange(0, c.headDim, 2, at::kLong).to(at::kFloat) / c.headDim);
  if (c.ropeFactor > 0) {
    const double lowWave = c.ropeOriginalMax / c.ropeLowFreq, highWave = c.ropeOriginalMax / c.ropeHighFreq;
    const at::Tensor wave = 2 * M_PI / inv;
    at::Tensor scaled = at::where(wave > lowWave, inv / c.ropeFactor, inv);
    const at::Tensor smooth = (c.ropeOriginalMax / wave - c.ropeLowFreq) / (c.ropeHighFreq - c.ropeLowFreq);
    const at::Tensor mid = (1 - smooth) * scaled / c.ropeFactor + smooth * scaled;
    inv = at::where((wave >= highWave) & (wave <= lowWave), mid, scaled);
  }
  m->invFreq_ = inv;
  return m;
}

std::unique_ptr<cache::KvCache> LlamaModel::makeCache(const cache::CacheConfig& cfg,
                                                      const cache::StatsOptions& stats) const {
  return std::make_unique<cache::KvCache>(cfg, cfg_.layers, stats);
}

at::Tensor LlamaModel::rmsNorm(const at::Tensor& x, const at::Tensor& w) const {
  // As transformers: normalize in float32, cast back, then scale.
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor y = xf * at::rsqrt(xf.pow(2).mean({-1}, true) + cfg_.rmsEps);
  return w * y.to(x.scalar_type());
}

std::pair<at::Tensor, at::Tensor> LlamaModel::rope(std::int64_t start, std::int64_t T) const {
  const at::Tensor pos = at::arange(start, start + T, at::kLong).to(at::kFloat);
  const at::Tensor freqs = at::outer(pos, invFreq_);
  const at::Tensor emb = at::cat({freqs, freqs}, -1);
  return {emb.cos().to(dtype_), emb.sin().to(dtype_)};
}

at::Tensor LlamaModel::forward(const at::Tensor& ids, cache::KvCache& cache, const TapFn& tap) const {
  if (ids.dim() != 2) throw std::invalid_argument("forward: ids must be [batch, T]");
  const std::int64_t B = ids.size(0), T = ids.size(1), past = cache.seqLength();
  const std::int64_t Dh = cfg_.headDim;
  if (cache.numLayers() != cfg_.layers)
    throw std::invalid_argument(fmt::format("forward: cache has {} layers, model {}", cache.numLayers(), cfg_.layers));
  if (ids.min().item<std::int64_t>() < 0 || ids.max().item<std::int64_t>() >= cfg_.vocab)
    throw std::invalid_argument(fmt::format("forward: token ids must lie in [0, {})", cfg_.vocab));
  at::Tensor h = embed_.index_select(0, ids.reshape({-1})).reshape({B, T, cfg_.hidden});
  auto [cos, sin] = rope(past, T);
  cos = cos.view({1, 1, T, Dh});
  sin = sin.view({1, 1, T, Dh});
  auto rotate = [&](const at::Tensor& x) {
    const at::Tensor x1 = x.narrow(-1, 0, Dh / 2), x2 = x.narrow(-1, Dh / 2, Dh / 2);
    return x * cos + at::cat({-x2, x1}, -1) * sin;
  };
  // Causal mask over [past + T] keys for T queries (only needed for T > 1).
  at::Tensor mask;
  if (T > 1) {
    mask = at::ones({T, past + T}, at::kBool).tril(past).view({1, 1, T, past + T});
  }
  const int groups = cfg_.heads / cfg_.kvHeads;
  for (int l = 0; l < cfg_.layers; ++l) {
    const Layer& L = layers_[static_cast<std::size_t>(l)];
    const at::Tensor x = rmsNorm(h, L.attnNorm);
    if (tap) tap(l, "attn_in", x);
    at::Tensor q = at::linear(x, L.wq, L.bq), k = at::linear(x, L.wk, L.bk), v = at::linear(x, L.wv, L.bv);
    q = q.view({B, T, cfg_.heads, Dh}).transpose(1, 2);
    k = k.view({B, T, cfg_.kvHeads, Dh}).transpose(1, 2);
    v = v.view({B, T, cfg_.kvHeads, Dh}).transpose(1, 2);
    if (L.qNorm.defined()) q = rmsNorm(q, L.qNorm);
    if (L.kNorm.defined()) k = rmsNorm(k, L.kNorm);
    q = rotate(q);
    k = rotate(k);
    if (tap) {
      tap(l, "q", q);
      tap(l, "k", k);
      tap(l, "v", v);
    }
    auto [kAll, vAll] = cache.update(l, k.contiguous(), v.contiguous());
    if (groups > 1) {
      kAll = kAll.repeat_interleave(groups, 1);
      vAll = vAll.repeat_interleave(groups, 1);
    }
    at::Tensor att = at::matmul(q.to(at::kFloat), kAll.to(at::kFloat).transpose(-1, -2)) / std::sqrt(double(Dh));
    if (mask.defined()) att = att.masked_fill(~mask, -INFINITY);
    att = at::softmax(att, -1);
    at::Tensor o = at::matmul(att, vAll.to(at::kFloat)).to(dtype_);
    o = o.transpose(1, 2).reshape({B, T, cfg_.heads * Dh});
    o = at::linear(o, L.wo);
    if (tap) tap(l, "attn_out", o);
    h = h + o;
    const at::Tensor y = rmsNorm(h, L.mlpNorm);
    const at::Tensor mlp = at::linear(at::silu(at::linear(y, L.wGate)) * at::linear(y, L.wUp), L.wDown);
    if (tap) tap(l, "mlp_out", mlp);
    h = h + mlp;
  }
  h = rmsNorm(h, finalNorm_);
  return at::linear(h, lmHead_).to(at::kFloat);
}

}  // namespace kvscope::model
