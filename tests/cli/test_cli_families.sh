#!/usr/bin/env bash
# The model families beyond dense Llama as a user meets them in the CLI: a Qwen3-MoE, a Gemma 3, a gpt-oss and a
# Gemma 4 GGUF (random weights in the layout llama.cpp's converter writes, SmolLM2's tokenizer) generate, compare and
# plan (gpt-oss: the doctor's key-fragile verdict, the vLLM export of its sliding layers; Gemma 4: the doctor and the
# planner on its shared-KV layers, a backend that cannot slide on its global layer only); a config the forward cannot
# run, and a cache config a sliding-window model cannot use, are one line naming the problem, exit 2.
set -u
. "$(dirname "$0")/model_test_setup.sh"
. "$(dirname "$0")/check.sh"
moe=$("$py" "$here/../bench/make_bench_models.py" --out "$tmp" --size qwen3moe-tiny --type Q8_0 \
  --tokenizer-from "$model" 2>/dev/null | tail -1)
[ -f "$moe" ] || { echo "FAIL make_bench_models.py wrote no qwen3moe-tiny"; exit 1; }
check moe-generate 0 '[llamacpp] 5 prompt + 8 new tokens' \
  "$cli" generate --model "$moe" --prompt "The capital of France is" --max-new 8 --cache llamacpp:type_k=q8_0,type_v=q8_0
check moe-generate-f32 0 'f32 activations' \
  "$cli" generate --model "$moe" --prompt "The capital of France is" --max-new 4 --activations f32 --cache fp8
check moe-compare 0 'llamacpp:type_k=q4_0,type_v=q4_0' \
  "$cli" compare --model "$moe" --prompt "The capital of France is" --max-new 8 --cache llamacpp:type_k=q4_0,type_v=q4_0
check moe-plan 0 'qwen3moe random-qwen3moe-tiny-Q8_0 (gguf, 4 layers' "$cli" plan "$moe"
gemma=$("$py" "$here/../bench/make_bench_models.py" --out "$tmp" --size gemma3-tiny --type Q8_0 \
  --tokenizer-from "$model" 2>/dev/null | tail -1)
[ -f "$gemma" ] || { echo "FAIL make_bench_models.py wrote no gemma3-tiny"; exit 1; }
check gemma-generate 0 '] 5 prompt + 8 new tokens' \
  "$cli" generate --model "$gemma" --prompt "The capital of France is" --max-new 8
check gemma-compare 0 'llamacpp:type_v=q4_0 ' \
  "$cli" compare --model "$gemma" --prompt "The capital of France is" --max-new 8 --cache llamacpp:type_k=q8_0,type_v=q4_0
check gemma-plan 0 'sliding: 2 KV heads x 64, window 128' "$cli" plan "$gemma"
check gemma-export-vllm 0 '--kv-cache-dtype fp8_e4m3 --kv-cache-dtype-skip-layers sliding_window' \
  "$cli" export --format vllm --model "$gemma" --cache 'layers=0-4:dynamic;*:fp8'
check gemma-export-llamacpp 0 'the sliding-window layers (0-4) with the same -ctk/-ctv' \
  "$cli" export --format llamacpp --model "$gemma" --cache llamacpp:type_k=q8_0,type_v=q8_0
check gemma-tune-context 0 'KV bytes priced at 32768 tokens of context, each of the 5 sliding-window layers at most' \
  "$cli" tune --model "$gemma" --text "$text" --ctx 256 --windows 1 --cache llamacpp:type_k=q4_0,type_v=q4_0 \
  --max-kl 0.001 --target vllm --no-verify --context 32768
check gemma-doctor 0 'try: layers=0-4:dynamic;*:llamacpp:type_k=q4_0,type_v=q4_0' \
  "$cli" doctor --model "$gemma"
check gemma-sliding-hqq 2 'is a sliding-window layer (window 128): `hqq' \
  "$cli" generate --model "$gemma" --prompt hi --cache hqq:nbits=4
oss=$("$py" "$here/../bench/make_bench_models.py" --out "$tmp" --size gpt-oss-tiny --type Q8_0 \
  --tokenizer-from "$model" 2>/dev/null | tail -1)
[ -f "$oss" ] || { echo "FAIL make_bench_models.py wrote no gpt-oss-tiny"; exit 1; }
check oss-generate 0 '[llamacpp] 5 prompt + 8 new tokens' \
  "$cli" generate --model "$oss" --prompt "The capital of France is" --max-new 8 --cache llamacpp:type_k=q8_0,type_v=q8_0
check oss-compare 0 'mxfp4' \
  "$cli" compare --model "$oss" --prompt "The capital of France is" --max-new 8 --cache mxfp4 --cache fp8
check oss-doctor 0 'fragile here (learned attention sinks on layers 0-3 and head size 64)' \
  "$cli" doctor --model "$oss" --no-fp8-kl
check oss-export-vllm 0 '--kv-cache-dtype-skip-layers sliding_window' \
  "$cli" export --format vllm --model "$oss" --cache 'layers=0:dynamic;2:dynamic;*:fp8'
g4=$("$py" "$here/../bench/make_bench_models.py" --out "$tmp" --size gemma4-tiny --type Q8_0 \
  --tokenizer-from "$model" 2>/dev/null | tail -1)
[ -f "$g4" ] || { echo "FAIL make_bench_models.py wrote no gemma4-tiny"; exit 1; }
check g4-generate 0 '[llamacpp] 5 prompt + 8 new tokens' \
  "$cli" generate --model "$g4" --prompt "The capital of France is" --max-new 8 --cache llamacpp:type_k=q8_0,type_v=q8_0
check g4-compare 0 "(8 layers, 2 KV heads x 64, 1 x 128 on layers 4, layers 5-7 reading another's KV)" \
  "$cli" compare --model "$g4" --prompt "The capital of France is" --max-new 8 --cache llamacpp:type_k=q4_0,type_v=q4_0
check g4-plan 0 'shared: reads layer 4'"'"'s KV' "$cli" plan "$g4"
check g4-doctor 0 "reads layer 3's keys and values (stores none)" "$cli" doctor --model "$g4" --no-fp8-kl --no-key-kl
check g4-doctor-verdict 0 'try: layers=0-3:dynamic;*:llamacpp:type_k=q4_0,type_v=q4_0' \
  "$cli" doctor --model "$g4" --no-fp8-kl --no-key-kl
check g4-export-vllm 0 '--kv-cache-dtype-skip-layers sliding_window' \
  "$cli" export --format vllm --model "$g4" --cache 'layers=0-3:dynamic;*:fp8'
check g4-sliding-hqq 2 'is a sliding-window layer (window 128): `hqq' \
  "$cli" generate --model "$g4" --prompt hi --cache hqq:nbits=4
check g4-global-quanto 0 '[layers=4:quanto:nbits=4;*:dynamic] 1 prompt + 4 new tokens' \
  "$cli" generate --model "$g4" --prompt hi --max-new 4 --cache 'layers=4:quanto:nbits=4;*:dynamic'
mkdir -p "$tmp/swa" "$tmp/topk" "$tmp/types"
for d in swa topk types; do
  cat >"$tmp/$d/tokenizer.json" <<'J'
{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
 "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}, "decoder": {"type": "ByteLevel"}}
J
done
cat >"$tmp/swa/config.json" <<'J'
{"model_type":"mistral","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":2,"num_key_value_heads":1,
 "intermediate_size":128,"vocab_size":64,"sliding_window":16}
J
# Random weights for it (a Mistral with every layer sliding over 16 positions).
"$py" - "$tmp/swa" <<'P' || { echo "FAIL writing the sliding-window model"; fail=1; }
import sys
import numpy as np
from safetensors.numpy import save_file
rng, H, F, V, kv = np.random.default_rng(0), 64, 128, 64, 32
t = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,), "lm_head.weight": (V, H)}
for l in range(2):
    p = f"model.layers.{l}."
    t.update({p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,),
              p + "self_attn.q_proj.weight": (H, H), p + "self_attn.k_proj.weight": (kv, H),
              p + "self_attn.v_proj.weight": (kv, H), p + "self_attn.o_proj.weight": (H, H),
              p + "mlp.gate_proj.weight": (F, H), p + "mlp.up_proj.weight": (F, H), p + "mlp.down_proj.weight": (H, F)})
save_file({k: (np.ones(s) if len(s) == 1 else rng.normal(0, 0.1, s)).astype(np.float32) for k, s in t.items()},
          sys.argv[1] + "/model.safetensors")
P
check sliding-run 0 '] 1 prompt + 40 new tokens (max_new)' \
  "$cli" generate --model "$tmp/swa" --prompt ab --max-new 40 --cache llamacpp:type_k=q8_0,type_v=q4_0
check sliding-quanto 2 'layer 0 is a sliding-window layer (window 16): `quanto:nbits=4` cannot run it' \
  "$cli" generate --model "$tmp/swa" --prompt ab --cache quanto:nbits=4
cat >"$tmp/types/config.json" <<'J'
{"model_type":"qwen3","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":2,"vocab_size":64,
 "layer_types":["full_attention","linear_attention"]}
J
check layer-types 2 '`layer_types` has "linear_attention": only full_attention and sliding_attention' \
  "$cli" generate --model "$tmp/types" --prompt hi
cat >"$tmp/topk/config.json" <<'J'
{"model_type":"qwen3_moe","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":2,"vocab_size":64,
 "num_experts":4,"num_experts_per_tok":8}
J
check moe-topk 2 '`num_experts_per_tok` = 8 exceeds the 4 experts' "$cli" generate --model "$tmp/topk" --prompt hi
exit $fail
