#!/usr/bin/env python3
"""kvscope-cli's transformers export is accepted by transformers: each exported cache_config builds a QuantizedCache
(the same call generate(cache_implementation="quantized", cache_config=...) makes) and its layers carry the values."""
import json
import subprocess
import sys
import warnings

warnings.filterwarnings("ignore")
import torch  # noqa: E402,F401
from transformers import LlamaConfig  # noqa: E402
from transformers.cache_utils import QuantizedCache  # noqa: E402

SPECS = ["fp8", "fp8:granularity=head,overflow=saturate", "quanto", "quanto:nbits=2,q_group_size=32,residual_length=64",
         "quanto:axis_key=-1,axis_value=-1", "hqq", "hqq:nbits=3,axis_key=1,q_group_size=32", "hqq:nbits=1,optimize=false"]
ALLOWED = {"backend", "nbits", "axis_key", "axis_value", "q_group_size", "residual_length"}


def main(cli):
    cfg = LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=64, vocab_size=128)
    failures = 0
    for spec in SPECS:
        out = subprocess.run([cli, "export", "--cache", spec, "--format", "hf"], capture_output=True, text=True)
        if out.returncode != 0:
            print(f"FAIL {spec}: exit {out.returncode}: {out.stderr.strip()}")
            failures += 1
            continue
        d = json.loads(out.stdout)
        extra = set(d) - ALLOWED
        try:
            assert not extra, f"keys transformers does not take: {sorted(extra)}"
            backend = d.pop("backend")
            cache = QuantizedCache(backend, cfg, **d)
            layer = cache.layers[0]
            for key, value in d.items():
                assert getattr(layer, key) == value, f"{key}: layer has {getattr(layer, key)}, export {value}"
            print(f"ok   {spec:45s} -> {type(layer).__name__} {json.dumps(d)}")
        except Exception as e:  # noqa: BLE001
            print(f"FAIL {spec}: {e}")
            failures += 1
    print(f"{len(SPECS) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
