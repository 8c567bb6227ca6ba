#!/usr/bin/env bash
# The CPU kernels' tests once per path this CPU can run (KVSCOPE_ISA=scalar, avx2, avx512; kernels/cpu/simd.h), so that
# an AVX-512 machine tests the AVX2 twins and the portable loops as the default path too; a path the CPU lacks is said
# and skipped. Usage: tests/run_isa_paths.sh build/tests/kvscope_unit_tests
set -euo pipefail
bin=$1
suites=(BitPack BlockFormats BlockMatmul Fp4Codec Fp4Layer Fp8Attention Fp8Codec FusedAttention FusedVsReference
        Hadamard IntKernelsCpu Iq4Nl KernelPaths KvBlocks KvBlocksTensor KvRowsSimd LlamaCppLayer PackedMatmul
        PerTokenHeadCodec PerTokenHeadLayer RowBasis SegmentedAttention TurboQuantCodec TurboQuantLayer Weight)
filter=$(printf '%s.*:' "${suites[@]}")"Paths/*"
# The two exhaustive 2^32 codec tests take minutes and run once in `make test`.
filter="$filter-*BitExactForAllFloat32*"
flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
has() { for f in "$@"; do grep -qw "$f" <<<"$flags" || return 1; done; }
status=0
for isa in scalar avx2 avx512; do
  case $isa in
    avx2) has avx2 fma f16c || { echo "isa $isa: skipped (this CPU has no AVX2 + FMA + F16C)"; continue; } ;;
    avx512) has avx512f avx512bw avx512vl avx512dq || { echo "isa $isa: skipped (this CPU has no AVX-512)"; continue; } ;;
  esac
  echo "isa $isa: KVSCOPE_ISA=$isa $bin --gtest_filter=..."
  if ! KVSCOPE_ISA=$isa OMP_WAIT_POLICY=passive "$bin" --gtest_filter="$filter" --gtest_brief=1; then
    echo "isa $isa: FAILED"
    status=1
  fi
done
exit $status
