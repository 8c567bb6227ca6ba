#!/usr/bin/env bash
# Sharded runs on the embedded model: `eval`, `sweep` and `tune` split in 3 shards and joined by `kvscope-cli merge`
# give what one unsharded run gives (eval's table and CSV and tune's scan file byte for byte; the JSON lines after
# sorting, less the timing fields: seconds, tok/s). The shards run through the shipped cluster examples: the Slurm
# array script in a local loop (its SLURM_ARRAY_* variables set as sbatch sets them), the Ray driver with --local.
# Bad shards and bad merges: one line each. Exit 77 (skipped) without the model.
set -u
source "$(dirname "$0")/model_test_setup.sh"
cluster="$here/../../packaging/cluster"
export KVSCOPE_CLI=$cli
# The unsharded runs take the shards' thread counts: a different count may change the last bits of a sum.
# The Slurm array's tasks 0..2 of --array=0-2, one after another.
slurm_loop() {
  local out=$1; shift
  for id in 0 1 2; do
    SLURM_ARRAY_TASK_ID=$id SLURM_ARRAY_TASK_MIN=0 SLURM_ARRAY_TASK_COUNT=3 SLURM_CPUS_PER_TASK=2 \
      bash "$cluster/kvscope-shard.sbatch" "$out" "$@" 2> "$tmp/slurm.err" \
      || { echo "FAIL slurm task $id: $*"; cat "$tmp/slurm.err"; fail=1; }
  done
}
same_json_lines() {  # $1 $2: JSON lines equal after sorting, less the timing fields
  "$py" - "$1" "$2" <<'PY' || { echo "FAIL JSON lines differ: $1 $2"; fail=1; }
import json, sys
def rows(p):
    out = []
    for line in open(p):
        r = json.loads(line)
        for k in ("seconds", "prefill_tok_s", "decode_tok_s"):
            r.pop(k, None)
        out.append(json.dumps(r, sort_keys=True))
    return sorted(out)
a, b = rows(sys.argv[1]), rows(sys.argv[2])
assert len(a) > 1 and a == b, (len(a), len(b))
PY
}

# eval: four configs, a shard of two and two of one; the reference in shard 1.
eval_args=(--model "$model" --text "$text" --ctx 48 --windows 1 --prompt 32 --step 16 --cache fp8:overflow=saturate
           --cache quanto:nbits=4 --cache quanto:nbits=2 --cache 'llamacpp:type_k=q4_0,type_v=q4_0')
"$cli" eval "${eval_args[@]}" --threads 2 > "$tmp/eval.txt" 2>/dev/null || { echo "FAIL eval"; fail=1; }
"$cli" eval "${eval_args[@]}" --threads 2 --csv > "$tmp/eval.csv" 2>/dev/null
"$cli" eval "${eval_args[@]}" --threads 2 --json > "$tmp/eval.json" 2>/dev/null
slurm_loop "$tmp/ev" eval "${eval_args[@]}"
[ "$(ls "$tmp/ev")" = "$(printf 'shard-1-of-3.jsonl\nshard-2-of-3.jsonl\nshard-3-of-3.jsonl')" ] \
  || { echo "FAIL slurm shard files: $(ls "$tmp/ev")"; fail=1; }
shards=("$tmp/ev/shard-3-of-3.jsonl" "$tmp/ev/shard-1-of-3.jsonl" "$tmp/ev/shard-2-of-3.jsonl")  # any order
"$cli" merge "${shards[@]}" > "$tmp/m.txt" 2>/dev/null && cmp "$tmp/m.txt" "$tmp/eval.txt" \
  || { echo "FAIL eval table merged != unsharded"; diff "$tmp/m.txt" "$tmp/eval.txt"; fail=1; }
"$cli" merge "${shards[@]}" --csv > "$tmp/m.csv" 2>/dev/null && cmp "$tmp/m.csv" "$tmp/eval.csv" \
  || { echo "FAIL eval CSV merged != unsharded"; fail=1; }
"$cli" merge "${shards[@]}" --json > "$tmp/m.json" 2>/dev/null || { echo "FAIL merge --json"; fail=1; }
same_json_lines "$tmp/m.json" "$tmp/eval.json"

# sweep, through the Ray driver's local mode: a baseline and three configs, the best under a budget.
sweep_args=(--model "$model" --prompt "The quick brown fox" --max-new 6 --grid 'quanto:nbits=2,4'
            --grid fp8:overflow=saturate)
"$cli" sweep "${sweep_args[@]}" --threads 1 --json --max-kl 0.5 > "$tmp/sweep.json" 2>/dev/null || { echo "FAIL sweep"; fail=1; }
"$py" "$cluster/ray_shards.py" --shards 3 --out "$tmp/sw" --cpus 1 --local -- sweep "${sweep_args[@]}" \
  > "$tmp/ray.txt" 2> "$tmp/ray.err" || { echo "FAIL ray --local"; cat "$tmp/ray.err"; fail=1; }
grep -q "sweep: 3 configs + the unquantized baseline" "$tmp/ray.txt" || { echo "FAIL ray table"; cat "$tmp/ray.txt"; fail=1; }
"$cli" merge "$tmp"/sw/shard-*-of-3.jsonl --json --max-kl 0.5 > "$tmp/m.json" 2>/dev/null \
  || { echo "FAIL sweep merge"; fail=1; }
same_json_lines "$tmp/m.json" "$tmp/sweep.json"
grep -q '"best":' "$tmp/m.json" || { echo "FAIL sweep merge without its best"; fail=1; }

# tune: the scan's 60 runs in three shards; the merged scan file is the unsharded one and solves the same.
tune_args=(--model "$model" --text "$text" --ctx 40 --windows 1 --prompt 32 --step 8 --cache fp8:overflow=saturate)
"$cli" tune "${tune_args[@]}" --threads 2 --scan-out "$tmp/scan.json" > /dev/null 2>&1 || { echo "FAIL tune"; fail=1; }
slurm_loop "$tmp/tu" tune "${tune_args[@]}"
"$cli" merge "$tmp"/tu/shard-*-of-3.jsonl --out "$tmp/merged-scan.json" 2>/dev/null \
  && cmp "$tmp/merged-scan.json" "$tmp/scan.json" || { echo "FAIL tune scan merged != unsharded"; fail=1; }
"$cli" tune --scan-in "$tmp/merged-scan.json" --max-kl 0.01 --no-verify > "$tmp/pick.txt" 2>&1 \
  && grep -q "Picks under mean KL <= 0.01" "$tmp/pick.txt" || { echo "FAIL merged scan does not solve"; fail=1; }

# Bad input: one line each, exit 2.
expect_error() {
  local what=$1; shift
  "$cli" "$@" > "$tmp/out" 2> "$tmp/e"
  local rc=$?
  [ $rc -eq 2 ] && grep -q -- "$what" "$tmp/e" && [ "$(grep -vc '^merge: ' "$tmp/e")" -eq 1 ] \
    || { echo "FAIL $* (rc=$rc): $(cat "$tmp/e")"; fail=1; }
}
expect_error "expected I/N with 1 <= I <= N" eval "${eval_args[@]}" --shard 4/3 --out "$tmp/x.jsonl"
expect_error "expected I/N with 1 <= I <= N" sweep "${sweep_args[@]}" --shard 0/2 --out "$tmp/x.jsonl"
expect_error "5 shards for 4 configs" eval "${eval_args[@]}" --shard 1/5 --out "$tmp/x.jsonl"
expect_error "writes a shard file: give --scan-out FILE" tune "${tune_args[@]}" --shard 1/3
expect_error "drop --max-kl" tune "${tune_args[@]}" --shard 1/3 --scan-out "$tmp/x.jsonl" --max-kl 0.1
expect_error "shard 2/3 is missing (given: 1/3, 3/3)" merge "$tmp/ev/shard-1-of-3.jsonl" "$tmp/ev/shard-3-of-3.jsonl"
expect_error "are both shard 1/3" merge "$tmp/ev/shard-1-of-3.jsonl" "$tmp/ev/shard-1-of-3.jsonl"
expect_error "not one run" merge "$tmp/sw/shard-1-of-3.jsonl" "$tmp/ev/shard-2-of-3.jsonl" \
  "$tmp/ev/shard-3-of-3.jsonl"
# Shards of another run (other configs) with the same split.
"$cli" eval "${eval_args[@]:0:12}" --cache hqq:nbits=4 --cache quanto:nbits=4 --cache quanto:nbits=2 --cache fp8 --shard 2/3 \
  --out "$tmp/other-2.jsonl" 2>/dev/null
expect_error 'not a shard of the same run as .*its "configs" is' merge "$tmp/ev/shard-1-of-3.jsonl" \
  "$tmp/other-2.jsonl" "$tmp/ev/shard-3-of-3.jsonl"
head -n 2 "$tmp/tu/shard-2-of-3.jsonl" > "$tmp/cut.jsonl"  # a task killed after its first record
expect_error "holds 1 of its 20 records: that shard did not finish" merge "$tmp/tu/shard-1-of-3.jsonl" "$tmp/cut.jsonl" \
  "$tmp/tu/shard-3-of-3.jsonl"
expect_error "not a kvscope shard file" merge "$tmp/scan.json"
expect_error "cannot read shard file" merge "$tmp/none.jsonl"
expect_error "merged into a scan file" merge "$tmp"/tu/shard-*-of-3.jsonl --json
SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_TASK_COUNT=3 bash "$cluster/kvscope-shard.sbatch" "$tmp/z" generate --prompt hi \
  2> "$tmp/e" && { echo "FAIL slurm script ran generate"; fail=1; }
grep -q "does not shard" "$tmp/e" || { echo "FAIL slurm script's message: $(cat "$tmp/e")"; fail=1; }
exit $fail
