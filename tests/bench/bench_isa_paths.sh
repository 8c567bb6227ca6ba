#!/usr/bin/env bash
# One fused attention step at one context (kvscope_bench's attend/*: one layer, SmolLM2's 9 query / 3 KV heads of 64)
# for every cache format, on each instruction-set path this CPU runs (KVSCOPE_ISA=avx2, then avx512), rounds
# alternating in one window; prints each format's median µs and its ratio to `dynamic` on the same path (above 1.0:
# faster than the unquantized layer). With --isa-only, LibTorch and MKL keep their own AVX-512 code on the AVX2 rounds
# (by default they are held to AVX2 too: ATEN_CPU_CAPABILITY=avx2, MKL_ENABLE_INSTRUCTIONS=AVX2).
# Usage: tests/bench/bench_isa_paths.sh [--ctx 8192] [--rounds 3] [--bench build/tests/kvscope_bench] [--isa-only]
set -euo pipefail
ctx=8192 rounds=3 bench=build/tests/kvscope_bench isaOnly=0
while [ $# -gt 0 ]; do
  case $1 in
    --ctx) ctx=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --bench) bench=$2; shift 2 ;;
    --isa-only) isaOnly=1; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
paths=(avx2)
grep -m1 '^flags' /proc/cpuinfo | grep -qw avx512bw && paths+=(avx512)
grep -m1 '^model name' /proc/cpuinfo
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for r in $(seq 1 "$rounds"); do
  for isa in "${paths[@]}"; do
    env=(KVSCOPE_ISA=$isa OMP_WAIT_POLICY=passive)
    if [ "$isa" = avx2 ] && [ "$isaOnly" = 0 ]; then env+=(ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2); fi
    env "${env[@]}" "$bench" --benchmark_filter="attend/[^/]*/$ctx\$" --benchmark_min_time=0.3 \
      --benchmark_format=json >"$out/$isa.$r.json" 2>/dev/null
  done
done
python3 - "$out" "$ctx" "${paths[@]}" <<'PY'
import glob, json, statistics, sys
out, ctx, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
times = {}
for p in paths:
    for f in glob.glob(f"{out}/{p}.*.json"):
        for b in json.load(open(f))["benchmarks"]:
            name = b["name"][len("attend/"):-len(f"/{ctx}")]
            times.setdefault((p, name), []).append(b["real_time"])
names = list(dict.fromkeys(n for (_, n) in times))
head = "| config | " + " | ".join(f"{p} µs | {p} vs dynamic" for p in paths) + " |"
print(f"context {ctx}, {len(times[(paths[0], 'dynamic')])} rounds, medians")
print(head)
print("|" + "---|" * (1 + 2 * len(paths)))
for n in names:
    cells = []
    for p in paths:
        t = statistics.median(times[(p, n)])
        d = statistics.median(times[(p, "dynamic")])
        cells += [f"{t:.0f}", f"{d / t:.2f}x"]
    print(f"| {n} | " + " | ".join(cells) + " |")
PY
