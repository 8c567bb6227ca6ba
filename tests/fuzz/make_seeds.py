#!/usr/bin/env python3
"""Seed corpora for the libFuzzer targets in tests/fuzz, written from valid files made here:

  gguf/            tiny GGUF models written by the `gguf` package (llama and qwen2 metadata, a byte-level tokenizer,
                   F32/F16/BF16/Q8_0/Q4_0/Q4_1/Q6_K tensors, v3 and alignment 64), and the first 64 KiB of the
                   embedded model (its header region, truncated inside the vocabulary) when --model is a file
  safetensors/     0x00 + small safetensors files (safetensors.numpy: F32, F16, BF16, I64, U8, empty, __metadata__),
                   0x01 + model.safetensors.index.json weight maps
  hf_config/       config.json files: transformers v4 and v5 keys, llama3 rope scaling, qwen2/qwen3, mistral,
                   a text_config wrapper
  tokenizer_json/  the parity tests' trained tokenizers (byte-level gpt2/smollm/llama3/qwen2 and the SentencePiece
                   layouts), then each with "\\0\\0" + a tokenizer_config.json, and a few hand-written small ones
  cache_config/    SPEC strings, sweep grids and JSON cache configs (kvscope's own and bare transformers dicts)
  session/         workbench session files (File > Save session, the autosave): runs with tokens, NaN (null) KL and
                   log-probs, per-layer memory, beams; an older file without per-token KV bytes

Nothing binary is committed: the corpora are rebuilt by this script (ctest runs it as fuzz.seeds).
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def write(d, name, data):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8"))


def gguf_seeds(out, model):
    import gguf
    from gguf.quants import quantize

    d = os.path.join(out, "gguf")
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "a", "b", "c", "Ġ", "ab", "Ġa", "1"]
    merges = ["a b", "Ġ a"]
    rng = np.random.default_rng(0)
    for i, (arch, version_types) in enumerate([
        ("llama", [gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.Q8_0]),
        ("qwen2", [gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.Q4_0]),
        ("llama", [gguf.GGMLQuantizationType.BF16, gguf.GGMLQuantizationType.Q4_1]),
        ("qwen3", [gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.Q6_K]),
    ]):
        tmp = tempfile.mkdtemp()
        path = os.path.join(tmp, "m.gguf")
        w = gguf.GGUFWriter(path, arch)
        w.add_name(f"seed{i}")
        if i == 2:
            w.add_custom_alignment(64)
        w.add_block_count(1)
        w.add_context_length(64)
        w.add_embedding_length(32 if version_types[1] != gguf.GGMLQuantizationType.Q6_K else 256)
        w.add_feed_forward_length(64)
        w.add_head_count(2)
        w.add_head_count_kv(1)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_rope_freq_base(10000.0)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(["smollm", "gpt2", "llama-bpe", "qwen2"][i])
        w.add_token_list(tokens)
        w.add_token_types([3, 3, 3, 1, 1, 1, 1, 1, 1, 1])
        w.add_token_merges(merges)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_add_bos_token(i % 2 == 0)
        w.add_chat_template("{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}")
        w.add_array("seed.floats", [1.5, -2.0])
        w.add_bool("seed.flag", True)
        hidden = 32 if version_types[1] != gguf.GGMLQuantizationType.Q6_K else 256
        for name, shape, t in [("token_embd.weight", (10, hidden), version_types[0]),
                               ("output_norm.weight", (hidden,), gguf.GGMLQuantizationType.F32),
                               ("blk.0.attn_q.weight", (2, hidden), version_types[1])]:
            x = rng.standard_normal(shape).astype(np.float32)
            if t == gguf.GGMLQuantizationType.Q6_K:  # the gguf package cannot quantize to Q6_K: raw blocks
                raw = rng.integers(0, 256, (shape[0], 210 * shape[1] // 256), dtype=np.uint8)
                raw[:, 208:210] = np.frombuffer(np.float16(0.01).tobytes(), dtype=np.uint8)  # d of each block
                w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=t)
            elif t == gguf.GGMLQuantizationType.F32:
                w.add_tensor(name, x)
            elif t == gguf.GGMLQuantizationType.F16:
                w.add_tensor(name, x.astype(np.float16))
            else:
                q = quantize(x, t)
                w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=t)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        with open(path, "rb") as f:
            write(d, f"tiny_{i}_{arch}.gguf", f.read())
        shutil.rmtree(tmp)
    if model and os.path.isfile(model):
        with open(model, "rb") as f:
            write(d, "embedded_head_64k.gguf", f.read(64 * 1024))


def safetensors_seeds(out):
    from safetensors.numpy import save

    d = os.path.join(out, "safetensors")
    rng = np.random.default_rng(1)
    files = {
        "f32": {"a": rng.standard_normal((2, 3)).astype(np.float32), "b": np.arange(4, dtype=np.float32)},
        "f16_i64": {"w": rng.standard_normal((4,)).astype(np.float16), "ids": np.arange(3, dtype=np.int64)},
        "u8_empty": {"u": np.arange(5, dtype=np.uint8), "e": np.zeros((0, 3), dtype=np.float32)},
    }
    for name, tensors in files.items():
        write(d, f"st_{name}", b"\x00" + save(tensors, metadata={"format": "pt"} if name == "f32" else None))
    # BF16 by hand (numpy has no bfloat16): header + 4 bytes.
    header = json.dumps({"x": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]},
                         "y": {"dtype": "F8_E4M3", "shape": [1, 2], "data_offsets": [4, 6]}}).encode()
    header += b" " * (-len(header) % 8)
    write(d, "st_bf16", b"\x00" + len(header).to_bytes(8, "little") + header + bytes(range(6)))
    index = {"metadata": {"total_size": 64},
             "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
                            "model.norm.weight": "model-00002-of-00002.safetensors",
                            "lm_head.weight": "model-00002-of-00002.safetensors"}}
    write(d, "index", b"\x01" + json.dumps(index, indent=2).encode())


def hf_config_seeds(out):
    d = os.path.join(out, "hf_config")
    base = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 256,
            "rms_norm_eps": 1e-5, "max_position_embeddings": 512, "rope_theta": 10000.0, "tie_word_embeddings": True}
    configs = {
        "llama_v4": base,
        "llama3_rope": {**base, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
        "llama_v5": {k: v for k, v in base.items() if k != "rope_theta"} | {
            "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"}},
        "qwen2": {**base, "model_type": "qwen2", "sliding_window": 4096, "use_sliding_window": False,
                  "layer_types": ["full_attention", "full_attention"]},
        "qwen3": {**base, "model_type": "qwen3", "head_dim": 32, "tie_word_embeddings": False},
        "mistral": {**base, "model_type": "mistral", "sliding_window": None},
        "wrapped": {"model_type": "llava", "text_config": {**base}},
    }
    for name, cfg in configs.items():
        write(d, name, json.dumps(cfg, indent=2))


def tokenizer_seeds(out):
    d = os.path.join(out, "tokenizer_json")
    sys.path.insert(0, os.path.join(HERE, "..", "parity"))
    import make_tokenizer_fixtures as mtf

    tmp = tempfile.mkdtemp()
    corpus = mtf.fixed_corpus()[:5]
    cases = {"references": {}}
    mtf.trained(tmp, corpus, cases)
    mtf.sentencepiece(tmp, corpus, cases)
    cfg = {"bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>"}, "pad_token": None,
           "chat_template": "{{ messages }}"}
    sp_cfg = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    for name in sorted(os.listdir(tmp)):
        path = os.path.join(tmp, name, "tokenizer.json")
        if not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            data = f.read()
        write(d, name, data)
        extra = sp_cfg if name.startswith("sp_") else cfg
        write(d, name + "_with_config", data + b"\x00\x00" + json.dumps(extra).encode())
    shutil.rmtree(tmp)
    # Small hand-written ones: quick to mutate.
    byte_level = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3, "Ġa": 4, "1": 5},
                            "merges": ["a b", ["Ġ", "a"]]},
                  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                      {"type": "Digits", "individual_digits": True},
                      {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}]},
                  "decoder": {"type": "ByteLevel"},
                  "added_tokens": [{"id": 6, "content": "<s>", "special": True}],
                  "post_processor": {"type": "TemplateProcessing",
                                     "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}],
                                     "special_tokens": {"<s>": {"ids": [6]}}}}
    write(d, "small_byte_level", json.dumps(byte_level))
    sp = {"model": {"type": "BPE", "vocab": {"<unk>": 0, "<0x41>": 1, "\u2581": 2, "a": 3, "\u2581a": 4},
                    "merges": [["\u2581", "a"]], "unk_token": "<unk>", "byte_fallback": True, "fuse_unk": True},
          "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False},
          "decoder": {"type": "Sequence", "decoders": [
              {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
              {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}}
    write(d, "small_sentencepiece", json.dumps(sp, ensure_ascii=False))


def cache_config_seeds(out):
    d = os.path.join(out, "cache_config")
    seeds = [
        "fp8", "dynamic", "fp8:granularity=head,overflow=saturate", "fp8:format=e5m2,headroom=1.25",
        "fp8:granularity=channel,overflow=recalibrate", "quanto:nbits=2,q_group_size=32,residual_length=64",
        "quanto:nbits=4,axis_key=-1,axis_value=-1", "hqq:nbits=3,axis_key=1", "hqq:nbits=8,optimize=false",
        "quanto:nbits=2,4;q_group_size=32,64", "hqq:nbits=1,2,3;axis_key=0,1;residual_length=0,16",
        "kivi:nbits=2,q_group_size=32", "fp8:sink=4", "layers=0-1:dynamic;*:K=fp8,V=quanto:nbits=4",
        '{"backend": "quanto", "nbits": 2, "q_group_size": 32, "residual_length": 64}',
        '{"backend": "hqq", "nbits": 4, "axis_key": 1, "axis_value": 1, "optimize": null}',
        json.dumps({"format": "kvscope-cache-config", "version": 1, "cache_config": {"backend": "fp8"},
                    "kvscope": {"granularity": "head", "format": "e5m2", "headroom": 1.5, "overflow": "saturate"}},
                   indent=2),
        json.dumps({"format": "kvscope-cache-config", "version": 1,
                    "cache_config": {"backend": "hqq", "nbits": 3, "q_group_size": 32}, "kvscope": {"optimize": False}}),
    ]
    for i, s in enumerate(seeds):
        write(d, f"seed_{i:02d}", s)


def session_seeds(out):
    d = os.path.join(out, "session")
    mem = {"payload": 4096, "metadata": 64, "residual": 0, "transient": 8192, "reserved": 1024, "unquantized": 8192}

    def run(i, n, shadow, nan_at=None, beams=0, old=False):
        tokens = []
        for j in range(n):
            t = {"id": 100 + j, "text": [" the", " cache", "é", "\n", "<|im_end|>"][j % 5],
                 "logprob": None if j == nan_at else -0.25 * j, "kl": None if j == nan_at else 0.001 * j,
                 "top1": j % 3 != 2}
            if not old:
                t.update({"kv_stored": 1000 * (j + 1), "kv_unquantized": 4000 * (j + 1)})
            tokens.append(t)
        r = {"run": i, "config": ["fp8:overflow=saturate", "quanto:nbits=4", "hqq:nbits=2,axis_key=1",
                                  "layers=0:dynamic;*:K=fp8,V=quanto:nbits=2"][i % 4],
             "shadow": shadow, "prompt_tokens": 12, "tokens": tokens, "memory": [{"k": mem, "v": mem}] * 3,
             "prefill_tok_s": 310.5, "decode_tok_s": 25.25, "mean_kl": 0.004, "max_kl": None if nan_at else 0.02,
             "top1_agreement": 0.95, "first_divergence": -1 if i % 2 else 4, "stop_reason": "eos"}
        if beams:
            r["beams"] = [{"text": f"hypothesis {b}", "score": -1.5 * b} for b in range(beams)]
        return r

    sessions = [
        {"format": "kvscope-session", "version": 1, "model": "/models/SmolLM2-135M-Instruct.Q4_1.gguf",
         "runs": [run(1, 6, True), run(2, 5, True, nan_at=3)]},
        {"format": "kvscope-session", "version": 1, "model": "", "runs": [run(3, 4, False, beams=3)]},
        {"format": "kvscope-session", "version": 1, "model": "m.gguf", "runs": [run(4, 3, False, old=True)]},
        {"format": "kvscope-session", "version": 1, "runs": []},
    ]
    for i, s in enumerate(sessions):
        write(d, f"seed_{i:02d}", json.dumps(s, indent=4 if i == 0 else None, ensure_ascii=i != 1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="", help="the embedded GGUF model (its first 64 KiB become a seed)")
    args = ap.parse_args()
    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    gguf_seeds(args.out, args.model)
    safetensors_seeds(args.out)
    hf_config_seeds(args.out)
    tokenizer_seeds(args.out)
    cache_config_seeds(args.out)
    session_seeds(args.out)
    for name in sorted(os.listdir(args.out)):
        files = os.listdir(os.path.join(args.out, name))
        size = sum(os.path.getsize(os.path.join(args.out, name, f)) for f in files)
        print(f"{name}: {len(files)} seeds, {size} bytes")


if __name__ == "__main__":
    main()
