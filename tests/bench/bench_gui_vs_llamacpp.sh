#!/usr/bin/env bash
# Decode tok/s of the GUI, as a user runs it (every dock live, the default arithmetic: `--activations auto`), against
# llama-bench's tg on the same GGUF with the same thread count. Rounds alternate (llama-bench, GUI without the shadow
# reference, GUI as it starts: with the shadow, which runs the model a second time per token) so that all three see
# the same load; medians are compared.
#   tests/bench/bench_gui_vs_llamacpp.sh [BUILD] [MODEL] [SPEC] [NEW] [ROUNDS]
# SPEC: the GUI's cache (default `dynamic`, the unquantized cache, as llama-bench's f16 cache is; the GUI's own
# default backend is fp8). llama.cpp comes from packaging/build_llamacpp.sh (built when missing).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
build=${1:-$REPO/build}
model=${2:-$HOME/.cache/kvscope/model/SmolLM2-135M-Instruct.Q4_1.gguf}
spec=${3:-dynamic} new=${4:-96} rounds=${5:-3}
threads=${KVSCOPE_THREADS:-$(nproc)}
bin=$(bash "$REPO/packaging/build_llamacpp.sh" | tail -1)
gui() {
  OMP_NUM_THREADS=$threads xvfb-run -a -s "-screen 0 1600x1000x24" "$build/app/kvscope" --model "$model" \
    --autorun "$spec" --max-new "$new" "$@" --quit 2>/dev/null | sed -n 's/.*decode \([0-9.]*\) tok\/s.*/\1/p'
}
lb=() gs=() gn=()
for ((i = 0; i < rounds; i++)); do
  l=$("$bin/llama-bench" -m "$model" -p 0 -n "$new" -t "$threads" -r 1 -o csv 2>/dev/null |
      python3 -c 'import csv,sys; r=list(csv.DictReader(sys.stdin)); print(r[-1]["avg_ts"])')
  n=$(gui --no-shadow)
  s=$(gui)
  lb+=("$l") gn+=("$n") gs+=("$s")
  echo "round $i: llama-bench tg$new $l tok/s; GUI $spec $n tok/s without the shadow, $s with it"
done
python3 - "${lb[*]}" "${gn[*]}" "${gs[*]}" "$spec" "$(basename "$model")" <<'PY'
import statistics, sys
l, n, s = (statistics.median(float(x) for x in a.split()) for a in sys.argv[1:4])
print(f"{sys.argv[5]}: median decode tok/s: llama-bench {l:.1f}; GUI ({sys.argv[4]}) {n:.1f} without the shadow "
      f"({n / l:.2f}x), {s:.1f} with it ({s / l:.2f}x)")
PY
