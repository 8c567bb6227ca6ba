#!/usr/bin/env bash
# Builds llama.cpp (CPU only), the reference tool of tests/bench/bench_vs_llamacpp.sh and of the parity test
# parity.llamacpp_kld (`make test-llamacpp`): the source is the vendored copy in the PyPI
# sdist of llama-cpp-python==0.3.36 (PyPI is the only network these machines reach), unpacked and built under
# ${KVSCOPE_CACHE:-~/.cache/kvscope}/llama.cpp/. Idempotent: a second run finds the binaries and only prints the path.
#
# Targets: llama-bench, llama-perplexity, llama-completion, llama-tokenize (the tokenizer parity test's reference
# for GGUF SentencePiece vocabularies). (In this llama.cpp version llama-cli is part of the
# server tree and needs the web UI fetched from Hugging Face at build time; llama-completion is the classic CLI.)
# GGML_NATIVE=OFF with explicit x86-64 flags (AVX-512 where the CPU has it): the native build dies with SIGILL on
# these VMs.
#
# Env: KVSCOPE_CACHE (cache root), KVSCOPE_JOBS (make jobs, default 2), KVSCOPE_PYTHON (python with pip).
# Output: the bin directory, as the last line on stdout (everything else goes to stderr).
set -euo pipefail

VERSION=0.3.36
CACHE=${KVSCOPE_CACHE:-$HOME/.cache/kvscope}
ROOT=$CACHE/llama.cpp
SRC=$ROOT/llama_cpp_python-$VERSION/vendor/llama.cpp
BUILD=$ROOT/build-$VERSION
BIN=$BUILD/bin
JOBS=${KVSCOPE_JOBS:-2}
PY=${KVSCOPE_PYTHON:-$CACHE/venv/bin/python}
[[ -x $PY ]] || PY=python3
TARGETS=(llama-bench llama-perplexity llama-completion llama-tokenize)

built() { for t in "${TARGETS[@]}"; do [[ -x $BIN/$t ]] || return 1; done; }

if ! built; then
    mkdir -p "$ROOT"
    SDIST=$ROOT/llama_cpp_python-$VERSION.tar.gz
    if [[ ! -s $SDIST ]]; then
        echo "== downloading the llama-cpp-python $VERSION sdist" >&2
        "$PY" -m pip download --quiet --no-binary :all: --no-deps "llama-cpp-python==$VERSION" -d "$ROOT" >&2
    fi
    if [[ ! -f $SRC/CMakeLists.txt ]]; then
        echo "== unpacking $SDIST" >&2
        tar xzf "$SDIST" -C "$ROOT"
    fi
    CCACHE=OFF
    # AVX-512 where the CPU reports it (these VMs come with and without it): named flags, never -march=native.
    AVX512=()
    grep -qw avx512f /proc/cpuinfo && AVX512+=(-DGGML_AVX512=ON)
    for f in avx512_vnni:VNNI avx512_bf16:BF16 avx512vbmi:VBMI; do
        grep -qw "${f%%:*}" /proc/cpuinfo && [[ ${#AVX512[@]} -gt 0 ]] && AVX512+=("-DGGML_AVX512_${f##*:}=ON")
    done
    command -v ccache >/dev/null && CCACHE=ON
    echo "== configuring $BUILD (ccache: $CCACHE)" >&2
    cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
        -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON "${AVX512[@]}" \
        -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_CCACHE=$CCACHE \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF >&2
    echo "== building ${TARGETS[*]} with $JOBS jobs" >&2
    start=$SECONDS
    cmake --build "$BUILD" --config Release -j "$JOBS" --target "${TARGETS[@]}" >&2
    echo "== built in $((SECONDS - start)) s" >&2
    built || { echo "build_llamacpp.sh: a target is missing in $BIN" >&2; exit 1; }
fi
echo "$BIN"
