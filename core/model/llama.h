// Llama-family decoder (Llama 2/3, SmolLM2, Mistral, Qwen2/2.5, Qwen3, Qwen3-MoE, Gemma 3/4, gpt-oss) in LibTorch,
// reading K/V through the cache layers of core/cache. Weights come from a GGUF file or a Hugging Face directory and
// stay in the file's format, memory-mapped (model/weight.h); norms and biases are small tensors of the model's dtype.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "device/context.h"
#include "model/model_config.h"
#include "model/moe.h"
#include "model/weight.h"
#include "util/cancel.h"

namespace kvscope::model {

/// Called with (done, total) units while loading; return false to cancel (the load throws LoadCancelled).
using ProgressFn = std::function<bool(std::int64_t done, std::int64_t total)>;

/// What a cancelled load throws: a kvscope::Cancelled (callers catch that, as for every cancel).
class LoadCancelled : public Cancelled {
 public:
  LoadCancelled() : Cancelled("model load cancelled") {}
};

/// Observes named intermediate tensors of a forward pass (like llama.cpp's eval callback):
/// (layer, name, tensor), names "attn_in", "q", "k", "v", "attn_out", "mlp_out".
using TapFn = std::function<void(int layer, const char* name, const at::Tensor& t)>;

struct WeightNames;  // where each weight lives in a file format (llama.cpp)

struct ForwardOptions {
  /// Logits of the last position only ([batch, 1, vocab]): all that generation reads. Off: every position.
  bool lastLogitsOnly = false;
  /// Positions per pass through the layers (chunked prefill): the activations and attention scores are bounded by
  /// the chunk, and later chunks read what the earlier ones stored in the cache. 0: all positions at once.
  std::int64_t chunk = 0;
  TapFn tap;
  /// Checked before each layer (so between chunks too): once requested, the pass throws kvscope::Cancelled, and
  /// the cache holds the layers and chunks before it (not to be used further).
  const CancelToken* cancel = nullptr;
};

class LlamaModel {
 public:
  /// Loads a GGUF model (llama/qwen2/qwen3/qwen3moe/gemma3 architectures) into the context `ctx` (its device and dtype:
  /// with host kernels the weight matrices stay in the file's format, memory-mapped; on the device path they become
  /// dense tensors of the context's dtype on its device). Throws FormatError with the file and the problem.
  /// `requantize` (parseWeightFormat: 0 keeps what is stored): float matrices (F32/F16/BF16) are quantized to that
  /// type at load, except the output matrix (and an embedding tied to it), which stays as stored, as llama.cpp keeps
  /// it at a higher precision; block-format matrices stay as they are.
  static std::unique_ptr<LlamaModel> fromGguf(const std::string& path, const device::ExecutionContext& ctx,
                                              const ProgressFn& progress = {}, std::uint32_t requantize = 0);

  /// Loads a Hugging Face model directory: config.json (transformers v4 or v5 keys), model.safetensors or a sharded
  /// model.safetensors.index.json; weights in fp32/bf16/fp16. Throws FormatError.
  static std::unique_ptr<LlamaModel> fromHfDir(const std::string& dir, const device::ExecutionContext& ctx,
                                               const ProgressFn& progress = {}, std::uint32_t requantize = 0);
  /// A GGUF file or a Hugging Face directory, by what `path` is.
  static std::unique_ptr<LlamaModel> load(const std::string& path, const device::ExecutionContext& ctx,
                                          const ProgressFn& progress = {}, std::uint32_t requantize = 0);
  /// The same on the CPU with host kernels and activations of `dtype`.
  static std::unique_ptr<LlamaModel> load(const std::string& path, at::ScalarType dtype = at::kFloat,
                                          const ProgressFn& progress = {}) {
    return load(path, device::ExecutionContext(c10::kCPU, dtype), progress);
  }

  const ModelConfig& config() const { return cfg_; }
  /// Where the model runs: its caches and generations run there too.
  const device::ExecutionContext& context() const { return ctx_; }
  /// The dtype of the activations (and of the norms and biases); the weight matrices keep their file's format.
  at::ScalarType dtype() const { return ctx_.dtype(); }
  /// Bytes the weights take in memory: the matrices in their stored form plus the norms and biases.
  std::uint64_t weightBytes() const;
  /// How the block weights are multiplied (model/weight.h); F32 unless set. Q8 repacks the matrices that have a
  /// packed form (Weight::packed: the embedding used for lookups stays as stored), F32 puts them back.
  Activations activations() const { return activations_; }
  void setActivations(Activations a);
  /// True when a layer's matrices are llama.cpp block formats (a GGUF's, or float matrices quantized at load) that
  /// this context multiplies with its own kernels: where 8-bit activations compute as llama.cpp does.
  bool blockWeights() const;
  /// Gives every layer matrix and the output matrix a float32 copy beside its stored form (Weight::withFloatCopy),
  /// or takes it away: batched products on float32 activations then skip dequantizing, with the same values. For
  /// work that runs the same weights over and over (the tuner's scan, generate::ScanArithmetic); it takes
  /// floatCopyBytes(). Does nothing where the weights are dense (the device path).
  void setFloatCopies(bool on);
  /// The bytes those copies take (what setFloatCopies(true) adds), 0 where there would be none.
  std::uint64_t floatCopyBytes() const;

  /// ids [batch, T] (int64, best on the CPU: they are checked there) at positions pastLength .. pastLength + T - 1;
  /// K/V go through `cache` (which holds pastLength tokens already). Returns logits [batch, T, vocab] in float32 on
  /// the context's device.
  at::Tensor forward(const at::Tensor& ids, cache::KvCache& cache, const TapFn& tap = {}) const;
  /// The same with chunking and last-position logits ([batch, 1, vocab] with lastLogitsOnly).
  at::Tensor forward(const at::Tensor& ids, cache::KvCache& cache, const ForwardOptions& options) const;

  /// The same pass in pieces, for a caller that resumes it at a layer (the tuner's scan starts each run at the layer
  /// it quantizes, from the unquantized run's residual stream there). embed: the residual stream entering layer 0,
  /// [batch, T, hidden] in the context's dtype. runLayers: layers [from, to) over the stream h of the tokens at
  /// positions past .. past + T - 1, K/V through those layers of `cache` (each holding `past` tokens); returns the
  /// stream after layer to - 1. logits: the final norm and the output matrix on the stream after the last layer,
  /// [batch, T, vocab] (lastOnly: [batch, 1, vocab]) in float32. forward() is exactly these three.
  at::Tensor embed(const at::Tensor& ids) const;
  /// Throws Error (BadFile) unless every id lies in [0, vocab): what forward() checks before it touches the cache,
  /// and what a caller of embed() checks once for all its pieces.
  void checkTokenIds(const at::Tensor& ids) const;
  /// `ple`: the per-layer inputs of a model with them (Gemma 4's PLE: perLayerInputs of the same tokens; required
  /// there, as each layer reads its slice).
  at::Tensor runLayers(at::Tensor h, cache::KvCache& cache, int from, int to, std::int64_t past, const TapFn& tap = {},
                       const CancelToken* cancel = nullptr, const at::Tensor& ple = {}) const;
  at::Tensor logits(at::Tensor h, bool lastOnly) const;
  /// The same for several streams at once, each through its own cache (the tuner's scan runs, which share a layer
  /// and the forward's positions): each stream gets what runLayers(h, cache, layer, layer + 1, past) and logits(h,
  /// lastOnly) give it alone, bit for bit. Where every stream has more than Weight::kKernelRows rows, the weight
  /// products take the streams' rows as one batch: the weights are read (and the GEMM packs them) once for all.
  std::vector<at::Tensor> runLayer(std::vector<at::Tensor> hs, const std::vector<cache::KvCache*>& caches, int layer,
                                   std::int64_t past) const;
  std::vector<at::Tensor> logits(std::vector<at::Tensor> hs, bool lastOnly) const;

  /// Layer l's bias of the q, k or v projection (`proj`: 'q', 'k', 'v'), [heads * head_dim] in the model's dtype on
  /// its device; undefined where the model has none. Throws Error (Internal) for another layer or projection.
  at::Tensor projectionBias(int layer, char proj) const;

  /// A cache for this model with `cfg`, for the model's context (its states live on the model's device).
  std::unique_ptr<cache::KvCache> makeCache(const cache::CacheConfig& cfg, const cache::StatsOptions& stats = {}) const;

 private:
  /// The named tensor checked against `shape` (undefined when optional and absent), as it is stored.
  using TensorGetter =
      std::function<Weight(const std::string& name, const std::vector<std::int64_t>& shape, bool optional)>;
  void assemble(const TensorGetter& get, const WeightNames& names, bool permutedQK, bool tiedEmbeddings,
                std::uint32_t requantize);
  /// The device path: every weight, norm and bias as a tensor on the context's device.
  void placeOnDevice();

  struct Layer {
    Weight wq, wk, wv, wo, wGate, wUp, wDown;  // wGate/wUp/wDown: a dense FFN's
    MoeFfn moe;                                // an MoE FFN's router and experts
    at::Tensor attnNorm, bq, bk, bv, qNorm, kNorm, mlpNorm;
    at::Tensor postAttnNorm, postFfnNorm;  // Gemma's sandwich norms, on the attention's and the FFN's outputs
    at::Tensor bo;                         // the output projection's bias (gpt-oss)
    at::Tensor sinks;                      // float32 [heads]: learned attention-sink logits (gpt-oss)
    // Gemma 4: the MoE side's norms (DenseAndMoe: the dense output's, the experts' input and output), the per-layer
    // input's gate, projection and norm (PLE), and the scalar the layer's output is multiplied by.
    at::Tensor postFfnNorm1, preFfnNorm2, postFfnNorm2, plePostNorm, layerScalar;
    Weight pleGate, pleProj;
    /// The layer's norms, biases and scales, and the MoE block's (undefined where it has none).
    std::vector<at::Tensor*> vectors() { return vectorsOf<at::Tensor>(*this); }
    std::vector<const at::Tensor*> vectors() const { return vectorsOf<const at::Tensor>(*this); }
    template <class T, class L>
    static std::vector<T*> vectorsOf(L& l) {
      return {&l.attnNorm,        &l.bq,           &l.bk,           &l.bv,
              &l.qNorm,           &l.kNorm,        &l.mlpNorm,      &l.postAttnNorm,
              &l.postFfnNorm,     &l.bo,           &l.sinks,        &l.moe.routerBias,
              &l.moe.gateBias,    &l.moe.upBias,   &l.moe.downBias, &l.moe.routerScale,
              &l.moe.expertScale, &l.postFfnNorm1, &l.preFfnNorm2,  &l.postFfnNorm2,
              &l.plePostNorm,     &l.layerScalar};
    }
    /// Every matrix the layer holds, for what is done to each of them alike.
    std::vector<Weight*> matrices();
    std::vector<const Weight*> matrices() const;
  };
  /// RMS norm over the last dimension, scaled by w (none where undefined: Gemma 4's value norm).
  at::Tensor rmsNorm(const at::Tensor& x, const at::Tensor& w) const;
  /// Gemma 4's per-layer inputs of the tokens ids whose embedded stream is h: [B, T, layers, pleDim] (undefined
  /// where the model has no PLE).
  at::Tensor perLayerInputs(const at::Tensor& ids, const at::Tensor& h) const;
  /// The rotary tables of positions start .. start + T - 1, [1, 1, T, headDim] each: the global layers' and (where
  /// the model has one) the local RoPE's of LayerSpec::localRope layers.
  struct RopeTables {
    at::Tensor cos, sin, cosLocal, sinLocal;
  };
  RopeTables rope(std::int64_t start, std::int64_t T) const;
  at::Tensor forwardChunk(const at::Tensor& ids, cache::KvCache& cache, const ForwardOptions& o) const;
  /// Layer l over the streams hs (in place), each through its cache; cos/sin: the positions' rotary tables.
  /// The feed-forward block of layer L on the normed streams ys (replaced by its output).
  /// `residuals`: the streams the normed ys came from (Gemma 4's MoE side routes on them).
  void ffnStep(const Layer& L, std::vector<at::Tensor>& ys, const std::vector<at::Tensor>& residuals) const;
  void layerStep(std::vector<at::Tensor>& hs, const std::vector<cache::KvCache*>& caches, int l, const RopeTables& rope,
                 const TapFn& tap, const at::Tensor& ple = {}) const;
  void checkStream(const at::Tensor& h, const cache::KvCache& cache, int from, int to) const;

  ModelConfig cfg_;
  device::ExecutionContext ctx_;
  Activations activations_ = Activations::F32;
  Weight embed_, lmHead_;
  at::Tensor finalNorm_, invFreq_, invFreqLocal_;
  Weight pleEmbed_, pleModelProj_;  // Gemma 4's PLE: [pleVocab, layers * pleDim], [layers * pleDim, hidden]
  at::Tensor pleNorm_;
  std::vector<Layer> layers_;
};

/// ids[from, from + n) as the [1, n] int64 batch that LlamaModel::forward takes.
at::Tensor idsTensor(const std::vector<std::int64_t>& ids, std::size_t from, std::size_t n);

}  // namespace kvscope::model
