#!/usr/bin/env python3
"""Writes a GGUF file with the `gguf` package (GGUFWriter): one tensor of every ggml type kvscope reads, quantized by
the package (the K-quants, which it cannot quantize, get random blocks with finite fp16 scales; MXFP4 some E8M0
scales at its edges), and metadata of every
value type; plus the package's own dequantization of each tensor as safetensors. test_gguf_parity.cpp reads both.
Also the package's quantization of float rows to the types kvscope writes (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1), with blocks
that test its edges: zeros, a constant, ties of the largest magnitude, values a hair below a rounding half; and, for
IQ4_NL (a llama.cpp KV cache type the package can only dequantize), random blocks with its dequantization.
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

TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "MXFP4"]
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
        if t == "MXFP4":  # the two subnormal scales (E8M0 0 and 1) and a large one among the package's blocks
            data = data.reshape(-1, 17).copy()
            data[0, 0], data[1, 0], data[2, 0] = 0, 1, 200
            data = data.reshape(3, -1)
        w.add_tensor(f"t.{t}", data, raw_dtype=qt)
        ref[f"t.{t}"] = np.ascontiguousarray(quants.dequantize(data, qt).astype(np.float32).reshape(3, 512))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    save_file(ref, os.path.join(args.out, "types_ref.safetensors"))
    x = (rng.standard_normal((4, 1024)) * 3).astype(np.float32)
    x[0, :32] = 0                                   # a zero block: d = 0
    x[0, 32:64] = 1.25                              # a constant block
    x[0, 64:96] = np.tile([2.0, -2.0], 16)          # ties of the largest magnitude (first wins)
    # amax 127 makes Q8_0's scale exactly 1: exact halves, and the float just below 0.5, whose |x| + 0.5 rounds up
    # to 1 in float32 where numpy's np_roundf gives 0.
    below = np.nextafter(np.float32(0.5), np.float32(0))
    x[0, 96:128] = np.array([127, below, -below, 0.5, -0.5, 1.5, -2.5, 3.5] + [below * 3] * 24, dtype=np.float32)
    x[1, :] = np.float32(1e-3) * rng.standard_normal(1024).astype(np.float32)  # tiny scales (fp16 subnormals)
    quantized = {"x": x}
    for t in ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"):
        quantized[t] = np.ascontiguousarray(quants.quantize(x, getattr(Q, t)))
    iq4 = rng.integers(0, 256, size=(64, 18), dtype=np.uint8)
    d = (rng.standard_normal(64) * 0.05).astype(np.float16)
    d[0] = 0  # a zero scale, as llama.cpp writes for an all-zero block
    iq4[:, :2] = d.view(np.uint8).reshape(-1, 2)
    quantized["IQ4_NL_blocks"] = np.ascontiguousarray(iq4.reshape(-1))
    quantized["IQ4_NL_dequantized"] = np.ascontiguousarray(
        quants.dequantize(iq4.reshape(1, -1), Q.IQ4_NL).astype(np.float32).reshape(-1))
    save_file(quantized, os.path.join(args.out, "quantize_ref.safetensors"))
    print(f"wrote {len(TYPES)} tensors to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
