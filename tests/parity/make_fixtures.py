#!/usr/bin/env python3
"""Records what the real Python packages return for sequences of cache updates, as safetensors fixtures that
tests/parity/test_parity.cpp replays through kvscope's layers.

Reference per backend (pinned in packaging/requirements-ref.txt):
  fp8    transformers' own Fp8QuantizedLayer (QuantizedCache("fp8", ...)).
  quanto transformers' QuantoQuantizedLayer over optimum-quanto.
  hqq    transformers' HQQQuantizedLayer over hqq. One exception: 3-bit with axis=1, where hqq's dequantize trims the
         unpacked codes to shape[0] * shape[1] // group_size rows, which is wrong for 4-D KV states and raises inside
         transformers. For that case the same transformers layer feeds hqq's Quantizer a 2-D [B*H*S, D] view (same
         groups, correct trim) and reshapes back.

Each fixture holds the inputs and outputs of every update, the beam indices of every reorder, and in its metadata
the kvscope SPEC of the config and the list of operations.
"""
import argparse
import json
import os
import sys
import warnings
import zlib

warnings.filterwarnings("ignore")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import LlamaConfig  # noqa: E402
from transformers.cache_utils import HQQQuantizedLayer, QuantizedCache  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class Hqq2DViewLayer(HQQQuantizedLayer):
    """transformers' HQQ layer, with hqq fed a 2-D view (see the module docstring)."""

    def _quantize(self, tensor, axis):
        shape = tensor.shape
        qtensor, meta = super()._quantize(tensor.reshape(-1, shape[-1]), axis)
        meta["kvscope_shape"] = shape
        return qtensor, meta

    def _dequantize(self, qtensor):
        return super()._dequantize(qtensor).reshape(qtensor[1]["kvscope_shape"])


def make_cache(backend, kwargs):
    cfg = LlamaConfig(num_hidden_layers=1, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=64, vocab_size=128)
    cache = QuantizedCache(backend, cfg, **kwargs)
    reference = f"transformers QuantizedCache('{backend}')"
    if backend == "hqq" and kwargs.get("nbits") == 3 and 1 in (kwargs.get("axis_key"), kwargs.get("axis_value")):
        cache.layers[0] = Hqq2DViewLayer(**kwargs)
        reference = "transformers HQQQuantizedLayer + hqq Quantizer on a 2-D view (hqq 3-bit trim bug)"
    return cache, reference


def spec_of(backend, kwargs):
    if not kwargs:
        return backend
    return backend + ":" + ",".join(f"{k}={v}" for k, v in kwargs.items())


def run_case(name, backend, kwargs, dtype, shape, script, seed, scale_steps=None):
    """script: list of ("update", T) | ("reorder", [idx]) | ("reset",)."""
    B, H, D = shape
    gen = torch.Generator().manual_seed(seed)
    cache, reference = make_cache(backend, kwargs)
    tensors, ops = {}, []
    batch = B
    for i, op in enumerate(script):
        if op[0] == "update":
            T = op[1]
            amp = 1.0 if scale_steps is None else scale_steps.get(i, 1.0)
            k = (torch.randn(batch, H, T, D, generator=gen) * amp).to(dtype)
            v = (torch.randn(batch, H, T, D, generator=gen) * 2 * amp).to(dtype)
            ko, vo = cache.update(k.clone(), v.clone(), 0)
            tensors[f"in.{i}.k"], tensors[f"in.{i}.v"] = k, v
            tensors[f"out.{i}.k"], tensors[f"out.{i}.v"] = ko.contiguous().clone(), vo.contiguous().clone()
            ops.append(["update", i])
        elif op[0] == "reorder":
            idx = torch.tensor(op[1], dtype=torch.long)
            cache.reorder_cache(idx)
            tensors[f"beam.{i}"] = idx
            ops.append(["reorder", i])
        elif op[0] == "reset":
            cache.reset()
            ops.append(["reset", i])
    meta = {"spec": spec_of(backend, kwargs), "ops": json.dumps(ops), "reference": reference, "name": name}
    return tensors, meta


def standard_script(prompt, steps, batch, reorder_every=0, reset_at=None, chunk_at=None):
    s = [("update", prompt)]
    for t in range(steps):
        if reorder_every and t % reorder_every == reorder_every - 1:
            perm = [(j * 7 + t) % batch for j in range(batch)]
            s.append(("reorder", perm))
        if reset_at is not None and t == reset_at:
            s.append(("reset",))
            s.append(("update", prompt))
            continue
        s.append(("update", 3 if chunk_at is not None and t == chunk_at else 1))
    return s


def cases():
    out = []
    # fp8: seed semantics in three dtypes, beams, a reset (scale re-calibrated), a chunked update, and late states
    # louder than the prompt (the seed's frozen scale turns them into NaN: the fixture records it).
    for dt in ("fp32", "bf16", "fp16"):
        out.append((f"fp8_{dt}", "fp8", {}, dt, (3, 2, 64),
                    standard_script(17, 30, 3, reorder_every=7, reset_at=20, chunk_at=5), {9: 30.0}))
    # quanto: nbits x axis, crossing several flushes, with beams; axis -1 with shapes whose groups divide.
    for nbits in (2, 4):
        for axis in (0, -1):
            for dt in ("fp32", "bf16") if nbits == 4 else ("fp32",):
                kw = {"nbits": nbits, "axis_key": axis, "axis_value": axis, "q_group_size": 32, "residual_length": 8}
                out.append((f"quanto_n{nbits}_a{axis}_{dt}", "quanto", kw, dt, (2, 2, 64),
                            standard_script(16, 33, 2, reorder_every=5), None))
    out.append(("quanto_n4_g64_mixed_fp16", "quanto",
                {"nbits": 4, "axis_key": 0, "axis_value": -1, "q_group_size": 32, "residual_length": 4}, "fp16",
                (4, 2, 64), standard_script(32, 20, 4, reorder_every=3), None))
    out.append(("quanto_defaults", "quanto", {}, "fp32", (1, 3, 64), standard_script(64, 20, 1, reset_at=12), None))
    # hqq: every nbits and axis.
    for nbits in (1, 2, 3, 4, 8):
        for axis in (0, 1):
            kw = {"nbits": nbits, "axis_key": axis, "axis_value": axis, "q_group_size": 64, "residual_length": 8}
            out.append((f"hqq_n{nbits}_a{axis}_fp32", "hqq", kw, "fp32", (2, 2, 64),
                        standard_script(16, 25, 2, reorder_every=6), None))
    for dt in ("bf16", "fp16"):
        kw = {"nbits": 4, "axis_key": 1, "axis_value": 0, "q_group_size": 32, "residual_length": 6}
        out.append((f"hqq_n4_mixed_{dt}", "hqq", kw, dt, (3, 2, 32), standard_script(12, 20, 3, reorder_every=4), None))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    for name, backend, kw, dt, shape, script, amp in cases():
        tensors, meta = run_case(name, backend, kw, DTYPES[dt], shape, script, seed=zlib.crc32(name.encode()) % 10000, scale_steps=amp)
        save_file(tensors, os.path.join(args.out, name + ".safetensors"), metadata=meta)
    print(f"wrote {len(cases())} fixtures to {args.out} (torch {torch.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
