#!/usr/bin/env bash
# Decode tok/s of the GUI with every dock live against kvscope-cli on the same model, config, prompt and length:
# runs alternate (GUI, CLI, GUI, CLI, ...) and the medians are compared.
#   tests/bench/bench_gui_vs_cli.sh build [SPEC] [NEW] [ROUNDS]
set -euo pipefail
build=${1:-build} spec=${2:-fp8:overflow=saturate} new=${3:-96} rounds=${4:-3}
model=${KVSCOPE_MODEL:-$HOME/.cache/kvscope/model/SmolLM2-135M-Instruct.Q4_1.gguf}
prompt="Explain in three sentences why a quantized key-value cache saves memory."
gui=() cli=()
for ((i = 0; i < rounds; i++)); do
  g=$(xvfb-run -a -s "-screen 0 1600x1000x24" "$build/app/kvscope" --model "$model" --autorun "$spec" --max-new "$new" \
        --no-shadow --quit 2>/dev/null | sed -n 's/.*decode \([0-9.]*\) tok\/s.*/\1/p')
  c=$("$build/app/kvscope-cli" generate --model "$model" --chat --prompt "$prompt" --cache "$spec" --max-new "$new" \
        --json 2>/dev/null | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["decode_tok_s"])')
  gui+=("$g") cli+=("$c")
  echo "round $i: gui $g tok/s, cli $c tok/s"
done
python3 - "${gui[*]}" "${cli[*]}" <<'PY'
import statistics, sys
g = [float(x) for x in sys.argv[1].split()]
c = [float(x) for x in sys.argv[2].split()]
mg, mc = statistics.median(g), statistics.median(c)
print(f"median decode tok/s: GUI with docks live {mg:.2f}, CLI {mc:.2f}; GUI/CLI = {mg / mc:.3f} ({(1 - mg / mc) * 100:.1f}% slower)")
PY
