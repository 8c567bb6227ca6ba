#!/usr/bin/env bash
# How long the GUI thread can stall while the engine decodes with every view on: the GUI test
# decodingKeepsTheEventLoopLive (tests/gui/test_workbench.cpp) on each model, offscreen, printing the event loop's
# longest gap between two turns (a 1 ms timer's ticks), the turns and the decode's wall time.
#
#   tests/bench/bench_gui_stall.sh [--tokens N] [model.gguf ...]
#
# Default models: the embedded SmolLM2 and the random 1B (TinyLlama's shape, Q4_0; written by make_bench_models.py
# when missing). N: new tokens per run (default 32; fewer on a 7-8B model on 2 cores, ~2 tok/s). The goal is a
# longest gap of at most 100 ms. Exit status: non-zero when a run fails, never for a long gap.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CACHE=${KVSCOPE_CACHE:-$HOME/.cache/kvscope}
TESTS=${KVSCOPE_GUI_TESTS:-$REPO/build/tests/kvscope_gui_tests}
PY=${KVSCOPE_PYTHON:-$CACHE/venv/bin/python}
[[ -x $PY ]] || PY=python3
TOKENS=32 MODELS=()
while (($#)); do
    case $1 in
        --tokens) TOKENS=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
        -*) echo "unknown option $1" >&2; exit 2 ;;
        *) MODELS+=("$1"); shift ;;
    esac
done
[[ -x $TESTS ]] || { echo "no GUI tests at $TESTS (build the project, or set KVSCOPE_GUI_TESTS)" >&2; exit 1; }
if ((${#MODELS[@]} == 0)); then
    MODELS=("$CACHE/model/SmolLM2-135M-Instruct.Q4_1.gguf" "$("$PY" "$HERE/make_bench_models.py" --size 1b --type Q4_0)")
fi
FAILED=0
for m in "${MODELS[@]}"; do
    [[ -f $m ]] || { echo "no model $m" >&2; exit 1; }
    echo "== $m ($(cut -d' ' -f1 /proc/loadavg) load)" >&2
    out=$(QT_QPA_PLATFORM=offscreen KVSCOPE_MODEL=$m KVSCOPE_STALL_TOKENS=$TOKENS \
        "$TESTS" decodingKeepsTheEventLoopLive 2>&1) || true
    line=$(grep -o 'event loop: .*' <<<"$out" | tail -n 1)
    if [[ -z $line ]] || ! grep -q '^PASS   : GuiTest::decodingKeepsTheEventLoopLive' <<<"$out"; then
        echo "FAILED on $m:" >&2; grep -E 'FAIL|QWARN|error' <<<"$out" | head -n 5 >&2; FAILED=1; continue
    fi
    echo "$line"
done
exit $FAILED
