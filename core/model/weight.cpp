#include "model/weight.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/blocks.h"
#include "model/dequant.h"
#include "model/mapped_file.h"
#include "util/error.h"

namespace kvscope::model {

Weight::Weight(std::uint32_t type, std::int64_t rows, std::int64_t cols, const std::uint8_t* data,
               std::shared_ptr<const void> owner, const MappedFile* mapping)
    : owner_(std::move(owner)), mapping_(mapping) {
  const kernels::BlockLayout L = kernels::blockLayout(type);
  if (L.values == 0 || cols % L.values != 0)
    throw Error(ErrorCode::BadFile, "Weight: a type without a layout, or rows that are not whole blocks");
  m_ = {type, rows, cols, data, cols / L.values * L.bytes};
}

const char* activationsName(Activations a) {
  return a == Activations::Q8 ? "q8" : "f32";
}

std::uint32_t parseWeightFormat(const std::string& name) {
  if (name == "stored") return 0;
  if (name == "q8_0") return static_cast<std::uint32_t>(kernels::GgmlType::Q8_0);
  if (name == "q4_0") return static_cast<std::uint32_t>(kernels::GgmlType::Q4_0);
  if (name == "q4_1") return static_cast<std::uint32_t>(kernels::GgmlType::Q4_1);
  if (name == "q5_0") return static_cast<std::uint32_t>(kernels::GgmlType::Q5_0);
  if (name == "q5_1") return static_cast<std::uint32_t>(kernels::GgmlType::Q5_1);
  throw Error(ErrorCode::BadInput, "weights must be stored, q8_0, q5_1, q5_0, q4_1 or q4_0, got `" + name + "`");
}

Activations parseActivations(const std::string& name) {
  if (name == "f32") return Activations::F32;
  if (name == "q8") return Activations::Q8;
  throw Error(ErrorCode::BadInput, "activations must be f32 or q8, got `" + name + "`");
}

at::Tensor Weight::linear(const at::Tensor& x, const at::Tensor& bias, Activations a) const {
  return linear(std::vector<const Weight*>{this}, x, {bias}, a)[0];
}

std::vector<at::Tensor> Weight::linear(const std::vector<const Weight*>& ws, const at::Tensor& x,
                                       const std::vector<at::Tensor>& biases, Activations a) {
  return linearEach(ws, {x}, std::vector<std::size_t>(ws.size(), 0), biases, a);
}

std::vector<at::Tensor> Weight::linearEach(const std::vector<const Weight*>& ws, const std::vector<at::Tensor>& xs,
                                           Activations a) {
  TORCH_CHECK(ws.size() == xs.size(), "Weight::linearEach: ", ws.size(), " weights for ", xs.size(), " inputs");
  std::vector<std::size_t> inputOf(ws.size());
  for (std::size_t i = 0; i < ws.size(); ++i) inputOf[i] = i;
  return linearEach(ws, xs, inputOf, {}, a);
}

std::vector<at::Tensor> Weight::linearEach(const std::vector<const Weight*>& ws, const std::vector<at::Tensor>& xs,
                                           const std::vector<std::size_t>& inputOf,
                                           const std::vector<at::Tensor>& biases, Activations a) {
  for (std::size_t i = 0; i < ws.size(); ++i)
    TORCH_CHECK(ws[i]->defined() && ws[i]->cols() == xs[inputOf[i]].size(-1),
                "Weight::linear: ", xs[inputOf[i]].sizes(), " against a [", ws[i]->rows(), ", ", ws[i]->cols(),
                "] weight");
  if (ws.front()->isDense()) {  // the device path: LibTorch's GEMM on the weights' device, in their dtype
    std::vector<at::Tensor> ys;
    for (std::size_t i = 0; i < ws.size(); ++i) {
      const at::Tensor& w = ws[i]->dense_;
      TORCH_CHECK(w.defined(), "Weight::linear: dense and block weights in one call");
      const at::Tensor b = i < biases.size() && biases[i].defined() ? biases[i].to(w.scalar_type()) : at::Tensor();
      const at::Tensor& x = xs[inputOf[i]];
      ys.push_back(at::linear(x.to(w.scalar_type()), w, b).to(x.scalar_type()));
    }
    return ys;
  }
  // Each input once: float32 rows, and (where a weight's path needs them) its sums of 16 or its 8-bit rows.
  struct Input {
    at::Tensor xf, sums;
    kernels::Q8Rows xq;
    std::int64_t n = 0, cols = 0;
  };
  std::vector<Input> in(xs.size());
  for (std::size_t j = 0; j < xs.size(); ++j) {
    in[j].cols = xs[j].size(-1);
    in[j].xf = xs[j].to(at::kFloat).contiguous().view({-1, in[j].cols});
    in[j].n = in[j].xf.size(0);
  }
  std::vector<at::Tensor> ys;
  ys.reserve(ws.size());
  for (std::size_t i = 0; i < ws.size(); ++i) ys.push_back(at::empty({in[inputOf[i]].n, ws[i]->rows()}, at::kFloat));
  // Each weight's path: its packed form on 8-bit activations (any batch), the block kernels (a small batch), or a
  // GEMM over dequantized tiles.
  enum class Path { Packed, BlockQ8, Block, Gemm };
  std::vector<Path> path;
  std::vector<char> f32Sums(xs.size(), 0), q8(xs.size(), 0);
  for (std::size_t i = 0; i < ws.size(); ++i) {
    const Weight* w = ws[i];
    const bool quantized = kernels::blockLayout(w->type()).quantized();
    // The type's 8-bit kernel at any batch (MXFP4), else only for a small one; a larger one multiplies float32.
    const bool small = in[inputOf[i]].n <= kKernelRows && !w->packed_;
    if (w->packed_ && a == Activations::Q8)
      path.push_back(Path::Packed);
    else if (a == Activations::Q8 && quantized && (small || kernels::q8KernelsTakeBatches(w->type())))
      path.push_back(Path::BlockQ8);
    else if (!small)
      path.push_back(Path::Gemm);
    else
      path.push_back(Path::Block);
    f32Sums[inputOf[i]] |= static_cast<char>(path.back() == Path::Block && quantized);
    q8[inputOf[i]] |= static_cast<char>(path.back() == Path::Packed || path.back() == Path::BlockQ8);
  }
  for (std::size_t j = 0; j < xs.size(); ++j) {
    Input& x = in[j];
    if (f32Sums[j]) {
      x.sums = at::empty({x.n, x.cols / 16}, at::kFloat);
      kernels::rowSums16(x.xf.data_ptr<float>(), x.n, x.cols, x.cols, x.sums.data_ptr<float>());
    }
    if (q8[j]) kernels::quantizeRowsQ8(x.xf.data_ptr<float>(), x.n, x.cols, x.cols, x.xq);
  }
  // The kernels' weights in units of 16 rows (a packed tile), one weight after another.
  std::vector<std::int64_t> first{0};
  for (std::size_t i = 0; i < ws.size(); ++i)
    first.push_back(first.back() + (path[i] == Path::Gemm ? 0 : (ws[i]->rows() + 15) / 16));
  // All the units over the threads at once: each thread reads its own share of the weight bytes, once.
  at::parallel_for(0, first.back(), 1, [&](std::int64_t u0, std::int64_t u1) {
    for (std::size_t i = 0; i < ws.size(); ++i) {
      const std::int64_t lo = std::max(u0, first[i]) - first[i], hi = std::min(u1, first[i + 1]) - first[i];
      if (lo >= hi) continue;
      const Weight& w = *ws[i];
      const Input& x = in[inputOf[i]];
      float* y = ys[i].data_ptr<float>();
      const std::int64_t r0 = 16 * lo, r1 = std::min(16 * hi, w.rows());
      switch (path[i]) {
        case Path::Packed:
          kernels::packedMatmulQ8(*w.packed_, x.xq, y, w.rows(), lo, hi);
          break;
        case Path::BlockQ8:
          kernels::blockMatmulQ8(w.m_, x.xq, y, w.rows(), r0, r1);
          break;
        case Path::Block:
          kernels::blockMatmul(w.m_, x.xf.const_data_ptr<float>(), x.n, x.cols,
                               x.sums.defined() ? x.sums.const_data_ptr<float>() : nullptr, y, w.rows(), r0, r1);
          break;
        case Path::Gemm:
          break;
      }
    }
  });
  for (std::size_t i = 0; i < ws.size(); ++i) {
    if (path[i] != Path::Gemm) continue;
    const Weight& w = *ws[i];
    const Input& x = in[inputOf[i]];
    // Tile by tile from the float32 copy where the weight has one (withFloatCopy), else dequantized into a buffer.
    const std::int64_t tile = gemmTileRows(x.cols);
    at::Tensor buf;
    if (!w.floatCopy_.defined()) buf = at::empty({std::min(tile, w.rows()), x.cols}, at::kFloat);
    for (std::int64_t r0 = 0; r0 < w.rows(); r0 += tile) {
      const std::int64_t rn = std::min(tile, w.rows() - r0);
      at::Tensor t;
      if (w.floatCopy_.defined()) {
        t = w.floatCopy_.narrow(0, r0, rn);
      } else {
        t = buf.narrow(0, 0, rn);
        w.dequantizeRows(r0, rn, t.data_ptr<float>());
      }
      if (rn == w.rows())
        at::mm_out(ys[i], x.xf, t.t());  // one tile: straight into the output
      else
        ys[i].narrow(1, r0, rn).copy_(at::mm(x.xf, t.t()));
    }
  }
  for (std::size_t i = 0; i < ws.size(); ++i) {
    if (i < biases.size() && biases[i].defined()) ys[i].add_(biases[i].to(at::kFloat));
    const at::Tensor& x = xs[inputOf[i]];
    std::vector<std::int64_t> shape(x.sizes().begin(), x.sizes().end());
    shape.back() = ws[i]->rows();
    ys[i] = ys[i].view(shape).to(x.scalar_type());
  }
  return ys;
}

std::vector<std::vector<at::Tensor>> Weight::linearStreams(const std::vector<const Weight*>& ws,
                                                           const std::vector<at::Tensor>& xs,
                                                           const std::vector<at::Tensor>& biases, Activations act) {
  std::vector<std::vector<at::Tensor>> out;
  out.reserve(xs.size());
  bool batch = xs.size() > 1 && act == Activations::F32 && !ws.front()->isDense();
  for (const at::Tensor& x : xs) batch = batch && x.numel() / x.size(-1) > kKernelRows;
  if (!batch) {
    for (const at::Tensor& x : xs) out.push_back(linear(ws, x, biases, act));
    return out;
  }
  std::vector<at::Tensor> flat;
  flat.reserve(xs.size());
  for (const at::Tensor& x : xs) flat.push_back(x.reshape({-1, x.size(-1)}));
  const auto ys = linear(ws, at::cat(flat, 0), biases, act);
  std::int64_t r0 = 0;
  for (const at::Tensor& x : xs) {
    const std::int64_t n = x.numel() / x.size(-1);
    std::vector<at::Tensor> mine;
    mine.reserve(ys.size());
    for (const at::Tensor& y : ys) {
      std::vector<std::int64_t> shape(x.sizes().begin(), x.sizes().end());
      shape.back() = y.size(-1);
      mine.push_back(y.narrow(0, r0, n).view(shape));
    }
    out.push_back(std::move(mine));
    r0 += n;
  }
  return out;
}

at::Tensor Weight::gather(const at::Tensor& ids) const {
  if (dense_.defined()) {  // ids are checked by the caller: an index out of range is a device-side assertion
    std::vector<std::int64_t> shape(ids.sizes().begin(), ids.sizes().end());
    shape.push_back(m_.cols);
    return dense_.index_select(0, ids.to(dense_.device(), at::kLong).reshape({-1})).to(at::kFloat).view(shape);
  }
  const at::Tensor flat = ids.to(at::kLong).contiguous().view({-1});
  const std::int64_t n = flat.numel();
  at::Tensor out = at::empty({n, m_.cols}, at::kFloat);
  const std::int64_t* id = flat.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    TORCH_CHECK(id[i] >= 0 && id[i] < m_.rows, "Weight::gather: row ", id[i], " of ", m_.rows);
    dequantizeRows(id[i], 1, out[i].data_ptr<float>());
  }
  std::vector<std::int64_t> shape(ids.sizes().begin(), ids.sizes().end());
  shape.push_back(m_.cols);
  return out.view(shape);
}

at::Tensor Weight::dense() const {
  if (dense_.defined()) return dense_.to(at::kFloat);
  at::Tensor out = at::empty({m_.rows, m_.cols}, at::kFloat);
  dequantizeRows(0, m_.rows, out.data_ptr<float>());
  return out;
}

void Weight::dequantizeRows(std::int64_t r0, std::int64_t n, float* dst) const {
  if (packed_)
    kernels::packedDequantize(*packed_, r0, r0 + n, dst);
  else
    dequantizeRow(m_.type, m_.data + r0 * m_.rowBytes, n * m_.cols, dst);
}

bool Weight::blockFormat() const {
  return defined() && !isDense() && kernels::blockLayout(m_.type).quantized();
}

Weight Weight::packed() const {
  if (!owner_ || dense_.defined() || packed_ || !kernels::packableType(m_.type)) return *this;
  auto p = std::make_shared<kernels::PackedMatrix>();
  kernels::packPrepare(m_, *p);
  // 1024 rows at a time, giving back the mapped pages of each share once it is packed: the resident weights grow by
  // one share at most, not by the whole matrix (the output matrix is the largest).
  constexpr std::int64_t kShare = 64;
  for (std::int64_t c0 = 0; c0 < p->tiles(); c0 += kShare) {
    const std::int64_t c1 = std::min(p->tiles(), c0 + kShare);
    at::parallel_for(c0, c1, 1, [&](std::int64_t t0, std::int64_t t1) { kernels::packTiles(m_, *p, t0, t1); });
    const std::int64_t r0 = 16 * c0, r1 = std::min(16 * c1, m_.rows);
    if (mapping_) mapping_->release(m_.data + r0 * m_.rowBytes, static_cast<std::size_t>((r1 - r0) * m_.rowBytes));
  }
  Weight w;
  w.m_ = {m_.type, m_.rows, m_.cols, nullptr, m_.rowBytes};
  w.packed_ = std::move(p);
  return w;
}

Weight Weight::unpacked() const {
  if (!packed_) return *this;
  auto bytes = std::make_shared<std::vector<std::uint8_t>>(static_cast<std::size_t>(m_.rows * m_.rowBytes));
  std::uint8_t* out = bytes->data();
  at::parallel_for(0, m_.rows, 16, [&](std::int64_t r0, std::int64_t r1) {
    kernels::unpackRows(*packed_, r0, r1, out + r0 * m_.rowBytes, m_.rowBytes);
  });
  return Weight(m_.type, m_.rows, m_.cols, out, std::move(bytes));
}

std::uint64_t Weight::floatCopyBytes() const {
  if (!defined() || dense_.defined()) return 0;
  return static_cast<std::uint64_t>(m_.rows) * static_cast<std::uint64_t>(m_.cols) * 4;
}

Weight Weight::withFloatCopy() const {
  if (!defined() || dense_.defined() || floatCopy_.defined()) return *this;
  Weight w = *this;
  w.floatCopy_ = at::empty({m_.rows, m_.cols}, at::kFloat);
  float* out = w.floatCopy_.data_ptr<float>();
  at::parallel_for(0, m_.rows, 64,
                   [&](std::int64_t r0, std::int64_t r1) { dequantizeRows(r0, r1 - r0, out + r0 * m_.cols); });
  return w;
}

Weight Weight::withoutFloatCopy() const {
  Weight w = *this;
  w.floatCopy_ = at::Tensor();
  return w;
}

Weight Weight::toDense(const at::TensorOptions& options) const {
  TORCH_CHECK(defined(), "Weight::toDense: an undefined weight");
  Weight w;
  w.m_ = {m_.type, m_.rows, m_.cols, nullptr, m_.rowBytes};
  w.dense_ = dense_.defined() ? dense_.to(options) : dense().to(options);
  return w;
}

Weight Weight::requantized(std::uint32_t type) const {
  const kernels::BlockLayout L = kernels::blockLayout(type);
  if (!kernels::quantizable(type))
    throw Error(ErrorCode::Internal, "Weight::requantized: kvscope writes Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1");
  if (!owner_ || dense_.defined() || packed_)
    throw Error(ErrorCode::Internal, "Weight::requantized: a weight in its stored form only");
  if (m_.cols % L.values != 0)
    throw Error(ErrorCode::BadInput,
                "Weight::requantized: rows of " + std::to_string(m_.cols) + " values are not whole blocks of 32");
  const std::int64_t rowBytes = m_.cols / L.values * L.bytes;
  auto bytes = std::make_shared<std::vector<std::uint8_t>>(static_cast<std::size_t>(m_.rows * rowBytes));
  std::uint8_t* out = bytes->data();
  at::parallel_for(0, m_.rows, 16, [&](std::int64_t r0, std::int64_t r1) {
    std::vector<float> row(static_cast<std::size_t>(m_.cols));
    for (std::int64_t r = r0; r < r1; ++r) {
      dequantizeRow(m_.type, m_.data + r * m_.rowBytes, m_.cols, row.data());
      kernels::quantizeRows(type, row.data(), m_.cols, out + r * rowBytes);
    }
  });
  if (mapping_) mapping_->release(m_.data, static_cast<std::size_t>(this->bytes()));  // the copy replaces them
  return Weight(type, m_.rows, m_.cols, out, std::move(bytes));
}

Weight Weight::permuteRows(const std::vector<std::int64_t>& order) const {
  TORCH_CHECK(owner_ && !packed_ && !dense_.defined(), "Weight::permuteRows: a weight in its stored form only");
  TORCH_CHECK(static_cast<std::int64_t>(order.size()) == m_.rows, "Weight::permuteRows: ", order.size(), " rows for ",
              m_.rows);
  auto bytes = std::make_shared<std::vector<std::uint8_t>>(static_cast<std::size_t>(this->bytes()));
  for (std::size_t i = 0; i < order.size(); ++i)
    std::memcpy(bytes->data() + static_cast<std::int64_t>(i) * m_.rowBytes, m_.data + order[i] * m_.rowBytes,
                static_cast<std::size_t>(m_.rowBytes));
  if (mapping_) mapping_->release(m_.data, static_cast<std::size_t>(this->bytes()));  // the copy replaces them
  const std::uint8_t* data = bytes->data();
  return Weight(m_.type, m_.rows, m_.cols, data, std::move(bytes));
}

Weight Weight::rowBlock(std::int64_t r0, std::int64_t n) const {
  TORCH_CHECK(owner_ && !packed_ && !dense_.defined(), "Weight::rowBlock: a weight in its stored form only");
  TORCH_CHECK(r0 >= 0 && n >= 0 && r0 + n <= m_.rows, "Weight::rowBlock: rows [", r0, ", ", r0 + n, ") of ", m_.rows);
  return Weight(m_.type, n, m_.cols, m_.data + r0 * m_.rowBytes, owner_, mapping_);
}

std::int64_t Weight::firstNonFinite() const {
  TORCH_CHECK(owner_ && !packed_ && !dense_.defined(), "Weight::firstNonFinite: a weight in its stored form only");
  const kernels::BlockLayout L = kernels::blockLayout(m_.type);
  const std::int64_t blocks = m_.rows * m_.cols / L.values;
  const std::int64_t b = kernels::firstNonFiniteBlock(m_.type, m_.data, blocks);
  if (b < 0) return -1;
  std::vector<float> v(static_cast<std::size_t>(L.values));
  kernels::dequantize(m_.type, m_.data + b * L.bytes, L.values, v.data());
  for (std::int64_t i = 0; i < L.values; ++i)
    if (!std::isfinite(v[static_cast<std::size_t>(i)])) return b * L.values + i;
  return b * L.values;
}

}  // namespace kvscope::model
