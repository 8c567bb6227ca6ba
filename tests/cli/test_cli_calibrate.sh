#!/usr/bin/env bash
# kvscope-cli calibrate on the embedded model and the shipped text: a config file with per-layer scales that the fp8
# cache then uses, and the seed's overflow on the same states; the model doctor on the same model and text. Exit 77
# (skipped) without the model.
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
# vLLM's checkpoint form of the scales: a safetensors file the safetensors package reads, one tensor per layer and
# side named as vLLM loads them, scalar (per tensor) or [heads] (per head), plus the quantization_config to merge.
"$cli" export --format vllm --cache "$tmp/c.json" --scales "$tmp/c.safetensors" > "$tmp/flags" 2> "$tmp/err" \
  || { echo "FAIL export --scales"; cat "$tmp/err"; fail=1; }
grep -q "Flash-Attention 3 backend only" "$tmp/err" && grep -q '"quantization_config": {"quant_method": "compressed-tensors"' "$tmp/err" \
  || { echo "FAIL export --scales notes"; cat "$tmp/err"; fail=1; }
"$cli" export --format vllm --cache "$tmp/p.json" --scales "$tmp/p.safetensors" >/dev/null 2>&1 || { echo "FAIL export p"; fail=1; }
"$py" - "$tmp" <<'PY' || fail=1
import json, sys
from safetensors.numpy import load_file
t = sys.argv[1]
for name, shape in (("c", (3,)), ("p", ())):
    cfg, st = json.load(open(f"{t}/{name}.json"))["kvscope"], load_file(f"{t}/{name}.safetensors")
    assert len(st) == 60, len(st)
    for l in range(30):
        for side, key in (("k", "key_scales"), ("v", "value_scales")):
            x = st[f"model.layers.{l}.self_attn.{side}_scale"]
            assert x.dtype.name == "float32" and x.shape == shape, (x.dtype, x.shape)
            assert x.reshape(-1).tolist() == cfg[key][l], (l, side)
print("ok   export --scales: vLLM's k_scale/v_scale tensors, per head and per tensor")
PY
grep -q -- "--kv-cache-dtype fp8_e4m3" "$tmp/flags" || { echo "FAIL vllm flags"; cat "$tmp/flags"; fail=1; }
out=$("$cli" export --format hf --cache "$tmp/c.json" --scales "$tmp/x.safetensors" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "use it with --format vllm" <<<"$out" || { echo "FAIL --scales hf: $rc $out"; fail=1; }
out=$("$cli" export --format vllm --cache fp8 --scales "$tmp/x.safetensors" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "from a calibrated fp8 config" <<<"$out" && [ ! -e "$tmp/x.safetensors" ] \
  || { echo "FAIL --scales uncalibrated: $rc $out"; fail=1; }
out=$("$cli" calibrate --model "$model" --text "$text" --cache quanto 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "calibrate takes an fp8 config" <<<"$out" || { echo "FAIL non-fp8: $rc $out"; fail=1; }
out=$("$cli" calibrate --model "$model" --text /nonexistent.txt 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "cannot read text file" <<<"$out" || { echo "FAIL missing text: $rc $out"; fail=1; }
[ $fail -eq 0 ] && echo "ok   calibrate errors"

# doctor: the shipped text by default; a row per layer and a verdict; --json for scripts; bad options in one line.
out=$("$cli" doctor --model "$model" --ctx 128 2>/dev/null); rc=$?
[ $rc -eq 0 ] && grep -q "GQA 3:1" <<<"$out" && grep -q "^verdict: " <<<"$out" \
  && [ "$(grep -cE '^ +[0-9]+ ' <<<"$out")" -eq 30 ] || { echo "FAIL doctor: $rc $out"; fail=1; }
"$cli" doctor --model "$model" --text "$text" --ctx 128 --json 2>/dev/null > "$tmp/d.json" \
  && python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['model']['head_dim']==64 and len(d['layers'])==30 and d['tokens']==128" "$tmp/d.json" \
  || { echo "FAIL doctor --json"; fail=1; }
out=$("$cli" doctor --model "$model" --base fp8 2>&1); rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q "base config must be one llamacpp config" <<<"$out" \
  || { echo "FAIL doctor --base: $rc $out"; fail=1; }
out=$("$cli" doctor --model "$model" --outlier-ratio 0.5 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "ratios must be above 1" <<<"$out" || { echo "FAIL doctor ratio: $rc $out"; fail=1; }
[ $fail -eq 0 ] && echo "ok   doctor"
exit $fail
