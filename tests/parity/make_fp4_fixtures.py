#!/usr/bin/env python3
"""Records what the engines' own Python code computes for the FP4 KV cache formats, as safetensors fixtures that
tests/parity/test_fp4_parity.cpp compares kvscope's row codecs with (kernels/fp4_codec.h).

References (pinned in packaging/requirements-engines.txt, installed with --no-deps beside the venv by
packaging/setup.sh; the directory is --engines):
  nvfp4         vLLM 0.33.0's ref_nvfp4_quant (model_executor/layers/quantization/utils/nvfp4_emulation_utils.py): the
                formula of its NVFP4 KV cache writer with exact reciprocals; the global scale passed as vLLM's writer
                derives it from k_scale (1 / k_scale); dequantize_to_dtype (swizzle=False) decodes.
  nvfp4_4over6  no Python reference ships: the choice between the amax/6 and amax/4 scales is written here from a
                reading of vLLM's SM100 kernel (csrc/nvfp4_kv_cache_kernels.cu, cvt_warp_fp16_to_fp4_4over6), on top
                of the same vLLM functions (cast_to_fp4, get_reciprocal).
  mxfp4         NVIDIA Model-Optimizer 0.47.0's MXFP4QTensor.quantize / dequantize (qtensor/mxfp4_tensor.py).
  ultraquant    vLLM 0.33.0's ultraquant_encode / ultraquant_dequant (v1/attention/ops/ultraquant/reference.py), on the
                inputs as given (rotate=False) and on the inputs rotated by vLLM's own hadamard_matrix (rotate=True:
                the fixture keeps x @ H.T, the float32 matmul vLLM rotates with, and the codes of that).

Import shim: the vLLM module is loaded from its file, with its four imports (vllm.platforms, vllm.scalar_type,
vllm.triton_utils, vllm.utils.torch_utils) replaced: vllm.scalar_type by its own file (it imports nothing of vLLM), the
others by stand-ins that the CPU path never calls (the Triton kernels only run for CUDA tensors). Model-Optimizer
imports whole once omegaconf, pulp, pynvml and scipy (imported at module level, unused by the FP4 code) are stubs.
"""
import argparse
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from engine_import import empty_packages, from_file  # noqa: E402  (this script's folder)


class _Anything:
    """A stand-in whose every attribute and call is itself (Triton's tl / triton in annotations and decorators)."""

    def __getattr__(self, name):
        return self

    def __call__(self, *a, **k):
        if len(a) == 1 and callable(a[0]) and not k:
            return a[0]  # a decorator: the function unchanged
        return self


def load_vllm_ultraquant(engines):
    """vLLM's UltraQuant reference: format.py (no imports of vLLM) under its package name, then reference.py."""
    root = os.path.join(engines, "vllm", "v1", "attention", "ops", "ultraquant")
    empty_packages(("vllm.v1", "vllm.v1.attention", "vllm.v1.attention.ops", "vllm.v1.attention.ops.ultraquant"),
                   replace=False)
    from_file("vllm.v1.attention.ops.ultraquant.format", os.path.join(root, "format.py"))
    return from_file("vllm_ultraquant_reference", os.path.join(root, "reference.py"))


def load_vllm_nvfp4(engines):
    root = os.path.join(engines, "vllm")

    empty_packages(("vllm", "vllm.utils"))
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(is_cuda_alike=lambda: False)
    sys.modules["vllm.platforms"] = platforms
    triton_utils = types.ModuleType("vllm.triton_utils")
    triton_utils.tl = _Anything()
    triton_utils.triton = _Anything()
    sys.modules["vllm.triton_utils"] = triton_utils
    torch_utils = types.ModuleType("vllm.utils.torch_utils")
    torch_utils.direct_register_custom_op = lambda *a, **k: None
    sys.modules["vllm.utils.torch_utils"] = torch_utils
    from_file("vllm.scalar_type", os.path.join(root, "scalar_type.py"))
    return from_file("vllm_nvfp4_emulation_utils",
                     os.path.join(root, "model_executor", "layers", "quantization", "utils",
                                  "nvfp4_emulation_utils.py"))


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Empty modules for Model-Optimizer's module-level imports that its FP4 code never uses."""

    def __init__(self, names):
        self.names = names

    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in self.names:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        m = types.ModuleType(spec.name)
        m.__path__ = []
        m.__getattr__ = lambda name: type(name, (), {})
        return m

    def exec_module(self, module):
        pass


def load_modelopt_mxfp4(engines):
    if engines not in sys.path:
        sys.path.insert(0, engines)
    missing = {n for n in ("omegaconf", "pulp", "pynvml", "scipy") if importlib.util.find_spec(n) is None}
    sys.meta_path.append(_StubFinder(missing))
    from modelopt.torch.quantization.qtensor.mxfp4_tensor import MXFP4QTensor
    return MXFP4QTensor


def inputs(D=128):
    """Rows of every kind a cache sees: Gaussian rows from tiny to large, outlier channels, zeros, exact ties."""
    g = torch.Generator().manual_seed(0)
    rows = []
    for scale in (1e-4, 2e-3, 0.05, 1.0, 8.0, 120.0, 900.0):
        rows.append(torch.randn(4, D, generator=g) * scale)
    spiky = torch.randn(4, D, generator=g)
    spiky[:, 7] *= 300.0
    spiky[:, 70] *= -40.0
    rows.append(spiky)
    zeros = torch.zeros(2, D)
    zeros[1, 16:32] = -torch.rand(16, generator=g) * 1e-3  # a zero block beside a tiny negative one
    rows.append(zeros)
    # With a block amax of 6 and a unit global scale the block scale is 1: the E2M1 boundaries and midpoints exactly.
    ties = torch.tensor([6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5.0, 0.1])
    rows.append(ties.repeat(D // 16).view(1, D))
    rows.append((ties * 2.0 ** -3).repeat(D // 16).view(1, D))
    return torch.cat(rows).contiguous().float()


def nvfp4_4over6(m, x, k_scale):
    """vLLM's 4over6 choice per block of 16 (a reading of its SM100 kernel) on vLLM's own E2M1 cast."""
    rows, n = x.shape
    xb = x.view(rows, n // 16, 16)
    g = 1.0 / k_scale
    amax = xb.abs().amax(-1, keepdim=True)
    best = None
    for den in (6.0, 4.0):
        s = g * (amax * torch.tensor(1.0 / den, dtype=torch.float32))
        s8 = torch.clamp(s, max=448.0).to(torch.float8_e4m3fn)
        sf = s8.to(torch.float32)
        zero = sf == 0
        os_ = torch.where(zero, torch.zeros_like(sf), 1.0 / torch.where(zero, torch.ones_like(sf), sf * (1.0 / g)))
        q = m.cast_to_fp4(torch.clamp(xb * os_, -6.0, 6.0))
        dq = torch.where(zero, torch.zeros_like(os_), 1.0 / torch.where(zero, torch.ones_like(os_), os_))
        d2 = (q * dq - xb) ** 2
        pair = d2[..., 0::2] + d2[..., 1::2]
        err = torch.zeros(rows, n // 16)
        sq = torch.zeros(rows, n // 16)
        for i in range(8):  # float32, in the kernel's order
            err = err + pair[..., i]
        for i in range(16):
            sq = sq + xb[..., i] * xb[..., i]
        err = torch.where(zero.squeeze(-1), sq, err)
        cand = (q, sf.squeeze(-1), s8.view(torch.uint8).squeeze(-1), err)
        if best is None:
            best = cand
        else:
            use4 = cand[3] < best[3]
            best = (torch.where(use4.unsqueeze(-1), cand[0], best[0]), torch.where(use4, cand[1], best[1]),
                    torch.where(use4, cand[2], best[2]), None)
    return best[0].reshape(rows, n), best[1], best[2]


def pack_e2m1(values):
    """vLLM's E2M1 values (float, with their sign, -0 included) into codes, element 2i in the low nibble."""
    mags = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    idx = torch.searchsorted(mags, values.abs())
    codes = (idx | (torch.signbit(values).to(torch.long) << 3)).to(torch.uint8)
    return (codes[..., 1::2] << 4) | codes[..., 0::2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engines", required=True, help="directory of the --no-deps installs of vllm and nvidia-modelopt")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    x = inputs()
    m = load_vllm_nvfp4(args.engines)
    amax = x.abs().amax()
    for name, k in (("unit", torch.tensor(1.0)), ("amax", amax / 448.0), ("odd", torch.tensor(0.0137))):
        k = k.to(torch.float32)
        values, scales = m.ref_nvfp4_quant(x.clone(), (1.0 / k).to(torch.float32), 16)
        scale_bytes = scales.to(torch.float8_e4m3fn).view(torch.uint8)
        packed = pack_e2m1(values)
        deq = m.dequantize_to_dtype(packed, scale_bytes, k, torch.float32, block_size=16, swizzle=False)
        q46, _, bytes46 = nvfp4_4over6(m, x, k)
        packed46 = pack_e2m1(q46)
        deq46 = m.dequantize_to_dtype(packed46, bytes46.contiguous(), k, torch.float32, block_size=16, swizzle=False)
        save_file({"x": x, "values": values.contiguous(), "scale_bytes": scale_bytes.contiguous(),
                   "dequant": deq.contiguous(), "values_4over6": q46.contiguous(),
                   "scale_bytes_4over6": bytes46.contiguous(), "dequant_4over6": deq46.contiguous(),
                   "k_scale": k.reshape(1)},
                  os.path.join(args.out, f"nvfp4_{name}.safetensors"),
                  metadata={"reference": "vllm==0.33.0 ref_nvfp4_quant / dequantize_to_dtype; 4over6 from a reading "
                                         "of csrc/nvfp4_kv_cache_kernels.cu", "k_scale": f"{float(k):.9g}"})
    mx = load_modelopt_mxfp4(args.engines)
    q, e8m0 = mx.quantize(x.clone(), 32)
    deq = q.dequantize(dtype=torch.float32, scale=e8m0, block_sizes={-1: 32})
    save_file({"x": x, "codes": q._quantized_data.contiguous(), "scale_bytes": e8m0.reshape(x.shape[0], -1).contiguous(),
               "dequant": deq.contiguous()},
              os.path.join(args.out, "mxfp4.safetensors"),
              metadata={"reference": "nvidia-modelopt==0.47.0 MXFP4QTensor"})
    uq = load_vllm_ultraquant(args.engines)
    H = uq.hadamard_matrix(x.shape[-1], x.device, torch.float32)
    x_rot = (x @ H.T).contiguous()
    plain = uq.ultraquant_encode(x.clone(), rotate=False)
    rotated = uq.ultraquant_encode(x.clone(), rotate=True)
    save_file({"x": x, "codes": plain.codes_packed.contiguous(), "scale_bytes": plain.scale_bytes.contiguous(),
               "dequant": uq.ultraquant_dequant(plain, x.shape[-1]).contiguous(), "x_rot": x_rot,
               "codes_rot": rotated.codes_packed.contiguous(), "scale_bytes_rot": rotated.scale_bytes.contiguous()},
              os.path.join(args.out, "ultraquant.safetensors"),
              metadata={"reference": "vllm==0.33.0 ultraquant_encode / ultraquant_dequant"})
    print(f"wrote 5 FP4 fixtures to {args.out}")


if __name__ == "__main__":
    sys.exit(main())
