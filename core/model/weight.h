// A weight matrix as the model holds it: the bytes of its file, in the file's format (GGUF block formats, or
// F32/F16/BF16 from GGUF or safetensors), memory-mapped and never widened to a float32 copy. Small batches (a decode
// step, beam search) go through the block matmul kernels (kernels/cpu/block_matmul.h) on LibTorch's threads; larger
// ones (prefill) dequantize a tile of rows at a time and multiply it with a LibTorch GEMM, except on 8-bit activations
// where a packed form or the type's kernel takes any batch (kernels::q8KernelsTakeBatches: MXFP4).
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/block_matmul.h"
#include "kernels/cpu/packed_matmul.h"

namespace kvscope::model {

class MappedFile;

/// How a decode step multiplies block weights: F32 keeps the activations in float32 (the dequantize-then-matmul
/// product up to rounding: transformers' numbers); Q8 quantizes them per 32 values to 8 bits first, as llama.cpp's
/// CPU dot products do (faster with AVX-512 VNNI; the numbers a llama.cpp deployment computes, not transformers').
/// Float weights (F32/F16/BF16) and prefill-sized batches always use float32.
enum class Activations { F32, Q8 };

/// What --weights names: "stored" (0: keep each matrix as its file stores it), or a type float matrices are
/// quantized to at load: "q8_0", "q4_0", "q4_1" (ggml's numbers). parseWeightFormat throws an Error (BadInput)
/// naming the choices.
std::uint32_t parseWeightFormat(const std::string& name);

/// "f32" / "q8"; parseActivations throws an Error (BadInput) naming the choices.
const char* activationsName(Activations a);
Activations parseActivations(const std::string& name);

class Weight {
 public:
  /// Activation rows up to which linear() runs the block kernels; from here on it dequantizes tiles for a GEMM.
  static constexpr std::int64_t kKernelRows = 16;
  /// Rows per tile of that GEMM for rows of `cols` values (about 8 MiB of float32, at least 64 rows): a large
  /// vocabulary never needs its whole float copy.
  static std::int64_t gemmTileRows(std::int64_t cols) {
    return std::max<std::int64_t>(64, (std::int64_t{8} << 20) / (4 * cols));
  }

  Weight() = default;
  /// rows x cols values of ggml type `type` at `data`, row after row; `owner` keeps the bytes alive (a mapped file,
  /// given as `mapping` too when the bytes lie in one: packed() then gives its pages back).
  Weight(std::uint32_t type, std::int64_t rows, std::int64_t cols, const std::uint8_t* data,
         std::shared_ptr<const void> owner, const MappedFile* mapping = nullptr);

  bool defined() const { return owner_ != nullptr || dense_.defined() || packed_ != nullptr; }
  std::int64_t rows() const { return m_.rows; }
  std::int64_t cols() const { return m_.cols; }
  std::uint32_t type() const { return m_.type; }
  /// Bytes the matrix takes in memory (its stored form).
  std::uint64_t bytes() const {
    if (packed_) return static_cast<std::uint64_t>(packed_->bytes());
    return dense_.defined() ? static_cast<std::uint64_t>(dense_.nbytes())
                            : static_cast<std::uint64_t>(m_.rows) * static_cast<std::uint64_t>(m_.rowBytes);
  }
  /// The device path (device/context.h): the same matrix as a dense tensor of `options`' dtype on its device, which
  /// linear() and gather() then read with LibTorch's operators; the file's bytes are no longer referenced. Values
  /// are dequantized in float32 first, then rounded once to the dtype.
  Weight toDense(const at::TensorOptions& options) const;
  bool isDense() const { return dense_.defined(); }
  /// True for a llama.cpp block format (Q8_0, Q4_K, ...) kept as such, stored or packed: the matrices whose products
  /// the activations' arithmetic (Activations) changes.
  bool blockFormat() const;

  /// The form for 8-bit activations (kernels/cpu/packed_matmul.h): the same values with sixteen rows interleaved, in
  /// memory of its own, rows split over LibTorch's threads; the mapped file's pages it replaces are given back. A
  /// type without that form (or a dense weight) stays as it is. linear() with
  /// Activations::Q8 then runs every batch size on integer dot products (prefill too); with F32 a packed weight is
  /// dequantized a tile at a time.
  Weight packed() const;
  /// The stored form back from the packed one, byte for byte, in memory of its own (anything else: itself).
  Weight unpacked() const;
  bool isPacked() const { return packed_ != nullptr; }

  /// The same weight with a float32 copy of its values beside its stored form: linear()'s GEMM path (more than
  /// kKernelRows rows on float32 activations) then multiplies the copy's tiles instead of dequantizing each tile
  /// again, with the same values bit for bit. For work that multiplies the same weights with batches over and over
  /// (the tuner's scan); it takes 4 bytes a value. A dense weight (the device path): itself.
  Weight withFloatCopy() const;
  /// The same weight without that copy.
  Weight withoutFloatCopy() const;
  /// Bytes withFloatCopy() adds (0 where it adds nothing).
  std::uint64_t floatCopyBytes() const;
  bool hasFloatCopy() const { return floatCopy_.defined(); }

  /// x [..., cols] of any floating dtype -> x W^T (+ bias) [..., rows] in x's dtype, computed in float32 (a dense
  /// weight: in its own dtype, on its device).
  at::Tensor linear(const at::Tensor& x, const at::Tensor& bias = {}, Activations a = Activations::F32) const;
  /// The same through several weights with the same cols (Q, K and V; gate and up) in one pass over the threads:
  /// out[i] = x ws[i]^T (+ biases[i] where given and defined).
  static std::vector<at::Tensor> linear(const std::vector<const Weight*>& ws, const at::Tensor& x,
                                        const std::vector<at::Tensor>& biases = {}, Activations a = Activations::F32);
  /// Each weight with its own input (an MoE layer's chosen experts' down projections): out[i] = xs[i] ws[i]^T, all
  /// in one pass over the threads, each out[i] the same as linear(ws[i], xs[i]) alone.
  static std::vector<at::Tensor> linearEach(const std::vector<const Weight*>& ws, const std::vector<at::Tensor>& xs,
                                            Activations a = Activations::F32);
  /// The same for several streams (the tuner's scan runs side by side), out[stream][weight]. The streams' rows go as
  /// one batch where each stream alone would take the float32 GEMM over host weights (float32 activations, more than
  /// kKernelRows rows a stream): MKL's GEMM gives a row the same values whatever rows are beside it
  /// (docs/cache-configs.md). Else stream by stream (the block kernels, 8-bit activations, a device's GEMM).
  static std::vector<std::vector<at::Tensor>> linearStreams(const std::vector<const Weight*>& ws,
                                                            const std::vector<at::Tensor>& xs,
                                                            const std::vector<at::Tensor>& biases, Activations a);
  /// The rows `ids` (int64, any shape) as float32 [ids..., cols]: an embedding lookup.
  at::Tensor gather(const at::Tensor& ids) const;
  /// The whole matrix as a float32 [rows, cols] tensor.
  at::Tensor dense() const;
  /// The same matrix quantized to `type` (kernels::quantizable: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) in memory of its own, as
  /// the `gguf` package quantizes its float values; rows split over LibTorch's threads. Throws an Error: BadInput for
  /// rows that are not whole blocks of 32, Internal for another type or a matrix not in its stored form.
  Weight requantized(std::uint32_t type) const;
  /// The same weight with new row i = old row order[i], in memory of its own (llama.cpp's Q/K row order undone).
  /// requantized() and permuteRows() give back the mapped file's pages their copy replaces (see packed()).
  Weight permuteRows(const std::vector<std::int64_t>& order) const;
  /// Rows [r0, r0 + n) as a weight of their own over the same bytes (one expert of a GGUF's stacked [experts, rows,
  /// cols] tensor); a weight in its stored form only.
  Weight rowBlock(std::int64_t r0, std::int64_t n) const;
  /// Index of the first value that is NaN or infinite, or -1 (reads only the block scales when they are all finite).
  std::int64_t firstNonFinite() const;

 private:
  /// linear() and linearEach(): weight i multiplies input xs[inputOf[i]], each input quantized once.
  static std::vector<at::Tensor> linearEach(const std::vector<const Weight*>& ws, const std::vector<at::Tensor>& xs,
                                            const std::vector<std::size_t>& inputOf,
                                            const std::vector<at::Tensor>& biases, Activations a);
  /// Rows [r0, r0 + n) as float32 into dst, from the stored or the packed form.
  void dequantizeRows(std::int64_t r0, std::int64_t n, float* dst) const;

  kernels::BlockMatrix m_;
  std::shared_ptr<const void> owner_;
  const MappedFile* mapping_ = nullptr;
  at::Tensor dense_;  // the device path's form (toDense); m_ then keeps only the shape
  std::shared_ptr<const kernels::PackedMatrix> packed_;  // packed(): m_ then keeps only the shape
  at::Tensor floatCopy_;                                 // withFloatCopy(): [rows, cols] float32
};

}  // namespace kvscope::model
