#!/usr/bin/env bash
# kvscope on a lent GPU machine, in one run: configure core + kvscope-cli (no Qt) against that machine's own PyTorch
# (its python3 with torch, REFERENCE §7) with the CUDA kernels, build, run `ctest -L gpu`, the GPU kernel benchmarks,
# then the model on the device (`kvscope-cli --device cuda`) on a model that travels there: greedy tokens CPU against
# CUDA (dynamic, fp32), fused against reference attention per backend (eval: perplexity and KL), and `bench` at 2k, 8k
# and 32k tokens with bf16 weights and the device's peak memory (fp8 decode over the bf16 cache's, P4); then write a
# short report (report.md) and the raw outputs. Nothing is installed and nothing is fetched: header-only and small compiled dependencies the machine lacks
# travel as .deb files (tests/gpu/fetch-deps.sh, run beforehand where there is network) and are unpacked into a
# private prefix inside the build directory.
#
# For a lent machine: here (with network) tests/gpu/fetch-deps.sh and tests/gpu/make_device_model.py (the embedded
# model's first 4 layers, ~39 MB: the whole model is over what travels), then run `tests/gpu/device-check.sh` there
# with .devdeps carried along (it is git-ignored); the report and raw outputs land in $OUT.
#
#   tests/gpu/device-check.sh [--out DIR] [--build DIR] [--python PY] [--deps DIR] [--model PATH] [--arch SM]
#                             [--jobs N] [--build-type T] [--no-gpu]
#
#   --out DIR     report and raw outputs (default: $OUT if set, else <build>/report)
#   --build DIR   build directory (default: <repo>/build-device)
#   --python PY   Python whose torch is LibTorch (default: $KVSCOPE_PYTHON, else python3)
#   --deps DIR    .deb files to unpack and build against (default: <repo>/.devdeps when it exists)
#   --model PATH  model for the device runs (default: .devdeps/smollm2-4-layers.gguf, else $KVSCOPE_MODEL, else
#                 ~/.cache/kvscope/model/SmolLM2-...gguf)
#   --arch SM     CUDA architectures (default: 90, the H200; "native" asks the device)
#   --jobs N      build jobs (default: all cores); --build-type T: CMake build type (default Release)
#   --no-gpu      CPU-only machine: build what nvcc allows (KVSCOPE_CUDA=AUTO), expect the gpu tests to skip, run
#                 the model steps on the CPU, briefly; checks the script itself
# Exit status: 0 when everything built and no test failed (skips allowed), 1 otherwise.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build-device
out=${OUT:-}
python=${KVSCOPE_PYTHON:-}
deps=""
model=${KVSCOPE_MODEL:-$HOME/.cache/kvscope/model/SmolLM2-135M-Instruct.Q4_1.gguf}
[[ -f $root/.devdeps/smollm2-4-layers.gguf ]] && model=$root/.devdeps/smollm2-4-layers.gguf
arch=90
jobs=$(nproc)
btype=Release
gpu=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    --deps) deps=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --arch) arch=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --build-type) btype=$2; shift 2 ;;
    --no-gpu) gpu=0; shift ;;
    -h|--help) sed -n '2,/^set -uo/{/^#/p}' "$0"; exit 0 ;;
    *) echo "device-check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n $out ]] || out=$build/report
mkdir -p "$out" "$build"
out=$(cd "$out" && pwd)
build=$(cd "$build" && pwd)
log=$out/device-check.log
: >"$log"
exec > >(tee -a "$log") 2>&1
status=0
fail() { echo "device-check: FAILED: $*"; status=1; }
t0=$(date +%s)

echo "== machine"
date -u
uname -srm
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none"
[[ -n $python ]] || python=$(command -v python3)
if ! "$python" -c "import torch" 2>/dev/null; then
  echo "device-check: $python cannot import torch (pass --python)"; exit 1
fi
"$python" - <<'PY' | tee "$out/torch.txt"
import torch
print(f"torch {torch.__version__} cuda {torch.version.cuda} available {torch.cuda.is_available()}")
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"device {p.name} sm_{p.major}{p.minor} {p.multi_processor_count} SMs {p.total_memory / 2**30:.0f} GiB")
PY
nvcc=$(command -v nvcc || true)
[[ -n $nvcc ]] || { [[ -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc; }
[[ -n $nvcc ]] && "$nvcc" --version | tail -1 || echo "nvcc: none"
cmake --version | head -1
gen=(-G "Unix Makefiles")
command -v ninja >/dev/null && gen=(-G Ninja)

echo "== dependencies"
[[ -n $deps || ! -d $root/.devdeps ]] || deps=$root/.devdeps
extra=()
if [[ -n $deps ]]; then
  prefix=$build/deps-root
  rm -rf "$prefix"
  mkdir -p "$prefix"
  n=0
  for f in "$deps"/*.deb; do
    [[ -e $f ]] || continue
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$f" "$prefix"
    else
      (cd "$prefix" && ar p "$f" "$(ar t "$f" | grep '^data.tar')" | tar -x -f - --auto-compress 2>/dev/null ||
       ar p "$f" "$(ar t "$f" | grep '^data.tar')" | tar -xJ -f -)
    fi
    n=$((n + 1))
  done
  echo "unpacked $n packages from $deps into $prefix"
  extra+=(-DCMAKE_PREFIX_PATH="$prefix/usr")
  # pkg-config (when the machine has one) resolves the carried .pc files inside the prefix.
  export PKG_CONFIG_PATH=$prefix/usr/lib/x86_64-linux-gnu/pkgconfig:$prefix/usr/share/pkgconfig
  export PKG_CONFIG_SYSROOT_DIR=$prefix
  export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
else
  echo "no --deps: building against the machine's own packages"
fi

echo "== configure"
cuda=ON
[[ $gpu == 1 ]] || cuda=AUTO
[[ -n $nvcc ]] && extra+=(-DCMAKE_CUDA_COMPILER="$nvcc")
cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE="$btype" -DKVSCOPE_BUILD_GUI=OFF \
  -DKVSCOPE_PYTHON="$python" -DKVSCOPE_CUDA=$cuda -DCMAKE_CUDA_ARCHITECTURES="$arch" -DKVSCOPE_MODEL="$model" \
  "${extra[@]}" >"$build/configure.txt" 2>&1 || { tail -40 "$build/configure.txt"; fail "configure"; }
grep -E "kvscope:|LibTorch" "$build/configure.txt"

echo "== build"
targets=(kvscope-cli)
if [[ $status == 0 ]] && grep -q "CUDA kernels ON" "$build/configure.txt"; then
  targets+=(kvscope_gpu_tests kvscope_gpu_bench)
fi
if [[ $status == 0 ]]; then
  cmake --build "$build" -j "$jobs" --target "${targets[@]}" >"$build/build.txt" 2>&1 ||
    { tail -60 "$build/build.txt"; fail "build"; }
  echo "built ${targets[*]} in $(($(date +%s) - t0)) s since start"
fi

echo "== ctest -L gpu"
if [[ $status == 0 ]]; then
  (cd "$build" && ctest -L gpu --output-on-failure --timeout 600) 2>&1 | tee "$out/ctest_gpu.txt"
  [[ ${PIPESTATUS[0]} == 0 ]] || fail "ctest -L gpu"
  # ctest counts a binary whose tests all skipped as passed: the gtest summary says how many ran.
  [[ -x $build/tests/kvscope_gpu_tests ]] &&
    "$build/tests/kvscope_gpu_tests" >"$out/gpu_tests.txt" 2>&1; grep -E "^\[ +(PASSED|SKIPPED|FAILED) +\] [0-9]" "$out/gpu_tests.txt"
fi

echo "== GPU benchmarks"
bench=$build/tests/kvscope_gpu_bench
if [[ $status == 0 && -x $bench ]]; then
  "$bench" --benchmark_min_time=0.2 --benchmark_out="$out/gpu_bench.json" --benchmark_out_format=json
  rc=$?
  if [[ $rc == 77 ]]; then echo "GPU benchmarks skipped (no CUDA device)"; rm -f "$out/gpu_bench.json"
  elif [[ $rc != 0 ]]; then fail "GPU benchmarks (exit $rc)"; fi
fi

echo "== the model on the device"
cli=$build/app/kvscope-cli
dev=cuda
[[ $gpu == 1 ]] || dev=cpu
text=$root/resources/eval/coriolanus.txt
if [[ $status == 0 && -x $cli && -f $model ]]; then
  echo "model: $model"
  # Greedy tokens with an fp32 dynamic cache: the CPU's and the device's must be the same tokens.
  for d in cpu $dev; do
    "$cli" generate --model "$model" --device $d --cache dynamic --max-new 48 --prompt "The quantized cache" --json \
      >"$out/greedy_$d.jsonl" 2>"$out/greedy_$d.err" || fail "generate --device $d: $(tail -1 "$out/greedy_$d.err")"
  done
  # Fused against reference attention for every backend, on the device: perplexity and KL against dynamic.
  # (fp8 saturates: the seed's NaN on overflow would leave no figure to compare.)
  specs=(fp8:overflow=saturate fp8:overflow=saturate,attention=reference fp8:granularity=head,overflow=saturate
         fp8:granularity=head,overflow=saturate,attention=reference
         quanto:nbits=4 quanto:nbits=4,attention=reference hqq:nbits=4 hqq:nbits=4,attention=reference
         kivi:nbits=2 kivi:nbits=2,attention=reference)
  cargs=()
  for c in "${specs[@]}"; do cargs+=(--cache "$c"); done
  "$cli" eval --model "$model" --device $dev --text "$text" --ctx 512 --windows 2 --json "${cargs[@]}" \
    >"$out/eval_$dev.jsonl" 2>"$out/eval_$dev.err" || fail "eval --device $dev: $(tail -1 "$out/eval_$dev.err")"
  # Speed and memory at long contexts: bf16 weights and caches; the dynamic baseline is the bf16 cache.
  contexts=(2048 8192 32768)
  [[ $gpu == 1 ]] || contexts=(256)
  "$cli" bench --model "$model" --device $dev --dtype bf16 --cache fp8 --cache quanto:nbits=4 --context "${contexts[@]}" \
    --new 32 --repeat 3 --beyond-context --json | tee "$out/cli_bench.jsonl"
  [[ ${PIPESTATUS[0]} == 0 ]] || fail "kvscope-cli bench --device $dev"
elif [[ ! -f $model ]]; then
  echo "no model at $model (tests/gpu/make_device_model.py writes one): the model steps skipped"
fi

echo "== report"
"$python" - "$out" "$status" "$(($(date +%s) - t0))" <<'PY'
import json, os, re, sys
out, status, secs = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lines = ["# kvscope device check", ""]
read = lambda n: open(os.path.join(out, n)).read() if os.path.exists(os.path.join(out, n)) else ""
lines += [f"- {l}" for l in read("torch.txt").splitlines()]
ct = read("ctest_gpu.txt")
m = re.search(r"(\d+)% tests passed, (\d+) tests failed out of (\d+)", ct)
skipped = re.findall(r"\*\*\*Skipped|Not Run|SKIPPED", ct)
lines.append(f"- ctest -L gpu: {m.group(0) if m else 'not run'}" + (f"; skipped markers: {len(skipped)}" if skipped else ""))
g = re.findall(r"^\[ +(PASSED|SKIPPED|FAILED) +\] (\d+) tests?", read("gpu_tests.txt"), re.M)
if g:
    lines.append("- kvscope_gpu_tests (gtest): " + ", ".join(f"{n} {w.lower()}" for w, n in g))
b = read("gpu_bench.json")
if b:
    res = {r["name"]: r for r in json.loads(b)["benchmarks"] if r.get("run_type", "iteration") == "iteration"}
    def bps(name):
        r = res.get(name)
        return r["bytes_per_second"] if r else None
    lines += ["", "## GPU kernels", "", "| benchmark | time (us) | GB/s |", "|---|---:|---:|"]
    for name, r in res.items():
        gbs = r.get("bytes_per_second", 0) / 1e9
        lines.append(f"| {name} | {r['real_time']:.1f} | {gbs:.0f} |")
    lines.append("")
    for mib in (256, 1024):
        d, c = bps(f"gpu_fp8_dequant/{mib}/manual_time"), bps(f"gpu_memcpy_d2d/{mib}/manual_time")
        if d and c:
            lines.append(f"- fp8 -> bf16 dequant bandwidth / device-to-device copy bandwidth at {mib} MiB of codes: "
                         f"**{d / c:.2f}** (goal >= 0.8)")
    for shape, label in ((0, "SmolLM2-135M heads"), (1, "Llama-3-8B heads")):
        for L in (2048, 32768):
            t = {k: res.get(f"gpu_attn_{k}/{shape}/{L}/manual_time") for k in ("fused", "sdpa_bf16", "deq_sdpa")}
            if all(t.values()):
                f, s, d = (t[k]["real_time"] for k in ("fused", "sdpa_bf16", "deq_sdpa"))
                lines.append(f"- decode attention, one layer, {label}, context {L}: fused fp8 {f:.1f} us, SDPA on bf16 "
                             f"{s:.1f} us (x{s / f:.2f}), dequantize-all + SDPA {d:.1f} us (x{d / f:.2f})")
greedy = {}
for name in sorted(os.listdir(out)):
    m = re.match(r"greedy_(\w+)\.jsonl$", name)
    if m:
        greedy[m.group(1)] = [json.loads(l)["token"] for l in read(name).splitlines() if '"token"' in l]
if len(greedy) == 2:
    (a, ta), (b, tb) = sorted(greedy.items())
    same = ta == tb and len(ta) > 0
    lines += ["", "## The model on the device", "",
              f"- greedy tokens, dynamic cache, fp32: {a} and {b} {'identical' if same else 'DIFFER'} over {len(ta)} tokens"
              + ("" if same else f" (first difference at step {next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))})")]
for name in sorted(os.listdir(out)):
    if not (name.startswith("eval_") and name.endswith(".jsonl")):
        continue
    rows = {r["config"]: r for r in (json.loads(l) for l in read(name).splitlines() if l.startswith("{"))}
    lines += ["", f"fused against reference attention ({name[5:-6]}): perplexity and mean KL against the dynamic cache", "",
              "| config | ppl fused | ppl reference | mean KL fused | mean KL reference |", "|---|---:|---:|---:|---:|"]
    for spec, r in rows.items():
        ref = rows.get(spec + ",attention=reference") or rows.get(spec + ":attention=reference")
        if ref is None or "attention=reference" in spec:
            continue
        f = lambda x: "n/a" if x is None else f"{x:.6g}"
        lines.append(f"| {spec} | {f(r.get('perplexity'))} | {f(ref.get('perplexity'))} | {f(r.get('mean_kl'))} | "
                     f"{f(ref.get('mean_kl'))} |")
cli = [json.loads(l) for l in read("cli_bench.jsonl").splitlines() if l.startswith("{")]
if cli:
    peak_key = "peak_device_bytes" if any("peak_device_bytes" in r for r in cli) else "peak_rss_bytes"
    lines += ["", f"## kvscope-cli bench (device {cli[0].get('device', 'cpu')}, bf16)", "",
              "| config | context | decode tok/s | vs bf16 dynamic | KV MiB | peak MiB |", "|---|---:|---:|---:|---:|---:|"]
    for r in cli:
        lines.append(f"| {r['config']} | {r['context']} | {r['decode_tok_s']:.1f} | {r['decode_vs_dynamic']:.3f} | "
                     f"{r['kv_stored_bytes'] / 2**20:.2f} | {r.get(peak_key, 0) / 2**20:.1f} |")
    lines.append("")
    by = {(r["config"], r["context"]): r for r in cli}
    for ctx in sorted({r["context"] for r in cli}):
        dyn = by.get(("dynamic", ctx))
        for spec in ("fp8", "quanto:nbits=4"):
            q = by.get((spec, ctx))
            if not (dyn and q):
                continue
            dkv = dyn["kv_stored_bytes"] - q["kv_stored_bytes"]
            p4 = (dyn.get(peak_key, 0) - q.get(peak_key, 0)) / dkv if dkv > 0 else float("nan")
            lines.append(f"- context {ctx}, {spec}: decode {q['decode_vs_dynamic']:.2f}x the bf16 cache's"
                         + (" (goal >= 1.2 for fp8 at 32k)" if spec == "fp8" and ctx == 32768 else "")
                         + f"; P4 = {p4:.2f} (goal >= 0.9)")
lines += ["", f"Status: {'OK' if status == 0 else 'FAILED'} ({secs} s). Raw outputs beside this file."]
open(os.path.join(out, "report.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
exit $status
