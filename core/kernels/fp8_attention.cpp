#include "kernels/fp8_attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/fp8_attention_cpu.h"
#include "util/error.h"
#if defined(KVSCOPE_WITH_CUDA)
#include "kernels/cuda/fp8_attention_cuda.h"
#include "kernels/cuda/runtime.h"
#endif

namespace kvscope::kernels {
namespace {

std::string shapeOf(const at::Tensor& t) {
  std::string s = "[";
  for (std::int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

// The kernel's arguments come from kvscope's caches (Internal when they do not fit), except where a model and a device
// ask for what it does not do (BadInput).
void check(bool ok, const std::string& msg, ErrorCode code = ErrorCode::Internal) {
  if (!ok) throw Error(code, "fp8 decode attention: " + msg);
}

}  // namespace

at::Tensor fp8DecodeAttention(const at::Tensor& q, const at::Tensor& kCodes, const at::Tensor& vCodes,
                              const at::Tensor& kScale, const at::Tensor& vScale, Fp8Format format,
                              std::optional<double> scale) {
  check(q.defined() && kCodes.defined() && vCodes.defined() && kScale.defined() && vScale.defined(),
        "undefined tensor");
  check(q.dim() == 4 && q.size(2) == 1, fmt::format("q must be [batch, heads, 1, head_dim], got {}", shapeOf(q)));
  check(q.scalar_type() == at::kFloat || q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf,
        fmt::format("q has dtype {} (fp32, bf16, fp16)", c10::toString(q.scalar_type())));
  const std::int64_t B = q.size(0), Hq = q.size(1), D = q.size(3);
  check(kCodes.dim() == 4 && kCodes.sizes() == vCodes.sizes(),
        fmt::format("keys {} and values {} must be [batch, kv_heads, seq, head_dim] alike", shapeOf(kCodes),
                    shapeOf(vCodes)));
  const std::int64_t Hkv = kCodes.size(1), L = kCodes.size(2);
  check(kCodes.size(0) == B && kCodes.size(3) == D,
        fmt::format("keys {} do not fit q {}", shapeOf(kCodes), shapeOf(q)));
  check(Hkv > 0 && Hq % Hkv == 0, fmt::format("{} query heads are not a multiple of {} KV heads", Hq, Hkv));
  check(L > 0, "empty cache (no key to attend to)");
  check(kCodes.scalar_type() == at::kByte && vCodes.scalar_type() == at::kByte, "codes must be uint8");
  check((D == 1 || kCodes.stride(3) == 1) && (D == 1 || vCodes.stride(3) == 1), "codes need a dense head_dim");
  for (const at::Tensor* s : {&kScale, &vScale})
    check(s->dim() == 2 && s->size(0) == Hkv && s->size(1) == D,
          fmt::format("scales must be [kv_heads, head_dim] = [{}, {}], got {}", Hkv, D, shapeOf(*s)));
  check(kCodes.device() == q.device() && vCodes.device() == q.device(), "q and the codes must be on one device");
  const float sm = static_cast<float>(scale.value_or(1.0 / std::sqrt(static_cast<double>(D))));
  const at::Tensor qf = q.to(at::kFloat).contiguous();
  const at::Tensor ks = kScale.to(q.device(), at::kFloat).contiguous();
  const at::Tensor vs = vScale.to(q.device(), at::kFloat).contiguous();
  at::Tensor out = at::empty({B, Hq, 1, D}, qf.options());
  const std::int64_t groups = Hq / Hkv;

  if (q.is_cpu()) {
    const float* qp = qf.const_data_ptr<float>();
    const std::uint8_t* kp = kCodes.const_data_ptr<std::uint8_t>();
    const std::uint8_t* vp = vCodes.const_data_ptr<std::uint8_t>();
    float* op = out.mutable_data_ptr<float>();
    at::parallel_for(0, B * Hq, 1, [&](std::int64_t begin, std::int64_t end) {
      std::vector<float> scores(static_cast<std::size_t>(L));
      for (std::int64_t bh = begin; bh < end; ++bh) {
        const std::int64_t b = bh / Hq, hk = (bh % Hq) / groups;
        fp8DecodeAttentionHead(qp + bh * D, kp + b * kCodes.stride(0) + hk * kCodes.stride(1), kCodes.stride(2),
                               vp + b * vCodes.stride(0) + hk * vCodes.stride(1), vCodes.stride(2),
                               ks.const_data_ptr<float>() + hk * D, vs.const_data_ptr<float>() + hk * D, L, D, sm,
                               format, op + bh * D, scores.data());
      }
    });
    return out.to(q.scalar_type());
  }
#if defined(KVSCOPE_WITH_CUDA)
  if (q.is_cuda()) {
    check(D <= 256, fmt::format("head_dim {} is above the CUDA kernel's 256", D), ErrorCode::BadInput);
    cuda::DeviceScope guard(q.get_device());
    cuda::Fp8AttentionArgs a;
    a.q = qf.const_data_ptr<float>();
    a.k = kCodes.const_data_ptr<std::uint8_t>();
    a.v = vCodes.const_data_ptr<std::uint8_t>();
    a.kStrideB = kCodes.stride(0), a.kStrideH = kCodes.stride(1), a.kStrideT = kCodes.stride(2);
    a.vStrideB = vCodes.stride(0), a.vStrideH = vCodes.stride(1), a.vStrideT = vCodes.stride(2);
    a.kScale = ks.const_data_ptr<float>();
    a.vScale = vs.const_data_ptr<float>();
    a.B = B, a.Hq = Hq, a.Hkv = Hkv, a.L = L, a.D = D;
    a.smScale = sm;
    a.format = format;
    a.out = out.mutable_data_ptr<float>();
    at::Tensor ws = at::empty({cuda::fp8AttentionWorkspace(B, Hq, L, D)}, qf.options());
    cuda::fp8DecodeAttention(a, ws.mutable_data_ptr<float>(), cuda::currentStream(q.get_device()));
    cuda::checkLastError("fp8 decode attention kernel");
    return out.to(q.scalar_type());
  }
#endif
  throw Error(ErrorCode::Internal, fmt::format("fp8 decode attention: no kernel for device {}", q.device().str()));
}

}  // namespace kvscope::kernels
