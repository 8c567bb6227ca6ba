#include "model/weight.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "kernels/cpu/blocks.h"
#include "model/dequant.h"

namespace kvscope::model {

Weight::Weight(std::uint32_t type, std::int64_t rows, std::int64_t cols, const std::uint8_t* data,
               std::shared_ptr<const void> owner)
    : owner_(std::move(owner)) {
  const kernels::BlockLayout L = kernels::blockLayout(type);
  if (L.values == 0 || cols % L.values != 0)
    throw std::invalid_argument("Weight: a type without a layout, or rows that are not whole blocks");
  m_ = {type, rows, cols, data, cols / L.values * L.bytes};
}

const char* activationsName(Activations a) { return a == Activations::Q8 ? "q8" : "f32"; }

const std::vector<std::string>& weightFormatNames() {
  static const std::vector<std::string> names{"stored", "q8_0", "q4_0", "q4_1"};
  return names;
}

std::uint32_t parseWeightFormat(const std::string& name) {
  if (name == "stored") return 0;
  if (name == "q8_0") return static_cast<std::uint32_t>(kernels::BlockType::Q8_0);
  if (name == "q4_0") return static_cast<std::uint32_t>(kernels::BlockType::Q4_0);
  if (name == "q4_1") return static_cast<std::uint32_t>(kernels::BlockType::Q4_1);
  throw std::invalid_argument("weights must be stored, q8_0, q4_0 or q4_1, got `" + name + "`");
}

Activations parseActivations(const std::string& name) {
  if (name == "f32") return Activations::F32;
  if (name == "q8") return Activations::Q8;
  throw std::invalid_argument("activations must be f32 or q8, got `" + name + "`");
}

at::Tensor Weight::linear(const at::Tensor& x, const at::Tensor& bias, Activations a) const {
  return linear(std::vector<const Weight*>{this}, x, {bias}, a)[0];
}

std::vector<at::Tensor> Weight::linear(const std::vector<const Weight*>& ws, const at::Tensor& x,
                                       const std::vector<at::Tensor>& biases, Activations a) {
  const std::int64_t cols = x.size(-1);
  for (const Weight* w : ws)
    TORCH_CHECK(w->defined() && w->cols() == cols, "Weight::linear: ", x.sizes(), " against a [", w->rows(), ", ",
                w->cols(), "] weight");
  if (ws.front()->isDense()) {  // the device path: LibTorch's GEMM on the weights' device, in their dtype
    std::vector<at::Tensor> ys;
    for (std::size_t i = 0; i < ws.size(); ++i) {
      const at::Tensor& w = ws[i]->dense_;
      TORCH_CHECK(w.defined(), "Weight::linear: dense and block weights in one call");
      const at::Tensor b = i < biases.size() && biases[i].defined() ? biases[i].to(w.scalar_type()) : at::Tensor();
      ys.push_back(at::linear(x.to(w.scalar_type()), w, b).to(x.scalar_type()));
    }
    return ys;
  }
  const at::Tensor xf = x.to(at::kFloat).contiguous().view({-1, cols});
  const std::int64_t n = xf.size(0);
  std::vector<at::Tensor> ys;
  for (const Weight* w : ws) ys.push_back(at::empty({n, w->rows()}, at::kFloat));
  if (n <= kKernelRows) {
    at::Tensor sums;
    kernels::Q8Rows q8;
    std::vector<bool> viaQ8;
    bool f32Sums = false;
    for (const Weight* w : ws) {
      const bool quantized = kernels::blockLayout(w->type()).quantized();
      viaQ8.push_back(quantized && a == Activations::Q8);
      f32Sums = f32Sums || (quantized && !viaQ8.back());
    }
    if (f32Sums) {
      sums = at::empty({n, cols / 16}, at::kFloat);
      kernels::rowSums16(xf.data_ptr<float>(), n, cols, cols, sums.data_ptr<float>());
    }
    if (std::find(viaQ8.begin(), viaQ8.end(), true) != viaQ8.end())
      kernels::quantizeRowsQ8(xf.data_ptr<float>(), n, cols, cols, q8);
    const float* xp = xf.data_ptr<float>();
    const float* sp = sums.defined() ? sums.data_ptr<float>() : nullptr;
    std::vector<std::int64_t> first{0};  // the weights' rows one after another
    for (const Weight* w : ws) first.push_back(first.back() + w->rows());
    // All the rows over the threads at once: each thread reads its own share of the weight bytes, once.
    at::parallel_for(0, first.back(), 16, [&](std::int64_t r0, std::int64_t r1) {
      for (std::size_t i = 0; i < ws.size(); ++i) {
        const std::int64_t lo = std::max(r0, first[i]), hi = std::min(r1, first[i + 1]);
        if (lo >= hi) continue;
        if (viaQ8[i]) kernels::blockMatmulQ8(ws[i]->m_, q8, ys[i].data_ptr<float>(), ws[i]->rows(), lo - first[i], hi - first[i]);
        else kernels::blockMatmul(ws[i]->m_, xp, n, cols, sp, ys[i].data_ptr<float>(), ws[i]->rows(), lo - first[i], hi - first[i]);
      }
    });
  } else {
    for (std::size_t i = 0; i < ws.size(); ++i) {
      const kernels::BlockMatrix& m = ws[i]->m_;
      // A tile of rows at a time (about 8 MiB of float32), so a large vocabulary never needs its whole float copy.
      const std::int64_t tile = std::max<std::int64_t>(64, (std::int64_t{8} << 20) / (4 * cols));
      at::Tensor buf = at::empty({std::min(tile, m.rows), cols}, at::kFloat);
      for (std::int64_t r0 = 0; r0 < m.rows; r0 += tile) {
        const std::int64_t rn = std::min(tile, m.rows - r0);
        at::Tensor w = buf.narrow(0, 0, rn);
        dequantizeRow(m.type, m.data + r0 * m.rowBytes, rn * cols, w.data_ptr<float>());
        ys[i].narrow(1, r0, rn).copy_(at::mm(xf, w.t()));
      }
    }
  }
  std::vector<std::int64_t> shape(x.sizes().begin(), x.sizes().end());
  for (std::size_t i = 0; i < ws.size(); ++i) {
    if (i < biases.size() && biases[i].defined()) ys[i].add_(biases[i].to(at::kFloat));
    shape.back() = ws[i]->rows();
    ys[i] = ys[i].view(shape).to(x.scalar_type());
  }
  return ys;
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
    kernels::dequantize(m_.type, m_.data + id[i] * m_.rowBytes, m_.cols, out[i].data_ptr<float>());
  }
  std::vector<std::int64_t> shape(ids.sizes().begin(), ids.sizes().end());
  shape.push_back(m_.cols);
  return out.view(shape);
}

at::Tensor Weight::dense() const {
  if (dense_.defined()) return dense_.to(at::kFloat);
  at::Tensor out = at::empty({m_.rows, m_.cols}, at::kFloat);
  dequantizeRow(m_.type, m_.data, m_.rows * m_.cols, out.data_ptr<float>());
  return out;
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
  if (!kernels::quantizable(type)) throw std::invalid_argument("Weight::requantized: kvscope writes Q8_0, Q4_0 and Q4_1");
  if (!defined() || dense_.defined()) throw std::invalid_argument("Weight::requantized: a weight in its stored form only");
  if (m_.cols % L.values != 0)
    throw std::invalid_argument("Weight::requantized: rows of " + std::to_string(m_.cols) + " values are not whole blocks of 32");
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
  return Weight(type, m_.rows, m_.cols, out, std::move(bytes));
}

Weight Weight::permuteRows(const std::vector<std::int64_t>& order) const {
  TORCH_CHECK(static_cast<std::int64_t>(order.size()) == m_.rows, "Weight::permuteRows: ", order.size(), " rows for ",
              m_.rows);
  auto bytes = std::make_shared<std::vector<std::uint8_t>>(static_cast<std::size_t>(this->bytes()));
  for (std::size_t i = 0; i < order.size(); ++i)
    std::memcpy(bytes->data() + static_cast<std::int64_t>(i) * m_.rowBytes, m_.data + order[i] * m_.rowBytes,
                static_cast<std::size_t>(m_.rowBytes));
  const std::uint8_t* data = bytes->data();
  return Weight(m_.type, m_.rows, m_.cols, data, std::move(bytes));
}

std::int64_t Weight::firstNonFinite() const {
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
