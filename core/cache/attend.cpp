// CacheLayer::attend: attention over what a layer holds, in reference mode (update() + LibTorch's fused attention, as
// transformers) or in fused mode (the stored form, read by kernels/cpu/segmented_attention a tile at a time).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <functional>
#include <optional>
#include <string_view>
#include <tuple>

#include "cache/detail/attention_sources.h"
#include "cache/detail/layers.h"
#include "cache/detail/seq_buffer.h"
#include "cache/layer.h"
#include "kernels/fp8_attention.h"

namespace kvscope::cache {

namespace {

// Decode steps (and beams, and short multi-token steps) read the stored form directly; longer query blocks (prefill
// chunks) dequantize this layer's history once into a transient buffer and use LibTorch's attention, which is faster
// for many queries and bounded by one layer.
constexpr std::int64_t kMaxSegmentedQueries = 16;

// LibTorch's fused attention (flash kernel on the CPU), grouped-query heads without copying K/V; float32
// accumulation. A boolean causal mask only when several queries must not see later keys; with a sliding `window`,
// query i (at key position L - T + i) also not the keys at or before L - T + i - window.
// Learned sinks (float32 [Hq], defined): transformers' eager attention for gpt-oss (its eager_attention_forward):
// the scaled scores with the mask, each head's sink logit concatenated as one more column, the row's maximum
// subtracted, the softmax, the sink's column dropped, times V (K/V repeated for the grouped heads).
at::Tensor sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, std::int64_t window = 0,
                const at::Tensor& sinks = {}) {
  const std::int64_t T = q.size(2), L = k.size(2);
  std::optional<at::Tensor> mask;
  if (T > 1) {
    const at::Tensor ones = at::ones({T, L}, at::TensorOptions().dtype(at::kBool).device(q.device()));
    at::Tensor m = ones.tril(L - T);
    if (window > 0 && L > window) m = m & ones.tril(L - T - window).logical_not();
    mask = m.view({1, 1, T, L});
  }
  if (sinks.defined()) {
    const std::int64_t G = q.size(1) / k.size(1);
    const at::Tensor kk = k.to(q.scalar_type()).repeat_interleave(G, 1);
    const at::Tensor vv = v.to(q.scalar_type()).repeat_interleave(G, 1);
    at::Tensor w = at::matmul(q, kk.transpose(2, 3)) * (1.0 / std::sqrt(static_cast<double>(q.size(3))));
    if (mask) w = w.masked_fill(mask->logical_not(), -INFINITY);
    const at::Tensor s = sinks.to(w.options()).view({1, -1, 1, 1}).expand({w.size(0), -1, T, 1});
    at::Tensor c = at::cat({w, s}, -1);
    c = c - std::get<0>(c.max(-1, true));
    return at::matmul(at::softmax(c, -1, c.scalar_type()).narrow(-1, 0, L), vv);
  }
  return at::scaled_dot_product_attention(q, k.to(q.scalar_type()), v.to(q.scalar_type()), mask, 0.0, false,
                                          std::nullopt, /*enable_gqa=*/q.size(1) != k.size(1));
}

// A prefill chunk after a long history (host path): LibTorch's flash kernel over the history a block of this many
// keys at a time, each block read from the stored form alone, then over the chunk's own keys with the causal mask; the
// partial results are merged by their log-sum-exp. So a quantized layer's transient is one block, not its whole
// dequantized history (64 MiB a layer for a 1B model at 32k tokens), and no [T, L] mask is built. A history of up to
// one block is one sdpa() call, as before, bit for bit.
constexpr std::int64_t kAttendKeyBlock = 4096;

// Keys and values [B, Hkv, n, D] of positions [t0, t0 + n).
using KeyBlock = std::function<std::pair<at::Tensor, at::Tensor>(std::int64_t t0, std::int64_t n)>;

// Learned sinks (defined) join the merged denominator at the end: the output times sigmoid(lse - sink).
at::Tensor blockwiseSdpa(const at::Tensor& q, std::int64_t L, const KeyBlock& block, const at::Tensor& sinks) {
  const std::int64_t T = q.size(2);
  at::Tensor out, lse;  // float32 [B, Hq, T, D] and [B, Hq, T]
  const auto add = [&](std::int64_t t0, std::int64_t n, bool causal) {
    const auto [k, v] = block(t0, n);
    // The kernel sdpa() reaches on the CPU (grouped-query heads read in place), with its log-sum-exp.
    auto [o, l] =
        at::_scaled_dot_product_flash_attention_for_cpu(q, k.to(q.scalar_type()), v.to(q.scalar_type()), 0.0, causal);
    o = o.to(at::kFloat);
    if (!out.defined()) {
      out = o, lse = l;
      return;
    }
    const at::Tensor m = at::logaddexp(lse, l);
    out = out * (lse - m).exp().unsqueeze(-1) + o * (l - m).exp().unsqueeze(-1);
    lse = m;
  };
  for (std::int64_t t0 = 0; t0 < L - T; t0 += kAttendKeyBlock) add(t0, std::min(kAttendKeyBlock, L - T - t0), false);
  add(L - T, T, true);  // the chunk's queries are its own keys' positions: the square causal mask
  if (sinks.defined()) out = out * at::sigmoid(lse - sinks.to(lse.options()).view({1, -1, 1})).unsqueeze(-1);
  return out.to(q.scalar_type());
}

// Tokens [t0, t0 + n) of a stored source, [B, H, n, D] float32 (host path): a block, or the whole (materialize).
at::Tensor readBlock(const detail::StoredSource& s, std::int64_t B, std::int64_t H, std::int64_t t0, std::int64_t n) {
  const std::int64_t D = s.dim();
  at::Tensor out = at::empty({B, H, n, D}, at::kFloat);
  if (n == 0) return out;
  float* p = out.mutable_data_ptr<float>();
  at::parallel_for(0, B * H, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t bh = begin; bh < end; ++bh) s.read(bh / H, bh % H, t0, n, p + bh * n * D);
  });
  return out;
}

kernels::ParallelFor torchParallel() {
  return
      [](std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& fn) { at::parallel_for(0, n, 1, fn); };
}

}  // namespace

at::Tensor detail::materialize(const StoredSource& s, std::int64_t B, std::int64_t H, at::ScalarType dtype,
                               kernels::KernelPath path) {
  if (path == kernels::KernelPath::Device) return s.dense(B, H, dtype);
  const at::Tensor out = readBlock(s, B, H, 0, s.length());
  return dtype == at::kFloat ? out : out.to(dtype);
}

Staged detail::stagedAsIs(const at::Tensor& keys, const at::Tensor& values) {
  Staged s;
  s.denseKeys = keys;
  s.denseValues = values;
  // Sources read strided rows: a view of a preallocated buffer (every decode step of an unquantized layer) is read
  // where it lies, not copied whole.
  auto rows = [](const at::Tensor& x) { return x.size(3) <= 1 || x.stride(3) == 1 ? x : x.contiguous(); };
  s.keys = fpSource(rows(keys));
  s.values = fpSource(rows(values));
  return s;
}

Staged CacheLayer::stage(const at::Tensor& keys, const at::Tensor& values) {
  auto [k, v] = updateReference(keys, values);
  return detail::stagedAsIs(k, v);
}

void CacheLayer::validateStates(const at::Tensor& keys, const at::Tensor& values) const {
  const std::string name(backendName(backend()));
  detail::checkStates(keys, (name + " keys").c_str());
  detail::checkStates(values, (name + " values").c_str());
  detail::checkSameLayout(values, keys, (name + " values").c_str());
  if (hostPath() && !(kernels::inHostMemory(keys) && kernels::inHostMemory(values)))
    throw CacheError(
        fmt::format("{}: {} states in a cache of the CPU's host kernels (a cache on a device takes the "
                    "device path: the model's makeCache, or makeLayer with KernelPath::Device)",
                    name, (kernels::inHostMemory(keys) ? values : keys).device().str()));
}

std::pair<at::Tensor, at::Tensor> CacheLayer::update(const at::Tensor& keys, const at::Tensor& values) {
  releaseKept();
  validateStates(keys, values);
  return updateValidated(keys, values);
}

std::pair<at::Tensor, at::Tensor> CacheLayer::updateValidated(const at::Tensor& keys, const at::Tensor& values) {
  if (!fused()) return updateReference(keys, values);
  // Fused mode keeps no full-precision history: what update() returns is built from the stored form, once.
  Staged s = stage(keys, values);
  std::pair<at::Tensor, at::Tensor> out;
  if (s.denseKeys.defined()) {
    out = {s.denseKeys, s.denseValues};
  } else {
    out = {detail::materialize(*s.keys, keys.size(0), keys.size(1), keys.scalar_type(), path_),
           detail::materialize(*s.values, values.size(0), values.size(1), values.scalar_type(), path_)};
  }
  if (s.finish) s.finish();
  return out;
}

void CacheLayer::dropOldest(std::int64_t n) {
  (void)n;
  throw CacheError(
      fmt::format("{}: this layer cannot drop its oldest tokens (a sliding window)", backendName(backend())));
}

namespace {
// Learned sinks, where given: float32-convertible [Hq], one per query head.
void checkSinks(const at::Tensor& sinks, std::int64_t queryHeads, std::string_view what) {
  if (sinks.defined() && (sinks.dim() != 1 || sinks.size(0) != queryHeads))
    throw CacheError(fmt::format("{}: {} sink logits for {} query heads", what, sinks.numel(), queryHeads));
}
}  // namespace

struct CacheLayer::Read {
  bool fused = false;
  at::Tensor k, v;  // reference mode: what update() returned
  Staged s;         // fused mode
  std::int64_t batch = 0, kvHeads = 0, dim = 0;
};

CacheLayer::Read CacheLayer::store(const at::Tensor& queries, const at::Tensor& keys, const at::Tensor& values,
                                   const at::Tensor& sinks) {
  releaseKept();
  validateStates(keys, values);
  detail::checkQueries(queries, keys, (std::string(backendName(backend())) + " queries").c_str());
  checkSinks(sinks, queries.size(1), backendName(backend()));
  Read r;
  r.fused = fused();
  r.batch = keys.size(0), r.kvHeads = keys.size(1), r.dim = keys.size(3);
  if (r.fused)
    r.s = stage(keys, values);
  else
    std::tie(r.k, r.v) = updateReference(keys, values);
  return r;
}

at::Tensor CacheLayer::attend(const at::Tensor& queries, const at::Tensor& keys, const at::Tensor& values,
                              std::int64_t window, const at::Tensor& sinks) {
  return attendImpl(queries, keys, values, window, sinks, false);
}

at::Tensor CacheLayer::attendKeeping(const at::Tensor& queries, const at::Tensor& keys, const at::Tensor& values,
                                     std::int64_t window, const at::Tensor& sinks) {
  return attendImpl(queries, keys, values, window, sinks, true);
}

at::Tensor CacheLayer::attendImpl(const at::Tensor& queries, const at::Tensor& keys, const at::Tensor& values,
                                  std::int64_t window, const at::Tensor& sinks, bool keep) {
  Read r = store(queries, keys, values, sinks);  // on the stack: the heap only for a read kept for shared layers
  at::Tensor out = attendOver(r, queries, window, sinks);
  if (keep)
    kept_ = std::make_shared<Read>(std::move(r));
  else if (r.s.finish)
    r.s.finish();
  return out;
}

at::Tensor CacheLayer::attendKept(const at::Tensor& queries, std::int64_t window, const at::Tensor& sinks) {
  const std::string what = std::string(backendName(backend())) + " shared-KV queries";
  if (!kept_) throw CacheError(what + ": the layer they read has not attended in this step");
  const Read& r = *kept_;
  if (queries.dim() != 4 || queries.size(0) != r.batch || queries.size(3) != r.dim || queries.size(1) % r.kvHeads != 0)
    throw CacheError(fmt::format("{}: shape [{}] against {} rows of {} KV heads x {}", what,
                                 fmt::join(queries.sizes(), ", "), r.batch, r.kvHeads, r.dim));
  checkSinks(sinks, queries.size(1), what);
  return attendOver(r, queries, window, sinks);
}

void CacheLayer::releaseKept() {
  if (!kept_) return;
  const std::shared_ptr<Read> r = std::move(kept_);  // leaves kept_ empty before the work runs
  if (r->s.finish) r->s.finish();
}

at::Tensor CacheLayer::attendOver(const Read& read, const at::Tensor& queries, std::int64_t window,
                                  const at::Tensor& sinks) {
  const std::int64_t T = queries.size(2);
  // A sliding window: the first query sees nothing before position L - T - window + 1 of the L held (every later
  // query sees less), so attention reads from there; the band mask does the rest.
  const auto firstVisible = [&](std::int64_t L) {
    return window > 0 ? std::max<std::int64_t>(L - T - window + 1, 0) : std::int64_t{0};
  };
  if (!read.fused) {
    at::Tensor k = read.k, v = read.v;
    const std::int64_t from = firstVisible(k.size(2));
    if (from > 0) k = k.narrow(2, from, k.size(2) - from), v = v.narrow(2, from, v.size(2) - from);
    return sdpa(roundQueries(queries), k, v, window, sinks);
  }
  Staged s = read.s;  // narrowed here for this read only: a shared layer reads the same again
  s.finish = nullptr;
  const std::int64_t Hkv = read.kvHeads;
  if (window > 0) {
    const std::int64_t L = s.denseKeys.defined() ? s.denseKeys.size(2) : s.keys ? s.keys->length() : 0;
    const std::int64_t from = firstVisible(L);
    if (from > 0) {
      if (s.denseKeys.defined()) {
        s.denseKeys = s.denseKeys.narrow(2, from, L - from);
        s.denseValues = s.denseValues.narrow(2, from, L - from);
      }
      if (s.keys) s.keys = detail::tail(s.keys, from);
      if (s.values) s.values = detail::tail(s.values, from);
    }
    // Several queries over more than the window: a band, which only sdpa's mask draws.
    if (T > 1 && L - from > window) {
      const at::Tensor q = roundQueries(queries);
      const std::int64_t B = q.size(0);
      return s.denseKeys.defined()
                 ? sdpa(q, s.denseKeys, s.denseValues, window, sinks)
                 : sdpa(q, detail::materialize(*s.keys, B, Hkv, q.scalar_type(), path_),
                        detail::materialize(*s.values, B, Hkv, q.scalar_type(), path_), window, sinks);
    }
  }
  const at::Tensor q = roundQueries(queries);  // after the store: what the layer holds decides the rounding
  at::Tensor out;
  const std::int64_t B = q.size(0), Hq = q.size(1), D = q.size(3);
  // On the host path a decode step reads the layer where it lies, unquantized layers too (LibTorch's sdpa would first
  // copy a strided view of the buffer and repeat K/V for GQA); a prefill goes to sdpa. The device path: an fp8 decode
  // step reads the codes with the fused kernel, anything else is dequantized for this layer only and goes to sdpa.
  const auto fp8Decode = [&]() -> std::pair<const detail::Fp8View*, const detail::Fp8View*> {
    if (T != 1 || !s.keys || !s.values || sinks.defined()) return {nullptr, nullptr};
    const detail::Fp8View *k = s.keys->fp8View(), *v = s.values->fp8View();
    return k && v && k->format == v->format ? std::pair{k, v} : std::pair{nullptr, nullptr};
  };
  if (T <= kMaxSegmentedQueries && hostPath() && s.keys) {
    const at::Tensor qf = q.to(at::kFloat).contiguous();
    at::Tensor o = at::empty({B, Hq, T, D}, qf.options());
    kernels::SegmentedAttentionArgs a;
    a.q = qf.const_data_ptr<float>();
    a.B = B, a.Hq = Hq, a.Hkv = Hkv, a.T = T, a.D = D;
    a.smScale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
    a.out = o.mutable_data_ptr<float>();
    const at::Tensor sk = sinks.defined() ? sinks.to(at::kFloat).contiguous() : at::Tensor();
    if (sk.defined()) a.sinks = sk.const_data_ptr<float>();
    a.threads = at::get_num_threads();
    kernels::segmentedAttention(a, *s.keys, *s.values, torchParallel());
    out = o.to(q.scalar_type());
  } else if (const std::int64_t L = s.denseKeys.defined() ? s.denseKeys.size(2)
                                    : s.keys              ? s.keys->length()
                                                          : 0;
             hostPath() && L - T > kAttendKeyBlock) {
    out = blockwiseSdpa(
        q, L,
        [&](std::int64_t t0, std::int64_t n) -> std::pair<at::Tensor, at::Tensor> {
          if (s.denseKeys.defined()) return {s.denseKeys.narrow(2, t0, n), s.denseValues.narrow(2, t0, n)};
          return {readBlock(*s.keys, B, Hkv, t0, n), readBlock(*s.values, B, Hkv, t0, n)};
        },
        sinks);
  } else if (s.denseKeys.defined()) {
    out = sdpa(q, s.denseKeys, s.denseValues, 0, sinks);
  } else if (const auto [fk, fv] = fp8Decode(); fk) {
    out = kernels::fp8DecodeAttention(q, fk->codes, fv->codes, fk->scale, fv->scale, fk->format);
  } else {
    out = sdpa(q, detail::materialize(*s.keys, B, Hkv, q.scalar_type(), path_),
               detail::materialize(*s.values, B, Hkv, q.scalar_type(), path_), 0, sinks);
  }
  return out;
}

}  // namespace kvscope::cache
