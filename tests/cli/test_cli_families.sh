#!/usr/bin/env bash
# The model families beyond dense Llama as a user meets them in the CLI: a Qwen3-MoE GGUF (random weights in the
# layout llama.cpp's converter writes, SmolLM2's tokenizer) generates, compares and plans; a config the forward cannot
# run is one line naming the key, exit 2.
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
mkdir -p "$tmp/swa" "$tmp/topk"
for d in swa topk; do
  cat >"$tmp/$d/tokenizer.json" <<'J'
{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
 "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}, "decoder": {"type": "ByteLevel"}}
J
done
cat >"$tmp/swa/config.json" <<'J'
{"model_type":"qwen3_moe","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":2,"vocab_size":64,
 "use_sliding_window":true,"sliding_window":16}
J
check moe-sliding 2 '`use_sliding_window` is true: sliding-window attention is not supported on qwen3_moe' \
  "$cli" generate --model "$tmp/swa" --prompt hi
cat >"$tmp/topk/config.json" <<'J'
{"model_type":"qwen3_moe","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":2,"vocab_size":64,
 "num_experts":4,"num_experts_per_tok":8}
J
check moe-topk 2 '`num_experts_per_tok` = 8 exceeds the 4 experts' "$cli" generate --model "$tmp/topk" --prompt hi
exit $fail
