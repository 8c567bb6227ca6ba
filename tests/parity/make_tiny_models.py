#!/usr/bin/env python3
"""Tiny random Llama, Qwen2 and Qwen3 models, built offline by transformers and saved as Hugging Face directories
(config.json + model.safetensors), with their reference outputs: logits over a 64-token prompt, and 64 greedy tokens
with the dynamic cache and with QuantizedCache fp8 / quanto int4 / hqq int4, plus the top-2 margins of each step.
The output head is scaled up so that greedy decoding is decided by clear margins, not ties.
"""
import argparse
import json
import os
import sys
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import (LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,  # noqa: E402
                          Qwen3ForCausalLM)

CACHES = {"dynamic": None, "fp8": {"backend": "fp8"}, "quanto_int4": {"backend": "quanto", "nbits": 4},
          "hqq_int4": {"backend": "hqq", "nbits": 4}}


def build(kind):
    common = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=32, max_position_embeddings=512, rms_norm_eps=1e-6,
                  tie_word_embeddings=False)
    if kind == "llama":
        cfg = LlamaConfig(**common, rope_theta=10000.0)
        model = LlamaForCausalLM(cfg)
    elif kind == "qwen2":  # q/k/v biases
        common.pop("head_dim")
        cfg = Qwen2Config(**common, rope_theta=1000000.0, use_sliding_window=False)
        model = Qwen2ForCausalLM(cfg)
    else:  # qwen3: per-head q/k RMSNorm
        cfg = Qwen3Config(**common, rope_theta=1000000.0)
        model = Qwen3ForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.08) if p.dim() > 1 else p.uniform_(0.8, 1.2)
        model.lm_head.weight.mul_(6.0)
    return model.eval()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--new", type=int, default=64)
    args = ap.parse_args()
    torch.manual_seed(1234)
    torch.set_num_threads(2)
    for kind in ("llama", "qwen2", "qwen3"):
        model = build(kind)
        d = os.path.join(args.out, kind)
        model.save_pretrained(d, safe_serialization=True)
        ids = torch.randint(3, 512, (1, 64), generator=torch.Generator().manual_seed(7))
        tensors = {"prompt_ids": ids}
        with torch.no_grad():
            tensors["prefill_logits"] = model(ids).logits[0].float().contiguous()
            for name, cc in CACHES.items():
                kw = {} if cc is None else {"cache_implementation": "quantized", "cache_config": dict(cc)}
                out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.new,
                                     do_sample=False, output_scores=True, return_dict_in_generate=True,
                                     eos_token_id=None, pad_token_id=0, **kw)
                scores = torch.stack([s[0] for s in out.scores]).float()
                top2 = scores.topk(2, dim=-1).values
                tensors[f"greedy.{name}"] = out.sequences[0, ids.shape[1]:].contiguous()
                tensors[f"margin.{name}"] = (top2[:, 0] - top2[:, 1]).contiguous()
            beams = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False,
                                   num_beams=4, num_return_sequences=4, length_penalty=1.0, early_stopping=False,
                                   output_scores=True, return_dict_in_generate=True, eos_token_id=None, pad_token_id=0)
            tensors["beam.sequences"] = beams.sequences[:, ids.shape[1]:].contiguous()
            tensors["beam.scores"] = beams.sequences_scores.float().contiguous()
        save_file(tensors, os.path.join(args.out, f"{kind}_ref.safetensors"), metadata={"caches": json.dumps(list(CACHES))})
        print(f"{kind}: saved to {d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
