#!/usr/bin/env bash
# kvscope-cli tune on the embedded model and the shipped text: the scan's per-layer KLs, each target's front and pick
# in its shape, the full run's bytes equal to the prediction, the scan file solved again, --save, clear errors.
# Exit 77 (skipped) without the model.
set -u
source "$(dirname "$0")/model_test_setup.sh"
cand='fp8:overflow=saturate'
"$cli" tune --model "$model" --text "$text" --ctx 48 --windows 1 --prompt 32 --step 16 --cache "$cand" \
  --max-kl 0.01 --scan-out "$tmp/scan.json" --save "$tmp/pick.json" --json > "$tmp/t.json" 2> "$tmp/err" \
  || { echo "FAIL tune rc=$?"; cat "$tmp/err"; fail=1; }
grep -q "tune: scan window 1/1, run 61/61" "$tmp/err" || { echo "FAIL progress"; cat "$tmp/err"; fail=1; }
# The same scan solved from its file, without the full runs: the same fronts and picks.
"$cli" tune --scan-in "$tmp/scan.json" --max-kl 0.01 --no-verify --json > "$tmp/again.json" 2> "$tmp/err2" \
  || { echo "FAIL tune --scan-in rc=$?"; cat "$tmp/err2"; fail=1; }
"$cli" export --format kvscope --cache "$tmp/pick.json" > "$tmp/pick_again.json" 2> "$tmp/err3" \
  || { echo "FAIL the saved pick does not load: $(cat "$tmp/err3")"; fail=1; }
"$py" - "$tmp/t.json" "$tmp/again.json" "$tmp/scan.json" <<'PY' || fail=1
import json, math, sys
t, again, scan = (json.load(open(p)) for p in sys.argv[1:4])
assert t["candidates"] == ["fp8:overflow=saturate"], t["candidates"]
assert len(t["scan"]) == 30 and scan["num_layers"] == 30 and len(scan["points"]) == 60, len(t["scan"])
for row in t["scan"]:
    for kl in row["keys_kl"] + row["values_kl"]:
        assert kl is not None and 0 <= kl < 1, row
# Every layer side saves the same bytes (fp8: 4 bytes a value down to 1, plus its scale).
saved = {t["reference_bytes"] - p["stored_bytes"] for p in scan["points"]}
assert len(saved) == 1 and saved.pop() > 0, saved
targets = {x["target"]: x for x in t["targets"]}
assert set(targets) == {"kvscope", "llamacpp", "vllm", "transformers", "modelopt"}, targets.keys()
for name, x in targets.items():
    front = x["front"]
    assert front[-1]["stored_bytes"] == t["reference_bytes"] and front[-1]["predicted_kl"] == 0, (name, front[-1])
    for a, b in zip(front, front[1:]):
        assert a["stored_bytes"] < b["stored_bytes"] and a["predicted_kl"] > b["predicted_kl"], (name, a, b)
    for a in front:  # effective bits per value: fp32's 32 times the share of the unquantized bytes
        assert abs(a["bits_per_value"] - 32 * a["stored_bytes"] / t["reference_bytes"]) < 1e-9, (name, a)
    assert front[-1]["bits_per_value"] == 32, (name, front[-1])
    p = x["pick"]
    assert p is not None and p["predicted_kl"] <= 0.01, (name, p)
    for a in front:  # the pick is the front's cheapest point within the budget
        if a["predicted_kl"] <= 0.01:
            assert a["stored_bytes"] >= p["stored_bytes"], (name, a, p)
    if "measured" in p:  # the full run holds exactly the predicted bytes; its KL is near the summed one
        m = p["measured"]
        assert m["stored_bytes"] == p["stored_bytes"], (name, m, p)
        assert math.isfinite(m["mean_kl"]) and m["mean_kl"] < 3 * 0.01, (name, m)
    else:
        assert p["config"] == "dynamic", (name, p)
    if name == "llamacpp":
        for side in ("keys", "values"):
            assert all(len(set(a[side])) == 1 for a in front), (name, side)
    if name in ("vllm", "transformers", "modelopt"):
        assert all(a["keys"] == a["values"] for a in front), name
    if name in ("transformers", "modelopt"):
        assert all(len(set(a["keys"])) == 1 for a in front), name
# Per layer and side is never worse than one config for all: fewer or equal bytes within the same budget.
assert targets["kvscope"]["pick"]["stored_bytes"] <= targets["transformers"]["pick"]["stored_bytes"]
assert targets["kvscope"]["pick"]["stored_bytes"] <= targets["vllm"]["pick"]["stored_bytes"]
assert targets["kvscope"]["pick"]["stored_bytes"] < t["reference_bytes"], targets["kvscope"]["pick"]
for x in again["targets"]:
    y = targets[x["target"]]
    assert x["front"] == y["front"], x["target"]
    assert {k: v for k, v in x["pick"].items() if k != "measured"} == {k: v for k, v in y["pick"].items() if k != "measured"}
assert again["settings"]["ctx"] == 48 and again["settings"]["text"].endswith("coriolanus.txt"), again["settings"]
PY
grep -q '"layers"\|"backend": "fp8"' "$tmp/pick_again.json" || { echo "FAIL saved pick: $(cat "$tmp/pick_again.json")"; fail=1; }

# The text table: the per-layer scan, each target's pick with its export, the picks side by side.
"$cli" tune --scan-in "$tmp/scan.json" --max-kl 0.01 --no-verify > "$tmp/table" 2>&1 || { echo "FAIL table"; fail=1; }
for want in "Mean KL with one layer side quantized" "Target llamacpp:" "pick:" "llamacpp: -ctk" "vs best uniform" \
            "transformers' QuantizedCache takes one config" "Target modelopt:"; do
  grep -q -- "$want" "$tmp/table" || { echo "FAIL table lacks '$want'"; cat "$tmp/table"; fail=1; }
done

# The probe objective: the cheapest transformers-shaped pick whose long-context probes answer as the unquantized
# cache does; an answer-KL budget of 0 no quantizing config meets (the probes read its quantized states).
probe_args=(--scan-in "$tmp/scan.json" --target transformers --no-verify --objective probes --probe-tasks passkey
            --probe-lengths 256 --probe-depths 50)
"$cli" tune "${probe_args[@]}" > "$tmp/ptable" 2> "$tmp/perr" || { echo "FAIL tune --min-agreement"; cat "$tmp/perr"; fail=1; }
for want in "Picks under probe agreement >= 100%" "probes: 1 of 1 answers the unquantized cache's (100%)"             "config: fp8:overflow=saturate"; do
  grep -q -- "$want" "$tmp/ptable" || { echo "FAIL probe table lacks '$want'"; cat "$tmp/ptable" "$tmp/perr"; fail=1; }
done
grep -q "tune: 1 probes answered through the unquantized cache" "$tmp/perr" || { echo "FAIL probe progress"; fail=1; }
"$cli" tune "${probe_args[@]}" --max-answer-kl 0 > "$tmp/ptable" 2> /dev/null || { echo "FAIL tune --max-answer-kl"; fail=1; }
grep -q "no assignment meets the budget" "$tmp/ptable" || { echo "FAIL answer-KL budget"; cat "$tmp/ptable"; fail=1; }

# Bad input: one line each, exit 2.
expect_error() {
  local what=$1; shift
  "$cli" tune "$@" > "$tmp/out" 2> "$tmp/e"
  local rc=$?
  [ $rc -eq 2 ] && grep -q -- "$what" "$tmp/e" && [ "$(wc -l < "$tmp/e")" -eq 1 ] \
    || { echo "FAIL tune $* (rc=$rc): $(cat "$tmp/e")"; fail=1; }
}
expect_error "tune needs --text" --cache fp8
expect_error "at least one candidate" --model "$model" --text "$text"
expect_error "unquantized cache the tuner compares against" --model "$model" --text "$text" --ctx 64 --windows 1 \
  --prompt 32 --cache dynamic
expect_error "is a per-layer config" --model "$model" --text "$text" --ctx 64 --windows 1 --prompt 32 \
  --cache 'layers=0:fp8;*:dynamic'
expect_error "drop --text" --scan-in "$tmp/scan.json" --text "$text"
echo '{"format": "kvscope-cache-config"}' > "$tmp/bad.json"
expect_error "not a kvscope tune scan" --scan-in "$tmp/bad.json"
expect_error "cannot read scan file" --scan-in "$tmp/none.json"
expect_error "--save needs a budget" --scan-in "$tmp/scan.json" --save "$tmp/x.json"
expect_error 'unknown tuning target `tensorrt`' --scan-in "$tmp/scan.json" --target tensorrt
expect_error '--probe-lengths: `4q` is not a token count' --scan-in "$tmp/scan.json" --min-agreement 1 --probe-lengths 4q
expect_error '--probe-tasks belongs to the probes objective: add --objective probes' --scan-in "$tmp/scan.json" \
  --max-kl 0.01 --probe-tasks passkey
"$cli" tune --scan-in "$tmp/scan.json" --min-agreement 1 --probe-lengths 16k > /dev/null 2> "$tmp/e"
[ $? -eq 2 ] && tail -1 "$tmp/e" | grep -q "past the model's trained context of 8192" \
  || { echo "FAIL --probe-lengths 16k: $(cat "$tmp/e")"; fail=1; }
exit $fail
