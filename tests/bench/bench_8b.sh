#!/usr/bin/env bash
# The workstation table: kvscope against llama.cpp (tests/bench/bench_vs_llamacpp.sh) on random-weight GGUFs in the
# shapes of Llama-3-8B, Qwen2.5-7B and Mistral-7B, each in Q4_K and Q8_0, with kvscope's default arithmetic
# (--activations auto) and settings that fit a 2-core machine in about half an hour (estimated from kvscope's rates on
# these files at a load average of 3.5, ~34 minutes, with llama.cpp's taken as equal; the prefills dominate, and
# --depth 512 would add ~11 minutes).
#
#   tests/bench/bench_8b.sh [bench_vs_llamacpp.sh options, which win over the ones below]
#
# Options passed to bench_vs_llamacpp.sh: --threads $(nproc) --repeat 2 --new 16 --depth 256 --prompt 128
# --activations auto. The six files (~36 GB in $KVSCOPE_CACHE/bench-models) are written by make_bench_models.py
# when missing (~20 s per Q4_K file, 2 to 3 minutes per Q8_0). Env: as bench_vs_llamacpp.sh's.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${KVSCOPE_CACHE:-$HOME/.cache/kvscope}
PY=${KVSCOPE_PYTHON:-$CACHE/venv/bin/python}
[[ -x $PY ]] || PY=python3
PATHS=$("$PY" "$HERE/make_bench_models.py" --size llama3-8b --size qwen2.5-7b --size mistral-7b --type Q4_K --type Q8_0)
mapfile -t MODELS <<<"$PATHS"
exec "$HERE/bench_vs_llamacpp.sh" --threads "$(nproc)" --repeat 2 --new 16 --depth 256 --prompt 128 \
    --activations auto "$@" "${MODELS[@]}"
