// Block-quantized rows along the head dimension, stored as each token arrives: llama.cpp's cache (`llamacpp`), vLLM's
// NVFP4 cache (`vllm`) and the OCP MXFP4 cache (`mxfp4`). All three keep, per token and KV head, one row of blocks
// (kernels/kv_block_codec.h, kernels/fp4_codec.h) and read attention from those rows.
//
// `vllm` (kv=nvfp4 | nvfp4_4over6): vLLM 0.33's NVFP4 KV cache, each row D / 2 bytes of E2M1 codes and D / 16 E4M3
// block scales, with the layer's global decode scale per side (vLLM's k_scale / v_scale): scale=amax takes it from the
// first update, amax / 448 as Model-Optimizer's export writes it; scale=unit is 1.0, vLLM's value without checkpoint
// scales. Queries stay in the model's dtype; keys and values are stored in the model's channel order, unrotated.
// kv=ultraquant_4bit: vLLM's UltraQuant, E2M1 in blocks of 32 with power-of-two scales; the keys are multiplied by the
// normalised Hadamard matrix of the head size before they are stored and the queries are rotated the same way and cast
// to FP8 E4M3, as vLLM's decode reads them (roundQueries); values are stored unrotated. KvCache leaves the first and
// last two layers unquantized, as vLLM does (applyVllmBoundarySkip). kv=int8 / fp8 / int4_per_token_head: a scale per
// token and head (int4: after vLLM's randomized Hadamard transform, inside the codec). kv=turboquant_*: keys and
// values in their own row types (Lloyd-Max keys normalised and rotated inside the codec, or FP8; uniform values), the
// boundary layers unquantized as for UltraQuant; queries stay as they are (vLLM rotates them in float32: the same dot
// product as the keys rotated back).
//
// `mxfp4` (rot=on | off): E2M1 in blocks of 32 with an E8M0 scale, Model-Optimizer's MXFP4. rot=on multiplies each key
// row by the Hadamard matrix of the head size before it is stored, as SGLang's MXFP4 change rotates Q and K (Q·K
// unchanged); values are stored unrotated.
//
// `llamacpp`: llama.cpp's quantized KV cache (src/llama-kv-cache.cpp), keys and values each in their own type
// (-ctk / -ctv: f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl). Each token's row of a KV head (head_dim values) is
// split into blocks of 32 along the head dimension, every block quantized as ggml quantizes it
// (kernels/cpu/kv_blocks.h). Every token is stored in that form as it arrives, the prompt included, and attention
// reads the cache, as llama.cpp's graph writes K/V into the cache before its attention reads it: no full-precision
// window, no re-quantization.
//
// Rotation (`rot`): llama.cpp multiplies each row by a Hadamard matrix before storing it, in chunks of n values
// (kernels/cpu/hadamard.h: keys the largest power of two up to the head size, values 64), when the side's type is
// quantized and the head size is a multiple of 64. It rotates Q the same way (Q·K unchanged) and the attention output
// back for V; kvscope rotates each row back as it is read, the same values up to float rounding.
//
// Queries: llama.cpp's attention converts Q to the keys' dot type before Q·K (ggml-cpu's flash attention converts
// each query row with the from_float of K's vec_dot_type; its CUDA kernels quantize Q to q8_1 for quantized keys):
// q8_0/q8_1 blocks of 32 (fp16 scale amax/127, rounded codes; kvscope rounds as ggml's reference quantizer, whose
// vector path may move a code by one on a tie) for every quantized key type, f16 for f16 keys, bf16 for bf16 keys. Q is
// rotated first where the keys are, as llama.cpp rotates it; roundQueries() gives attention those values (rotated back,
// as the keys are read rotated back).
//
// Channel order: llama.cpp's converter permutes a Llama-family model's Q/K rows for its adjacent-pair RoPE, so its
// cache holds each key head with the two rotary halves interleaved; blocks of 32 then hold other channels than in the
// model's order (an outlier channel pair shares one block). With setInterleavedRopePairs (the model's makeCache, for
// the Llama family) the keys are rotated and blocked in that order, and the queries rounded in it.
//
// Storage per side: uint8 rows [B, H, T, kvRowBytes(type, D)] in a SeqBuffer on the states' device, written and read
// by kernels/kv_blocks_tensor.h (the CPU loops or their CUDA twins: the same bytes). Fused mode (the default) reads
// them tile by tile on the CPU and dequantizes one layer at a time on a device (llamaCppSource); reference mode keeps
// a dequantized copy beside them for LibTorch's attention.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "cache/detail/attention_sources.h"
#include "cache/detail/error_stats.h"
#include "cache/detail/layers.h"
#include "cache/detail/seq_buffer.h"
#include "kernels/cpu/blocks.h"
#include "kernels/cpu/hadamard.h"
#include "kernels/cpu/kv_blocks.h"
#include "kernels/kv_block_codec.h"
#include "kernels/kv_blocks_tensor.h"

namespace kvscope::cache::detail {
namespace {

std::uint32_t ggmlType(LlamaCppType t) {
  using kernels::GgmlType;
  switch (t) {
    case LlamaCppType::F16:
      return static_cast<std::uint32_t>(GgmlType::F16);
    case LlamaCppType::BF16:
      return static_cast<std::uint32_t>(GgmlType::BF16);
    case LlamaCppType::Q8_0:
      return static_cast<std::uint32_t>(GgmlType::Q8_0);
    case LlamaCppType::Q4_0:
      return static_cast<std::uint32_t>(GgmlType::Q4_0);
    case LlamaCppType::Q4_1:
      return static_cast<std::uint32_t>(GgmlType::Q4_1);
    case LlamaCppType::Q5_0:
      return static_cast<std::uint32_t>(GgmlType::Q5_0);
    case LlamaCppType::Q5_1:
      return static_cast<std::uint32_t>(GgmlType::Q5_1);
    case LlamaCppType::IQ4_NL:
      return kernels::kTypeIq4Nl;
  }
  return static_cast<std::uint32_t>(GgmlType::F16);
}

// The row type of a config's keys or values.
std::uint32_t rowType(const CacheConfig& cfg, bool keys) {
  switch (cfg.backend) {
    case Backend::Vllm:
      switch (cfg.vllmKv) {
        case VllmKv::Nvfp4FourOverSix:
          return kernels::kTypeNvfp4FourOverSix;
        case VllmKv::Ultraquant4Bit:
          return kernels::kTypeUltraquant;
        case VllmKv::Int8PerTokenHead:
          return kernels::kTypeInt8PerTokenHead;
        case VllmKv::Fp8PerTokenHead:
          return kernels::kTypeFp8PerTokenHead;
        case VllmKv::Int4PerTokenHead:
          return kernels::kTypeInt4PerTokenHead;
        case VllmKv::TurboquantK8V4:
          return keys ? kernels::kTypeTqKeyFp8 : kernels::kTypeTqValue4;
        case VllmKv::Turboquant4BitNc:
          return keys ? kernels::kTypeTqKey4 : kernels::kTypeTqValue4;
        case VllmKv::TurboquantK3V4Nc:
          return keys ? kernels::kTypeTqKey3 : kernels::kTypeTqValue4;
        case VllmKv::Turboquant3BitNc:
          return keys ? kernels::kTypeTqKey3 : kernels::kTypeTqValue3;
        case VllmKv::Nvfp4:
          break;
      }
      return kernels::kTypeNvfp4;
    case Backend::Mxfp4:
      return kernels::kTypeMxfp4;
    default:
      return ggmlType(keys ? cfg.typeK : cfg.typeV);
  }
}

// A config's keys' or values' format as its engine names it (error messages).
std::string rowTypeName(const CacheConfig& cfg, bool keys) {
  switch (cfg.backend) {
    case Backend::Mxfp4:
      return "MXFP4";
    case Backend::Vllm:
      if (vllmNvfp4(cfg.vllmKv)) return "NVFP4";
      return cfg.vllmKv == VllmKv::Ultraquant4Bit ? "UltraQuant" : std::string(vllmKvName(cfg.vllmKv));
    default:
      return std::string(llamaCppTypeName(keys ? cfg.typeK : cfg.typeV));
  }
}

class KvRowLayer final : public CacheLayer {
 public:
  KvRowLayer(const CacheConfig& cfg, const StatsOptions& s, kernels::KernelPath path)
      : CacheLayer(s, cfg.attention, path),
        backend_(cfg.backend),
        rotation_(cfg.rotation),
        unitScale_(cfg.fp8Scale == Fp8Scale::Unit),
        ultraquant_(cfg.backend == Backend::Vllm && cfg.vllmKv == VllmKv::Ultraquant4Bit) {
    k_.type = rowType(cfg, true);
    v_.type = rowType(cfg, false);
    k_.name = rowTypeName(cfg, true);
    v_.name = rowTypeName(cfg, false);
    k_.quantized = cfg.backend != Backend::LlamaCpp || llamaCppQuantized(cfg.typeK);
    v_.quantized = cfg.backend != Backend::LlamaCpp || llamaCppQuantized(cfg.typeV);
  }

  std::pair<at::Tensor, at::Tensor> updateReference(const at::Tensor& k, const at::Tensor& v) override {
    store(k, v);
    return {k_.mirror.view(), v_.mirror.view()};
  }

  Staged stage(const at::Tensor& k, const at::Tensor& v) override {
    if (!fused()) return CacheLayer::stage(k, v);
    store(k, v);
    Staged st;
    st.keys = source(k_);
    st.values = source(v_);
    return st;
  }

  void reorder(const at::Tensor& beamIdx) override {
    if (!k_.rows.defined()) return;
    const at::Tensor idx = checkBeamIndex(beamIdx, k_.rows.view().size(0), k_.rows.view().device());
    for (Side* s : {&k_, &v_}) {
      s->rows.reorderBatch(idx);
      if (s->mirror.defined()) s->mirror.reorderBatch(idx);
    }
  }

  void reset() override {
    for (Side* s : {&k_, &v_}) {
      s->rows.clear();
      s->mirror.clear();
      s->counts = {};
    }
    layout_ = at::Tensor();
    clearStats();
  }

  void crop(std::int64_t n) override {
    const std::int64_t len = seqLength();
    const std::int64_t keep = n < 0 ? std::max<std::int64_t>(len + n, 0) : std::min(n, len);
    if (keep == 0) return reset();
    for (Side* s : {&k_, &v_}) {
      s->rows.setLength(keep);
      if (s->mirror.defined()) s->mirror.setLength(keep);
      s->counts.rows = std::min(s->counts.rows, keep);
    }
  }

  std::int64_t seqLength() const override { return k_.rows.length(); }
  std::int64_t quantizedLength() const override { return k_.quantized || v_.quantized ? seqLength() : 0; }
  bool readsWhatItStores() const override { return true; }
  Backend backend() const override { return backend_; }

  // llama.cpp converts Q to the keys' dot type; vLLM and SGLang read their FP4 keys with queries in the model's dtype.
  at::Tensor roundQueries(const at::Tensor& q) const override {
    if (ultraquant_ && k_.rotation > 0) {
      // vLLM's UltraQuant decode: Q rotated as the keys (q @ H.T, float32), cast to E4M3; rotated back here, as the
      // keys are read rotated back.
      const at::Tensor r = at::matmul(q.to(at::kFloat), hadamard_.t()).to(at::kFloat8_e4m3fn).to(at::kFloat);
      return at::matmul(r, hadamard_).to(q.scalar_type()).contiguous();
    }
    if (backend_ != Backend::LlamaCpp) return q;
    const std::uint32_t dot = k_.quantized ? static_cast<std::uint32_t>(kernels::GgmlType::Q8_0) : k_.type;
    const bool perm = permuted(k_);
    const at::Tensor r = kernels::roundThroughKvRows(perm ? kernels::interleaveHalves(q) : q, dot, k_.rotation);
    return (perm ? kernels::deinterleaveHalves(r) : r).to(q.scalar_type()).contiguous();
  }

  // llama.cpp's keys only: V's rows are not permuted, and the other engines keep the model's channel order.
  void setInterleavedRopePairs(bool on) override { k_.interleaved = on && backend_ == Backend::LlamaCpp; }

  // Tiers by age (TieredLayer): stores states as update() does, without returning them; the first n tokens decoded
  // (float32, the model's channel order); those tokens dropped; what attention reads.
  void append(const at::Tensor& k, const at::Tensor& v) { store(k, v); }
  std::pair<at::Tensor, at::Tensor> oldest(std::int64_t n) const { return span(0, n); }
  /// Tokens [from, from + n) as attention reads them (float32).
  std::pair<at::Tensor, at::Tensor> span(std::int64_t from, std::int64_t n) const {
    const auto read = [&](const Side& s) {
      const at::Tensor d =
          kernels::readKvRows(s.rows.view().narrow(2, from, n), s.type, layout_.size(3), s.rotation, s.scale);
      return permuted(s) ? kernels::deinterleaveHalves(d).contiguous() : d;
    };
    return {read(k_), read(v_)};
  }
  bool canDropOldest() const override { return true; }
  void dropOldest(std::int64_t n) override {
    for (Side* s : {&k_, &v_}) {
      s->rows.dropFront(n);
      if (s->mirror.defined()) s->mirror.dropFront(n);
      s->counts.rows = std::max<std::int64_t>(s->counts.rows - n, 0);
    }
  }
  std::pair<SourcePtr, SourcePtr> sources() const { return {source(k_), source(v_)}; }

  LayerMemory memory() const override {
    LayerMemory m;
    for (auto [mem, s] : {std::pair{&m.keys, &k_}, std::pair{&m.values, &v_}}) {
      if (!s->rows.defined()) continue;
      const std::int64_t D = layout_.size(3), used = s->rows.bytesUsed();
      mem->metadata = used / kernels::kvRowBytes(s->type, D) * kernels::kvRowScaleBytes(s->type, D);
      mem->payload = used - mem->metadata;
      mem->transient = s->mirror.bytesUsed();
      mem->reserved = s->rows.bytesReserved() + s->mirror.bytesReserved();
      mem->unquantized = seqLength() * s->elementsPerToken * s->inputElementSize;
    }
    return m;
  }

 private:
  struct Side {
    std::uint32_t type = 0;    // kernels/kv_blocks.h's row type
    std::string name;          // the format as its engine names it (error messages)
    bool quantized = true;     // not a 16-bit llama.cpp type
    float scale = 1.0f;        // NVFP4's global decode scale (k_scale / v_scale)
    int rotation = 0;          // Hadamard chunk size; 0: not rotated
    bool interleaved = false;  // llama.cpp holds the head's two rotary halves interleaved (setInterleavedRopePairs)
    SeqBuffer rows;            // uint8 [B, H, T, kvRowBytes(type, D)]
    SeqBuffer mirror;          // reference mode: the dequantized rows, input dtype
    std::int64_t elementsPerToken = 0;  // B * H * D
    std::int64_t inputElementSize = 0;
    // Statistics: the stored scales by binade and the codes by value of the rows counted so far (countRows, when
    // the statistics are read: nothing of it on an update).
    struct Counts {
      std::int64_t rows = 0;  // tokens of the sequence counted
      std::vector<std::int64_t> scale, code;
      std::string kind;
    };
    mutable Counts counts;
  };

  // Adds the tokens a side stored since it was last counted to its histograms (on a device: one host copy of those
  // rows, when the statistics are read).
  void countRows(const Side& s) const {
    Side::Counts& c = s.counts;
    const at::Tensor all = s.rows.view();
    const std::int64_t T = all.size(2) - c.rows;
    if (T <= 0) return;
    if (c.scale.empty()) {
      c.scale.assign(256, 0);
      c.code.assign(16, 0);
    }
    const at::Tensor rows = all.narrow(2, c.rows, T).to(at::kCPU).contiguous();
    const std::int64_t rowBytes = rows.size(3), n = rows.numel() / rowBytes, D = layout_.size(3);
    const std::uint8_t* p = rows.const_data_ptr<std::uint8_t>();
    for (std::int64_t r = 0; r < n; ++r)
      c.kind = kernels::kvRowHistogram(s.type, p + r * rowBytes, D, c.scale.data(), c.code.data());
    c.rows = all.size(2);
  }

  void refreshStats() const override {
    if (!statsOptions_.enabled || !k_.rows.defined()) return;
    for (auto [side, st] : {std::pair{&k_, &stats_.keys}, std::pair{&v_, &stats_.values}}) {
      countRows(*side);
      if (side->counts.kind.empty()) continue;  // a 16-bit side or FP8 keys without a scale have nothing to count
      st->scaleHistogram = side->counts.scale;
      st->codeHistogram = side->counts.code;
      st->scaleKind = side->counts.kind;
    }
  }

  SourcePtr source(const Side& s) const {
    return kvRowSource(s.rows.view(), s.type, layout_.size(3), s.rotation, permuted(s), s.scale);
  }

  // Whether a side's rows are stored in the interleaved order: where the order changes the stored values (blocks of
  // 32, a rotation); a 16-bit side without rotation rounds each value on its own, in any order.
  static bool permuted(const Side& s) { return s.interleaved && (s.rotation > 0 || s.quantized); }

  // The rotation a side of this type and head size gets: llama.cpp's rule; mxfp4's keys with rot=on, over the whole
  // head; none for vllm (CacheError for rot=on with a head size that cannot be rotated).
  int rotationFor(const Side& s, std::int64_t D, bool keys) const {
    if (ultraquant_) {
      if (!keys) return 0;
      if ((D & (D - 1)) != 0)  // vLLM's hadamard_matrix
        throw CacheError(
            fmt::format("vllm: ultraquant_4bit rotates the keys with a Hadamard matrix, which requires a "
                        "power-of-two head size, got {}",
                        D));
      return static_cast<int>(D);
    }
    if (rotation_ == Rotation::Off || backend_ == Backend::Vllm) return 0;
    if (backend_ == Backend::Mxfp4) {
      if (rotation_ != Rotation::On || !keys) return 0;
      if (D < 32 || (D & (D - 1)) != 0)
        throw CacheError(
            fmt::format("mxfp4: rot=on rotates each key head with one Hadamard matrix: the head size must be a "
                        "power of two times the block of 32, got {}",
                        D));
      return static_cast<int>(D);
    }
    if (D % 64 != 0) {
      if (rotation_ == Rotation::On)
        throw CacheError(
            fmt::format("llamacpp: rot=on needs a head size that is a multiple of 64 (llama.cpp's "
                        "Hadamard sizes), got {}",
                        D));
      return 0;
    }
    if (rotation_ == Rotation::Auto && !s.quantized) return 0;
    return keys ? kernels::hadamardSizeForKeys(static_cast<int>(D))
                : kernels::hadamardSizeForValues(static_cast<int>(D));
  }

  void store(const at::Tensor& k, const at::Tensor& v) {
    const std::int64_t D = k.size(3);
    const bool first = !k_.rows.defined();
    if (first) {
      for (auto [s, x, keys] : {std::tuple{&k_, &k, true}, std::tuple{&v_, &v, false}}) {
        const int block = kernels::kvcodec::blockValues(s->type);
        if (s->quantized && D % block != 0)
          throw CacheError(
              fmt::format("{}: {} {} are stored in blocks of {} along the head dimension: head "
                          "size {} is not a multiple of {}",
                          backendName(backend_), s->name, keys ? "keys" : "values", block, D, block));
        s->rotation = rotationFor(*s, D, keys);
        if (s->type == kernels::kTypeNvfp4 || s->type == kernels::kTypeNvfp4FourOverSix)
          s->scale = unitScale_ ? 1.0f : globalScale(*x);
        // vLLM casts int4's transform to the model's dtype before its codes: the row type follows the states' dtype.
        if (kernels::kvcodec::isInt4PerTokenHead(s->type))
          s->type = x->scalar_type() == at::kHalf       ? kernels::kTypeInt4PerTokenHeadF16
                    : x->scalar_type() == at::kBFloat16 ? kernels::kTypeInt4PerTokenHeadBf16
                                                        : kernels::kTypeInt4PerTokenHead;
        if ((s->type == kernels::kTypeInt8PerTokenHead || s->type == kernels::kTypeFp8PerTokenHead ||
             kernels::kvcodec::isInt4PerTokenHead(s->type)) &&
            D < 32)
          throw CacheError(
              fmt::format("vllm: {} runs on vLLM's Triton attention backend, which takes head sizes of "
                          "32 or more, got {}",
                          s->name, D));
        if ((s->type == kernels::kTypeTqKey3 || s->type == kernels::kTypeTqKey4) && (D & (D - 1)) != 0)
          throw CacheError(
              fmt::format("vllm: {} rotates the keys with the Hadamard matrix of the head size (vLLM's "
                          "_build_hadamard), which requires a power-of-two head size, got {}",
                          s->name, D));
        s->elementsPerToken = k.size(0) * k.size(1) * D;
        s->inputElementSize = static_cast<std::int64_t>(k.element_size());
      }
      // UltraQuant's queries are rotated at every decode step: the matrix is made once, on the states' device.
      if (ultraquant_ && k_.rotation > 0) hadamard_ = hadamardMatrix(D, k.device());
      stats_.storeRows.resize(static_cast<std::size_t>(k.size(0)));
      std::iota(stats_.storeRows.begin(), stats_.storeRows.end(), 0);
      layout_ = at::empty({k.size(0), k.size(1), 0, D}, k.options());
    } else {
      checkSameLayout(k, layout_, "llamacpp keys");
    }
    beginUpdate();
    const std::int64_t start = seqLength();
    for (auto [side, st, x] : {std::tuple{&k_, &stats_.keys, &k}, std::tuple{&v_, &stats_.values, &v}}) {
      const at::Tensor deq = encode(*side, *x, fused() && !statsOptions_.enabled);
      st->quantized = side->quantized;
      st->quantizedTokens = st->quantized ? x->size(2) : 0;
      if (statsOptions_.enabled) {
        recordAmax(*st, *x);
        recordError(*st, *x, deq.to(x->scalar_type()), start);
      }
      if (!fused()) side->mirror.append(deq.to(x->scalar_type()));
    }
  }

  // Rotates (where the side rotates) and quantizes each row of x [B, H, T, D] into the side's rows, on x's device;
  // returns the rows as attention will read them (decoded and rotated back, float32), unless `skipDecode`.
  at::Tensor encode(Side& s, const at::Tensor& x, bool skipDecode) {
    const std::int64_t B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3);
    const std::uint32_t type = s.type;
    const at::Tensor rows =
        s.rows.tail(T, at::empty({B, H, 0, kernels::kvRowBytes(type, D)}, x.options().dtype(at::kByte)), at::kByte);
    const bool perm = permuted(s);
    at::Tensor deq =
        kernels::storeKvRows(perm ? kernels::interleaveHalves(x) : x, type, s.rotation, rows, !skipDecode, s.scale);
    s.rows.commit(T);
    return perm && deq.defined() ? kernels::deinterleaveHalves(deq).contiguous() : deq;
  }

  // A side's global decode scale from its first update: amax / 448 (Model-Optimizer's k_scale / v_scale), 1.0 where
  // that is no positive finite number (vLLM refuses such a scale).
  static float globalScale(const at::Tensor& x) {
    const float amax = x.abs().max().to(at::kFloat).item<float>();
    const float s = amax / 448.0f;
    return std::isfinite(s) && s > 0.0f ? s : 1.0f;
  }

  // vLLM's normalised Sylvester Hadamard matrix of size n (built in float64, divided by sqrt(n), float32).
  static at::Tensor hadamardMatrix(std::int64_t n, const at::Device& device) {
    at::Tensor H = at::ones({1, 1}, at::kDouble);
    while (H.size(0) < n) H = at::cat({at::cat({H, H}, 1), at::cat({H, -H}, 1)}, 0);
    return (H / std::sqrt(static_cast<double>(n))).to(at::kFloat).to(device);
  }

  Backend backend_;
  Rotation rotation_;
  bool unitScale_;
  bool ultraquant_;
  Side k_, v_;
  at::Tensor hadamard_;  // UltraQuant: vLLM's Hadamard matrix of the head size (roundQueries)
  at::Tensor layout_;    // [B, H, 0, D] in the input dtype: what later updates must continue
};

// `tiers=AGE:FORMAT,...,*:FORMAT`: the newest tokens in the first tier's rows, each older tier in its own format. A
// tier holds the tokens younger than its age that no newer tier holds; when a tier holds a page of 16 tokens (vLLM's
// block) or more beyond its share, its oldest whole pages move down one tier: decoded from the rows they were stored
// in, cast to the model's dtype and stored again in the next tier's format (engines re-quantize a cold page from its
// stored form), once per tier. Attention reads every tier's rows in token order, oldest first. The newest tier keeps
// the statistics (each token's error when it arrived); an update that moved pages adds their drift (what the move
// changed: the new tier's values minus the old tier's, in ranges of a page, over the tokens from the oldest moved page
// to the newest; 0 between), which the error history adds to the tokens' errors. Memory reports each tier's bytes
// (TensorMemory::tiers).
class TieredLayer final : public CacheLayer {
 public:
  TieredLayer(const CacheConfig& cfg, const StatsOptions& s, kernels::KernelPath path)
      : CacheLayer(s, cfg.attention, path) {
    std::int64_t younger = 0;
    for (std::size_t i = 0; i < cfg.tiers.size(); ++i) {
      const AgeTier& t = cfg.tiers[i];
      StatsOptions ts = s;
      ts.enabled = s.enabled && i == 0;  // the older tiers re-store tokens: their errors are the newest tier's
      Tier tier{std::make_unique<KvRowLayer>(tierFormatConfig(t.format), ts, path), t.age > 0 ? t.age - younger : 0};
      younger = t.age;
      tiers_.push_back(std::move(tier));
    }
  }

  std::pair<at::Tensor, at::Tensor> updateReference(const at::Tensor& k, const at::Tensor& v) override {
    store(k, v);
    std::vector<at::Tensor> ks, vs;
    for (auto it = tiers_.rbegin(); it != tiers_.rend(); ++it) {
      const std::int64_t n = it->layer->seqLength();
      if (n == 0) continue;
      auto [a, b] = it->layer->oldest(n);
      ks.push_back(a.to(k.scalar_type()));
      vs.push_back(b.to(v.scalar_type()));
    }
    return {at::cat(ks, 2), at::cat(vs, 2)};
  }

  Staged stage(const at::Tensor& k, const at::Tensor& v) override {
    if (!fused()) return CacheLayer::stage(k, v);
    store(k, v);
    std::vector<SourcePtr> ks, vs;
    for (auto it = tiers_.rbegin(); it != tiers_.rend(); ++it) {
      if (it->layer->seqLength() == 0) continue;
      auto [a, b] = it->layer->sources();
      ks.push_back(std::move(a));
      vs.push_back(std::move(b));
    }
    Staged st;
    st.keys = ks.size() == 1 ? ks.front() : concat(ks);
    st.values = vs.size() == 1 ? vs.front() : concat(vs);
    return st;
  }

  void reorder(const at::Tensor& beamIdx) override {
    for (Tier& t : tiers_) t.layer->reorder(beamIdx);
  }
  void reset() override {
    for (Tier& t : tiers_) t.layer->reset();
    clearStats();
    updates_ = 0;
    driftK_ = driftV_ = {};
    moved_.clear();
  }
  void crop(std::int64_t n) override {
    const std::int64_t len = seqLength();
    const std::int64_t keep = n < 0 ? std::max<std::int64_t>(len + n, 0) : std::min(n, len);
    std::int64_t remove = len - keep;  // the newest tokens first
    for (Tier& t : tiers_) {
      const std::int64_t has = t.layer->seqLength(), take = std::min(remove, has);
      if (take > 0) t.layer->crop(has - take);
      remove -= take;
    }
  }
  std::int64_t seqLength() const override {
    std::int64_t n = 0;
    for (const Tier& t : tiers_) n += t.layer->seqLength();
    return n;
  }
  std::int64_t quantizedLength() const override {
    std::int64_t n = 0;
    for (const Tier& t : tiers_) n += t.layer->quantizedLength();
    return n;
  }
  bool readsWhatItStores() const override { return true; }
  Backend backend() const override { return tiers_.back().layer->backend(); }
  void setInterleavedRopePairs(bool on) override {
    for (Tier& t : tiers_) t.layer->setInterleavedRopePairs(on);
  }
  LayerMemory memory() const override {
    LayerMemory m;
    for (const Tier& t : tiers_) {
      const LayerMemory tm = t.layer->memory();
      for (auto [sum, part] : {std::pair{&m.keys, &tm.keys}, std::pair{&m.values, &tm.values}}) {
        *sum += *part;
        sum->tiers.push_back(part->stored());
      }
    }
    return m;
  }
  void deferredStats(std::vector<DeferredStats*>& out) const override {
    CacheLayer::deferredStats(out);
    tiers_.front().layer->deferredStats(out);
  }

 private:
  struct Tier {
    std::unique_ptr<KvRowLayer> layer;
    std::int64_t capacity = 0;  // tokens this tier holds before it moves pages down; 0: every older token
  };
  static constexpr std::int64_t kPage = 16;

  // A page move of this update: tokens [start, start + n) as the older tier reads them now and as they were before.
  struct Move {
    std::int64_t start = 0;
    at::Tensor k, v, oldK, oldV;
  };

  void store(const at::Tensor& k, const at::Tensor& v) {
    ++updates_;
    deferred_.clear();  // only this update's statistics wait (CacheLayer::beginUpdate)
    offset_ = seqLength() - tiers_.front().layer->seqLength();  // tokens older than the newest tier's first
    tiers_.front().layer->append(k, v);
    std::vector<Move> moves;
    for (std::size_t i = 0; i + 1 < tiers_.size(); ++i) {
      KvRowLayer& from = *tiers_[i].layer;
      const std::int64_t excess = from.seqLength() - tiers_[i].capacity;
      if (excess < kPage) continue;
      const std::int64_t n = excess / kPage * kPage;
      auto [ok, ov] = from.oldest(n);
      KvRowLayer& to = *tiers_[i + 1].layer;
      Move m;
      for (std::size_t j = i + 1; j < tiers_.size(); ++j) m.start += tiers_[j].layer->seqLength();
      to.append(ok.to(k.scalar_type()), ov.to(v.scalar_type()));
      from.dropOldest(n);
      if (!statsOptions_.enabled) continue;
      std::tie(m.k, m.v) = to.span(to.seqLength() - n, n);
      m.oldK = std::move(ok);
      m.oldV = std::move(ov);
      moves.push_back(std::move(m));
    }
    recordMoves(moves);
  }

  // The drift of this update's moves: one map per side over the moved pages only, packed one after the other in token
  // order (driftK_, driftV_), and where each run of pages starts (moved_); refreshStats spreads it over the sequence.
  void recordMoves(std::vector<Move>& moves) {
    driftK_ = driftV_ = {};
    moved_.clear();
    if (moves.empty()) return;
    std::sort(moves.begin(), moves.end(), [](const Move& a, const Move& b) { return a.start < b.start; });
    std::vector<at::Tensor> nk, nv, ok, ov;
    for (const Move& m : moves) {
      nk.push_back(m.k), nv.push_back(m.v), ok.push_back(m.oldK), ov.push_back(m.oldV);
      moved_.push_back({m.start, m.k.size(2)});
    }
    detail::errorMap(at::cat(ok, 2), at::cat(nk, 2), 0, kPage, kernelPath(), driftK_, deferred_);
    detail::errorMap(at::cat(ov, 2), at::cat(nv, 2), 0, kPage, kernelPath(), driftV_, deferred_);
  }

  // A packed drift map (recordMoves) over the sequence: from the oldest moved page to the newest, each page's range
  // where its tokens are, 0 between (no change there).
  ErrorMap spread(const ErrorMap& packed) const {
    const std::int64_t start = moved_.front().first, end = moved_.back().first + moved_.back().second;
    const std::int64_t H = packed.heads, D = packed.channels, R = (end - start) / kPage, P = packed.ranges;
    ErrorMap m = packed;
    m.tokenStart = start;
    m.tokens = end - start;
    m.ranges = R;
    m.relL2.assign(static_cast<std::size_t>(H * R * D), 0.0f);
    m.maxAbs.assign(m.relL2.size(), 0.0f);
    std::int64_t src = 0;  // the packed range
    for (const auto& [first, n] : moved_)
      for (std::int64_t r = (first - start) / kPage; r < (first - start + n) / kPage; ++r, ++src)
        for (std::int64_t h = 0; h < H; ++h) {
          const auto from = static_cast<std::ptrdiff_t>((h * P + src) * D),
                     to = static_cast<std::ptrdiff_t>((h * R + r) * D);
          std::copy_n(packed.relL2.begin() + from, D, m.relL2.begin() + to);
          std::copy_n(packed.maxAbs.begin() + from, D, m.maxAbs.begin() + to);
        }
    return m;
  }

  // The newest tier's statistics, with positions counted from the start of the sequence.
  void refreshStats() const override {
    stats_ = tiers_.front().layer->stats();
    stats_.updates = updates_;
    for (TensorStats* t : {&stats_.keys, &stats_.values})
      for (ErrorMap* m : {&t->error, &t->drift})
        if (!m->empty()) m->tokenStart += offset_;
    for (auto [t, drift] : {std::pair{&stats_.keys, &driftK_}, std::pair{&stats_.values, &driftV_}}) {
      if (drift->empty()) continue;
      t->drift = spread(*drift);
      t->quantized = true;
    }
  }

  std::vector<Tier> tiers_;  // newest first
  std::int64_t updates_ = 0;
  std::int64_t offset_ = 0;   // at the latest update: the tokens in the older tiers before it
  ErrorMap driftK_, driftV_;  // the latest update's page moves, packed (recordMoves)
  std::vector<std::pair<std::int64_t, std::int64_t>> moved_;  // their runs of pages: first token, tokens
};

}  // namespace

std::unique_ptr<CacheLayer> makeTieredLayer(const CacheConfig& cfg, const StatsOptions& stats,
                                            kernels::KernelPath path) {
  return std::make_unique<TieredLayer>(cfg, stats, path);
}

std::unique_ptr<CacheLayer> makeKvRowLayer(const CacheConfig& cfg, const StatsOptions& stats,
                                           kernels::KernelPath path) {
  return std::make_unique<KvRowLayer>(cfg, stats, path);
}

}  // namespace kvscope::cache::detail
