#!/usr/bin/env bash
# kvscope-cli with kivi, sink and per-layer / K-vs-V configs (no model needed): exports and their notes, errors.
set -u
cli=$1
. "$(dirname "$0")/check.sh"
mixed='layers=0-1:dynamic;*:K=fp8:granularity=head,V=quanto:nbits=4'
check backends-kivi 0 'kivi' "$cli" backends
check backends-layers 0 'layers=RANGE:CONFIG' "$cli" backends
check backends-sink 0 'sink' "$cli" backends
check kivi-hf 0 'note: nearest equivalent only: transformers has no KIVI-style cache' "$cli" export --cache kivi
check sink-hf 0 'note: sink=4 has no transformers equivalent' "$cli" export --cache quanto:sink=4
check layers-hf-kv 2 'quantizes keys and values with one config' "$cli" export --cache "$mixed"
check layers-hf-note 0 'note: not exported: layers 0-1 use keys `dynamic`' "$cli" export --cache 'layers=0-1:dynamic;*:quanto:nbits=2'
check layers-vllm 0 '--kv-cache-dtype fp8_e4m3 --kv-cache-dtype-skip-layers 0 1' "$cli" export --cache "$mixed" --format vllm
check layers-llamacpp 0 '-ctk q8_0 -ctv q4_1 -fa' "$cli" export --cache "$mixed" --format llamacpp
check layers-overlap 2 'kvscope-cli: error: layers 0-3 and 2-5 overlap' "$cli" export --cache 'layers=0-3:fp8;2-5:hqq'
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check layers-write 0 '' "$cli" export --cache "$mixed" --format kvscope -o "$tmp/m.json"
check layers-read 0 '--kv-cache-dtype-skip-layers 0 1' "$cli" export --cache "$tmp/m.json" --format vllm
check layers-json 0 '"granularity": "head"' cat "$tmp/m.json"
exit $fail
