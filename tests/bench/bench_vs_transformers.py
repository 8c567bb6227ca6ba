#!/usr/bin/env python3
"""Decode speed of kvscope and of transformers on the same model, prompt and cache configs, in one run.

    python tests/bench/bench_vs_transformers.py --cli build/app/kvscope-cli --model <gguf> --context 2048 --new 32

kvscope's side is `kvscope-cli bench --json`; transformers' side loads the same GGUF (dequantized to fp32) and times
generate() with the matching QuantizedCache config: decode tok/s = new tokens / (time of prefill + N tokens - time
of the prefill alone). Both use the same number of CPU threads. Prints a table and the ratios the issue asks for.
"""
import argparse
import json
import os
import subprocess
import sys
import time
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

CONFIGS = [("dynamic", None), ("fp8", {"backend": "fp8"}), ("quanto:nbits=4", {"backend": "quanto", "nbits": 4}),
           ("hqq:nbits=4", {"backend": "hqq", "nbits": 4})]


def hf_decode(model, ids, new, cfg):
    kw = {} if cfg is None else {"cache_implementation": "quantized", "cache_config": dict(cfg)}
    common = dict(attention_mask=torch.ones_like(ids), do_sample=False, eos_token_id=None, pad_token_id=0, **kw)
    with torch.no_grad():
        t0 = time.perf_counter()
        model.generate(ids, max_new_tokens=1, min_new_tokens=1, **common)
        t1 = time.perf_counter()
        model.generate(ids, max_new_tokens=new + 1, min_new_tokens=new + 1, **common)
        t2 = time.perf_counter()
    return ids.shape[1] / (t1 - t0), new / ((t2 - t1) - (t1 - t0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--context", type=int, nargs="+", default=[2048])
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cmd = [args.cli, "bench", "--model", args.model, "--new", str(args.new), "--threads", str(args.threads), "--json",
           "--context", *map(str, args.context)]
    for spec, _ in CONFIGS[1:]:
        cmd += ["--cache", spec]
    ours = {}
    for line in subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines():
        r = json.loads(line)
        ours[(r["config"], r["context"])] = r
    d, name = os.path.split(os.path.abspath(args.model))
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32).eval()
    vocab = model.config.vocab_size
    print(f"{'config':<18} {'context':>7} {'kvscope decode':>15} {'transformers':>13} {'kvscope/hf':>11} "
          f"{'vs dynamic (kvscope)':>21} {'vs dynamic (hf)':>16}")
    for ctx in args.context:
        torch.manual_seed(0)
        ids = torch.randint(3, vocab, (1, ctx))
        hf = {spec: hf_decode(model, ids, args.new, cfg) for spec, cfg in CONFIGS}
        for spec, _ in CONFIGS:
            o = ours[(spec, ctx)]
            print(f"{spec:<18} {ctx:>7} {o['decode_tok_s']:>15.1f} {hf[spec][1]:>13.1f} "
                  f"{o['decode_tok_s'] / hf[spec][1]:>10.2f}x {o['decode_vs_dynamic']:>20.3f}x "
                  f"{hf[spec][1] / hf['dynamic'][1]:>15.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
