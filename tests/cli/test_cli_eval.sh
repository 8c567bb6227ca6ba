#!/usr/bin/env bash
# kvscope-cli eval on the embedded model and the shipped text: figures per config, the reference first, progress on
# stderr, clear errors. Exit 77 (skipped) without the model.
set -u
source "$(dirname "$0")/model_test_setup.sh"
"$cli" eval --model "$model" --text "$text" --ctx 96 --windows 1 --prompt 32 --step 8 --json \
  --cache fp8:overflow=saturate --cache kivi:nbits=4,q_group_size=16,residual_length=16,sink=4 --cache dynamic \
  --cache 'layers=0-1:dynamic;*:K=fp8:granularity=head,overflow=saturate,V=quanto:nbits=4,q_group_size=32' \
  > "$tmp/e.jsonl" 2> "$tmp/err" || { echo "FAIL eval rc=$?"; cat "$tmp/err"; fail=1; }
grep -q "eval: window 1/1, config 5/5" "$tmp/err" || { echo "FAIL progress"; cat "$tmp/err"; fail=1; }
"$py" - "$tmp/e.jsonl" <<'PY' || fail=1
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 5 and rows[0]["reference"] and not any(r["reference"] for r in rows[1:]), rows
ref = rows[0]
assert ref["scored_tokens"] == 96 - 32 and math.isfinite(ref["perplexity"]) and ref["perplexity"] > 1
fp8, kivi, dyn, mixed = rows[1:]
# A dynamic cache fed the same steps is the reference: nothing to lose.
assert abs(dyn["perplexity"] - ref["perplexity"]) < 1e-3 * ref["perplexity"] and dyn["mean_kl"] < 1e-6, dyn
assert dyn["top1_agreement"] == 1.0 and abs(dyn["compression_ratio"] - 1.0) < 1e-9
for r in (fp8, kivi, mixed):
    assert 0 < r["mean_kl"] < 1 and r["max_kl"] >= r["mean_kl"] and 0.5 < r["top1_agreement"] <= 1, r
    assert r["compression_ratio"] > 1, r
assert 3.99 < fp8["compression_ratio"] <= 4.0, fp8  # fp32 model, one byte a value (+ the scales)
assert mixed["config"].startswith("layers=0-1:dynamic;*:K=fp8"), mixed["config"]
# Scored tokens that read quantized states: none through dynamic; every step after the prompt through fp8 (its first
# update, the prompt, reads the states as they came).
assert dyn["quantized_reads"] == 0 and fp8["quantized_reads"] == 63, (dyn["quantized_reads"], fp8["quantized_reads"])
assert 0 < kivi["quantized_reads"] <= 63 and 0 < mixed["quantized_reads"] <= 63, (kivi, mixed)
# llama-perplexity's figures on the same tokens: the mean and maximum are the table's, the quantiles in order, the
# same top p is top-1, the PPL ratio is the perplexities'; the KL against context length is null over the prompt
# and averages to the mean (one window: one token a position).
for r in (fp8, kivi, mixed, dyn):
    k = r["kld"]
    # (mean_kl sums the float32 KLs, kld sums them in double)
    assert k["tokens"] == 64 and abs(k["mean"]["value"] - r["mean_kl"]) <= 1e-6 * max(r["mean_kl"], 1e-9), (k, r)
    assert k["mean"]["stderr"] >= 0 and k["median"] <= k["p99"] <= k["p99_9"] <= k["max"], k
    assert abs(k["max"] - r["max_kl"]) <= 1e-12 + 1e-9 * r["max_kl"] and k["same_top_p"]["value"] == r["top1_agreement"], k
    assert abs(k["ppl_ratio"]["value"] - r["perplexity"] / ref["perplexity"]) < 1e-6, (k, r["perplexity"])
    assert 0 <= k["rms_delta_p"]["value"] < 1, k
    pos = r["kl_by_position"]
    assert len(pos) == 96 and all(x is None for x in pos[:32]) and all(x is not None for x in pos[32:]), pos
    assert abs(sum(pos[32:]) / 64 - r["mean_kl"]) <= 1e-6 * max(r["mean_kl"], 1e-9), (pos, r["mean_kl"])
assert dyn["kld"]["rms_delta_p"]["value"] < 1e-6 and kivi["kld"]["rms_delta_p"]["value"] > 0, (dyn["kld"], kivi["kld"])
print("ok   eval --json:", [(r["config"][:24], round(r["perplexity"], 3), r.get("mean_kl")) for r in rows])
PY
# --csv: a header, the reference, then the config, with the figures --json gives.
"$cli" eval --model "$model" --text "$text" --ctx 96 --windows 1 --prompt 32 --step 8 --csv \
  --cache fp8:overflow=saturate > "$tmp/e.csv" 2> "$tmp/err" || { echo "FAIL eval --csv rc=$?"; cat "$tmp/err"; fail=1; }
"$py" - "$tmp/e.csv" "$tmp/e.jsonl" <<'PY' || fail=1
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
fp8 = [json.loads(l) for l in open(sys.argv[2])][1]
assert len(rows) == 2 and rows[0]["reference"] == "1" and rows[0]["mean_kl"] == "", rows
r = rows[1]
assert r["config"] == fp8["config"] and r["reference"] == "0", r
for col, want in (("mean_kl", fp8["kld"]["mean"]["value"]), ("kl_99_9", fp8["kld"]["p99_9"]),
                  ("rms_delta_p", fp8["kld"]["rms_delta_p"]["value"]), ("ppl_ratio", fp8["kld"]["ppl_ratio"]["value"])):
    assert abs(float(r[col]) - want) <= 1e-7 * max(abs(want), 1e-12), (col, r[col], want)
print("ok   eval --csv:", r["config"], r["mean_kl"], r["same_top_p"], r["ppl_ratio"])
PY
out=$("$cli" eval --model "$model" --text "$text" --cache fp8 --csv --json 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q -- "--json excludes --csv" <<<"$out" || { echo "FAIL --csv --json: $rc $out"; fail=1; }
out=$("$cli" eval --model "$model" --text "$text" --cache quanto:nbits=3 2>&1); rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q "nbits" <<<"$out" || { echo "FAIL bad spec: $rc $out"; fail=1; }
out=$("$cli" eval --model "$model" --text "$text" --cache 'layers=0-40:fp8' 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "reach past the model's 30 layers" <<<"$out" || { echo "FAIL layers past the model: $rc $out"; fail=1; }
out=$("$cli" eval --model "$model" --text "$text" --cache fp8 --ctx 64 --prompt 64 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "leaves nothing to score" <<<"$out" || { echo "FAIL prompt >= ctx: $rc $out"; fail=1; }
[ $fail -eq 0 ] && echo "ok   eval errors"
exit $fail
