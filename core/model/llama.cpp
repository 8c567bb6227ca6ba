// The forward over a LlamaModel's layer specs: attention through each layer's cache (its window), the dense or MoE
// FFN, the logits; the weights' forms (llama_load.cpp loads them).
#include "model/llama.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <tuple>

#include "util/error.h"
#include "util/process_memory.h"

namespace kvscope::model {

void LlamaModel::setActivations(Activations a) {
  if (a == activations_) return;
  activations_ = a;
  auto form = [a](Weight& w) { w = a == Activations::Q8 ? w.packed() : w.unpacked(); };
  for (Layer& L : layers_)
    for (Weight* w : L.matrices()) form(*w);
  form(lmHead_);
  if (pleModelProj_.defined()) form(pleModelProj_);
}

void LlamaModel::setFloatCopies(bool on) {
  auto form = [on](Weight& w) { w = on ? w.withFloatCopy() : w.withoutFloatCopy(); };
  for (Layer& L : layers_)
    for (Weight* w : L.matrices()) form(*w);
  form(lmHead_);
  if (pleModelProj_.defined()) form(pleModelProj_);
}

std::uint64_t LlamaModel::floatCopyBytes() const {
  std::uint64_t n = lmHead_.floatCopyBytes() + (pleModelProj_.defined() ? pleModelProj_.floatCopyBytes() : 0);
  for (const Layer& L : layers_)
    for (const Weight* w : L.matrices()) n += w->floatCopyBytes();
  return n;
}

bool LlamaModel::blockWeights() const {
  for (const Layer& L : layers_)
    for (const Weight* w : L.matrices())
      if (w->blockFormat()) return true;
  return false;
}

std::uint64_t LlamaModel::weightBytes() const {
  // A tied output matrix shares the embedding's bytes until it is packed into memory of its own.
  std::uint64_t n = embed_.bytes() + (cfg_.tiedEmbeddings && !lmHead_.isPacked() ? 0 : lmHead_.bytes());
  auto add = [&](const at::Tensor& t) {
    if (t.defined()) n += static_cast<std::uint64_t>(t.nbytes());
  };
  add(finalNorm_);
  if (pleEmbed_.defined())
    n += pleEmbed_.bytes() + pleModelProj_.bytes() + static_cast<std::uint64_t>(pleNorm_.nbytes());
  for (const Layer& L : layers_) {
    for (const Weight* w : L.matrices()) n += w->bytes();
    for (const at::Tensor* t : L.vectors()) add(*t);
  }
  return n;
}

namespace {

// Only the matrices a layer's kinds hold: a dense FFN has no router, an MoE layer no wGate.
template <class W, class Layer>
std::vector<W*> matricesOf(Layer& L) {
  std::vector<W*> ms;
  ms.reserve(9 + 3 * L.moe.gate.size() + 1);
  for (W* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.wGate, &L.wUp, &L.wDown, &L.pleGate, &L.pleProj})
    if (w->defined()) ms.push_back(w);
  if (L.moe.router.defined()) {
    ms.push_back(&L.moe.router);
    for (auto* part : {&L.moe.gate, &L.moe.up, &L.moe.down})
      for (W& w : *part) ms.push_back(&w);
  }
  return ms;
}

}  // namespace

std::vector<Weight*> LlamaModel::Layer::matrices() {
  return matricesOf<Weight>(*this);
}

std::vector<const Weight*> LlamaModel::Layer::matrices() const {
  return matricesOf<const Weight>(*this);
}

at::Tensor LlamaModel::projectionBias(int layer, char proj) const {
  if (layer < 0 || layer >= static_cast<int>(layers_.size()) || (proj != 'q' && proj != 'k' && proj != 'v'))
    throw Error(ErrorCode::Internal, fmt::format("projectionBias: no layer {} projection '{}'", layer, proj));
  const Layer& L = layers_[static_cast<std::size_t>(layer)];
  return proj == 'q' ? L.bq : proj == 'k' ? L.bk : L.bv;
}

std::unique_ptr<cache::KvCache> LlamaModel::makeCache(const cache::CacheConfig& cfg,
                                                      const cache::StatsOptions& stats) const {
  auto kv = std::make_unique<cache::KvCache>(cfg, cfg_.layers, stats, ctx_.kernelPath());
  // llama.cpp runs the Llama family with adjacent-pair RoPE on Q/K rows its converter permuted (unpermuteQK undoes
  // that here): a llama.cpp cache holds each key head's channels in that order.
  kv->setInterleavedRopePairs(cfg_.arch == "llama");
  // Sliding-window layers attend and keep only their window (a config that cannot drop tokens is refused here).
  // Shared-KV layers (Gemma 4) read their source layer's cache and store nothing.
  if (cfg_.sharesKv()) kv->setSharedKv(cfg_.kvSources());
  std::vector<std::int64_t> windows;
  windows.reserve(cfg_.layerSpecs.size());
  for (const LayerSpec& s : cfg_.layerSpecs) windows.push_back(s.window);
  if (!windows.empty()) kv->setWindows(windows);
  return kv;
}

at::Tensor LlamaModel::rmsNorm(const at::Tensor& x, const at::Tensor& w) const {
  // As transformers: normalize in float32; Llama casts back, then scales; Gemma scales by its float32 (1 + w), then
  // casts (its norms are kept in float32); Gemma 4 by pow(mean + eps, -0.5), and not at all where w is undefined.
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor ms = xf.pow(2).mean({-1}, true) + cfg_.rmsEps;
  const at::Tensor y = xf * (cfg_.gemma4Blocks ? at::pow(ms, -0.5) : at::rsqrt(ms));
  if (!w.defined()) return y.to(x.scalar_type());
  if (cfg_.floatNorms) return (y * w).to(x.scalar_type());
  return w * y.to(x.scalar_type());
}

at::Tensor LlamaModel::perLayerInputs(const at::Tensor& ids, const at::Tensor& h) const {
  if (cfg_.pleDim == 0) return {};
  // Gemma4TextModel.get_per_layer_inputs + project_per_layer_inputs: the token's rows of the PLE embedding scaled by
  // sqrt(pleDim) (a float32 scalar cast to the dtype), and the normed projection of its embedding scaled by
  // hidden^-0.5, summed and scaled by 2^-0.5.
  const std::int64_t B = h.size(0), T = h.size(1), L = cfg_.layers, P = cfg_.pleDim;
  const at::Tensor tok = pleEmbed_.gather(ids).to(ctx_.dtype());
  const at::Tensor scale =
      at::scalar_tensor(std::sqrt(static_cast<double>(P)), tok.options().dtype(at::kFloat)).to(tok.scalar_type());
  const at::Tensor identity = (tok * scale).view({B, T, L, P});
  at::Tensor proj = pleModelProj_.linear(h, {}, activations_) * std::pow(static_cast<double>(cfg_.hidden), -0.5);
  proj = rmsNorm(proj.view({B, T, L, P}), pleNorm_);
  return (proj + identity) * std::pow(2.0, -0.5);
}

LlamaModel::RopeTables LlamaModel::rope(std::int64_t start, std::int64_t T) const {
  const at::Tensor pos = at::arange(start, start + T, ctx_.options(at::kLong)).to(at::kFloat);
  // cos and sin in float32, times YaRN's attention factor where there is one (before the cast, as transformers); each
  // table as wide as its layers' heads (Gemma 4's full and sliding layers differ).
  auto tables = [&](const at::Tensor& inv, double scale) {
    const std::int64_t Dh = 2 * inv.size(0);
    const at::Tensor freqs = at::outer(pos, inv);
    const at::Tensor emb = at::cat({freqs, freqs}, -1);
    at::Tensor c = emb.cos(), s = emb.sin();
    if (scale != 1.0) c = c * scale, s = s * scale;
    return std::pair{c.to(ctx_.dtype()).view({1, 1, T, Dh}), s.to(ctx_.dtype()).view({1, 1, T, Dh})};
  };
  RopeTables r;
  std::tie(r.cos, r.sin) = tables(invFreq_, cfg_.yarnFactor > 0 ? cfg_.yarnAttnFactor : 1.0);
  if (invFreqLocal_.defined()) std::tie(r.cosLocal, r.sinLocal) = tables(invFreqLocal_, 1.0);
  return r;
}

at::Tensor LlamaModel::forward(const at::Tensor& ids, cache::KvCache& cache, const TapFn& tap) const {
  ForwardOptions o;
  o.tap = tap;
  return forward(ids, cache, o);
}

at::Tensor LlamaModel::forward(const at::Tensor& ids, cache::KvCache& cache, const ForwardOptions& o) const {
  if (ids.dim() != 2) throw Error(ErrorCode::Internal, "forward: ids must be [batch, T]");
  if (cache.numLayers() != cfg_.layers)
    throw Error(ErrorCode::Internal,
                fmt::format("forward: cache has {} layers, model {}", cache.numLayers(), cfg_.layers));
  checkTokenIds(ids);
  if (o.chunk < 0) throw Error(ErrorCode::Internal, fmt::format("forward: chunk must be >= 0, got {}", o.chunk));
  const std::int64_t T = ids.size(1);
  if (o.chunk == 0 || T <= o.chunk) return forwardChunk(ids, cache, o);
  std::vector<at::Tensor> logits;
  for (std::int64_t s = 0; s < T; s += o.chunk) {
    const std::int64_t n = std::min(o.chunk, T - s);
    const bool last = s + n == T;
    at::Tensor l = forwardChunk(ids.narrow(1, s, n), cache, o);
    // Each chunk frees many short-lived buffers of many sizes: give their pages back before the next one, or the
    // allocator's fragments keep the resident size above what the cache holds.
    util::releaseFreeMemory();
    if (!o.lastLogitsOnly)
      logits.push_back(std::move(l));
    else if (last)
      return l;
  }
  return at::cat(logits, 1);
}

at::Tensor LlamaModel::forwardChunk(const at::Tensor& ids, cache::KvCache& cache, const ForwardOptions& fo) const {
  at::Tensor h = embed(ids);
  const at::Tensor ple = perLayerInputs(ids, h);
  return logits(runLayers(std::move(h), cache, 0, cfg_.layers, cache.seqLength(), fo.tap, fo.cancel, ple),
                fo.lastLogitsOnly);
}

void LlamaModel::checkTokenIds(const at::Tensor& ids) const {
  if (ids.numel() > 0 && (ids.min().item<std::int64_t>() < 0 || ids.max().item<std::int64_t>() >= cfg_.vocab))
    throw Error(ErrorCode::BadFile, fmt::format("forward: token ids must lie in [0, {})", cfg_.vocab));
}

at::Tensor LlamaModel::embed(const at::Tensor& ids) const {
  at::Tensor h = embed_.gather(ids).to(ctx_.dtype());
  // Gemma scales the embeddings by sqrt(hidden), a scalar of the activations' dtype (Gemma3TextScaledWordEmbedding).
  if (cfg_.gemmaBlocks)
    return h * at::scalar_tensor(std::sqrt(static_cast<double>(cfg_.hidden)), h.options().dtype(at::kFloat))
                   .to(h.scalar_type());
  return h;
}

void LlamaModel::layerStep(std::vector<at::Tensor>& hs, const std::vector<cache::KvCache*>& caches, int l,
                           const RopeTables& rope, const TapFn& tap, const at::Tensor& ple) const {
  const LayerSpec& spec = cfg_.layerSpecs[static_cast<std::size_t>(l)];
  const std::int64_t Dh = cfg_.headDimOf(l), Hkv = cfg_.kvHeadsOf(l);
  const bool local = spec.localRope && rope.cosLocal.defined(), shared = spec.kvFrom >= 0;
  const at::Tensor& cos = local ? rope.cosLocal : rope.cos;
  const at::Tensor& sin = local ? rope.sinLocal : rope.sin;
  // A score scale other than 1/sqrt(headDim) (Gemma's query_pre_attn_scalar, Gemma 4's 1) goes into the query: the
  // cache's attention divides by sqrt(headDim), as llama.cpp scales Q before its attention.
  const double qScale = cfg_.attnScale > 0 ? cfg_.attnScale * std::sqrt(static_cast<double>(Dh)) : 1.0;
  auto rotate = [&](const at::Tensor& x) {
    const at::Tensor x1 = x.narrow(-1, 0, Dh / 2), x2 = x.narrow(-1, Dh / 2, Dh / 2);
    return x * cos + at::cat({-x2, x1}, -1) * sin;
  };
  const Layer& L = layers_[static_cast<std::size_t>(l)];
  const Activations act = activations_;
  const std::size_t n = hs.size();
  std::vector<at::Tensor> xs(n);
  for (std::size_t p = 0; p < n; ++p) {
    xs[p] = rmsNorm(hs[p], L.attnNorm);
    if (tap) tap(l, "attn_in", xs[p]);
  }
  // A shared-KV layer projects only its queries; with K = V the key projection gives the values too.
  std::vector<const Weight*> proj{&L.wq};
  std::vector<at::Tensor> bias{L.bq};
  if (!shared) {
    proj.push_back(&L.wk), bias.push_back(L.bk);
    if (!spec.kEqV) proj.push_back(&L.wv), bias.push_back(L.bv);
  }
  auto qkv = Weight::linearStreams(proj, xs, bias, act);
  std::vector<at::Tensor> os(n);
  for (std::size_t p = 0; p < n; ++p) {
    const std::int64_t B = hs[p].size(0), T = hs[p].size(1);
    at::Tensor q = std::move(qkv[p][0]).view({B, T, cfg_.heads, Dh}).transpose(1, 2);
    if (L.qNorm.defined()) q = rmsNorm(q, L.qNorm);
    q = rotate(q);
    if (std::abs(qScale - 1.0) > 1e-12) q = q * qScale;
    if (tap) tap(l, "q", q);
    at::Tensor o;
    if (shared) {
      // Reads the KV its source layer stored and attended over in this step (cache::KvCache::attendShared).
      o = caches[p]->attendShared(l, q, L.sinks);
    } else {
      at::Tensor k = qkv[p][1].view({B, T, Hkv, Dh}).transpose(1, 2);
      at::Tensor v = (spec.kEqV ? qkv[p][1] : qkv[p][2]).view({B, T, Hkv, Dh}).transpose(1, 2);
      if (L.kNorm.defined()) k = rmsNorm(k, L.kNorm);
      if (cfg_.gemma4Blocks) v = rmsNorm(v, {});  // Gemma 4's v_norm: no weight
      k = rotate(k);
      if (tap) {
        tap(l, "k", k);
        tap(l, "v", v);
      }
      // The layer stores K/V and answers attention from what it holds (cache/layer.h: reference or fused mode).
      o = caches[p]->attend(l, q, k.contiguous(), v.contiguous(), L.sinks);
    }
    os[p] = o.transpose(1, 2).reshape({B, T, cfg_.heads * Dh});
  }
  auto wo = Weight::linearStreams({&L.wo}, os, {L.bo}, act);
  std::vector<at::Tensor> ys(n);
  for (std::size_t p = 0; p < n; ++p) {
    if (L.postAttnNorm.defined()) wo[p][0] = rmsNorm(wo[p][0], L.postAttnNorm);
    if (tap) tap(l, "attn_out", wo[p][0]);
    hs[p] = hs[p] + wo[p][0];
    ys[p] = rmsNorm(hs[p], L.mlpNorm);
  }
  ffnStep(L, ys, hs);
  for (std::size_t p = 0; p < n; ++p) {
    if (L.postFfnNorm.defined()) ys[p] = rmsNorm(ys[p], L.postFfnNorm);
    if (tap) tap(l, "mlp_out", ys[p]);
    hs[p] = hs[p] + ys[p];
  }
  if (L.pleGate.defined()) {  // Gemma 4's per-layer input: gelu(gate(h)) * its slice, projected, normed, added
    const at::Tensor mine = ple.select(2, l);
    auto g = Weight::linearStreams({&L.pleGate}, hs, {}, act);
    std::vector<at::Tensor> gs(n);
    for (std::size_t p = 0; p < n; ++p) gs[p] = at::gelu(g[p][0], "tanh") * mine;
    auto y = Weight::linearStreams({&L.pleProj}, gs, {}, act);
    for (std::size_t p = 0; p < n; ++p) hs[p] = hs[p] + rmsNorm(y[p][0], L.plePostNorm);
  }
  if (L.layerScalar.defined())
    for (at::Tensor& h : hs) h = h * L.layerScalar;
}

void LlamaModel::ffnStep(const Layer& L, std::vector<at::Tensor>& ys, const std::vector<at::Tensor>& residuals) const {
  const Activations act = activations_;
  const bool dense = L.wGate.defined();
  if (L.moe.router.defined() && !dense) {
    for (at::Tensor& y : ys) y = L.moe.forward(y, act);
    return;
  }
  std::vector<at::Tensor> moeOut;
  if (L.moe.router.defined()) {  // Gemma 4: the experts beside the MLP, routed on the residual, their own norms
    for (const at::Tensor& r : residuals)
      moeOut.push_back(rmsNorm(L.moe.forward(rmsNorm(r, L.preFfnNorm2), act, r), L.postFfnNorm2));
  }
  auto gateUp = Weight::linearStreams({&L.wGate, &L.wUp}, ys, {}, act);
  for (std::size_t p = 0; p < ys.size(); ++p)
    ys[p] = gatedActivation(gateUp[p][0], gateUp[p][1], cfg_.act, cfg_.swigluLimit);
  auto down = Weight::linearStreams({&L.wDown}, ys, {}, act);
  for (std::size_t p = 0; p < ys.size(); ++p)
    ys[p] = moeOut.empty() ? std::move(down[p][0]) : rmsNorm(down[p][0], L.postFfnNorm1) + moeOut[p];
}

void LlamaModel::checkStream(const at::Tensor& h, const cache::KvCache& cache, int from, int to) const {
  if (from < 0 || to > cfg_.layers || from > to || h.dim() != 3 || h.size(2) != cfg_.hidden)
    throw Error(ErrorCode::Internal, fmt::format("runLayers: layers [{}, {}) of {} on a stream of shape {}", from, to,
                                                 cfg_.layers, fmt::join(h.sizes(), "x")));
  if (cache.numLayers() != cfg_.layers)
    throw Error(ErrorCode::Internal,
                fmt::format("runLayers: cache has {} layers, model {}", cache.numLayers(), cfg_.layers));
}

at::Tensor LlamaModel::runLayers(at::Tensor h, cache::KvCache& cache, int from, int to, std::int64_t past,
                                 const TapFn& tap, const CancelToken* cancel, const at::Tensor& ple) const {
  checkStream(h, cache, from, to);
  if (cfg_.pleDim > 0 && (!ple.defined() || ple.size(1) != h.size(1)))
    throw Error(ErrorCode::Internal, "runLayers: a model with per-layer embeddings needs the tokens' per-layer inputs");
  const RopeTables tables = rope(past, h.size(1));
  std::vector<at::Tensor> hs{std::move(h)};
  const std::vector<cache::KvCache*> caches{&cache};
  for (int l = from; l < to; ++l) {
    if (cancel) cancel->check("the forward pass");
    layerStep(hs, caches, l, tables, tap, ple);
  }
  return hs[0];
}

std::vector<at::Tensor> LlamaModel::runLayer(std::vector<at::Tensor> hs, const std::vector<cache::KvCache*>& caches,
                                             int layer, std::int64_t past) const {
  if (hs.size() != caches.size() || hs.empty())
    throw Error(ErrorCode::Internal, fmt::format("runLayer: {} streams for {} caches", hs.size(), caches.size()));
  if (cfg_.pleDim > 0 || cfg_.sharesKv())
    throw Error(ErrorCode::BadInput,
                "a layer-by-layer scan cannot resume a model with per-layer embeddings or shared-KV layers (Gemma 4 "
                "E-series): its layers read inputs from outside the stream");
  for (std::size_t p = 0; p < hs.size(); ++p) {
    checkStream(hs[p], *caches[p], layer, layer + 1);
    if (hs[p].size(1) != hs[0].size(1)) throw Error(ErrorCode::Internal, "runLayer: streams of different lengths");
  }
  layerStep(hs, caches, layer, rope(past, hs[0].size(1)), {});
  return hs;
}

at::Tensor LlamaModel::logits(at::Tensor h, bool lastOnly) const {
  return std::move(logits(std::vector<at::Tensor>{std::move(h)}, lastOnly)[0]);
}

std::vector<at::Tensor> LlamaModel::logits(std::vector<at::Tensor> hs, bool lastOnly) const {
  for (at::Tensor& h : hs) {
    if (lastOnly) h = h.narrow(1, h.size(1) - 1, 1);
    h = rmsNorm(h, finalNorm_);
  }
  auto ys = Weight::linearStreams({&lmHead_}, hs, {}, activations_);
  std::vector<at::Tensor> out;
  out.reserve(ys.size());
  for (auto& y : ys) {
    at::Tensor l = y[0].to(at::kFloat);
    // Gemma's final soft-capping: cap * tanh(logits / cap).
    if (cfg_.finalSoftcap > 0) l = at::tanh(l / cfg_.finalSoftcap) * cfg_.finalSoftcap;
    out.push_back(std::move(l));
  }
  return out;
}

at::Tensor idsTensor(const std::vector<std::int64_t>& ids, std::size_t from, std::size_t n) {
  TORCH_CHECK(from + n <= ids.size(), "idsTensor: [", from, ", ", from + n, ") is past ", ids.size(), " ids");
  return at::tensor(std::vector<std::int64_t>(ids.begin() + static_cast<std::ptrdiff_t>(from),
                                              ids.begin() + static_cast<std::ptrdiff_t>(from + n)),
                    at::kLong)
      .view({1, -1});
}

}  // namespace kvscope::model
