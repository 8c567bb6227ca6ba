#!/usr/bin/env bash
# Set-up (packaging/setup.sh) + configure + build, into ./build. Idempotent; ccache makes rebuilds cheap.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
eval "$(bash packaging/setup.sh | grep -E '^KVSCOPE_[A-Z]+=' | sed 's/^/export /')"
export CCACHE_DIR=${CCACHE_DIR:-${KVSCOPE_CACHE:-$HOME/.cache/kvscope}/ccache}
# Paths relative to the clone, and no build directory in the hash: a fresh clone anywhere reuses the cache.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
build=${KVSCOPE_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DKVSCOPE_PYTHON="$KVSCOPE_PYTHON" -DCMAKE_BUILD_TYPE=RelWithDebInfo >&2
cmake --build "$build" -j "${KVSCOPE_JOBS:-2}" >&2
echo "KVSCOPE_PYTHON=$KVSCOPE_PYTHON"
echo "KVSCOPE_MODEL=$KVSCOPE_MODEL"
echo "KVSCOPE_BUILD_DIR=$build"
