#!/usr/bin/env bash
# P4 on the user's path: how much of the KV memory a cache saves shows up in the process's peak memory, through
# `generate` (the CLI's default path: the views' statistics on, as in the GUI) and through `bench --no-baseline` (no
# views), on the same prompt: the first BYTES bytes of the shipped evaluation text (about 7,900 tokens by default;
# repeated where BYTES asks for more than its 38,829 bytes).
#   P4 = (peak RSS of dynamic - peak RSS of the cache) / (KV stored by dynamic - KV stored by the cache)
# 1.0: every byte the cache saves is a byte the process does not use; below, something else (views, working buffers)
# takes part of it back. One process per run, so that no run inherits another's allocations.
#   tests/bench/bench_p4_views.sh [BUILD] [BYTES] [CONFIG ...]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
build=${1:-$REPO/build} bytes=${2:-25900}
shift $(( $# < 2 ? $# : 2 ))
configs=("$@")
[[ ${#configs[@]} -gt 0 ]] || configs=(fp8 quanto hqq kivi llamacpp)
cli=$build/app/kvscope-cli
model=${KVSCOPE_MODEL:-$HOME/.cache/kvscope/model/SmolLM2-135M-Instruct.Q4_1.gguf}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The text over and over where BYTES asks for more than it holds (a long-context run), cut at BYTES.
while [[ $(stat -c %s "$work/prompt.txt" 2>/dev/null || echo 0) -lt $bytes ]]; do
  cat "$REPO/resources/eval/coriolanus.txt" >> "$work/prompt.txt"
done
truncate -s "$bytes" "$work/prompt.txt"

# generate: peak RSS (KiB, /usr/bin/time) and the summary's KV stored bytes and prompt tokens.
run_generate() {
  /usr/bin/time -f '%M' -o "$work/rss" "$cli" generate --model "$model" --prompt-file "$work/prompt.txt" \
    --cache "$1" --max-new 16 --json 2>"$work/err" | tail -1 > "$work/summary.json" || true
  if [[ ! -s $work/summary.json ]] || ! grep -q '"prompt_tokens"' "$work/summary.json"; then
    echo "generate --cache $1 failed: $(tail -1 "$work/err")" >&2
    exit 1
  fi
  python3 - "$work/summary.json" "$work/rss" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
kv = s["kv_bytes"]
print(int(open(sys.argv[2]).read().split()[-1]) * 1024, kv["payload"] + kv["metadata"] + kv["residual"], s["prompt_tokens"])
PY
}

# bench: its own peak RSS and KV stored bytes at the same context, from the same text.
run_bench() {
  "$cli" bench --model "$model" --no-baseline --cache "$1" --text "$work/prompt.txt" --context "$2" --new 16 \
    --repeat 1 --json 2>/dev/null | tail -1 |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["peak_rss_bytes"], d["kv_stored_bytes"])'
}

read -r gpeak gkv tokens < <(run_generate dynamic)
read -r bpeak bkv < <(run_bench dynamic "$tokens")
echo "prompt: $tokens tokens; dynamic: generate peak $((gpeak >> 20)) MiB, bench peak $((bpeak >> 20)) MiB, KV $((gkv >> 20)) MiB"
printf '| %-10s | %9s | %12s | %12s | %14s | %11s |\n' cache "KV MiB" "bench peak" "generate peak" "P4 bench" "P4 generate"
printf '|%s|%s|%s|%s|%s|%s|\n' ------------ ----------- -------------- -------------- ---------------- -------------
for c in "${configs[@]}"; do
  read -r gp gk _ < <(run_generate "$c")
  read -r bp bk < <(run_bench "$c" "$tokens")
  python3 - "$c" "$gpeak" "$gkv" "$bpeak" "$bkv" "$gp" "$gk" "$bp" "$bk" <<'PY'
import sys
c = sys.argv[1]
gpeak, gkv, bpeak, bkv, gp, gk, bp, bk = map(int, sys.argv[2:])
p4 = lambda peak0, kv0, peak, kv: (peak0 - peak) / (kv0 - kv) if kv0 != kv else float("nan")
print(f"| {c:<10} | {gk / 2**20:9.1f} | {bp / 2**20:12.1f} | {gp / 2**20:12.1f} | {p4(bpeak, bkv, bp, bk):14.2f} | {p4(gpeak, gkv, gp, gk):11.2f} |")
PY
done
