#!/usr/bin/env python3
"""Decode speed of kvscope and of transformers on the same model, prompt and cache configs, in one run.

    python tests/bench/bench_vs_transformers.py --cli build/app/kvscope-cli --model <gguf> --context 2048 --new 32

kvscope's side is `kvscope-cli bench --json`; transformers' side loads the same GGUF (dequantized to fp32) and times
generate() with the matching QuantizedCache config: decode tok/s = new tokens / (time of prefill + N tokens - time
of the prefill alone). Both use the same number of CPU threads and the same number of rounds (configs interleaved
within a round; medians reported). Prints decode tok/s, the speed ratio kvscope/transformers, each config's speed
relative to the dynamic cache, and the cache overhead per token (step time minus the dynamic step time).
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


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])


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
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cmd = [args.cli, "bench", "--model", args.model, "--new", str(args.new), "--threads", str(args.threads), "--json",
           "--repeat", str(args.rounds),
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
    print(f"{'config':<16} {'context':>7} {'kvscope tok/s':>13} {'hf tok/s':>9} {'kvscope/hf':>10} "
          f"{'vs dyn (kvscope)':>16} {'vs dyn (hf)':>11} {'overhead ms/tok kvscope':>23} {'hf':>7}")
    for ctx in args.context:
        torch.manual_seed(0)
        ids = torch.randint(3, vocab, (1, ctx))
        runs = {spec: [] for spec, _ in CONFIGS}
        for _ in range(args.rounds):
            for spec, cfg in CONFIGS:
                runs[spec].append(hf_decode(model, ids, args.new, cfg)[1])
        hf = {spec: median(v) for spec, v in runs.items()}
        for spec, _ in CONFIGS:
            o = ours[(spec, ctx)]
            base = ours[("dynamic", ctx)]["decode_tok_s"]
            ov_ours = 1000.0 * (1.0 / o["decode_tok_s"] - 1.0 / base)
            ov_hf = 1000.0 * (1.0 / hf[spec] - 1.0 / hf["dynamic"])
            print(f"{spec:<16} {ctx:>7} {o['decode_tok_s']:>13.1f} {hf[spec]:>9.1f} "
                  f"{o['decode_tok_s'] / hf[spec]:>9.2f}x {o['decode_vs_dynamic']:>15.3f}x "
                  f"{hf[spec] / hf['dynamic']:>10.3f}x {ov_ours:>23.2f} {ov_hf:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
