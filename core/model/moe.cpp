#include "model/moe.h"

#include <ATen/ATen.h>

#include <cmath>
#include <tuple>

#include "device/host_copy.h"

namespace kvscope::model {

at::Tensor gatedActivation(const at::Tensor& g, const at::Tensor& u, FfnAct act, double limit) {
  switch (act) {
    case FfnAct::SwigluOai: {  // transformers' GptOssExperts: alpha 1.702, (up + 1) * glu
      const at::Tensor gc = g.clamp_max(limit);
      return (u.clamp(-limit, limit) + 1) * (gc * at::sigmoid(gc * 1.702));
    }
    case FfnAct::GeluTanh:
      return at::gelu(g, "tanh") * u;
    case FfnAct::Silu:
      break;
  }
  return at::silu(g) * u;
}

at::Tensor MoeFfn::forward(const at::Tensor& x, Activations a, const at::Tensor& routerInput) const {
  const std::int64_t H = x.size(-1), E = static_cast<std::int64_t>(gate.size()), k = topK;
  const at::Tensor x2 = x.reshape({-1, H});
  const std::int64_t N = x2.size(0);
  at::Tensor r2 = routerInput.defined() ? routerInput.reshape({-1, H}) : x2;
  if (routerScale.defined()) {  // Gemma4TextRouter: RMS norm (no weight) in float32, * scale * hidden^-0.5
    const at::Tensor f = r2.to(at::kFloat);
    r2 = (f * at::pow(f.pow(2).mean({-1}, true) + routerEps, -0.5)).to(r2.scalar_type());
    r2 = r2 * routerScale * std::pow(static_cast<double>(H), -0.5);
  }
  // Router (Softmax): softmax in float32 over every expert, the top k, renormalized where the model says, in x's
  // dtype. TopKSoftmax: the top k logits (the router's bias added), softmaxed among themselves in their dtype.
  const at::Tensor logits = router.linear(r2, routerBias, a);
  at::Tensor top, chosen;
  if (gating == MoeGating::TopKSoftmax) {
    std::tie(top, chosen) = at::topk(logits, k, -1);
    top = at::softmax(top, -1, top.scalar_type());
  } else {
    std::tie(top, chosen) = at::topk(at::softmax(logits, -1, at::kFloat), k, -1);
    if (normTopK) top = top / top.sum(-1, true);
    if (expertScale.defined()) top = top * expertScale.index_select(0, chosen.reshape({-1})).view_as(chosen);
  }
  const at::Tensor weights = top.to(logits.scalar_type()).reshape({-1});
  auto row = [](const at::Tensor& bias, std::size_t e) {
    return bias.defined() ? bias.select(0, static_cast<std::int64_t>(e)) : at::Tensor();
  };

  // Which (token, slot) pairs each expert serves, slot by slot then token by token (transformers' torch.where order).
  const at::Tensor hostChosen = device::toHost(chosen.to(at::kLong));
  const auto* c = hostChosen.data_ptr<std::int64_t>();
  std::vector<std::vector<std::int64_t>> tokens(static_cast<std::size_t>(E)), flat(static_cast<std::size_t>(E));
  for (std::int64_t s = 0; s < k; ++s)
    for (std::int64_t t = 0; t < N; ++t) {
      const auto e = static_cast<std::size_t>(c[t * k + s]);
      tokens[e].push_back(t);
      flat[e].push_back(t * k + s);
    }
  // The experts with tokens, ascending: the order transformers' loop adds them in.
  std::vector<std::size_t> hit;
  for (std::size_t e = 0; e < tokens.size(); ++e)
    if (!tokens[e].empty()) hit.push_back(e);
  at::Tensor out = at::zeros_like(x2);
  if (N == 1) {  // a decode step: the token's row as it is, no gathers; index_add_ on one row is add_
    // Every chosen expert's gate and up in one pass over the threads (the same input row), then every down.
    std::vector<const Weight*> ws, downs;
    std::vector<at::Tensor> biases;
    ws.reserve(2 * hit.size());
    downs.reserve(hit.size());
    for (const std::size_t e : hit) {
      ws.push_back(&gate[e]);
      ws.push_back(&up[e]);
      biases.push_back(row(gateBias, e));
      biases.push_back(row(upBias, e));
      downs.push_back(&down[e]);
    }
    const auto gu = Weight::linear(ws, x2, biases, a);
    std::vector<at::Tensor> hs;
    hs.reserve(hit.size());
    for (std::size_t j = 0; j < hit.size(); ++j)
      hs.push_back(gatedActivation(gu[2 * j], gu[2 * j + 1], act, swigluLimit));
    const auto ys = Weight::linearEach(downs, hs, a);
    for (std::size_t j = 0; j < hit.size(); ++j) {
      const at::Tensor y = downBias.defined() ? ys[j] + row(downBias, hit[j]) : ys[j];
      out.add_((y * weights.narrow(0, flat[hit[j]].front(), 1)).to(out.scalar_type()));
    }
    return out.view(x.sizes());
  }
  const at::TensorOptions idx = at::TensorOptions().dtype(at::kLong);
  for (const std::size_t e : hit) {
    const auto& te = tokens[e];
    const at::Tensor tok = at::tensor(te, idx).to(x.device());
    const at::Tensor slot = at::tensor(flat[e], idx).to(x.device());
    const at::Tensor xs = x2.index_select(0, tok);
    const auto gu = Weight::linear({&gate[e], &up[e]}, xs, {row(gateBias, e), row(upBias, e)}, a);
    const at::Tensor h = gatedActivation(gu[0], gu[1], act, swigluLimit);
    const at::Tensor y = down[e].linear(h, row(downBias, e), a) * weights.index_select(0, slot).unsqueeze(-1);
    out.index_add_(0, tok, y.to(out.scalar_type()));
  }
  return out.view(x.sizes());
}

}  // namespace kvscope::model
