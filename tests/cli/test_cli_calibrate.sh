#!/usr/bin/env bash
# kvscope-cli calibrate on the embedded model and the shipped text: a config file with per-layer scales that the fp8
# cache then uses, and the seed's overflow on the same states. Exit 77 (skipped) without the model.
set -u
source "$(dirname "$0")/model_test_setup.sh"
"$cli" calibrate --model "$model" --text "$text" --cache fp8:granularity=head --ctx 96 --windows 2 --prompt 32 \
  -o "$tmp/c.json" 2> "$tmp/err" || { echo "FAIL calibrate rc=$?"; cat "$tmp/err"; fail=1; }
grep -q "seed (one scale per tensor, frozen on those 32 tokens)" "$tmp/err" || { echo "FAIL no seed report"; cat "$tmp/err"; fail=1; }
"$cli" calibrate --model "$model" --text "$text" --cache fp8 --method percentile --percentile 99.9 --ctx 96 \
  --windows 1 -o "$tmp/p.json" 2>/dev/null || { echo "FAIL calibrate percentile"; fail=1; }
"$py" - "$tmp/c.json" "$tmp/p.json" <<'PY' || fail=1
import json, sys
c, p = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
k, v = c["kvscope"]["key_scales"], c["kvscope"]["value_scales"]
assert len(k) == len(v) == 30 and all(len(x) == 3 for x in k + v), "one scale per KV head, 30 layers"
assert all(s > 0 for x in k + v for s in x)
cal = c["calibration"]
assert cal["tokens"] == 192 and cal["windows"] == 2 and cal["seed_overflow"]["prompt_tokens"] == 32, cal
assert cal["calibrated_overflow"]["non_finite"] == 0, "amax scales cannot overflow into NaN on their own text"
assert all(len(x) == 1 for x in p["kvscope"]["key_scales"]) and p["calibration"]["method"] == "percentile"
print("ok   calibrate: 30 layers x 3 heads; seed NaN", cal["seed_overflow"]["non_finite"])
PY
# The file works wherever a SPEC does, and the export says what transformers lacks.
"$cli" export --cache "$tmp/c.json" 2>&1 | grep -q "calibrated scales have no transformers equivalent" \
  || { echo "FAIL export note"; fail=1; }
out=$("$cli" calibrate --model "$model" --text "$text" --cache quanto 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "calibrate takes an fp8 config" <<<"$out" || { echo "FAIL non-fp8: $rc $out"; fail=1; }
out=$("$cli" calibrate --model "$model" --text /nonexistent.txt 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "cannot read text file" <<<"$out" || { echo "FAIL missing text: $rc $out"; fail=1; }
[ $fail -eq 0 ] && echo "ok   calibrate errors"
exit $fail
