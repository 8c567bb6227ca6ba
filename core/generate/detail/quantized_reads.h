// Whether a forward read states its cache held quantized: what eval's and probe's "quantized reads" count. Internal to
// generate/.
#pragma once

#include <ATen/core/Tensor.h>

#include "cache/kv_cache.h"

namespace kvscope::generate::detail {

/// Runs `forward` (a forward pass through `kv`) and sets `read`: whether its attention read quantized states. Every
/// cache reads what earlier passes stored quantized (quantized before this pass). KIVI also quantizes the groups
/// leaving its window at the start of an update and then reads them, and the block rows (llama.cpp's, vLLM's) read
/// what they just stored, a first update's prompt included (quantized after the pass); transformers' caches and fp8
/// return a first update's states as they came, though they store them quantized.
template <class Forward>
at::Tensor readsQuantized(const cache::KvCache& kv, Forward&& forward, bool& read) {
  const bool first = kv.seqLength() == 0;
  const bool before = kv.quantizedLength() > 0;
  at::Tensor out = forward();
  read = before || ((!first || kv.readsWhatItStores()) && kv.quantizedLength() > 0);
  return out;
}

}  // namespace kvscope::generate::detail
