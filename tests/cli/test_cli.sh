#!/usr/bin/env bash
# kvscope-cli as a user meets it: output, exit codes, one clear error line.
set -u
cli=$1
. "$(dirname "$0")/check.sh"
check export-fp8 0 '"backend": "fp8"' "$cli" export --cache fp8
check export-quanto 0 '"q_group_size": 32' "$cli" export --cache quanto:nbits=2,q_group_size=32
check export-note 0 'note: granularity=head has no transformers equivalent' "$cli" export --cache fp8:granularity=head
check export-kvscope 0 '"granularity": "channel"' "$cli" export --cache fp8:granularity=channel --format kvscope
check bad-backend 2 'kvscope-cli: error: unknown cache backend `fp4`' "$cli" export --cache fp4
check bad-nbits 2 '`nbits` for `quanto` backend has to be one of [`2`, `4`] but got 3' "$cli" export --cache quanto:nbits=3
check fp8-groupwise 2 'does not support ['"'"'q_group_size'"'"']' "$cli" export --cache fp8:q_group_size=32
check bad-path 2 'cannot read cache config file `/nonexistent/x.json`' "$cli" export --cache /nonexistent/x.json
check dynamic-hf 2 'has no cache_config to export' "$cli" export --cache dynamic
check bad-format 2 'format' "$cli" export --cache fp8 --format onnx
check backends 0 'residual_length' "$cli" backends
check vllm-fp8 0 '--kv-cache-dtype fp8_e4m3' "$cli" export --cache fp8 --format vllm
check vllm-int 0 'nearest equivalent only' "$cli" export --cache quanto:nbits=2 --format vllm
check llamacpp-int4 0 '-ctk q4_1 -ctv q4_1 -fa' "$cli" export --cache hqq:nbits=4 --format llamacpp
check llamacpp-fp8 0 '-ctk q8_0 -ctv q8_0 -fa' "$cli" export --cache fp8 --format llamacpp
check llamacpp-exact 0 '-ctk q4_0 -ctv q8_0 -fa on' "$cli" export --cache llamacpp:type_k=q4_0,type_v=q8_0 --format llamacpp
check llamacpp-rot-off 0 'run it with LLAMA_ATTN_ROT_DISABLE=1' "$cli" export --cache llamacpp:type_k=q4_0,type_v=q4_0,rot=off --format llamacpp
check llamacpp-bad-type 2 'option `type_k` takes one of f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, got `q3_k`' "$cli" export --cache llamacpp:type_k=q3_k
check hf-snippet 0 'cache_implementation="quantized"' "$cli" export --cache quanto
tmp=$(mktemp -d)
check write-file 0 '' "$cli" export --cache hqq:nbits=3 --format kvscope -o "$tmp/c.json"
check read-back 0 '"nbits": 3' "$cli" export --cache "$tmp/c.json"
check unwritable 2 'cannot write' "$cli" export --cache fp8 -o /nonexistent/dir/c.json
# --device: a device that is not here, or a name that is no device, is one line and exit 2 before any model is read.
check bad-device 2 'unknown device `tpu` (cpu, cuda or cuda:N)' "$cli" generate --model /nonexistent.gguf --prompt hi --device tpu
if [ ! -e /dev/nvidiactl ]; then
  check no-cuda 2 'device `cuda` is not available' "$cli" generate --model /nonexistent.gguf --prompt hi --device cuda
  check no-cuda-bench 2 'device `cuda:1` is not available' "$cli" bench --model /nonexistent.gguf --cache fp8 --device cuda:1
  lines=$("$cli" eval --model /nonexistent.gguf --text /dev/null --cache fp8 --device cuda 2>&1 | wc -l)
  [ "$lines" -eq 1 ] || { echo "FAIL no-cuda one line: $lines lines"; fail=1; }
fi
# KVSCOPE_ISA: a name that is no path is one line and exit 2; a path the CPU runs is taken without a word.
check bad-isa 2 'kvscope-cli: error: KVSCOPE_ISA=avx9 is not one of scalar, avx2, avx512' env KVSCOPE_ISA=avx9 "$cli" export --cache fp8
[ "$(KVSCOPE_ISA=scalar "$cli" export --cache fp8 2>&1)" = "$("$cli" export --cache fp8 2>&1)" ] ||
  { echo "FAIL scalar-isa: KVSCOPE_ISA=scalar changed export's output"; fail=1; }
check bad-weights 2 'q6_k not in {stored,q8_0,q5_1,q5_0,q4_1,q4_0}' "$cli" generate --model /nonexistent.gguf --prompt hi --weights q6_k
# One error line, nothing else.
lines=$("$cli" export --cache quanto:nbits=3 2>&1 | wc -l)
[ "$lines" -eq 1 ] || { echo "FAIL one-line: $lines lines"; fail=1; }
rm -rf "$tmp"
exit $fail
