#!/usr/bin/env python3
"""kvscope's `llamacpp` backend against llama.cpp itself: the mean KL divergence a cache type costs on the embedded
model and the shipped text, as `llama-perplexity --kl-divergence` prints it and as `kvscope-cli eval` measures it.

llama-perplexity scores the second half of each chunk of --ctx tokens after one forward of the whole chunk; kvscope
runs the same chunks with the first half as the prompt and the second half as one step (--prompt ctx/2 --step ctx/2,
so the same keys are stored in the cache and read by the same queries), with 8-bit activations for block-format
weights as llama.cpp's CPU backend computes them. Each side's reference is its own unquantized run (llama.cpp: an f16
cache; kvscope: the model's fp32). Passes when every config's kvscope mean KLD is within --tolerance (relative) of
llama.cpp's. Exit 77 (skipped) when llama-perplexity is not there.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

CONFIGS = [  # (-ctk, -ctv, rotation)
    ("q8_0", "q8_0", True), ("q8_0", "q8_0", False),
    ("q4_0", "q4_0", True), ("q4_0", "q4_0", False),
    ("q8_0", "q4_0", True), ("q8_0", "q4_0", False),
]


def llama_kld(exe, model, base, ctk, ctv, rot, threads, chunks, ctx):
    env = dict(os.environ)
    if not rot:
        env["LLAMA_ATTN_ROT_DISABLE"] = "1"
    out = subprocess.run([exe, "-m", model, "--kl-divergence-base", base, "--kl-divergence", "-c", str(ctx),
                          "--chunks", str(chunks), "-t", str(threads), "-ctk", ctk, "-ctv", ctv, "-fa", "on"],
                         env=env, capture_output=True, text=True)
    text = out.stdout + out.stderr
    m = re.search(r"Mean\s+KLD:\s+([0-9.eE+-]+)\s+±\s+([0-9.eE+-]+)", text)
    if out.returncode != 0 or not m:
        sys.exit(f"llama-perplexity -ctk {ctk} -ctv {ctv} failed (rc {out.returncode}):\n{text[-3000:]}")
    rotated = re.search(r"attn_rot_k = (\d)", text)
    if rotated and (rotated.group(1) == "1") != rot:
        sys.exit(f"llama-perplexity -ctk {ctk}: attn_rot_k = {rotated.group(1)}, expected rotation {rot}")
    return float(m.group(1)), float(m.group(2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-perplexity", required=True)
    ap.add_argument("--kvscope-cli", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tolerance", type=float, default=0.10)
    a = ap.parse_args()
    if not os.access(a.llama_perplexity, os.X_OK):
        print(f"skipped: no llama-perplexity at {a.llama_perplexity} (`make test-llamacpp` builds it with packaging/build_llamacpp.sh)")
        return 77
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "base.kld")
        out = subprocess.run([a.llama_perplexity, "-m", a.model, "-f", a.text, "-c", str(a.ctx), "--chunks",
                              str(a.chunks), "-t", str(a.threads), "-fa", "on", "--kl-divergence-base", base],
                             capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"llama-perplexity (base run) failed:\n{(out.stdout + out.stderr)[-3000:]}")
        theirs = [llama_kld(a.llama_perplexity, a.model, base, k, v, r, a.threads, a.chunks, a.ctx)
                  for k, v, r in CONFIGS]
    t1 = time.monotonic()
    specs = [f"llamacpp:type_k={k},type_v={v},rot={'auto' if r else 'off'}" for k, v, r in CONFIGS]
    cmd = [a.kvscope_cli, "eval", "--model", a.model, "--text", a.text, "--ctx", str(a.ctx), "--windows",
           str(a.chunks), "--prompt", str(a.ctx // 2), "--step", str(a.ctx // 2), "--activations", "q8",
           "--threads", str(a.threads), "--json"]
    for s in specs:
        cmd += ["--cache", s]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"kvscope-cli eval failed:\n{out.stderr[-3000:]}")
    t2 = time.monotonic()
    print(f"llama-perplexity: {t1 - t0:.0f} s for the base and {len(CONFIGS)} configs; kvscope-cli eval: {t2 - t1:.0f} s")
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    ours = [r["kld"]["mean"] for r in rows[1:]]  # the reference first, then the configs in the order given
    if len(ours) != len(specs):
        sys.exit(f"kvscope-cli eval wrote {len(rows)} rows for {len(specs)} configs")
    failed = False
    print(f"{'config':<48} {'llama.cpp mean KLD':>24} {'kvscope mean KLD':>24} {'rel diff':>9}")
    for spec, (t, terr), mine in zip(specs, theirs, ours):
        m, merr = mine["value"], mine["stderr"]
        rel = abs(m - t) / t
        ok = rel <= a.tolerance
        failed |= not ok
        print(f"{spec:<48} {t:>12.6f} ± {terr:<9.6f} {m:>12.6f} ± {merr:<9.6f} {rel:>8.1%}{'' if ok else '  FAIL'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
