#!/usr/bin/env bash
# `kvscope-cli plan` as a user meets it: the table, the JSON schema, and bad input as one line with exit 2.
set -u
cli=$1
. "$(dirname "$0")/check.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/llama.json" <<'J'
{"model_type":"llama","hidden_size":4096,"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,
 "max_position_embeddings":131072,"torch_dtype":"bfloat16"}
J
mkdir -p "$tmp/dsv3" && cat >"$tmp/dsv3/config.json" <<'J'
{"model_type":"deepseek_v3","hidden_size":7168,"num_hidden_layers":61,"num_attention_heads":128,"kv_lora_rank":512,
 "qk_rope_head_dim":64,"qk_nope_head_dim":128,"v_head_dim":128,"max_position_embeddings":163840}
J
echo '{"metadata":{"total_size":687194767360},"weight_map":{}}' >"$tmp/dsv3/model.safetensors.index.json"
check help 0 '--kv-memory-gib' "$cli" plan --help
check help-engines 0 'llamacpp, vllm or sglang' "$cli" plan --help
check vllm-table 0 'GPU KV cache size: 491,520 tokens, Maximum concurrency for 131,072 tokens per request: 3.75x' \
  "$cli" plan "$tmp/llama.json" --kv-memory-gib 60 --engine-version 0.33
check layers 0 'full: 8 KV heads x 128' "$cli" plan "$tmp/llama.json" --kv-memory-gib 60
check llamacpp-table 0 'llama_kv_cache: size = 4096.00 MiB ( 32768 cells,  32 layers,  1/1 seqs), K (f16): 2048.00 MiB' \
  "$cli" plan "$tmp/llama.json" --engine llamacpp --ctx 32768
check not-expressible 0 'llama.cpp has no `fp8` cache' "$cli" plan "$tmp/llama.json" --engine llamacpp --cache fp8
check mla-dir 0 'mla: latent 512 + rope 64' "$cli" plan "$tmp/dsv3" --engine sglang --kv-memory-gib 40 --tp 8
check gpu-weights 0 'weights 80.00 GiB per GPU' "$cli" plan "$tmp/dsv3" --gpu H200 --tp 8
check gpu-too-small 2 'leave no memory for the KV cache' "$cli" plan "$tmp/dsv3" --gpu L4
# The JSON schema's fixed fields.
"$cli" plan "$tmp/llama.json" --kv-memory-gib 60 --json "$tmp/plan.json" || fail=1
python3 - "$tmp/plan.json" <<'P' || { echo "FAIL json-schema"; fail=1; }
import json, sys
p = json.load(open(sys.argv[1]))
for k in ("engine", "engine_version", "model", "configs"): assert k in p, k
assert p["engine"] == "vllm" and p["model"]["arch"] == "llama"
for k in ("index", "kind", "kv_heads", "head_dim_k", "head_dim_v", "window"): assert k in p["model"]["layers"][0], k
for c in p["configs"]:
    for k in ("spec", "bytes_per_token", "k_mib", "v_mib", "kv_mib", "state_mib", "cells", "swa_cells", "block_size",
              "kv_tokens", "max_concurrency"):
        assert k in c, k
assert p["configs"][0]["kv_tokens"] == 491520 and p["configs"][0]["cells"] is None
print("ok   json-schema")
P
# Bad input: one line, exit 2.
echo '{"model_type":"llama","hidden_size":64}' >"$tmp/bad.json"
check missing-key 2 '`num_hidden_layers` is missing' "$cli" plan "$tmp/bad.json" --kv-memory-gib 1
check bad-version 2 'vllm version `0.99` is not one the planner knows (0.24, 0.33, 0.34)' \
  "$cli" plan "$tmp/llama.json" --kv-memory-gib 1 --engine-version 0.99
check bad-gpu 2 'unknown GPU `Z80`' "$cli" plan "$tmp/llama.json" --gpu Z80
check bad-engine 2 'unknown engine `tgi`' "$cli" plan "$tmp/llama.json" --engine tgi
check no-memory 2 'needs the KV cache'"'"'s memory' "$cli" plan "$tmp/llama.json"
check no-file 2 'no such file or directory' "$cli" plan "$tmp/none.gguf"
check no-config 2 'no config.json in this directory' "$cli" plan "$tmp"
check bad-spec 2 'unknown cache backend' "$cli" plan "$tmp/llama.json" --kv-memory-gib 1 --cache fp4
lines=$("$cli" plan "$tmp/bad.json" --kv-memory-gib 1 2>&1 | wc -l)
[ "$lines" -eq 1 ] || { echo "FAIL one-line: $lines lines"; fail=1; }
exit $fail
