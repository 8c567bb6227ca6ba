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
print("ok   eval --json:", [(r["config"][:24], round(r["perplexity"], 3), r.get("mean_kl")) for r in rows])
PY
out=$("$cli" eval --model "$model" --text "$text" --cache quanto:nbits=3 2>&1); rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q "nbits" <<<"$out" || { echo "FAIL bad spec: $rc $out"; fail=1; }
out=$("$cli" eval --model "$model" --text "$text" --cache 'layers=0-40:fp8' 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "reach past the model's 30 layers" <<<"$out" || { echo "FAIL layers past the model: $rc $out"; fail=1; }
out=$("$cli" eval --model "$model" --text "$text" --cache fp8 --ctx 64 --prompt 64 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "leaves nothing to score" <<<"$out" || { echo "FAIL prompt >= ctx: $rc $out"; fail=1; }
[ $fail -eq 0 ] && echo "ok   eval errors"
exit $fail
