#!/usr/bin/env python3
"""Tiny random Llama, Qwen2, Qwen3 and Qwen3-MoE models, built offline by transformers and saved as Hugging Face
directories (config.json + model.safetensors), with their reference outputs: logits over a 64-token prompt, and 64 greedy tokens
with the dynamic cache and with QuantizedCache fp8 / quanto int4 / hqq int4, plus the top-2 margins of each step.
The output head is scaled up so that greedy decoding is decided by clear margins, not ties.

Two sliding-window models (dynamic cache only: transformers' QuantizedCache refuses them): `qwen3_swa` (Qwen3 with
use_sliding_window, layers 1-2 over 16 positions) and `mistral_swa` (every layer over 24), so that the 64-token prompt
and the 64 new tokens run far past each window.

Two Qwen3-MoE models: `qwen3_moe` as transformers' defaults route (norm_topk_prob false) with layer 1 dense
(mlp_only_layers), and `qwen3moe_gguf` as Qwen3-30B-A3B routes (norm_topk_prob true, every layer MoE), which is also
written as an F32 GGUF the way llama.cpp's converter names it (qwen3moe.gguf): the same reference holds for both files.

Two Gemma 3 models (dynamic cache only, as they slide): `gemma3` as the 1B-12B are built (six layers, the default
pattern: five slide over 16 positions with the local RoPE base, the sixth is global with linear RoPE scaling 4,
query_pre_attn_scalar = head_dim, an output matrix of its own), also written as gemma3.gguf the way llama.cpp's converter writes it
(norms stored as 1 + w); and `gemma3_27b` as the 27B scales its scores (query_pre_attn_scalar = hidden / heads, not
head_dim), with an explicit layer_types list, final logit soft-capping and tied embeddings, as a multimodal wrapper's text_config
(v5's model.language_model.* names).

Two gpt-oss models (dynamic cache only, as they slide): four layers alternating a 16-position window and full attention,
learned sinks, attention biases, 8 experts of 64 with biases behind a biased router (top 2 softmaxed among themselves), the
clamped SwiGLU, YaRN by 32 over 4096 positions. `gpt_oss` keeps GptOssConfig's untruncated YaRN (truncate false, as the
published configs); `gpt_oss_gguf` truncates it (as llama.cpp always does), has its experts rounded to MXFP4 values, and is
also written as gpt-oss.gguf the way llama.cpp's converter writes it (MXFP4 experts, gate and up split, the FFN norm as
post_attention_norm) and as gpt_oss_mxfp4/, the layout of OpenAI's published checkpoints (MXFP4 `*_blocks` /
`*_scales` experts): the same reference holds for all three.

Three Gemma 4 models (dynamic cache only, as they slide), each with norms scaling by w as stored, values RMS-normed,
attention scaled by 1, a layer scalar per layer and final soft-capping: `gemma4` as the 31B is built (five layers over a
16-position window with head size 32, the sixth full with head size 64, one KV head, K = V, proportional RoPE on a
quarter of its pairs; saved by Gemma4ForCausalLM, its config carrying transformers' per_layer_config); `gemma4_e2b` as
the E2B/E4B are (per-layer embeddings, the last three of eight layers reading layer 3's or 4's KV with double-wide
MLPs; saved as a Gemma4ForConditionalGeneration's text half with global_head_dim, as the published configs);
`gemma4_moe` as the 26B-A4B is (every layer's MLP beside 8 experts of 32, top 2, with Gemma 4's router). The last two
are also written as GGUFs the way llama.cpp's converter writes them (gemma4-e2b.gguf, gemma4-moe.gguf: per-layer KV
heads and MLP widths as arrays, the sliding pattern as bools, rope_freqs of 1e30 for the pairs that keep still, the
experts' gate and up stacked), against the same references.
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
import numpy as np  # noqa: E402
from transformers import (Gemma3ForCausalLM, Gemma3TextConfig, Gemma4ForCausalLM, Gemma4TextConfig, GptOssConfig, GptOssForCausalLM,  # noqa: E402
                          LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

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
    elif kind == "qwen3":  # per-head q/k RMSNorm
        cfg = Qwen3Config(**common, rope_theta=1000000.0)
        model = Qwen3ForCausalLM(cfg)
    elif kind == "qwen3_swa":  # layers 1 and 2 slide over 16 positions (max_window_layers 1)
        cfg = Qwen3Config(**common, rope_theta=1000000.0, use_sliding_window=True, sliding_window=16,
                          max_window_layers=1)
        model = Qwen3ForCausalLM(cfg)
    elif kind == "mistral_swa":  # every layer slides over 24 positions
        cfg = MistralConfig(**common, rope_theta=10000.0, sliding_window=24)
        model = MistralForCausalLM(cfg)
    elif kind == "gemma3":  # layers 0-4 slide over 16 (local RoPE base 10000), layer 5 global (1e6, linear x4)
        common.update(num_hidden_layers=6)
        cfg = Gemma3TextConfig(**common, sliding_window=16, query_pre_attn_scalar=32,
                               rope_scaling={"rope_type": "linear", "factor": 4.0})
        model = Gemma3ForCausalLM(cfg)
    elif kind == "gemma3_27b":  # head_dim 64, scores scaled by 1/sqrt(hidden / heads = 32), soft-capped logits
        common.update(num_hidden_layers=4, tie_word_embeddings=True, head_dim=64)
        cfg = Gemma3TextConfig(**common, sliding_window=12, query_pre_attn_scalar=32, final_logit_softcapping=30.0,
                               layer_types=["sliding_attention", "full_attention", "sliding_attention",
                                            "sliding_attention"], rope_theta=500000.0, rope_local_base_freq=20000.0)
        model = Gemma3ForCausalLM(cfg)
    elif kind.startswith("gemma4"):
        common.update(num_hidden_layers=6, tie_word_embeddings=True)
        g4 = dict(sliding_window=16, global_head_dim=64, final_logit_softcapping=30.0, hidden_size_per_layer_input=0)
        if kind == "gemma4":  # 31B-like: K = V on the full layer, one KV head there
            g4.update(attention_k_eq_v=True, num_global_key_value_heads=1)
        elif kind == "gemma4_e2b":  # E2B-like: PLE, layers 5-6 share layer 3's (sliding) KV, 7 layer 4's (full)
            common.update(num_hidden_layers=8)
            g4.update(hidden_size_per_layer_input=16, vocab_size_per_layer_input=512, num_kv_shared_layers=3,
                      use_double_wide_mlp=True,
                      layer_types=["full_attention" if i in (4, 7) else "sliding_attention" for i in range(8)])
        else:  # 26B-A4B-like: the dense MLP beside 8 experts of 32, top 2
            g4.update(attention_k_eq_v=True, num_global_key_value_heads=1, enable_moe_block=True, num_experts=8,
                      top_k_experts=2, moe_intermediate_size=32)
        cfg = Gemma4TextConfig(**common, **g4)
        model = Gemma4ForCausalLM(cfg)
    elif kind.startswith("gpt_oss"):  # layers 0 and 2 slide over 16, 1 and 3 are global; sinks; 8 experts of 64, top 2
        common.update(num_hidden_layers=4, intermediate_size=64, max_position_embeddings=131072)
        yarn = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                "truncate": kind == "gpt_oss_gguf", "original_max_position_embeddings": 4096}
        cfg = GptOssConfig(**common, num_local_experts=8, num_experts_per_tok=2, sliding_window=16,
                           rope_parameters=yarn)
        model = GptOssForCausalLM(cfg)
    else:  # Qwen3-MoE: 8 experts of 64, top 2
        moe = dict(moe_intermediate_size=64, num_experts=8, num_experts_per_tok=2, decoder_sparse_step=1)
        if kind == "qwen3_moe":
            moe.update(norm_topk_prob=False, mlp_only_layers=[1])
        else:
            moe.update(norm_topk_prob=True, mlp_only_layers=[])
        cfg = Qwen3MoeConfig(**common, **moe, rope_theta=1000000.0)
        model = Qwen3MoeForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.08) if p.dim() > 1 else p.uniform_(0.8, 1.2)
        if not model.config.tie_word_embeddings:
            model.lm_head.weight.mul_(6.0)
        elif kind.startswith("gemma4"):  # norms scale by w: the output matrix is the embedding, the final norm scales up
            model.model.embed_tokens.weight.mul_(0.25)
            model.model.norm.weight.uniform_(16.0, 24.0)
            for name, b in model.named_buffers():
                if name.endswith("layer_scalar"):
                    b.uniform_(0.5, 1.5)
        else:  # Gemma: the norms scale by 1 + w; the output matrix is the embedding, so the final norm scales up
            for name, p in model.named_parameters():
                if p.dim() == 1:
                    p.uniform_(-0.2, 0.2)
            model.model.embed_tokens.weight.mul_(0.25)  # so that the token's own embedding does not drown the rest
            model.model.norm.weight.uniform_(16.0, 24.0)
        if kind.startswith("gpt_oss"):  # biases small, sinks large enough to take a share of each softmax
            for name, p in model.named_parameters():
                if name.endswith("bias"):
                    p.normal_(0.0, 0.1)
                elif name.endswith("sinks"):
                    p.normal_(1.0, 1.0)
            if kind == "gpt_oss_gguf":
                for layer in model.model.layers:
                    ex = layer.mlp.experts
                    ex.gate_up_proj.copy_(mxfp4_round(ex.gate_up_proj.transpose(-1, -2)).transpose(-1, -2))
                    ex.down_proj.copy_(mxfp4_round(ex.down_proj.transpose(-1, -2)).transpose(-1, -2))
    return model.eval()


def mxfp4_bytes(w):
    """w [..., rows, cols] as ggml's MXFP4 rows (blocks of 32 along cols), as the gguf package quantizes it."""
    import gguf
    return gguf.quants.quantize(np.ascontiguousarray(w.detach().float().numpy()), gguf.GGMLQuantizationType.MXFP4)


def mxfp4_round(w):
    """w's values rounded to MXFP4 along its rows (what llama.cpp's MXFP4 experts hold)."""
    import gguf
    q = gguf.quants.dequantize(mxfp4_bytes(w), gguf.GGMLQuantizationType.MXFP4)
    return torch.from_numpy(np.ascontiguousarray(q)).reshape(w.shape).to(w.dtype)


def save_gptoss_mxfp4(model, d):
    """The model as OpenAI's published gpt-oss checkpoints store it: the experts' gate_up_proj and down_proj as MXFP4
    `*_blocks` (U8 [experts, rows, groups, 16], the even element in the low nibble) and `*_scales` (U8 E8M0 exponents),
    rows being the outputs, and quantization_config mxfp4 in config.json. The experts were rounded to MXFP4 values
    (build), so the blocks hold them exactly."""
    model.save_pretrained(d, safe_serialization=True)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn",
                                  "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    for layer in range(model.config.num_hidden_layers):
        for name in ("gate_up_proj", "down_proj"):
            key = f"model.layers.{layer}.mlp.experts.{name}"
            w = sd.pop(key).transpose(-1, -2)  # [experts, outputs, inputs]
            q = np.asarray(mxfp4_bytes(w)).reshape(*w.shape[:-1], w.shape[-1] // 32, 17)
            codes = np.concatenate([q[..., 1:17] & 0x0F, q[..., 1:17] >> 4], axis=-1)  # element i's code, i < 32
            packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
            sd[key + "_blocks"] = torch.from_numpy(np.ascontiguousarray(packed))
            sd[key + "_scales"] = torch.from_numpy(np.ascontiguousarray(q[..., 0]))
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})


def save_multimodal(model, d, family="gemma3"):
    """The model as a Gemma3ForConditionalGeneration (Gemma4...) checkpoint's text half: config.json with the text
    config under text_config, weights under model.language_model.*. Gemma 3's leaves its model_type out (the wrapper's
    names the family); Gemma 4's is written as the published configs write it: global_head_dim (and
    num_global_key_value_heads) rather than transformers' per_layer_config."""
    os.makedirs(d, exist_ok=True)
    text = model.config.to_dict()
    if family == "gemma3":
        text.pop("model_type", None)
    for layer in (text.pop("per_layer_config", None) or {}).values():
        text["global_head_dim"] = layer["head_dim"]
        if "num_key_value_heads" in layer:
            text["num_global_key_value_heads"] = layer["num_key_value_heads"]
    arch = "Gemma3ForConditionalGeneration" if family == "gemma3" else "Gemma4ForConditionalGeneration"
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"model_type": family, "architectures": [arch], "text_config": text}, f, indent=1)
    sd = {("model.language_model." + k[len("model."):]): v.detach().contiguous()
          for k, v in model.state_dict().items() if k.startswith("model.")}
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})


def write_gemma3_gguf(model, path):
    """The model as llama.cpp's converter writes a Gemma 3 (architecture gemma3, conversion/gemma.py): F32 tensors,
    every norm weight stored as 1 + w, the window and the global RoPE (freq_base, linear
    scaling) as metadata, the pattern left to llama.cpp's default of 6."""
    import gguf
    cfg = model.config
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    w = gguf_writer(model, path, "gemma3", cfg.rope_parameters["full_attention"]["rope_theta"])
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
    w.add_rope_scaling_factor(cfg.rope_parameters["full_attention"]["factor"])
    w.add_sliding_window(cfg.sliding_window)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"] + 1)
    w.add_tensor("output.weight", sd["lm_head.weight"])
    names = {"input_layernorm.weight": "attn_norm", "self_attn.q_proj.weight": "attn_q",
             "self_attn.k_proj.weight": "attn_k", "self_attn.v_proj.weight": "attn_v",
             "self_attn.o_proj.weight": "attn_output", "self_attn.q_norm.weight": "attn_q_norm",
             "self_attn.k_norm.weight": "attn_k_norm", "post_attention_layernorm.weight": "post_attention_norm",
             "pre_feedforward_layernorm.weight": "ffn_norm", "post_feedforward_layernorm.weight": "post_ffw_norm",
             "mlp.gate_proj.weight": "ffn_gate", "mlp.up_proj.weight": "ffn_up", "mlp.down_proj.weight": "ffn_down"}
    for layer in range(cfg.num_hidden_layers):
        for hf, gg in names.items():
            t = sd[f"model.layers.{layer}.{hf}"]
            w.add_tensor(f"blk.{layer}.{gg}.weight", t + 1 if hf.endswith("norm.weight") else t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_gemma4_gguf(model, path):
    """The model as llama.cpp's converter writes a Gemma 4 (conversion/gemma.py, Gemma4Model): F32, norms as stored,
    head sizes full/swa, per-layer KV heads and MLP widths as arrays, the sliding pattern as bools, the shared-KV count,
    the per-layer-embedding width, rope_freqs (1 for the rotated pairs of the full layers, 1e30 for the rest), the
    router's scale and per-expert scale, the experts' [experts, 2 ff, hidden] unsplit."""
    import gguf
    cfg = model.config
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    a = "gemma4"
    full = next(i for i, t in enumerate(cfg.layer_types) if t == "full_attention")
    swa = next(i for i, t in enumerate(cfg.layer_types) if t == "sliding_attention")
    gdim, sdim = cfg.per_layer_config[full].head_dim, cfg.per_layer_config[swa].head_dim
    w = gguf.GGUFWriter(path, a)
    w.add_name("tiny-gemma4")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_head_count(cfg.num_attention_heads)
    w.add_array(f"{a}.attention.head_count_kv",
                [cfg.per_layer_config[i].num_key_value_heads for i in range(cfg.num_hidden_layers)])
    w.add_key_length(gdim)
    w.add_value_length(gdim)
    w.add_uint32(f"{a}.attention.key_length_swa", sdim)
    w.add_uint32(f"{a}.attention.value_length_swa", sdim)
    w.add_uint32(f"{a}.rope.dimension_count", gdim)
    w.add_uint32(f"{a}.rope.dimension_count_swa", sdim)
    w.add_rope_freq_base(cfg.rope_parameters["full_attention"]["rope_theta"])
    w.add_float32(f"{a}.rope.freq_base_swa", cfg.rope_parameters["sliding_attention"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_sliding_window(cfg.sliding_window)
    w.add_array(f"{a}.attention.sliding_window_pattern", [t == "sliding_attention" for t in cfg.layer_types])
    w.add_uint32(f"{a}.attention.shared_kv_layers", cfg.num_kv_shared_layers)
    w.add_uint32(f"{a}.embedding_length_per_layer_input", cfg.hidden_size_per_layer_input or 0)
    w.add_float32(f"{a}.final_logit_softcapping", cfg.final_logit_softcapping)
    first_shared = cfg.num_hidden_layers - cfg.num_kv_shared_layers
    ff = [cfg.intermediate_size * (2 if cfg.use_double_wide_mlp and i >= first_shared else 1)
          for i in range(cfg.num_hidden_layers)]
    w.add_array(f"{a}.feed_forward_length", ff)
    if cfg.enable_moe_block:
        w.add_expert_count(cfg.num_experts)
        w.add_expert_used_count(cfg.top_k_experts)
        w.add_uint32(f"{a}.expert_feed_forward_length", cfg.moe_intermediate_size)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    partial = cfg.rope_parameters["full_attention"]["partial_rotary_factor"]
    rotated = int(partial * gdim // 2)
    w.add_tensor("rope_freqs.weight", np.array([1.0] * rotated + [1e30] * (gdim // 2 - rotated), dtype=np.float32))
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    if cfg.hidden_size_per_layer_input:
        w.add_tensor("per_layer_token_embd.weight", sd["model.embed_tokens_per_layer.weight"])
        w.add_tensor("per_layer_model_proj.weight", sd["model.per_layer_model_projection.weight"])
        w.add_tensor("per_layer_proj_norm.weight", sd["model.per_layer_projection_norm.weight"])
    names = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
             "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
             "self_attn.o_proj.weight": "attn_output.weight", "self_attn.q_norm.weight": "attn_q_norm.weight",
             "self_attn.k_norm.weight": "attn_k_norm.weight",
             "post_attention_layernorm.weight": "post_attention_norm.weight",
             "pre_feedforward_layernorm.weight": "ffn_norm.weight",
             "post_feedforward_layernorm.weight": "post_ffw_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
             "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
             "layer_scalar": "layer_output_scale.weight", "per_layer_input_gate.weight": "inp_gate.weight",
             "per_layer_projection.weight": "proj.weight", "post_per_layer_input_norm.weight": "post_norm.weight",
             "router.proj.weight": "ffn_gate_inp.weight", "router.scale": "ffn_gate_inp.scale",
             "router.per_expert_scale": "ffn_down_exps.scale", "experts.gate_up_proj": "ffn_gate_up_exps.weight",
             "experts.down_proj": "ffn_down_exps.weight",
             "post_feedforward_layernorm_1.weight": "post_ffw_norm_1.weight",
             "pre_feedforward_layernorm_2.weight": "pre_ffw_norm_2.weight",
             "post_feedforward_layernorm_2.weight": "post_ffw_norm_2.weight"}
    for layer in range(cfg.num_hidden_layers):
        for hf, gg in names.items():
            key = f"model.layers.{layer}.{hf}"
            if key in sd:
                w.add_tensor(f"blk.{layer}.{gg}", sd[key])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gguf_writer(model, path, arch, rope_theta):
    """A GGUF writer for `arch` with the shape every architecture's converter writes: the name, context, widths,
    heads, head sizes, the (global) RoPE base and the RMS epsilon."""
    import gguf
    cfg = model.config
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"tiny-{arch}")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_rope_freq_base(rope_theta)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    return w


def write_qwen3moe_gguf(model, path):
    """The model as llama.cpp's converter writes a Qwen3-MoE (architecture qwen3moe): F32 tensors, each layer's
    experts stacked into ffn_{gate,up,down}_exps [experts, rows, cols], the router as ffn_gate_inp."""
    import gguf
    cfg = model.config
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    w = gguf_writer(model, path, "qwen3moe", cfg.rope_parameters["rope_theta"])
    w.add_expert_count(cfg.num_experts)
    w.add_expert_used_count(cfg.num_experts_per_tok)
    w.add_expert_feed_forward_length(cfg.moe_intermediate_size)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    w.add_tensor("output.weight", sd["lm_head.weight"])
    names = {"input_layernorm.weight": "attn_norm", "self_attn.q_proj.weight": "attn_q",
             "self_attn.k_proj.weight": "attn_k", "self_attn.v_proj.weight": "attn_v",
             "self_attn.o_proj.weight": "attn_output", "self_attn.q_norm.weight": "attn_q_norm",
             "self_attn.k_norm.weight": "attn_k_norm", "post_attention_layernorm.weight": "ffn_norm",
             "mlp.gate.weight": "ffn_gate_inp"}
    for layer in range(cfg.num_hidden_layers):
        pre = f"model.layers.{layer}."
        for hf, gg in names.items():
            w.add_tensor(f"blk.{layer}.{gg}.weight", sd[pre + hf])
        for part in ("gate", "up", "down"):
            key = pre + f"mlp.experts.{{}}.{part}_proj.weight"
            if key.format(0) in sd:  # per-expert names (a v4 checkpoint)
                stacked = np.stack([sd[key.format(e)] for e in range(cfg.num_experts)])
            else:  # v5's fused parameters: gate_up_proj [E, 2F, H] (gate rows first), down_proj [E, H, F]
                gu = sd[pre + "mlp.experts.gate_up_proj"]
                stacked = {"gate": gu[:, :cfg.moe_intermediate_size], "up": gu[:, cfg.moe_intermediate_size:],
                           "down": sd[pre + "mlp.experts.down_proj"]}[part]
            w.add_tensor(f"blk.{layer}.ffn_{part}_exps.weight", np.ascontiguousarray(stacked))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_gptoss_gguf(model, path):
    """The model as llama.cpp's converter writes a gpt-oss (architecture gpt-oss): F32 tensors but the experts, which are
    MXFP4 rows [experts, rows, cols] (gate the even and up the odd columns of gate_up_proj, transposed), their biases
    split alike, the router as ffn_gate_inp, the sinks as attn_sinks.weight, the FFN norm as post_attention_norm, YaRN
    as rope.scaling.*."""
    import gguf
    cfg = model.config
    sd = {k: v.detach().float() for k, v in model.state_dict().items()}
    rope = cfg.rope_parameters
    w = gguf_writer(model, path, "gpt-oss", rope["rope_theta"])
    w.add_expert_count(cfg.num_local_experts)
    w.add_expert_used_count(cfg.num_experts_per_tok)
    w.add_expert_feed_forward_length(cfg.intermediate_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_sliding_window(cfg.sliding_window)
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(rope["factor"])
    w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_MXFP4_MOE)
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"].numpy())
    w.add_tensor("output_norm.weight", sd["model.norm.weight"].numpy())
    w.add_tensor("output.weight", sd["lm_head.weight"].numpy())
    names = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "post_attention_norm.weight",
             "self_attn.sinks": "attn_sinks.weight", "mlp.router.weight": "ffn_gate_inp.weight",
             "mlp.router.bias": "ffn_gate_inp.bias", "mlp.experts.down_proj_bias": "ffn_down_exps.bias"}
    for p, g in (("q", "q"), ("k", "k"), ("v", "v"), ("o", "output")):
        for t in ("weight", "bias"):
            names[f"self_attn.{p}_proj.{t}"] = f"attn_{g}.{t}"
    mx = gguf.GGMLQuantizationType.MXFP4
    for layer in range(cfg.num_hidden_layers):
        pre = f"model.layers.{layer}."
        for hf, gg in names.items():
            w.add_tensor(f"blk.{layer}.{gg}", sd[pre + hf].numpy())
        gu = sd[pre + "mlp.experts.gate_up_proj"].transpose(-1, -2)  # [E, 2F, H]
        gub = sd[pre + "mlp.experts.gate_up_proj_bias"]
        for part, rows in (("gate", slice(0, None, 2)), ("up", slice(1, None, 2))):
            w.add_tensor(f"blk.{layer}.ffn_{part}_exps.weight", mxfp4_bytes(gu[:, rows, :]), raw_dtype=mx)
            w.add_tensor(f"blk.{layer}.ffn_{part}_exps.bias", np.ascontiguousarray(gub[:, rows].numpy()))
        down = sd[pre + "mlp.experts.down_proj"].transpose(-1, -2)  # [E, H, F]
        w.add_tensor(f"blk.{layer}.ffn_down_exps.weight", mxfp4_bytes(down), raw_dtype=mx)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--only", nargs="*", help="these kinds only")
    args = ap.parse_args()
    torch.manual_seed(1234)
    torch.set_num_threads(2)
    kinds = ("llama", "qwen2", "qwen3", "qwen3_moe", "qwen3moe_gguf", "qwen3_swa", "mistral_swa", "gemma3", "gemma3_27b",
             "gpt_oss", "gpt_oss_gguf", "gemma4", "gemma4_e2b", "gemma4_moe")
    for kind in args.only or kinds:
        model = build(kind)
        d = os.path.join(args.out, kind)
        if kind == "gemma3_27b":
            save_multimodal(model, d)
        elif kind == "gemma4_e2b":
            save_multimodal(model, d, "gemma4")
        else:
            model.save_pretrained(d, safe_serialization=True)
        if kind == "qwen3moe_gguf":
            write_qwen3moe_gguf(model, os.path.join(args.out, "qwen3moe.gguf"))
        if kind == "gemma3":
            write_gemma3_gguf(model, os.path.join(args.out, "gemma3.gguf"))
        if kind == "gpt_oss_gguf":
            write_gptoss_gguf(model, os.path.join(args.out, "gpt-oss.gguf"))
            save_gptoss_mxfp4(model, os.path.join(args.out, "gpt_oss_mxfp4"))
        if kind in ("gemma4_e2b", "gemma4_moe"):
            write_gemma4_gguf(model, os.path.join(args.out, kind.replace("_", "-") + ".gguf"))
        ids = torch.randint(3, 512, (1, 64), generator=torch.Generator().manual_seed(7))
        tensors = {"prompt_ids": ids}
        with torch.no_grad():
            tensors["prefill_logits"] = model(ids).logits[0].float().contiguous()
            # transformers' QuantizedCache refuses sliding-window layers: their reference is the dynamic cache's.
            sliding = kind.endswith("_swa") or kind.startswith("gemma") or kind.startswith("gpt_oss")
            caches = {"dynamic": None} if sliding else CACHES
            for name, cc in caches.items():
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
        save_file(tensors, os.path.join(args.out, f"{kind}_ref.safetensors"), metadata={"caches": json.dumps(list(caches))})
        print(f"{kind}: saved to {d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
