#!/usr/bin/env bash
# The tuner's scan, resumed at each run's layer (the default) against each run from the first layer
# (`--scan-method full`, the scan as it ran before), in one window: the same command both ways, alternating, and the
# two scan files compared point by point.
#
#   tests/bench/bench_tune_scan.sh [--rounds R] [--threads N] [--model M] [--before CLI] [--no-full] [-- TUNE ARGS...]
#
# --before CLI: also time the scan of another kvscope-cli build (one from before `--scan-method`, e.g. a checkout of
# an earlier commit), as "before", in the same rounds, and compare its scan file too. --no-full: leave out
# `--scan-method full` (with --before, the comparison that matters, in a third of the time).
# Default: docs/cache-configs.md's documented scan (the shipped text, 2 windows of 256, prompt 128, steps of 32,
# llama.cpp's q8_0 and q4_0 as the candidates) on the embedded model, 1 round, LibTorch's default threads. TUNE
# ARGS replace the text, windows and candidates (e.g. `-- --text FILE --ctx 512 --windows 1 --cache quanto:nbits=4`).
# Prints each run's wall time, the median of each method, their ratio, and the largest relative difference of a
# point's mean KL (and whether the stored bytes are equal) between the two scans. Exit status: non-zero when a run
# fails or the scans differ by more than 1e-6 relative, never for a slow ratio.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CACHE=${KVSCOPE_CACHE:-$HOME/.cache/kvscope}
CLI=${KVSCOPE_CLI:-$REPO/build/app/kvscope-cli}
ROUNDS=1 THREADS=0 BEFORE= FULL=1 MODEL=$CACHE/model/SmolLM2-135M-Instruct.Q4_1.gguf
ARGS=(--text "$REPO/resources/eval/coriolanus.txt" --ctx 256 --windows 2 --prompt 128 --step 32
      --cache llamacpp:type_k=q8_0,type_v=q8_0 --cache llamacpp:type_k=q4_0,type_v=q4_0)
while (($#)); do
    case $1 in
        --rounds) ROUNDS=$2; shift 2 ;;
        --threads) THREADS=$2; shift 2 ;;
        --model) MODEL=$2; shift 2 ;;
        --before) BEFORE=$2; shift 2 ;;
        --no-full) FULL=0; shift ;;
        --) shift; ARGS=("$@"); break ;;
        -h|--help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
        *) echo "unknown option $1 (tune's own arguments go after --)" >&2; exit 2 ;;
    esac
done
[[ -x $CLI ]] || { echo "no kvscope-cli at $CLI (build the project, or set KVSCOPE_CLI)" >&2; exit 1; }
OUT=$(mktemp -d /tmp/bench_tune_scan.XXXXXX)

METHODS=(resume)
((FULL)) && METHODS=(full resume)
[[ -z $BEFORE ]] || { [[ -x $BEFORE ]] || { echo "no kvscope-cli at $BEFORE" >&2; exit 1; }; METHODS=(before "${METHODS[@]}"); }
for r in $(seq 1 "$ROUNDS"); do
    for method in "${METHODS[@]}"; do
        s=$(date +%s.%N)
        if [[ $method == before ]]; then cmd=("$BEFORE" tune); else cmd=("$CLI" tune --scan-method "$method"); fi
        "${cmd[@]}" --model "$MODEL" --threads "$THREADS" "${ARGS[@]}" --no-verify \
            --scan-out "$OUT/$method-$r.json" >"$OUT/$method-$r.out" 2>"$OUT/$method-$r.err" ||
            { echo "tune ($method) failed: $(tail -n 1 "$OUT/$method-$r.err")" >&2; exit 1; }
        e=$(date +%s.%N)
        echo "$method $(echo "$e - $s" | bc)" >>"$OUT/times"
        echo "round $r: $method $(echo "$e - $s" | bc | xargs printf '%.1f') s" >&2
    done
done

python3 - "$OUT" "$ROUNDS" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
t = {}
for line in open(f"{out}/times"):
    m, s = line.split()
    t.setdefault(m, []).append(float(s))
med = {m: statistics.median(v) for m, v in t.items()}
if "before" in med:
    print(f"scan of the --before build:                               {med['before']:7.1f} s (median of {rounds})")
if "full" in med:
    print(f"scan, each run from the first layer (--scan-method full): {med['full']:7.1f} s (median of {rounds})")
print(f"scan, each run resumed at its layer (the default):        {med['resume']:7.1f} s (median of {rounds})")
ratios = [f"against {m}: {med[m] / med['resume']:.2f}x" for m in ("full", "before") if m in med]
print("speed-up " + "; ".join(ratios) if ratios else "")
worst, bytes_equal, n = 0.0, True, 0
pairs = [(f"{m}-{r}", f"resume-{r}") for r in range(1, rounds + 1) for m in t if m != "resume"]
for ra, rb in pairs:
    a = json.load(open(f"{out}/{ra}.json"))
    b = json.load(open(f"{out}/{rb}.json"))
    key = lambda p: (p["candidate"], p["layer"], p["side"])
    pa, pb = {key(p): p for p in a["points"]}, {key(p): p for p in b["points"]}
    assert pa.keys() == pb.keys(), "the scans hold different points"
    bytes_equal &= a["reference_bytes"] == b["reference_bytes"]
    for k, p in pa.items():
        q = pb[k]
        bytes_equal &= p["stored_bytes"] == q["stored_bytes"]
        x, y = p["mean_kl"], q["mean_kl"]
        if x != y:
            worst = max(worst, abs(x - y) / max(abs(x), abs(y)))
        n += 1
print(f"{n} points compared with the resumed scan's: largest relative difference of a mean KL {worst:.3g}; "
      f"stored bytes {'equal' if bytes_equal else 'DIFFER'}")
sys.exit(0 if worst <= 1e-6 and bytes_equal else 1)
EOF
echo "raw outputs: $OUT" >&2
