#!/usr/bin/env bash
# kvscope against llama.cpp on the same GGUF files, CPU, same thread count, in one window per model (llama-bench
# decode, kvscope-cli bench, llama-bench prefill, then the memory runs, model after model) so both see the same load.
#
#   tests/bench/bench_vs_llamacpp.sh [--threads N] [--repeat R] [--new T] [--depth D] [--prompt P]
#                                    [--activations f32|q8|auto] [model.gguf ...]
#
# Default models: the embedded SmolLM2 and the random 1b Q4_0/Q4_K/Q8_0 models (made by make_bench_models.py when
# missing). llama.cpp comes from packaging/build_llamacpp.sh (built when missing), or from the bin directory in
# $KVSCOPE_LLAMACPP_BIN. Defaults: --threads $(nproc) --repeat 3 --new 32 --depth 2048 --prompt 256 --activations f32
# (kvscope's float32 arithmetic; auto is kvscope-cli's own default, 8-bit activations on block-format weights as
# llama.cpp's, so the same as q8 on a GGUF of block formats). Metrics:
#   decode tok/s at an empty context: llama-bench tg T at depth 0 | kvscope-cli bench --context 16, T new tokens
#   decode tok/s at D (2048):         llama-bench tg T at depth D | kvscope-cli bench --context D
#   prefill tok/s of P (256) tokens:  llama-bench ppP | kvscope-cli bench --context P (prefill_tok_s)
#   load + 1 token, s: wall time (/usr/bin/time %e) of the memory runs below, process start to exit, the file in the
#     page cache (read whole just before each run: a run after a process that held 8 GB found part of it evicted):
#     the load, the prompt "hi" and 1 new token
#   resident MiB / file MiB: max RSS (/usr/bin/time) of a 1-token generation ("hi") minus the max RSS of the same
#     binary with its runtime loaded but no model (kvscope: `cache-sim` on a 1-layer toy cache, which initializes
#     LibTorch; llama.cpp: `llama-completion --version`), over the file size. An upper bound of the weights' memory:
#     it also holds the tokenizer, activations, logits and allocator slack. llama-completion runs with -c 64 (its
#     default context is the model's 8192, a KV cache that would count) and -lm none: with mmap plus Q4_0
#     repacking both the file's pages and the repacked copy stay resident (1.8x the file).
# The ratio column is kvscope over llama.cpp (higher is better for tok/s, lower for seconds and memory).
# Both warm up first, untimed: llama-bench's warm-up run, and `kvscope-cli bench`'s (a short generation before its
# first round, so the first context measured does not pay for mapping the weights' pages: MoE experts are first
# touched when a token picks them).
# llama-bench reports mean tok/s over its repetitions, kvscope the median over its rounds. llama.cpp's threads
# spin-wait for each other: with --threads = the cores and anything else running, its numbers swing by 10x (seen:
# SmolLM2 tg32 from 6 to 130 tok/s). The 1-minute load average before each model is printed under the table.
# Raw outputs stay in $KVSCOPE_BENCH_OUT (default: a new temporary directory, printed at the end).
# Exit status: non-zero when a tool fails (e.g. a model kvscope cannot load), never for slow ratios.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CACHE=${KVSCOPE_CACHE:-$HOME/.cache/kvscope}
CLI=${KVSCOPE_CLI:-$REPO/build/app/kvscope-cli}
PY=${KVSCOPE_PYTHON:-$CACHE/venv/bin/python}
[[ -x $PY ]] || PY=python3
THREADS=$(nproc) REPEAT=3 NEW=32 DEPTH=2048 PROMPT=256 ACTIVATIONS=f32 MODELS=()
while (($#)); do
    case $1 in
        --threads) THREADS=$2; shift 2 ;;
        --repeat) REPEAT=$2; shift 2 ;;
        --new) NEW=$2; shift 2 ;;
        --depth) DEPTH=$2; shift 2 ;;
        --prompt) PROMPT=$2; shift 2 ;;
        --activations) ACTIVATIONS=$2; shift 2 ;;  # kvscope's decode arithmetic (model/weight.h)
        -h|--help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
        -*) echo "unknown option $1" >&2; exit 2 ;;
        *) MODELS+=("$1"); shift ;;
    esac
done
case $ACTIVATIONS in f32|q8|auto) ;; *) echo "--activations: f32, q8 or auto, not $ACTIVATIONS" >&2; exit 2 ;; esac
for n in "$THREADS" "$REPEAT" "$NEW" "$DEPTH" "$PROMPT"; do
    [[ $n =~ ^[0-9]+$ ]] || { echo "not a count: $n" >&2; exit 2; }
done
if ((${#MODELS[@]} == 0)); then
    MODELS=("$CACHE/model/SmolLM2-135M-Instruct.Q4_1.gguf")
    RANDOM_MODELS=$("$PY" "$HERE/make_bench_models.py" --size 1b --type Q4_0 --type Q4_K --type Q8_0)
    mapfile -t -O 1 MODELS <<<"$RANDOM_MODELS"
fi
[[ -x $CLI ]] || { echo "no kvscope-cli at $CLI (build the project, or set KVSCOPE_CLI)" >&2; exit 1; }
LLAMA=${KVSCOPE_LLAMACPP_BIN:-$("$HERE/../../packaging/build_llamacpp.sh" | tail -n 1)}
OUT=${KVSCOPE_BENCH_OUT:-$(mktemp -d /tmp/bench_vs_llamacpp.XXXXXX)}
mkdir -p "$OUT"
FAILED=0
CONTEXTS=()  # kvscope-cli bench's contexts: 16 (the empty one), the prompt and the depth, each once
for c in $(printf '%s\n' 16 "$PROMPT" "$DEPTH" | sort -nu); do CONTEXTS+=(--context "$c"); done

# run NAME CMD...: stdout to $OUT/NAME, stderr to $OUT/NAME.err; a failure is reported and counted, not fatal.
run() {
    local name=$1; shift
    echo "   $name: $*" >&2
    if ! "$@" >"$OUT/$name" 2>"$OUT/$name.err"; then
        echo "   FAILED ($OUT/$name.err): $(grep -v '^\s*$' "$OUT/$name.err" | tail -n 1)" >&2
        rm -f "$OUT/$name"; FAILED=1
    fi
}
# maxrss CMD...: "KiB seconds", the command's max RSS and wall time.
maxrss() { /usr/bin/time -f '%M %e' -o "$OUT/rss.tmp" "$@" </dev/null >/dev/null && cat "$OUT/rss.tmp"; }

run base.kvscope.rss maxrss "$CLI" cache-sim --cache dynamic --context 1 --steps 1 --layers 1 --kv-heads 1 --head-dim 8
run base.llama.rss maxrss "$LLAMA/llama-completion" --version
for i in "${!MODELS[@]}"; do
    m=${MODELS[$i]}
    [[ -f $m ]] || { echo "no model $m" >&2; exit 1; }
    echo "== $m" >&2
    echo "$m" >"$OUT/$i.model"
    cut -d' ' -f1 /proc/loadavg >"$OUT/$i.load"
    run "$i.llama.tg" "$LLAMA/llama-bench" -m "$m" -p 0 -n "$NEW" -d "0,$DEPTH" -t "$THREADS" -r "$REPEAT" -o json
    run "$i.kvscope" "$CLI" bench --model "$m" --cache dynamic --no-baseline "${CONTEXTS[@]}" \
        --new "$NEW" --threads "$THREADS" --repeat "$REPEAT" --activations "$ACTIVATIONS" --json
    run "$i.llama.pp" "$LLAMA/llama-bench" -m "$m" -p "$PROMPT" -n 0 -t "$THREADS" -r "$REPEAT" -o json
    cat "$m" >/dev/null
    run "$i.kvscope.rss" maxrss "$CLI" generate --model "$m" --prompt hi --max-new 1 --threads "$THREADS" \
        --activations "$ACTIVATIONS"
    cat "$m" >/dev/null
    run "$i.llama.rss" maxrss "$LLAMA/llama-completion" -m "$m" -p hi -n 1 -t "$THREADS" -c 64 -lm none -no-cnv --no-warmup
done

"$PY" - "$OUT" "${#MODELS[@]}" "$NEW" "$DEPTH" "$PROMPT" <<'EOF'
import json, os, statistics, sys
out, n, new, depth, prompt = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
def load(name, lines=False):
    p = os.path.join(out, name)
    if not os.path.exists(p): return None
    with open(p) as f:
        return [json.loads(l) for l in f if l.startswith("{")] if lines else f.read()
def llama(name, pp, depth):
    rows = load(name)
    rows = json.loads(rows) if rows else []
    v = [r["avg_ts"] for r in rows if (r["n_prompt"] > 0) == pp and r.get("n_depth", 0) == depth]
    return v[0] if v else None
def kv(rows, ctx, key):
    v = [r[key] for r in rows or [] if r["context"] == ctx]
    return statistics.median(v) if v else None
def rss(name, base):
    t, b = load(name), load(base)
    return (int(t.split()[0]) - int(b.split()[0])) / 1024 if t and b else None
def seconds(name):
    t = load(name)
    return float(t.split()[1]) if t else None
def f(x): return "n/a" if x is None else f"{x:.2f}" if x < 100 else f"{x:.0f}"
print(f"\n{'model':<34} {'metric':<28} {'llama.cpp':>10} {'kvscope':>10} {'ratio':>7}")
for i in range(n):
    m = load(f"{i}.model").strip()
    size = os.path.getsize(m) / 2**20
    k = load(f"{i}.kvscope", lines=True)
    lr, kr = rss(f"{i}.llama.rss", "base.llama.rss"), rss(f"{i}.kvscope.rss", "base.kvscope.rss")
    rows = [(f"decode tok/s, ctx 0 (kv: 16)", llama(f"{i}.llama.tg", False, 0), kv(k, 16, "decode_tok_s")),
            (f"decode tok/s, ctx {depth}", llama(f"{i}.llama.tg", False, depth), kv(k, depth, "decode_tok_s")),
            (f"prefill tok/s, {prompt} tokens", llama(f"{i}.llama.pp", True, 0), kv(k, prompt, "prefill_tok_s")),
            ("load + 1 token, s", seconds(f"{i}.llama.rss"), seconds(f"{i}.kvscope.rss")),
            (f"resident / file ({size:.0f} MiB)", lr and lr / size, kr and kr / size)]
    for metric, a, b in rows:
        print(f"{os.path.basename(m)[:34]:<34} {metric:<28} {f(a):>10} {f(b):>10} {f(b / a) if a and b else 'n/a':>7}")
print("load average before each model:", ", ".join(load(f"{i}.load").strip() for i in range(n)))
EOF
echo "raw outputs: $OUT; $SECONDS s" >&2
exit $FAILED
