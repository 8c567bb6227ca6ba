#include "cache/detail/seq_buffer.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>

#include "cache/layer.h"

namespace kvscope::cache::detail {

namespace {
constexpr std::int64_t kFirstRoom = 128;

std::string shapeText(const at::Tensor& t) {
  std::string s = "[";
  for (std::int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}
}  // namespace

void SeqBuffer::reserve(std::int64_t total, const at::Tensor& like, std::optional<at::ScalarType> dtype) {
  if (buf_.defined() && capacity() >= total) return;
  // Doubling keeps appends amortized O(1); the first allocation leaves room for kFirstRoom decode tokens so that a
  // prompt is not copied again on the very next step.
  const std::int64_t cap = std::max<std::int64_t>({total, 2 * capacity(), total + kFirstRoom});
  at::Tensor next =
      at::empty({like.size(0), like.size(1), cap, like.size(3)},
                buf_.defined() ? buf_.options() : like.options().dtype(dtype.value_or(like.scalar_type())));
  if (buf_.defined() && len_ > 0) next.narrow(2, 0, len_).copy_(buf_.narrow(2, 0, len_));
  buf_ = std::move(next);
}

void SeqBuffer::append(const at::Tensor& x) {
  const std::int64_t n = x.size(2);
  tail(n, x).copy_(x);
  commit(n);
}

at::Tensor SeqBuffer::tail(std::int64_t n, const at::Tensor& like, std::optional<at::ScalarType> dtype) {
  reserve(len_ + n, like, dtype);
  return buf_.narrow(2, len_, n);
}

at::Tensor SeqBuffer::view() const {
  return buf_.narrow(2, 0, len_);
}

void SeqBuffer::reorderBatch(const at::Tensor& idx) {
  if (!buf_.defined()) return;
  at::Tensor next = at::empty_like(buf_);
  if (len_ > 0) next.narrow(2, 0, len_).copy_(buf_.narrow(2, 0, len_).index_select(0, idx));
  buf_ = std::move(next);
}

void SeqBuffer::dropFront(std::int64_t n) {
  n = std::clamp<std::int64_t>(n, 0, len_);
  if (n == 0) return;
  if (len_ > n) buf_.narrow(2, 0, len_ - n).copy_(buf_.narrow(2, n, len_ - n).clone());
  len_ -= n;
}

void SeqBuffer::compact(std::int64_t room) {
  if (!buf_.defined() || capacity() <= 2 * (len_ + room)) return;
  at::Tensor next = at::empty({buf_.size(0), buf_.size(1), len_ + room, buf_.size(3)}, buf_.options());
  if (len_ > 0) next.narrow(2, 0, len_).copy_(buf_.narrow(2, 0, len_));
  buf_ = std::move(next);
}

std::int64_t SeqBuffer::bytesPerToken() const {
  if (!buf_.defined()) return 0;
  return buf_.size(0) * buf_.size(1) * buf_.size(3) * static_cast<std::int64_t>(buf_.element_size());
}

void checkStates(const at::Tensor& t, const char* what) {
  if (!t.defined()) throw CacheError(fmt::format("{}: undefined tensor", what));
  if (t.dim() != 4)
    throw CacheError(fmt::format("{}: expected [batch, kv_heads, seq, head_dim], got shape {}", what, shapeText(t)));
  const auto st = t.scalar_type();
  if (st != at::kFloat && st != at::kBFloat16 && st != at::kHalf)
    throw CacheError(fmt::format("{}: dtype {} is not supported (fp32, bf16, fp16)", what, c10::toString(st)));
  if (t.size(0) == 0 || t.size(1) == 0 || t.size(3) == 0)
    throw CacheError(fmt::format("{}: empty dimension in shape {}", what, shapeText(t)));
}

void checkSameLayout(const at::Tensor& t, const at::Tensor& ref, const char* what) {
  if (t.size(0) != ref.size(0) || t.size(1) != ref.size(1) || t.size(3) != ref.size(3) ||
      t.scalar_type() != ref.scalar_type()) {
    throw CacheError(fmt::format("{}: shape {} {} does not continue the cached states {} {}", what, shapeText(t),
                                 c10::toString(t.scalar_type()), shapeText(ref), c10::toString(ref.scalar_type())));
  }
}

void checkQueries(const at::Tensor& q, const at::Tensor& keys, const char* what) {
  checkStates(q, what);
  if (q.size(0) != keys.size(0) || q.size(2) != keys.size(2) || q.size(3) != keys.size(3) ||
      q.size(1) % keys.size(1) != 0 || q.device() != keys.device()) {
    throw CacheError(
        fmt::format("{}: shape {} on {} does not fit the keys {} on {} (the same batch, tokens, head "
                    "size and device; query heads a multiple of the KV heads)",
                    what, shapeText(q), q.device().str(), shapeText(keys), keys.device().str()));
  }
}

at::Tensor checkBeamIndex(const at::Tensor& idx, std::int64_t batch, const at::Device& device) {
  if (!idx.defined() || idx.dim() != 1 || idx.size(0) != batch)
    throw CacheError(fmt::format("beam index: expected {} indices, got shape {}", batch,
                                 idx.defined() ? shapeText(idx) : "undefined"));
  if (idx.is_floating_point() || idx.is_complex()) throw CacheError("beam index: expected an integer tensor");
  // Checked where the index lies, before it moves: a beam search's comes from the host, where reading it waits for
  // no device.
  const at::Tensor i = idx.to(at::kLong);
  if (batch > 0) {
    const auto lo = i.min().item<std::int64_t>(), hi = i.max().item<std::int64_t>();
    if (lo < 0 || hi >= batch)
      throw CacheError(fmt::format("beam index: values must lie in [0, {}), got [{}, {}]", batch, lo, hi));
  }
  return i.to(device);
}

}  // namespace kvscope::cache::detail
