// The stored forms of kvscope's cache layers as kernels::TokenSource, for attention that reads them a tile at a time
// (kernels/cpu/segmented_attention.h). Each source holds references to the tensors it reads, so it stays valid while
// the layer changes; none copies the history.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "cache/detail/group_codec.h"
#include "kernels/cpu/segmented_attention.h"
#include "kernels/fp8.h"
#include "kernels/path.h"

namespace kvscope::cache {
struct Staged;
}

namespace kvscope::cache::detail {

/// FP8 codes and scales behind a source made by fp8Source: what the fused fp8 decode kernel reads.
struct Fp8View {
  at::Tensor codes;  ///< uint8 [B, H, S, D]
  at::Tensor scale;  ///< float32 [H, D]
  kernels::Fp8Format format;
};

/// Every source a cache layer makes, read as its layer's kernel path reads: on the host path a tile at a time by the
/// CPU kernels (read(): CPU tensors), on the device path whole by LibTorch's operators on the tensors' own device
/// (dense(): a transient of one layer).
class StoredSource : public kernels::TokenSource {
 public:
  /// The states [B, H, length(), dim()] in `dtype`, on the device the stored form is on.
  virtual at::Tensor dense(std::int64_t B, std::int64_t H, at::ScalarType dtype) const = 0;
  /// The fp8 codes and scales of a source made by fp8Source; null for any other.
  virtual const Fp8View* fp8View() const { return nullptr; }
};

using SourcePtr = std::shared_ptr<const StoredSource>;

/// Full-precision states [B, H, S, D] (fp32, bf16 or fp16; the last dim dense), as they are.
SourcePtr fpSource(const at::Tensor& x);

/// FP8 codes uint8 [B, H, S, D] (last dim dense) with the float32 scale of every (head, channel), [H, D].
SourcePtr fp8Source(const at::Tensor& codes, const at::Tensor& expandedScale, kernels::Fp8Format format);

/// How a group codec's dequantization reads (quanto: scale * code - shift; hqq: (code - zero) * scale).
enum class IntScheme { Quanto, Hqq };

/// A whole-tensor group-quantized block (quanto or hqq, GroupCodec's layout) read in place; batch row b of the
/// attention reads the block's row rows[b] (a beam reorder not yet applied to the codes). Empty rows: identity.
/// `codec` (the layer's, which outlives the source) dequantizes it whole on the device path.
SourcePtr groupSource(const QuantizedBlock& block, IntScheme scheme, int bits, const GroupCodec& codec,
                      std::vector<std::int64_t> rows = {});

/// KIVI's packed rows: codes uint8 [B, H, T, packedBytes(D, bits)], scale/zero (input dtype) [B, H, T / group, D]
/// for keys (per channel over a group of tokens) or [B, H, T, D / group] for values (per token over a group of
/// channels); value = code * scale + zero. Reads the first `length` tokens.
SourcePtr kiviSource(const at::Tensor& codes, const at::Tensor& scale, const at::Tensor& zero, int bits,
                     std::int64_t group, bool keys, std::int64_t D, std::int64_t length);

/// Block-quantized cache rows: uint8 [B, H, S, kvRowBytes(type, D)] (last dim dense), each token's head row stored as
/// blocks of `type` (kernels/cpu/kv_blocks.h: llama.cpp's types, the engines' FP4 types with the global decode scale
/// `scale`); `rotation` > 0: the rows were Hadamard-rotated in chunks of that size before they were quantized, and are
/// rotated back as they are read. read(): CPU rows; dense(): either device. `interleaved`: each row holds the head's
/// channels with its two halves interleaved (llama.cpp's order for a Llama-family model's keys: here channel
/// j * D/2 + i is the row's 2i + j); they are read back into the model's order.
SourcePtr kvRowSource(const at::Tensor& rows, std::uint32_t type, std::int64_t D, int rotation,
                      bool interleaved = false, float scale = 1.0f);

/// What attention reads when it reads states as they came (a first update, an unquantized layer): the tensors
/// themselves, and on the CPU their sources.
cache::Staged stagedAsIs(const at::Tensor& keys, const at::Tensor& values);

/// Sources one after the other along the sequence (empty ones skipped).
SourcePtr concat(const std::vector<SourcePtr>& parts);
/// Tokens [from, length()) of `s` (from <= 0: `s` itself), read in place.
SourcePtr tail(const SourcePtr& s, std::int64_t from);

/// Packs each row (last dim) of uint8 codes [B, H, T, D] LSB-first into [B, H, T, packedBytes(D, bits)] on the
/// codes' device (kernels::packBits' layout), and the inverse: kvscope's CPU kernels on the host path, else
/// LibTorch's operators (1, 2, 4 or 8 bits).
at::Tensor packRows(const at::Tensor& codes, int bits, kernels::KernelPath path);
at::Tensor unpackRows(const at::Tensor& packed, std::int64_t D, int bits, kernels::KernelPath path);

}  // namespace kvscope::cache::detail
