#!/usr/bin/env python3
"""Records what vLLM 0.33.0's own code computes for its TurboQuant KV cache (presets turboquant_k8v4, _4bit_nc,
_k3v4_nc, _3bit_nc) and its int4_per_token_head cache, as one safetensors fixture (turboquant.safetensors) for
bit-for-bit C++ tests.

References (pinned in packaging/requirements-engines.txt, installed with --no-deps beside the venv by
packaging/setup.sh; the directory is --engines), all under vllm/:
  centroids     model_executor/layers/quantization/turboquant/centroids.py get_centroids (pure Python Lloyd-Max).
  sizes, skips  model_executor/layers/quantization/turboquant/config.py TurboQuantConfig (key_packed_size,
                value_packed_size, slot_size_aligned, get_boundary_skip_layers on a minimal dense model_config).
  store         v1/attention/ops/triton_turboquant_store.py triton_turboquant_store, run whole (launcher + its Triton
                kernels _tq_fused_store_fp8 / _tq_fused_store_mse) on CPU tensors under Triton's interpreter, with the
                arguments v1/attention/backends/turboquant_attn.py passes (_build_hadamard, midpoints of the sorted
                centroids, cache [num_blocks, 16, 1, slot_size_aligned] uint8, num_kv_heads 1, slots 0..R-1). The y
                and norms recorded are the very tensors the launcher hands the MSE kernel.
  kdeq, vdeq    v1/attention/ops/triton_turboquant_decode.py _tq_full_dequant_kv (the continuation-prefill dequant;
                it writes float16), launched as the backend launches it.
  vdeq32        the same file's decode launcher triton_turboquant_decode_attention (stage1 + stage2) with a zero query,
                one KV split per token and the mid_o buffer read back: stage1's per-token float32 values.
  int4          v1/attention/ops/int4_per_token_head.py: _get_rht_signs, single_rht (its CPU butterfly), and
                reshape_and_cache_int4 (RHT, cast to the key dtype, _reshape_cache_int4_kernel) under the interpreter.

Import shim: each vLLM module is loaded from its file under its package name, with vllm.triton_utils replaced by the
real triton / triton.language (so the kernels are interpreted), vllm.platforms by a stand-in that says "not CUDA"
(hence e4nv FP8, the Hopper format), triton_decode_attention, triton_attention_helpers and utils/math_utils by their
own files, and triton_unified_attention (imported by int4_per_token_head for its read path only) by a stub.

Two patches to Triton 3.6's interpreter (the tool, not vLLM): (1) tensor.__index__ uses .item(), because under
NumPy 2 int() of the interpreter's shape-(1,) scalars raises, which stops the decode kernel's `range(split_start, ...)`;
(2) the fp32 -> float8e4nv cast is done as the GPU code Triton emits for it does (cvt.rn.satfinite.e4m3x2.f32: round
to nearest even, saturate to +-448), since the interpreter's own bit-twiddling conversion truncates subnormals, rounds
ties away and drops the mantissa carry; the number of key bytes the stock interpreter gets wrong is kept in the
metadata. Everything else runs as the interpreter runs it: IEEE float32 with one rounding per operation, where the GPU
build uses div.full.f32 for `/`, sqrt.approx for tl.sqrt and may contract a*b+c into an FMA.
"""
import argparse
import ast
import functools
import math
import os
import sys
import types
import warnings

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: the kernels run on CPU tensors
warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
import triton.runtime.interpreter as interp  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from engine_import import empty_packages, from_file  # noqa: E402  (this script's folder)

PRESETS = ("k8v4", "4bit_nc", "k3v4_nc", "3bit_nc")
TQ_DIMS = (64, 128)
INT4_DIMS = (32, 64, 128, 256)
BLOCK_SIZE = 16


def patch_interpreter():
    orig_patch = interp._patch_lang_tensor

    def patch_lang_tensor(tensor, scope):
        orig_patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).item()))

    interp._patch_lang_tensor = patch_lang_tensor
    orig_fp_to_fp = interp.InterpreterBuilder.create_fp_to_fp

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        if dst_type.scalar == tl.float8e4nv and src.dtype.scalar in (tl.float32, tl.float16):
            x = torch.from_numpy(np.ascontiguousarray(src.data)).float().clamp(-448.0, 448.0)
            return interp.TensorHandle(x.to(torch.float8_e4m3fn).view(torch.uint8).numpy(), dst_type.scalar)
        return orig_fp_to_fp(self, src, dst_type, rounding_mode)

    def use_fp8_cast(fixed):
        interp.InterpreterBuilder.create_fp_to_fp = create_fp_to_fp if fixed else orig_fp_to_fp

    use_fp8_cast(True)
    return use_fp8_cast


def load_vllm(engines):
    root = os.path.join(engines, "vllm")
    empty_packages(("vllm", "vllm.utils", "vllm.v1", "vllm.v1.attention", "vllm.v1.attention.ops",
                    "vllm.model_executor", "vllm.model_executor.layers", "vllm.model_executor.layers.quantization",
                    "vllm.model_executor.layers.quantization.turboquant"))
    platforms = types.ModuleType("vllm.platforms")
    no = lambda *a, **k: False  # noqa: E731
    platforms.current_platform = types.SimpleNamespace(
        is_cuda_alike=no, is_cuda=no, is_rocm=no, is_xpu=no, has_device_capability=no,
        fp8_dtype=lambda: torch.float8_e4m3fn)
    sys.modules["vllm.platforms"] = platforms
    triton_utils = types.ModuleType("vllm.triton_utils")
    triton_utils.tl = tl
    triton_utils.triton = triton
    sys.modules["vllm.triton_utils"] = triton_utils
    unified = types.ModuleType("vllm.v1.attention.ops.triton_unified_attention")
    unified.reduce_segments = None  # the INT4 read path only; never called here
    sys.modules[unified.__name__] = unified
    ops = os.path.join(root, "v1", "attention", "ops")
    tq = os.path.join(root, "model_executor", "layers", "quantization", "turboquant")
    from_file("vllm.utils.math_utils", os.path.join(root, "utils", "math_utils.py"))
    from_file("vllm.v1.attention.ops.triton_decode_attention", os.path.join(ops, "triton_decode_attention.py"))
    from_file("vllm.v1.attention.ops.triton_attention_helpers", os.path.join(ops, "triton_attention_helpers.py"))
    m = types.SimpleNamespace()
    tq_pkg = "vllm.model_executor.layers.quantization.turboquant"
    m.centroids = from_file(tq_pkg + ".centroids", os.path.join(tq, "centroids.py"))
    m.config = from_file(tq_pkg + ".config", os.path.join(tq, "config.py"))
    m.decode = from_file("vllm.v1.attention.ops.triton_turboquant_decode", os.path.join(ops, "triton_turboquant_decode.py"))
    m.store = from_file("vllm.v1.attention.ops.triton_turboquant_store", os.path.join(ops, "triton_turboquant_store.py"))
    m.int4 = from_file("vllm.v1.attention.ops.int4_per_token_head", os.path.join(ops, "int4_per_token_head.py"))
    # The backend module imports half of vLLM; take its _build_hadamard_cached from the source text as written.
    src_path = os.path.join(root, "v1", "attention", "backends", "turboquant_attn.py")
    tree = ast.parse(open(src_path).read(), src_path)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_build_hadamard_cached")
    ns = {"torch": torch, "math": math, "functools": functools}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), src_path, "exec"), ns)
    m.build_hadamard = lambda d: ns["_build_hadamard_cached"](d, "cpu")
    return m


class Recorder:
    """Stands in for a @triton.jit kernel in its module: records the launch arguments, then launches the kernel."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.args = None

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.args = args
            return self.kernel[grid](*args, **kwargs)
        return launch


def rows(D, seed):
    """40 rows, exactly float16-representable: Gaussian rows from 1e-3 to 300, outlier channels, a zero row, constant
    rows, rows of repeated values, a one-hot row, float16 subnormals."""
    g = torch.Generator().manual_seed(seed)
    out = [torch.randn(3, D, generator=g) * s for s in (1e-3, 1e-2, 0.1, 0.5, 1.0, 4.0, 30.0, 300.0)]  # rows 0-23
    spiky = torch.randn(4, D, generator=g)  # rows 24-27
    spiky[0, 5] = 60.0
    spiky[1, D - 3] = -250.0
    spiky[2, 1], spiky[2, D // 2] = 40.0, -40.0
    spiky[3, 0], spiky[3, 7] = 300.0, 299.0
    out.append(spiky)
    special = torch.zeros(12, D)  # rows 28-39
    # 28: all zero
    special[1] = 0.75  # 29: constant
    special[2] = -3.5  # 30: constant, negative
    special[3] = torch.tensor([1.5, -1.5]).repeat(D // 2)  # 31: two values
    special[4] = (torch.arange(D) % 5 - 2).float()  # 32: -2..2 cycling
    special[5] = torch.randint(-3, 4, (D,), generator=g).float()  # 33: small integers
    special[6, 3] = 5.0  # 34: one-hot
    special[7] = torch.randn(D, generator=g) * 3e-6  # 35: float16 subnormals
    special[8] = torch.randn(D, generator=g).abs() * 2.0  # 36: all positive
    special[9] = -torch.randn(D, generator=g).abs() * 2.0  # 37: all negative
    special[10] = torch.randn(D, generator=g) * torch.logspace(-3, 2.4, D)  # 38: dynamic range across channels
    special[11] = torch.randn(D, generator=g) * 1000.0  # 39: past FP8's 448
    out.append(special)
    return torch.cat(out).half().float().contiguous()


def turboquant(m, D, keys, values, t, meta, use_fp8_cast):
    R = keys.shape[0]
    H = m.build_hadamard(D)
    rec = Recorder(m.store._tq_fused_store_mse)
    m.store._tq_fused_store_mse = rec
    k16 = keys.half().view(R, 1, D)
    v16 = values.half().view(R, 1, D)
    nb = -(-R // BLOCK_SIZE)
    slot_mapping = torch.arange(R, dtype=torch.int64)
    block_table = torch.arange(nb, dtype=torch.int32).view(1, nb)
    sizes = []
    for p in PRESETS:
        cfg = m.config.TurboQuantConfig.from_cache_dtype("turboquant_" + p, D)
        sizes.append([cfg.key_packed_size, cfg.value_packed_size, cfg.slot_size_aligned])
        centroids = m.centroids.get_centroids(D, cfg.centroid_bits).to(dtype=torch.float32)
        c_sorted, _ = centroids.sort()  # turboquant_attn.py _ensure_on_device
        midpoints = (c_sorted[:-1] + c_sorted[1:]) / 2
        slot = cfg.slot_size_aligned
        cache = torch.zeros(nb, BLOCK_SIZE, 1, slot, dtype=torch.uint8)  # LBNHC layer view, Hk = 1

        def store(kv_cache):
            m.store.triton_turboquant_store(
                k16, v16, kv_cache, slot_mapping, H, midpoints, mse_bits=cfg.key_mse_bits,
                key_packed_size=cfg.key_packed_size, value_quant_bits=cfg.effective_value_quant_bits,
                key_fp8=cfg.key_fp8)
        store(cache)
        t[f"slot_{p}_d{D}"] = cache.view(-1, slot)[:R].clone()
        if cfg.key_fp8:
            use_fp8_cast(False)  # once more with the interpreter's own cast, to count what it gets wrong
            stock = torch.zeros_like(cache)
            store(stock)
            use_fp8_cast(True)
            bad = (stock.view(-1, slot)[:R, :D] != t[f"slot_{p}_d{D}"][:, :D]).sum().item()
            meta[f"stock_interpreter_fp8_key_bytes_wrong_d{D}"] = str(bad)
        else:
            y, norms = rec.args[0].clone(), rec.args[1].clone()
            if f"y_d{D}" in t:
                assert torch.equal(t[f"y_d{D}"], y) and torch.equal(t[f"norm_d{D}"], norms)
            t[f"y_d{D}"], t[f"norm_d{D}"] = y, norms
        # turboquant_attn.py _continuation_prefill: full dequant to float16 (keys rotated for MSE presets).
        mse_bytes = D if cfg.key_fp8 else math.ceil(D * cfg.key_mse_bits / 8)
        val_bytes = math.ceil(D * cfg.effective_value_quant_bits / 8)
        k_out = torch.zeros(1, 1, nb * BLOCK_SIZE, D, dtype=torch.float16)
        v_out = torch.zeros_like(k_out)
        m.decode._tq_full_dequant_kv[(nb * BLOCK_SIZE, 1)](
            cache, block_table, centroids, k_out, v_out, k_out.stride(0), k_out.stride(1), k_out.stride(2),
            v_out.stride(0), v_out.stride(1), v_out.stride(2), cache.stride(0), cache.stride(1), cache.stride(2),
            block_table.stride(0), HEAD_DIM=D, BLOCK_SIZE=BLOCK_SIZE, NUM_KV_HEADS=1, MSE_BYTES=mse_bytes,
            KPS=cfg.key_packed_size, VQB=cfg.effective_value_quant_bits, VAL_DATA_BYTES=val_bytes,
            MSE_BITS=cfg.key_mse_bits, KEY_FP8=1 if cfg.key_fp8 else 0, BLOCK_D=triton.next_power_of_2(D),
            NORM_CORRECTION=1 if cfg.norm_correction else 0, FP8_E4B15=0, num_warps=4)
        t[f"kdeq_{p}_d{D}"] = k_out[0, 0, :R].float()
        t[f"vdeq_{p}_d{D}"] = v_out[0, 0, :R].float()
        # Decode: a zero query, one split per token, so each split's softmax weight is exactly 1 and stage1's mid_o
        # holds that token's values as float32.
        mid_o = torch.zeros(1, 1, R, D + 1, dtype=torch.float32)
        m.decode.triton_turboquant_decode_attention(
            torch.zeros(1, 1, D, dtype=torch.float16), cache, block_table, torch.tensor([R], dtype=torch.int32), H,
            centroids, 1.0, mse_bits=cfg.key_mse_bits, key_packed_size=cfg.key_packed_size,
            value_quant_bits=cfg.effective_value_quant_bits, key_fp8=cfg.key_fp8,
            norm_correction=cfg.norm_correction, PiT=H, mid_o_buf=mid_o, max_num_kv_splits=R)
        t[f"vdeq32_{p}_d{D}"] = mid_o[0, 0, :, :D].clone()
    m.store._tq_fused_store_mse = rec.kernel
    return sizes


def int4(m, D, x, t):
    R = x.shape[0]
    nb = -(-R // BLOCK_SIZE)
    x16 = x.half().view(R, 1, D)
    rht = m.int4.single_rht(x16.float())  # as reshape_and_cache_int4 computes it, before the cast to key.dtype
    key_cache = torch.zeros(nb, BLOCK_SIZE, 1, D // 2, dtype=torch.uint8)
    value_cache = torch.zeros_like(key_cache)
    k_scale = torch.zeros(nb, BLOCK_SIZE, 1, dtype=torch.float32)
    v_scale = torch.zeros_like(k_scale)
    m.int4.reshape_and_cache_int4(x16, x16.clone(), key_cache, value_cache, torch.arange(R, dtype=torch.int64),
                                  k_scale_cache=k_scale, v_scale_cache=v_scale)
    codes = key_cache.view(-1, D // 2)[:R]
    scale_bytes = k_scale.view(-1)[:R].contiguous().view(torch.uint8).view(R, 4)  # little-endian float32 words
    assert torch.equal(codes, value_cache.view(-1, D // 2)[:R]) and torch.equal(k_scale, v_scale)
    t[f"int4_signs_d{D}"] = m.int4._get_rht_signs(D, 0, torch.device("cpu")).float().clone()
    t[f"int4_x_d{D}"] = x
    t[f"int4_rht_d{D}"] = rht.view(R, D).contiguous()
    t[f"int4_in_d{D}"] = rht.to(torch.float16).float().view(R, D).contiguous()
    t[f"int4_rows_d{D}"] = torch.cat([codes, scale_bytes], 1).contiguous()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engines", required=True, help="directory of the --no-deps install of vllm")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    use_fp8_cast = patch_interpreter()
    m = load_vllm(args.engines)
    t = {}
    meta = {"reference": "vllm==0.33.0 TurboQuant (config, centroids, triton_turboquant_store, _tq_full_dequant_kv, "
                         "triton_turboquant_decode_attention) and int4_per_token_head (single_rht, "
                         "reshape_and_cache_int4), Triton kernels under TRITON_INTERPRET=1 on CPU",
            "triton": triton.__version__, "torch": torch.__version__,
            "interpreter_patches": "__index__ via item(); fp32->float8e4nv as cvt.rn.satfinite (RNE, clamp 448)",
            "presets": ",".join(PRESETS)}
    for D in (16, 32, 64, 128, 256, 512):
        for b in (3, 4):
            t[f"centroids_d{D}_b{b}"] = m.centroids.get_centroids(D, b).to(torch.float32).clone()
    for D in TQ_DIMS:
        for b in (3, 4):
            c, _ = t[f"centroids_d{D}_b{b}"].sort()
            t[f"midpoints_d{D}_b{b}"] = (c[:-1] + c[1:]) / 2
    skips = torch.full((9, 4), -1, dtype=torch.int64)
    for i, n in enumerate((1, 2, 3, 4, 5, 6, 7, 8, 32)):
        mc = types.SimpleNamespace(is_hybrid=False, hf_text_config=types.SimpleNamespace(num_hidden_layers=n))
        got = [int(s) for s in m.config.TurboQuantConfig.get_boundary_skip_layers(mc)]
        skips[i, :len(got)] = torch.tensor(got, dtype=torch.int64)
    t["skip_layers"] = skips
    sizes = {}
    for D in TQ_DIMS:
        keys, values = rows(D, 100 + D), rows(D, 200 + D)
        t[f"key_d{D}"], t[f"value_d{D}"] = keys, values
        sizes[D] = turboquant(m, D, keys, values, t, meta, use_fp8_cast)
    t["sizes"] = torch.tensor([[sizes[D][i] for D in TQ_DIMS] for i in range(len(PRESETS))], dtype=torch.int64)
    for D in INT4_DIMS:
        int4(m, D, rows(D, 300 + D), t)
    t = {k: v.contiguous() for k, v in t.items()}
    save_file(t, os.path.join(args.out, "turboquant.safetensors"), metadata=meta)
    print(f"wrote {len(t)} TurboQuant/INT4 tensors to {os.path.join(args.out, 'turboquant.safetensors')}")


if __name__ == "__main__":
    sys.exit(main())
