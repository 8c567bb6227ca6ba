#!/usr/bin/env python3
"""Reference run of the embedded SmolLM2 GGUF through transformers' own GGUF loader (weights dequantized by the
`gguf` package, fp32): prompt ids, prefill logits, and 64 greedy tokens with the dynamic cache and with transformers'
QuantizedCache backends (fp8, quanto int4, hqq int4), plus the top-2 logit margin at every greedy step (a divergence
is only acceptable where that margin is a genuine tie). Written as safetensors for tests/parity/test_model_parity.cpp.
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
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

PROMPT = [
    {"role": "user", "content": "Explain in two sentences why quantizing a transformer's key-value cache saves memory, "
                                "and what it can cost in accuracy."},
]
CONFIGS = {
    "dynamic": None,
    "fp8": {"backend": "fp8"},
    "quanto_int4": {"backend": "quanto", "nbits": 4},
    "hqq_int4": {"backend": "hqq", "nbits": 4},
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--new", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(2)
    d, name = os.path.split(os.path.abspath(args.model))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32)
    model.eval()
    text = tok.apply_chat_template(PROMPT, tokenize=False, add_generation_prompt=True)
    ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]], dtype=torch.long)
    tensors = {"prompt_ids": ids}
    with torch.no_grad():
        tensors["prefill_logits"] = model(ids).logits[0].float().contiguous()
        for cname, cfg in CONFIGS.items():
            kw = {} if cfg is None else {"cache_implementation": "quantized", "cache_config": dict(cfg)}
            # An explicit all-ones mask: the prompt holds <|im_end|> (id 2), which is also the pad id, and generate()
            # would otherwise infer a mask that hides those tokens.
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.new, do_sample=False, output_scores=True,
                                 return_dict_in_generate=True, eos_token_id=None, pad_token_id=tok.eos_token_id, **kw)
            new = out.sequences[0, ids.shape[1]:]
            scores = torch.stack([s[0] for s in out.scores]).float()
            top2 = scores.topk(2, dim=-1).values
            tensors[f"greedy.{cname}"] = new.contiguous()
            tensors[f"margin.{cname}"] = (top2[:, 0] - top2[:, 1]).contiguous()
    meta = {"prompt_text": text, "configs": json.dumps(list(CONFIGS)), "reference_text": tok.decode(tensors["greedy.dynamic"])}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    save_file(tensors, args.out, metadata=meta)
    print(f"prompt {ids.shape[1]} tokens; dynamic greedy: {meta['reference_text']!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
