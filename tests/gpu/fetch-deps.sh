#!/usr/bin/env bash
# Downloads (apt-get download: no install, no root needed) the Debian/Ubuntu packages that kvscope's core, kvscope-cli
# and the gpu tests/benchmarks build against but that a bare CUDA machine may lack (headers: nlohmann-json, CLI11,
# fmt, PCRE2; static/shared: GoogleTest, Google Benchmark, fmt, PCRE2), into DIR (default <repo>/.devdeps, ignored by
# git). Run it on a machine with network access; tests/gpu/device-check.sh --deps DIR unpacks them into a private
# prefix on a machine without (they are never installed into /). Built for Debian 12 amd64 (glibc 2.36): they run on
# newer glibc/libstdc++ (Ubuntu 24.04) too.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:-$root/.devdeps}
mkdir -p "$dir"
cd "$dir"
pkgs=(nlohmann-json3-dev libcli11-dev libfmt-dev libfmt9 libpcre2-dev libpcre2-8-0 libgtest-dev libbenchmark-dev
      libbenchmark1debian)
apt-get download "${pkgs[@]}"
ls -la "$dir"
du -sh "$dir"
