#!/usr/bin/env python3
"""Writes Llama-family GGUF models with random weights, for speed benchmarks (tests/bench/bench_vs_llamacpp.sh).

    make_bench_models.py [--out DIR] [--size 1b|3b|llama3-8b|qwen2.5-7b|mistral-7b|qwen3-30b-a3b|qwen3moe-tiny|
                          gemma3-1b|gemma3-4b|gemma3-tiny|gpt-oss-20b|gpt-oss-tiny|gemma4-e2b|gemma4-31b|
                          gemma4-tiny ...]
                         [--type Q4_0|Q4_K|Q8_0 ...] [--layers N] [--seed N]

Shapes: 1b = TinyLlama-1.1B (hidden 2048, 22 layers, 32 heads, 4 KV heads, head dim 64, FFN 5632),
3b = Llama-3.2-3B (hidden 3072, 28 layers, 24 heads, 8 KV heads, head dim 128, FFN 8192), both with rope base 10000
and RMS eps 1e-5 (the 3b's rope base is not Llama-3.2's); the workstation shapes, with their models' rope base:
llama3-8b = Llama-3-8B (hidden 4096, 32 layers, 32 heads, 8 KV heads, head dim 128, FFN 14336, rope base 500000),
mistral-7b = Mistral-7B (v0.2/v0.3: the same shape, rope base 1000000; GGUF architecture llama, as llama.cpp's
converter writes it, full attention: no sliding window), qwen2.5-7b = Qwen2.5-7B (GGUF architecture qwen2: hidden
3584, 28 layers, 28 heads, 4 KV heads, head dim 128, FFN 18944, rope base 1000000, RMS eps 1e-6, with F32 q/k/v
biases). Every file has a context length of 8192 (the Gemma shapes their models': 32768, 131072) and vocab 49152, not the real models' vocabularies (128256, 152064,
32768), so the embedding and output matrices hold 0.40 G parameters (Qwen2.5-7B's shape: 0.35 G) where the real
Llama-3-8B has 1.05 G, Qwen2.5-7B 1.09 G and Mistral-7B 0.27 G; the layers are the real ones.
Mixture-of-experts shapes (GGUF architecture qwen3moe, q/k RMSNorm, rope base 1000000, RMS eps 1e-6):
qwen3-30b-a3b = Qwen3-30B-A3B's layers (hidden 2048, 32 heads, 4 KV heads, head dim 128, 128 experts of 768, 8 per
token; 48 layers, or --layers N of them, as many as the machine holds: one Q4_K layer is ~0.34 GB), and qwen3moe-tiny
(hidden 256, 4 layers, 4 heads, 2 KV heads, head dim 64, 8 experts of 128, 2 per token; Q8_0 only) for the CLI tests.
Their routers (ffn_gate_inp, F32) are Gaussian with std 0.02 like the matrices, so tokens spread over the experts.
Gemma 3 shapes (GGUF architecture gemma3 as llama.cpp's converter writes it: q/k norms, post-attention and post-FFN
norms, GELU FFN, tied output, sliding_window with llama.cpp's default pattern of 6 (five sliding layers, then a global
one), rope base 1000000 on the global layers and llama.cpp's 10000 on the sliding ones, RMS eps 1e-6):
gemma3-1b = Gemma-3-1B's layers (hidden 1152, 26 layers, 4 heads, 1 KV head, head dim 256, FFN 6912, window 512),
gemma3-4b = Gemma-3-4B's text layers (hidden 2560, 34 layers, 8 heads, 4 KV heads, head dim 256, FFN 10240, window
1024, linear RoPE scaling 8), and gemma3-tiny (hidden 256, 6 layers, 4 heads, 2 KV heads, head dim 64, FFN 512,
window 128; Q8_0 only) for the CLI tests.
The tokenizer (all tokenizer.* keys, vocab 49152) is copied from the embedded SmolLM2 GGUF, so llama.cpp and kvscope
can both tokenize. Norms are F32 ones; the matrices are Gaussian with std 0.02 (activations stay finite), quantized
by gguf.quants for Q4_0/Q8_0. The gguf package cannot quantize Q4_K, so Q4_K blocks are written directly: random
4-bit codes, per-sub-block scale = min (zero-mean blocks), d chosen so the values have std ~0.02. token_embd and
output (untied; the Gemma shapes tie them) are Q8_0 in every file. qwen2.5-7b's q/k/v biases are Gaussian with std 0.1, except that its k bias
spikes where the real model's k_proj bias does (values in the hundreds at the first and last layer): at layers 0 and
27, 4 channels each of magnitude 250 to 350 with random signs, which `kvscope-cli doctor` flags. Writing is one
core's work: a 7B/8B file takes ~20 s in Q4_K (random codes), 2 to 3 minutes in Q8_0 (gguf.quants; Q4_0 about half).
Idempotent: a file that exists with the same name, tensor count and a complete data section is kept; files are
written as NAME.part and renamed when complete.
gpt-oss shapes (GGUF architecture gpt-oss as llama.cpp's converter writes it: q/k/v/output biases, learned sinks around 1,
q and k projections of std 2 / sqrt(hidden) (there are no q/k norms: at 0.02 attention would be near uniform),
a biased router, experts with biases stored as MXFP4 whatever --type says (as gpt-oss GGUFs ship them: random codes
under random scales, std ~0.02), the even layers sliding over 128 tokens, rope base 150000 with YaRN by 32
over 4096, RMS eps 1e-5): gpt-oss-20b = gpt-oss-20b's layers (hidden 2880, 64 heads, 8 KV heads, head dim 64, 32
experts of 2880, 4 per token; 24 layers, or --layers N: one layer is ~0.42 GB) and gpt-oss-tiny (hidden 256, 4 layers,
4 heads, 2 KV heads, head dim 64, 8 experts of 128, 2 per token) for the CLI and KLD tests. Their attention matrices
(2880 columns) are no whole Q4_K blocks: Q8_0 or Q4_0 only.
Gemma 4 shapes (GGUF architecture gemma4 as llama.cpp's converter writes it: sliding layers by a bool per layer, full
layers of their own head size and KV heads (arrays), K = V where the full layers have no attn_v, rope_freqs of 1e30
for the three quarters of the full layers' pairs that keep still, rope base 1000000 (full) and 10000 (sliding), q/k
norms of d^-1/4 (attention is scaled by 1), the last shared_kv_layers layers with no K/V of their own and double-wide
MLPs, per-layer embeddings, soft-capping 30, tied output, RMS eps 1e-6): gemma4-e2b = Gemma-4-E2B's layers (hidden
1536, 35 layers, 8 heads, 1 KV head, head dim 256 / 512, FFN 6144, window 512, every 5th layer full, the last 20
sharing KV, PLE of 256), gemma4-31b = Gemma-4-31B's (hidden 5376, 60 layers, 32 heads, 16 KV heads of 256 / 4 of 512
with K = V, FFN 21504, window 1024, every 6th layer full) and gemma4-tiny (hidden 256, 8 layers, 4 heads, 2 KV heads of
64 / 1 of 128 with K = V, FFN 512, window 128, layers 4 and 7 full, the last 3 sharing KV, PLE of 32) for the CLI, GUI
and KLD tests. No --layers (the shared layers' sources are fixed by the count).
Output: DIR/random-<size>-<type>.gguf, one path per line on stdout.
"""
import argparse
import functools
import os
import sys
import time
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT
from gguf.quants import quantize, dequantize

CACHE = Path(os.environ.get("KVSCOPE_CACHE", Path.home() / ".cache" / "kvscope"))
TOKENIZER_FROM = CACHE / "model" / "SmolLM2-135M-Instruct.Q4_1.gguf"
SIZES = {  # hidden, layers, heads, kv heads, head dim, ffn
    "1b": (2048, 22, 32, 4, 64, 5632),
    "3b": (3072, 28, 24, 8, 128, 8192),
    "llama3-8b": (4096, 32, 32, 8, 128, 14336),
    "qwen2.5-7b": (3584, 28, 28, 4, 128, 18944),
    "mistral-7b": (4096, 32, 32, 8, 128, 14336),
    "qwen3-30b-a3b": (2048, 48, 32, 4, 128, 6144),
    "qwen3moe-tiny": (256, 4, 4, 2, 64, 512),
    "gemma3-1b": (1152, 26, 4, 1, 256, 6912),
    "gemma3-4b": (2560, 34, 8, 4, 256, 10240),
    "gemma3-tiny": (256, 6, 4, 2, 64, 512),
    "gpt-oss-20b": (2880, 24, 64, 8, 64, 2880),
    "gpt-oss-tiny": (256, 4, 4, 2, 64, 128),
    "gemma4-e2b": (1536, 35, 8, 1, 256, 6144),
    "gemma4-31b": (5376, 60, 32, 16, 256, 21504),
    "gemma4-tiny": (256, 8, 4, 2, 64, 512),
}
GEMMA4 = {  # window, full layers' head dim, full layers' KV heads, K = V, shared-KV layers, PLE width, double-wide
    # MLP on shared layers, sliding pattern period (the last layer full too)
    "gemma4-e2b": (512, 512, 1, False, 20, 256, True, 5),
    "gemma4-31b": (1024, 512, 4, True, 0, 0, False, 6),
    "gemma4-tiny": (128, 128, 1, True, 3, 32, True, 5),
}
GPT_OSS = {  # sliding window (even layers), YaRN factor, YaRN original context
    "gpt-oss-20b": (128, 32.0, 4096),
    "gpt-oss-tiny": (128, 32.0, 4096),
}
CONTEXT = {"gemma3-1b": 32768, "gemma3-4b": 131072, "gpt-oss-20b": 131072, "gpt-oss-tiny": 131072,
           "gemma4-e2b": 131072, "gemma4-31b": 262144, "gemma4-tiny": 131072}  # the real models' trained context; the others 8192
GEMMA = {  # sliding window, linear RoPE scaling of the global layers (None: none)
    "gemma3-1b": (512, None),
    "gemma3-4b": (1024, 8.0),
    "gemma3-tiny": (128, None),
}
MOE = {  # experts, experts per token, expert FFN
    "qwen3-30b-a3b": (128, 8, 768),
    "qwen3moe-tiny": (8, 2, 128),
    "gpt-oss-20b": (32, 4, 2880),
    "gpt-oss-tiny": (8, 2, 128),
}
ARCH = {  # GGUF architecture, rope base, RMS norm eps, q/k/v biases; sizes not listed: llama, 10000, 1e-5, none
    "llama3-8b": ("llama", 500000.0, 1e-5, False),
    "qwen2.5-7b": ("qwen2", 1000000.0, 1e-6, True),
    "mistral-7b": ("llama", 1000000.0, 1e-5, False),
    "qwen3-30b-a3b": ("qwen3moe", 1000000.0, 1e-6, False),
    "qwen3moe-tiny": ("qwen3moe", 1000000.0, 1e-6, False),
    "gemma3-1b": ("gemma3", 1000000.0, 1e-6, False),
    "gemma3-4b": ("gemma3", 1000000.0, 1e-6, False),
    "gemma3-tiny": ("gemma3", 1000000.0, 1e-6, False),
    "gpt-oss-20b": ("gpt-oss", 150000.0, 1e-5, True),
    "gpt-oss-tiny": ("gpt-oss", 150000.0, 1e-5, True),
    "gemma4-e2b": ("gemma4", 1000000.0, 1e-6, False),
    "gemma4-31b": ("gemma4", 1000000.0, 1e-6, False),
    "gemma4-tiny": ("gemma4", 1000000.0, 1e-6, False),
}
SHAPE_OF = {"llama3-8b": "Llama-3-8B", "qwen2.5-7b": "Qwen2.5-7B", "mistral-7b": "Mistral-7B",
            "qwen3-30b-a3b": "Qwen3-30B-A3B", "qwen3moe-tiny": "a tiny Qwen3-MoE", "gemma3-1b": "Gemma-3-1B", "gemma3-4b": "Gemma-3-4B",
            "gemma3-tiny": "a tiny Gemma 3", "gpt-oss-20b": "gpt-oss-20b", "gpt-oss-tiny": "a tiny gpt-oss",
            "gemma4-e2b": "Gemma-4-E2B", "gemma4-31b": "Gemma-4-31B", "gemma4-tiny": "a tiny Gemma 4"}
BIAS_STD = 0.1
K_SPIKES = 4, (250.0, 350.0)  # channels per spiked layer (the first and the last), magnitude range
TYPES = {"Q4_0": QT.Q4_0, "Q4_K": QT.Q4_K, "Q8_0": QT.Q8_0}
FILE_TYPE = {"Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0, "Q4_K": gguf.LlamaFileType.MOSTLY_Q4_K_M,
             "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}
STD = 0.02
VOCAB = 49152  # SmolLM2's, checked against the tokenizer file
ROWS_PER_CHUNK = 1024


def nbytes(shape, qtype):
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n = int(np.prod(shape))
    assert shape[-1] % block == 0, (shape, qtype)
    return n // block * size


def q4k_blocks(n_blocks, rng):
    """Random valid Q4_K blocks (144 bytes per 256 values): value = d*sc*q - dmin*m, with m = sc and dmin = 7.5*d
    so each 32-value sub-block has mean ~0 and std d*sc*4.6 (q uniform in 0..15)."""
    sc = rng.integers(24, 41, size=(n_blocks, 8), dtype=np.uint8)  # 6-bit scales, mean 32
    m = sc
    d = (STD / (32 * 4.61) * (1 + 0.1 * rng.standard_normal(n_blocks))).astype(np.float16)
    dmin = (d.astype(np.float32) * 7.5).astype(np.float16)
    scales = np.empty((n_blocks, 12), np.uint8)  # packing of ggml's get_scale_min_k4
    scales[:, 0:4] = sc[:, :4] | ((sc[:, 4:] >> 4) << 6)
    scales[:, 4:8] = m[:, :4] | ((m[:, 4:] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:] & 0xF) | ((m[:, 4:] & 0xF) << 4)
    qs = rng.integers(0, 256, size=(n_blocks, 128), dtype=np.uint8)
    return np.concatenate([d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2), scales, qs], axis=1)


def mxfp4_blocks(n_blocks, rng):
    """Random MXFP4 blocks (17 bytes per 32 values): uniform 4-bit codes (doubled E2M1 values, rms 5.85) times
    2^(e - 128) for E8M0 bytes e of 119 to 121, so the values have std ~0.02 like the other matrices."""
    e = rng.integers(119, 121, size=(n_blocks, 1), dtype=np.uint8, endpoint=True)
    return np.concatenate([e, rng.integers(0, 256, size=(n_blocks, 16), dtype=np.uint8)], axis=1)


def random_matrix(shape, qtype, rng, std=STD):
    """Quantized bytes of a (..., rows, cols) Gaussian matrix of standard deviation `std` (Q4_K and MXFP4 blocks:
    ~STD), generated ROWS_PER_CHUNK rows at a time."""
    rows, cols = int(np.prod(shape[:-1])), shape[-1]
    out = np.empty(nbytes(shape, qtype), np.uint8).reshape(rows, -1)
    for r in range(0, rows, ROWS_PER_CHUNK):
        n = min(ROWS_PER_CHUNK, rows - r)
        if qtype == QT.MXFP4:
            out[r:r + n] = mxfp4_blocks(n * cols // 32, rng).reshape(n, -1)
        elif qtype == QT.Q4_K:
            out[r:r + n] = q4k_blocks(n * cols // 256, rng).reshape(n, -1)
        else:
            x = rng.standard_normal((n, cols), dtype=np.float32)
            x *= std
            out[r:r + n] = quantize(x, qtype)
    return out.reshape(-1)


def check_q4k(rng):
    x = dequantize(q4k_blocks(4096, rng), QT.Q4_K)
    assert np.isfinite(x).all() and 0.015 < x.std() < 0.025 and abs(x.mean()) < 2e-3 and np.abs(x).max() < 0.2, \
        (x.std(), x.mean(), np.abs(x).max())


def arch_of(size):
    return ARCH.get(size, ("llama", 10000.0, 1e-5, False))


def bias_vector(tensor, shape, layers, rng):
    """A q/k/v bias: Gaussian with std BIAS_STD; the k bias of the first and last layer with K_SPIKES spikes."""
    b = rng.standard_normal(shape, dtype=np.float32)
    b *= BIAS_STD
    layer = int(tensor.split(".")[1])
    if tensor.endswith("attn_k.bias") and layer in (0, layers - 1):
        n, (lo, hi) = K_SPIKES
        channels = rng.choice(shape[0], size=n, replace=False)
        b[channels] = rng.uniform(lo, hi, size=n) * rng.choice([-1.0, 1.0], size=n)
    return b


def dims_of(size, layers=None):
    hidden, n, heads, kv, hd, ffn = SIZES[size]
    return hidden, layers or n, heads, kv, hd, ffn


def gemma4_layers(size, layers):
    """Per layer (sliding, head dim, KV heads, own KV, K = V, FFN width) of a Gemma 4 shape: the sliding pattern by its
    period with the last layer full, the full layers' head size and KV heads, the last `shared` layers reading
    llama.cpp's source layers (n - shared - 1 full, - 2 sliding), double-wide MLPs there."""
    hidden, n, heads, kv, hd, ffn = dims_of(size, layers)
    window, ghd, gkv, keqv, shared, ple, wide, period = GEMMA4[size]
    out = []
    for i in range(n):
        sliding = (i + 1) % period != 0 and i != n - 1
        own = i < n - shared
        out.append((sliding, hd if sliding else ghd, kv if sliding else gkv, own, keqv and not sliding,
                    ffn * (2 if wide and not own else 1)))
    return out


def tensor_plan(size, wtype, layers=None):
    hidden, layers, heads, kv, hd, ffn = dims_of(size, layers)
    if size in GEMMA4:
        return gemma4_plan(size, wtype, layers)
    bias = arch_of(size)[3]
    moe = MOE.get(size)
    plan = [("token_embd.weight", (VOCAB, hidden), QT.Q8_0)]
    for i in range(layers):
        p = f"blk.{i}."
        qkv = [(p + "attn_q.weight", (heads * hd, hidden), wtype),
               (p + "attn_k.weight", (kv * hd, hidden), wtype),
               (p + "attn_v.weight", (kv * hd, hidden), wtype)]
        if bias:  # each bias after its matrix, as llama.cpp's converter orders them
            qkv = [qkv[0], (p + "attn_q.bias", (heads * hd,), QT.F32), qkv[1], (p + "attn_k.bias", (kv * hd,), QT.F32),
                   qkv[2], (p + "attn_v.bias", (kv * hd,), QT.F32)]
        plan += [(p + "attn_norm.weight", (hidden,), QT.F32),
                 *qkv,
                 (p + "attn_output.weight", (hidden, heads * hd), wtype)]
        if size in GPT_OSS:  # biases everywhere, sinks, the FFN norm as post_attention_norm, MXFP4 experts
            experts, _, eff = moe
            plan += [(p + "attn_output.bias", (hidden,), QT.F32),
                     (p + "attn_sinks.weight", (heads,), QT.F32),
                     (p + "post_attention_norm.weight", (hidden,), QT.F32),
                     (p + "ffn_gate_inp.weight", (experts, hidden), QT.F32),
                     (p + "ffn_gate_inp.bias", (experts,), QT.F32)]
            for t, shape in (("gate", (experts, eff, hidden)), ("up", (experts, eff, hidden)),
                             ("down", (experts, hidden, eff))):
                plan += [(p + f"ffn_{t}_exps.weight", shape, QT.MXFP4), (p + f"ffn_{t}_exps.bias", shape[:2], QT.F32)]
        elif moe:  # Qwen3: per-head q/k RMSNorm; the experts stacked [experts, rows, cols] as llama.cpp's converter does
            experts, _, eff = moe
            plan += [(p + "attn_q_norm.weight", (hd,), QT.F32), (p + "attn_k_norm.weight", (hd,), QT.F32),
                     (p + "ffn_norm.weight", (hidden,), QT.F32),
                     (p + "ffn_gate_inp.weight", (experts, hidden), QT.F32),
                     (p + "ffn_gate_exps.weight", (experts, eff, hidden), wtype),
                     (p + "ffn_up_exps.weight", (experts, eff, hidden), wtype),
                     (p + "ffn_down_exps.weight", (experts, hidden, eff), wtype)]
        elif size in GEMMA:  # Gemma 3: q/k norms and the sandwich norms around attention and FFN
            plan += [(p + "attn_q_norm.weight", (hd,), QT.F32), (p + "attn_k_norm.weight", (hd,), QT.F32),
                     (p + "post_attention_norm.weight", (hidden,), QT.F32),
                     (p + "ffn_norm.weight", (hidden,), QT.F32),
                     (p + "ffn_gate.weight", (ffn, hidden), wtype),
                     (p + "ffn_up.weight", (ffn, hidden), wtype),
                     (p + "ffn_down.weight", (hidden, ffn), wtype),
                     (p + "post_ffw_norm.weight", (hidden,), QT.F32)]
        else:
            plan += [(p + "ffn_norm.weight", (hidden,), QT.F32),
                     (p + "ffn_gate.weight", (ffn, hidden), wtype),
                     (p + "ffn_up.weight", (ffn, hidden), wtype),
                     (p + "ffn_down.weight", (hidden, ffn), wtype)]
    plan += [("output_norm.weight", (hidden,), QT.F32)]
    if size not in GEMMA:  # Gemma ties its output matrix to the embedding
        plan += [("output.weight", (VOCAB, hidden), QT.Q8_0)]
    return plan


def gemma4_plan(size, wtype, layers):
    """Gemma 4 as llama.cpp's converter writes it (conversion/gemma.py, Gemma4Model): rope_freqs, per-layer embeddings
    (token table Q8_0 like token_embd), q/k norms of the layer's head size (no k norm, k or v on shared layers; no v
    with K = V), the sandwich norms, the layer scalar, the PLE gate, projection and norm."""
    hidden, n, heads, kv, hd, ffn = dims_of(size, layers)
    ple = GEMMA4[size][5]
    ghd = GEMMA4[size][1]
    plan = [("rope_freqs.weight", (ghd // 2,), QT.F32), ("token_embd.weight", (VOCAB, hidden), QT.Q8_0)]
    if ple:
        plan += [("per_layer_token_embd.weight", (VOCAB, n * ple), QT.Q8_0),
                 ("per_layer_model_proj.weight", (n * ple, hidden), wtype),
                 ("per_layer_proj_norm.weight", (ple,), QT.F32)]
    for i, (sliding, d, h, own, keqv, f) in enumerate(gemma4_layers(size, layers)):
        p = f"blk.{i}."
        plan += [(p + "attn_norm.weight", (hidden,), QT.F32), (p + "attn_q.weight", (heads * d, hidden), wtype)]
        if own:
            plan += [(p + "attn_k.weight", (h * d, hidden), wtype)]
            if not keqv:
                plan += [(p + "attn_v.weight", (h * d, hidden), wtype)]
        plan += [(p + "attn_output.weight", (hidden, heads * d), wtype), (p + "attn_q_norm.weight", (d,), QT.F32)]
        if own:
            plan += [(p + "attn_k_norm.weight", (d,), QT.F32)]
        plan += [(p + "post_attention_norm.weight", (hidden,), QT.F32), (p + "ffn_norm.weight", (hidden,), QT.F32),
                 (p + "ffn_gate.weight", (f, hidden), wtype), (p + "ffn_up.weight", (f, hidden), wtype),
                 (p + "ffn_down.weight", (hidden, f), wtype), (p + "post_ffw_norm.weight", (hidden,), QT.F32),
                 (p + "layer_output_scale.weight", (1,), QT.F32)]
        if ple:
            plan += [(p + "inp_gate.weight", (ple, hidden), wtype), (p + "proj.weight", (hidden, ple), wtype),
                     (p + "post_norm.weight", (hidden,), QT.F32)]
    plan += [("output_norm.weight", (hidden,), QT.F32)]
    return plan


def is_complete(path, name, n_tensors):
    try:
        r = gguf.GGUFReader(path)
        end = max(t.data_offset + t.n_bytes for t in r.tensors)
        return (r.fields["general.name"].contents() == name and len(r.tensors) == n_tensors
                and os.path.getsize(path) >= end)
    except Exception:
        return False


def write_model(out_dir, size, tname, tokenizer_from, seed, n_layers=None):
    name = f"random-{size}{f'-L{n_layers}' if n_layers else ''}-{tname}"
    path = out_dir / f"{name}.gguf"
    plan = tensor_plan(size, TYPES[tname], n_layers)
    if path.exists() and is_complete(path, name, len(plan)):
        print(f"{path}: exists, kept", file=sys.stderr)
        return path
    tok = read_tokenizer(tokenizer_from)
    hidden, layers, heads, kv, hd, ffn = dims_of(size, n_layers)
    arch, rope_base, rms_eps, _ = arch_of(size)
    part = path.with_name(path.name + ".part")
    w = gguf.GGUFWriter(part, arch)
    w.add_name(name)
    shape_of = SHAPE_OF.get(size, f"a {size} Llama")
    w.add_description(f"random weights (std {STD}, seed {seed}) in the shape of {shape_of}; for benchmarks only")
    w.add_context_length(CONTEXT.get(size, 8192))
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_head_count(heads)
    if size in GEMMA4:  # per-layer KV heads and FFN widths, full and sliding head sizes, the pattern, shared KV, PLE
        window, ghd, _, _, shared, ple, _, _ = GEMMA4[size]
        spec = gemma4_layers(size, n_layers)
        w.add_array(f"{arch}.attention.head_count_kv", [h for _, _, h, _, _, _ in spec])
        w.add_array(f"{arch}.feed_forward_length", [f for *_, f in spec])
        w.add_key_length(ghd)
        w.add_value_length(ghd)
        w.add_rope_dimension_count(ghd)
        w.add_uint32(f"{arch}.attention.key_length_swa", hd)
        w.add_uint32(f"{arch}.attention.value_length_swa", hd)
        w.add_uint32(f"{arch}.rope.dimension_count_swa", hd)
        w.add_float32(f"{arch}.rope.freq_base_swa", 10000.0)
        w.add_sliding_window(window)
        w.add_array(f"{arch}.attention.sliding_window_pattern", [s for s, *_ in spec])
        w.add_uint32(f"{arch}.attention.shared_kv_layers", shared)
        w.add_uint32(f"{arch}.embedding_length_per_layer_input", ple)
        w.add_float32(f"{arch}.final_logit_softcapping", 30.0)
    else:
        w.add_feed_forward_length(ffn)
        w.add_head_count_kv(kv)
        w.add_key_length(hd)
        w.add_value_length(hd)
        w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(rope_base)
    w.add_layer_norm_rms_eps(rms_eps)
    w.add_vocab_size(VOCAB)
    if size in MOE:
        experts, used, eff = MOE[size]
        w.add_expert_count(experts)
        w.add_expert_used_count(used)
        w.add_expert_feed_forward_length(eff)
    if size in GPT_OSS:
        window, yarn, original = GPT_OSS[size]
        w.add_sliding_window(window)
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(yarn)
        w.add_rope_scaling_orig_ctx_len(original)
    if size in GEMMA:
        window, linear = GEMMA[size]
        w.add_sliding_window(window)
        if linear:
            w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            w.add_rope_scaling_factor(linear)
    w.add_file_type(FILE_TYPE[tname])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for key, (value, vtype, sub) in tok.items():
        w.add_key_value(key, value, vtype, sub_type=sub)
    for tensor, shape, qtype in plan:
        w.add_tensor_info(tensor, shape, np.dtype(np.float32), nbytes(shape, qtype) if qtype != QT.F32
                          else 4 * int(np.prod(shape)), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    start, done, total = time.time(), 0, sum(nbytes(s, q) if q != QT.F32 else 4 * int(np.prod(s)) for _, s, q in plan)
    for i, (tensor, shape, qtype) in enumerate(plan):
        if tensor.endswith(".bias") and size in GPT_OSS:
            data = (rng.standard_normal(shape, dtype=np.float32) * BIAS_STD).astype(np.float32)
        elif tensor.endswith("attn_sinks.weight"):  # gpt-oss's learned sink logits: around 1, as trained ones sit
            data = (1.0 + rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
        elif tensor.endswith(".bias"):
            data = bias_vector(tensor, shape, layers, rng)
        elif tensor.endswith("ffn_gate_inp.weight"):
            data = rng.standard_normal(shape, dtype=np.float32) * STD
        elif tensor == "rope_freqs.weight":  # Gemma 4's proportional RoPE: a quarter of the full layers' pairs rotate
            data = np.where(np.arange(shape[0]) < shape[0] // 4, 1.0, 1e30).astype(np.float32)
        elif size in GEMMA4 and tensor.endswith(("attn_q_norm.weight", "attn_k_norm.weight")):
            # Attention is scaled by 1: q and k norms of d^-1/4 each give scores of about unit spread, as trained ones
            data = np.full(shape, shape[0] ** -0.25, np.float32)
        else:
            # gpt-oss has no q/k norms: its q and k projections are drawn at 2 / sqrt(hidden), so each query and key
            # channel has a magnitude near 2 (a Qwen3's or Gemma's q/k norms give them about 1), scores spread
            # over a few units and attention reads its cache; at STD they would be near uniform.
            qk = size in GPT_OSS and tensor.endswith(("attn_q.weight", "attn_k.weight"))
            std = 2.0 / np.sqrt(hidden) if qk else STD
            data = np.ones(shape, np.float32) if qtype == QT.F32 else random_matrix(shape, qtype, rng, std)
        w.write_tensor_data(data)
        done += data.nbytes
        if i % 9 == 0 or i == len(plan) - 1:
            print(f"\r{name}: {done / 2**20:7.0f} / {total / 2**20:.0f} MiB, {time.time() - start:5.1f} s",
                  end="", file=sys.stderr, flush=True)
    w.close()
    os.replace(part, path)
    print(f"\n{path}: written", file=sys.stderr)
    return path


@functools.cache
def read_tokenizer(path):
    r = gguf.GGUFReader(path)
    assert int(r.fields["llama.vocab_size"].contents()) == VOCAB
    tok = {}
    for key, f in r.fields.items():
        if key.startswith("tokenizer."):
            sub = f.types[1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
            tok[key] = (f.contents(), f.types[0], sub)
    assert len(tok["tokenizer.ggml.tokens"][0]) == VOCAB
    return tok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=CACHE / "bench-models")
    ap.add_argument("--size", action="append", choices=sorted(SIZES))
    ap.add_argument("--type", action="append", choices=sorted(TYPES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, help="the first N layers of the shape (MoE shapes larger than memory)")
    ap.add_argument("--tokenizer-from", type=Path, default=TOKENIZER_FROM)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    check_q4k(np.random.default_rng(1))
    for size in a.size or ["1b"]:
        for tname in a.type or sorted(TYPES):
            if size in GPT_OSS and tname == "Q4_K":
                ap.error(f"{size}: its 2880-column matrices are no whole Q4_K blocks (Q8_0 or Q4_0)")
            if size == "gemma4-tiny" and tname == "Q4_K":
                ap.error(f"{size}: its 32-column PLE projections are no whole Q4_K blocks (Q8_0 or Q4_0)")
            if size in GEMMA4 and a.layers:
                ap.error(f"{size}: --layers would cut its shared-KV layers from their sources")
            print(write_model(a.out, size, tname, a.tokenizer_from, a.seed, a.layers))


if __name__ == "__main__":
    main()
