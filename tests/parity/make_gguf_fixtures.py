#!/usr/bin/env python3
"""Writes a GGUF file with the `gguf` package (GGUFWriter): one tensor of every ggml type kvscope reads, quantized by
the package (the K-quants, which it cannot quantize, get random blocks with finite fp16 scales), and metadata of every
value type; plus the package's own dequantization of each tensor as safetensors. test_gguf_parity.cpp reads both.
"""
import argparse
import os
import sys
import warnings

warnings.filterwarnings("ignore")
import gguf  # noqa: E402
import numpy as np  # noqa: E402
from gguf import GGMLQuantizationType as Q  # noqa: E402
from gguf import quants  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"]
# K-quant block sizes and where their fp16 scales sit (d, and dmin where there is one).
K_BLOCKS = {"Q4_K": (144, [0, 2]), "Q5_K": (176, [0, 2]), "Q6_K": (210, [208])}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="directory")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(11)
    w = gguf.GGUFWriter(os.path.join(args.out, "types.gguf"), arch="llama")
    w.add_string("test.string", "héllo ✓")
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -7)
    w.add_float32("test.f32", 0.25)
    w.add_bool("test.bool", True)
    w.add_array("test.strings", ["a", "bc", ""])
    w.add_array("test.ints", [1, -2, 3])
    w.add_array("test.floats", [0.5, 1.5])
    ref = {}
    for t in TYPES:
        qt = getattr(Q, t)
        x = (rng.standard_normal((3, 512)) * 2).astype(np.float32)
        if t == "F32":
            data = x
        elif t == "F16":
            data = x.astype(np.float16)
        elif t in K_BLOCKS:
            size, scales = K_BLOCKS[t]
            blocks = rng.integers(0, 256, size=(3 * 512 // 256, size), dtype=np.uint8)
            for at in scales:
                d = (rng.random(blocks.shape[0]) * 0.01 + 0.001).astype(np.float16)
                blocks[:, at:at + 2] = d.view(np.uint8).reshape(-1, 2)
            data = blocks.reshape(3, -1)
        else:
            data = quants.quantize(x, qt)
        w.add_tensor(f"t.{t}", data, raw_dtype=qt)
        ref[f"t.{t}"] = np.ascontiguousarray(quants.dequantize(data, qt).astype(np.float32).reshape(3, 512))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    save_file(ref, os.path.join(args.out, "types_ref.safetensors"))
    print(f"wrote {len(TYPES)} tensors to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
