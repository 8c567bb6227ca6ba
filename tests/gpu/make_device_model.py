#!/usr/bin/env python3
"""Writes a truncated copy of a GGUF model small enough to carry to a lent GPU machine (at most 64 MiB travel beside
the tracked files): the first N decoder layers with their weights as stored, the embeddings, the final norm and the
whole tokenizer, every other key copied; block_count says N.

    make_device_model.py [--model GGUF] [--layers N] [--out PATH]

Default: the embedded SmolLM2-135M-Instruct Q4_1 with 4 of its 30 layers (about 30 MB), into
.devdeps/smollm2-4-layers.gguf (git-ignored, carried by tests/gpu/device-check.sh's caller). The text it writes is no
longer good English, but the model runs the same code on the same shapes: what the device check compares (CPU against
CUDA, fused against reference) holds on it. Prints the path.
"""
import argparse
import os
import sys
from pathlib import Path

import gguf

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("KVSCOPE_CACHE", Path.home() / ".cache" / "kvscope"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=CACHE / "model" / "SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    r = gguf.GGUFReader(a.model)
    arch = r.fields["general.architecture"].contents()
    total = int(r.fields[f"{arch}.block_count"].contents())
    if not 1 <= a.layers <= total:
        sys.exit(f"make_device_model: --layers must be in 1..{total}")
    out = a.out or ROOT / ".devdeps" / f"{a.model.stem.split('-')[0].lower()}-{a.layers}-layers.gguf"
    out.parent.mkdir(parents=True, exist_ok=True)

    def kept(name):
        return not name.startswith("blk.") or int(name.split(".")[1]) < a.layers

    tensors = [t for t in r.tensors if kept(t.name)]
    part = out.with_name(out.name + ".part")
    w = gguf.GGUFWriter(part, arch)
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = a.layers if key == f"{arch}.block_count" else f.contents()
        sub = f.types[1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, value, f.types[0], sub_type=sub)
    for t in tensors:
        w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for t in tensors:
        w.write_tensor_data(t.data)
    w.close()
    os.replace(part, out)
    print(f"{out}: {len(tensors)} tensors, {out.stat().st_size / 2**20:.1f} MiB", file=sys.stderr)
    print(out)


if __name__ == "__main__":
    main()
