#!/usr/bin/env bash
# kvscope-cli's model commands on the embedded model: output a user (or a script) can rely on, and clear errors.
# Exit 77 (ctest: skipped) when the model is not there.
set -u
source "$(dirname "$0")/model_test_setup.sh"

# generate --json: one object per step, then a summary; greedy is deterministic.
"$cli" generate --model "$model" --chat --prompt "Name three colours." --max-new 8 --cache fp8:overflow=saturate \
  --shadow --json > "$tmp/g1.jsonl" 2> "$tmp/err" || { echo "FAIL generate rc=$?"; cat "$tmp/err"; fail=1; }
"$cli" generate --model "$model" --chat --prompt "Name three colours." --max-new 8 --cache fp8:overflow=saturate \
  --json > "$tmp/g2.jsonl" 2>/dev/null
"$py" - "$tmp/g1.jsonl" "$tmp/g2.jsonl" <<'PY' || fail=1
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
steps, summary = a[:-1], a[-1]
assert summary["summary"] and summary["new_tokens"] == len(steps) > 0, summary
assert all(s["kl"] is not None and s["kl"] >= 0 for s in steps), "shadow KL missing"
assert [s["token"] for s in steps] == [s["token"] for s in b[:-1]], "greedy runs differ"
assert summary["kv_bytes"]["payload"] * 4 == summary["kv_bytes"]["unquantized"], summary["kv_bytes"]
print("ok   generate --json:", len(steps), "steps,", repr(summary["text"]))
PY

# Sampling with a seed is reproducible.
s1=$("$cli" generate --model "$model" --prompt "Once upon a time" --max-new 12 --sample --temperature 0.8 --top-p 0.9 --seed 5 2>/dev/null)
s2=$("$cli" generate --model "$model" --prompt "Once upon a time" --max-new 12 --sample --temperature 0.8 --top-p 0.9 --seed 5 2>/dev/null)
[ "$s1" = "$s2" ] && [ -n "$s1" ] && echo "ok   seeded sampling" || { echo "FAIL seeded sampling: '$s1' vs '$s2'"; fail=1; }

# compare --csv: the baseline first, one row per config.
"$cli" compare --model "$model" --prompt "The capital of France is" --max-new 6 --cache fp8 --cache quanto:nbits=2 \
  --csv > "$tmp/c.csv" 2>"$tmp/err" || { echo "FAIL compare"; cat "$tmp/err"; fail=1; }
[ "$(wc -l < "$tmp/c.csv")" -eq 4 ] && grep -q '^"dynamic"' "$tmp/c.csv" && echo "ok   compare --csv" || { echo "FAIL compare csv"; cat "$tmp/c.csv"; fail=1; }

# sweep: results appended as they finish, best under a budget.
"$cli" sweep --model "$model" --prompt "The capital of France is" --max-new 4 --grid 'quanto:nbits=2,4' \
  --max-kl 100 --out "$tmp/s.jsonl" > "$tmp/s.txt" 2>&1 || { echo "FAIL sweep"; cat "$tmp/s.txt"; fail=1; }
[ "$(wc -l < "$tmp/s.jsonl")" -eq 2 ] && grep -q 'best under' "$tmp/s.txt" && echo "ok   sweep" || { echo "FAIL sweep output"; cat "$tmp/s.txt"; fail=1; }

# Bad input: one line, exit 2, nothing loaded for a bad SPEC.
check() {
  local name=$1 text=$2; shift 2
  out=$("$@" 2>&1); rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$text" <<<"$out" && [ "$(wc -l <<<"$out")" -eq 1 ]; then echo "ok   $name"; else echo "FAIL $name: rc $rc: $out"; fail=1; fi
}
check bad-model 'not found' "$cli" generate --model /nonexistent.gguf --prompt hi
check bad-spec 'unknown cache backend' "$cli" generate --model "$model" --prompt hi --cache int3
printf 'this is a text file pretending to be a model, long enough' > "$tmp/bad.gguf"
check bad-gguf 'not a GGUF file' "$cli" generate --model "$tmp/bad.gguf" --prompt hi
check empty-prompt 'empty prompt' "$cli" generate --model "$model" --prompt ""
check bad-grid 'bad grid axis' "$cli" sweep --model "$model" --prompt hi --grid 'quanto:nbits'
exit $fail
