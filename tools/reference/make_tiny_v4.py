#!/usr/bin/env python3
"""Tiny random DeepSeek-V4 checkpoints and goldens, produced by DeepSeek's own inference code.

What this writes, per config, into <out>/<name>/ (see tests/data/deepseek_v4/README.md):
  config.json                  HF-style config (model_type deepseek_v4, official key names)
  model.safetensors            weights in the OFFICIAL checkpoint naming and storage format
  input_ids.txt                the prompt, one line of space-separated ids
  logits.f32                   raw little-endian float32 [T, vocab]: official code, fp32, QAT sims off
  intermediates.safetensors    named activations of the same run (fp32 / int32)
  logits_qat_bf16.f32          official code as released: bf16 activations, FP8 activation
                               quantisation in FP8/FP4 linears, KV / indexer QAT sims on
  logits_hf.f32                (with --hf; swa_bf16 only) HF transformers port, fp32, same weights
  mtp_logits.f32               (configs with an MTP layer) MTP logits [T-1, vocab]
  report.json                  numbers quoted in the README (diffs, routing margins, ...)

The third-party code is NOT part of this file: pass the directory of DeepSeek's
`inference/` (model.py, kernel.py = pure-torch kernels, convert.py) with --official.
The HF port is imported from the installed `transformers` package.

Usage (the environment beside the repository, as tools/reference/README.md creates it):
  ../tools-venv/bin/python tools/reference/make_tiny_v4.py \
      --official /tmp/dsv4-official/inference --out tests/data/deepseek_v4 --hf
"""
import argparse
import contextlib
import hashlib
import importlib
import json
import math
import os
import shutil
import sys
import tempfile

import torch
import torch.nn.functional as F

# --------------------------------------------------------------------------------------
# Tiny configurations.  Field names follow the official inference `ModelArgs` where noted.
# --------------------------------------------------------------------------------------
TINY_CONFIGS = {
    # (a) window-only attention, 2 hash-routed + 2 scored MoE layers, BF16 weights.
    "swa_bf16": dict(
        seed=1001, weights="bf16", vocab=256, dim=64, n_layers=4, n_hash_layers=2,
        n_heads=4, head_dim=128, rope_head_dim=64, q_lora_rank=16, o_groups=2, o_lora_rank=16,
        window=8, seq_len=24, n_experts=8, topk=2, moe_inter=16, ratios=[0, 0, 0, 0],
        n_mtp=0, route_scale=1.5, swiglu_limit=1.5, tid2eid_dtype="int64",
        index_n_heads=2, index_head_dim=128, index_topk=4, intermediates="full",
        write_hf_logits=True),
    # (b) weights as released: FP8 e4m3 dense (128x128 e8m0 scales), FP4 e2m1 routed experts
    #     (per-32 e8m0 scales).  Every dim a multiple of 128 (the official act_quant and
    #     convert.py need whole 128-blocks along K), so only 2 layers (1 hash + 1 scored) fit
    #     the data budget (~0.5 MB per layer at these sizes).
    "swa_fp8": dict(
        seed=2002, weights="fp8_fp4", vocab=256, dim=128, n_layers=2, n_hash_layers=1,
        n_heads=2, head_dim=128, rope_head_dim=64, q_lora_rank=128, o_groups=2, o_lora_rank=64,
        window=8, seq_len=24, n_experts=8, topk=2, moe_inter=128, ratios=[0, 0],
        n_mtp=0, route_scale=1.5, swiglu_limit=1.5, tid2eid_dtype="int64",
        index_n_heads=2, index_head_dim=128, index_topk=4, intermediates="min"),
    # (c) second seed / shape variation: odd sizes, 3 heads in 3 groups, top-3, window 5 over
    #     17 tokens, route_scale 2.5, tid2eid stored as int32.
    "swa_bf16_v2": dict(
        seed=3003, weights="bf16", vocab=320, dim=40, n_layers=3, n_hash_layers=1,
        n_heads=3, head_dim=128, rope_head_dim=64, q_lora_rank=16, o_groups=3, o_lora_rank=16,
        window=5, seq_len=17, n_experts=8, topk=3, moe_inter=20, ratios=[0, 0, 0],
        n_mtp=0, route_scale=2.5, swiglu_limit=2.0, tid2eid_dtype="int32",
        index_n_heads=2, index_head_dim=128, index_topk=4, intermediates="std"),
    # (d) all three attention types (SWA, CSA ratio 4 + indexer, HCA ratio 8) + 1 MTP layer,
    #     42 tokens: 10 CSA entries (index_topk 4), 5 HCA entries, partial tails in both.
    "mixed_mtp_bf16": dict(
        seed=4004, weights="bf16", vocab=256, dim=40, n_layers=3, n_hash_layers=1,
        n_heads=2, head_dim=128, rope_head_dim=64, q_lora_rank=16, o_groups=2, o_lora_rank=16,
        window=8, seq_len=42, n_experts=8, topk=2, moe_inter=16, ratios=[0, 4, 8, 0],
        n_mtp=1, route_scale=1.5, swiglu_limit=1.5, tid2eid_dtype="int64",
        index_n_heads=8, index_head_dim=128, index_topk=4, intermediates="attn"),
    # (e) long sequence with the real HCA ratio 128: CSA (ratio 4, index_topk 8 of up to 136
    #     visible entries), HCA 128 (4 full pools + a 32-token tail) and HCA 16 (34 pools),
    #     window 32 over 544 tokens. No HF run (its config has one HCA rate), no bf16 run.
    "long_hca128_bf16": dict(
        seed=5005, weights="bf16", vocab=128, dim=40, n_layers=3, n_hash_layers=1,
        n_heads=2, head_dim=128, rope_head_dim=64, q_lora_rank=16, o_groups=2, o_lora_rank=16,
        window=32, seq_len=544, n_experts=8, topk=2, moe_inter=16, ratios=[4, 128, 16],
        n_mtp=0, route_scale=1.5, swiglu_limit=1.5, tid2eid_dtype="int64",
        index_n_heads=8, index_head_dim=128, index_topk=8, intermediates="long",
        hf=False, qat_bf16=False),
}

# Fixed (real-model) values for everything the tiny configs do not shrink.
FIXED = dict(rope_theta=10000.0, compress_rope_theta=160000.0, rope_factor=16.0,
             original_seq_len=65536, beta_fast=32, beta_slow=1, hc_mult=4,
             hc_sinkhorn_iters=20, hc_eps=1e-6, norm_eps=1e-6)


# --------------------------------------------------------------------------------------
# Config files
# --------------------------------------------------------------------------------------
def hf_config(c):
    """HF-style config.json with the keys of the released DeepSeek-V4 config.json."""
    cfg = {
        "architectures": ["DeepseekV4ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "hc_eps": FIXED["hc_eps"],
        "hc_mult": FIXED["hc_mult"],
        "hc_sinkhorn_iters": FIXED["hc_sinkhorn_iters"],
        "head_dim": c["head_dim"],
        "hidden_act": "silu",
        "hidden_size": c["dim"],
        "index_head_dim": c["index_head_dim"],
        "index_n_heads": c["index_n_heads"],
        "index_topk": c["index_topk"],
        "initializer_range": 0.02,
        "max_position_embeddings": 1048576,
        "model_type": "deepseek_v4",
        "moe_intermediate_size": c["moe_inter"],
        "n_routed_experts": c["n_experts"],
        "n_shared_experts": 1,
        "norm_topk_prob": True,
        "num_attention_heads": c["n_heads"],
        "num_experts_per_tok": c["topk"],
        "num_hidden_layers": c["n_layers"],
        "num_hash_layers": c["n_hash_layers"],
        "num_key_value_heads": 1,
        "num_nextn_predict_layers": c["n_mtp"],
        "o_groups": c["o_groups"],
        "o_lora_rank": c["o_lora_rank"],
        "q_lora_rank": c["q_lora_rank"],
        "qk_rope_head_dim": c["rope_head_dim"],
        "rms_norm_eps": FIXED["norm_eps"],
        "rope_scaling": {
            "beta_fast": FIXED["beta_fast"],
            "beta_slow": FIXED["beta_slow"],
            "factor": FIXED["rope_factor"],
            "original_max_position_embeddings": FIXED["original_seq_len"],
            "type": "yarn",
        },
        "rope_theta": FIXED["rope_theta"],
        "routed_scaling_factor": c["route_scale"],
        "scoring_func": "sqrtsoftplus",
        "sliding_window": c["window"],
        "swiglu_limit": c["swiglu_limit"],
        "tie_word_embeddings": False,
        "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": c["vocab"],
        "compress_rope_theta": FIXED["compress_rope_theta"],
        "compress_ratios": list(c["ratios"]),
    }
    if c["weights"] == "fp8_fp4":
        cfg["expert_dtype"] = "fp4"
        cfg["quantization_config"] = {
            "activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
            "scale_fmt": "ue8m0", "weight_block_size": [128, 128]}
    return dict(sorted(cfg.items()))


def model_args_kwargs(c, max_seq_len):
    """Keyword arguments for the official `ModelArgs` (inference/config.json key names)."""
    quant = c["weights"] == "fp8_fp4"
    return dict(
        max_batch_size=1, max_seq_len=max_seq_len,
        dtype="fp8" if quant else "bf16", scale_fmt="ue8m0",
        expert_dtype="fp4" if quant else None, scale_dtype="fp8",
        vocab_size=c["vocab"], dim=c["dim"], moe_inter_dim=c["moe_inter"],
        n_layers=c["n_layers"], n_hash_layers=c["n_hash_layers"], n_mtp_layers=c["n_mtp"],
        n_heads=c["n_heads"], n_routed_experts=c["n_experts"], n_shared_experts=1,
        n_activated_experts=c["topk"], score_func="sqrtsoftplus", route_scale=c["route_scale"],
        swiglu_limit=c["swiglu_limit"], q_lora_rank=c["q_lora_rank"], head_dim=c["head_dim"],
        rope_head_dim=c["rope_head_dim"], norm_eps=FIXED["norm_eps"], o_groups=c["o_groups"],
        o_lora_rank=c["o_lora_rank"], window_size=c["window"],
        compress_ratios=tuple(c["ratios"]), compress_rope_theta=FIXED["compress_rope_theta"],
        original_seq_len=FIXED["original_seq_len"], rope_theta=FIXED["rope_theta"],
        rope_factor=FIXED["rope_factor"], beta_fast=FIXED["beta_fast"],
        beta_slow=FIXED["beta_slow"], index_n_heads=c["index_n_heads"],
        index_head_dim=c["index_head_dim"], index_topk=c["index_topk"],
        hc_mult=FIXED["hc_mult"], hc_sinkhorn_iters=FIXED["hc_sinkhorn_iters"],
        hc_eps=FIXED["hc_eps"])


# --------------------------------------------------------------------------------------
# Quantisation to the released storage formats (our code; spec section 7.4)
# --------------------------------------------------------------------------------------
E2M1_GRID = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def pow2_ceil_exponent(a):
    """ceil(log2(a)) for positive fp32 a, via the IEEE trick of the official kernels."""
    bits = a.float().contiguous().view(torch.int32)
    exp = (bits >> 23) & 0xFF
    man = bits & ((1 << 23) - 1)
    return exp - 127 + (man != 0).to(torch.int32)


def e8m0_from_exponent(e):
    return (e + 127).to(torch.uint8).view(torch.float8_e8m0fnu)


def quantize_fp8_block(w, block=128):
    """W [O, I] fp32 -> (e4m3 [O, I], e8m0 scale [ceil(O/128), ceil(I/128)]); s = 2^ceil(log2(amax/448))."""
    o, i = w.shape
    bo, bi = -(-o // block), -(-i // block)
    pad = torch.zeros(bo * block, bi * block)
    pad[:o, :i] = w
    blocks = pad.view(bo, block, bi, block).abs().amax(dim=(1, 3)).clamp_min(1e-30)
    e = pow2_ceil_exponent(blocks / 448.0)
    s = torch.pow(2.0, e.float())
    s_full = s.repeat_interleave(block, 0).repeat_interleave(block, 1)[:o, :i]
    q = (w / s_full).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q, e8m0_from_exponent(e)


def e2m1_codes(x):
    """Round-to-nearest-even onto the e2m1 grid; returns 4-bit codes (bit 3 = sign)."""
    mag = x.abs().clamp(max=6.0)
    d = (mag.unsqueeze(-1) - E2M1_GRID).abs()
    best = d.min(dim=-1, keepdim=True).values
    ties = d == best
    # among equally-near grid points prefer the even code (mantissa bit 0)
    code_idx = torch.arange(8)
    score = torch.where(ties, (code_idx % 2) * 16 + code_idx, torch.full_like(code_idx, 1000))
    code = score.argmin(dim=-1)
    return code | ((x < 0) & (code != 0)).to(torch.int64) << 3


def quantize_fp4_experts(w, block=32):
    """W [O, I] -> (packed int8 [O, I/2] with element 2j in the LOW nibble, e8m0 scale [O, I/32])."""
    o, i = w.shape
    blk = w.view(o, i // block, block)
    amax = blk.abs().amax(dim=-1).clamp_min(6 * 2.0 ** -126)
    e = pow2_ceil_exponent(amax / 6.0)
    s = torch.pow(2.0, e.float()).unsqueeze(-1)
    codes = e2m1_codes(blk / s).view(o, i)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8).view(torch.int8)
    return packed, e8m0_from_exponent(e)


def dequant_fp4_ref(packed, scale):
    """Independent check of the packing (low nibble = even element)."""
    u = packed.view(torch.uint8).long()
    lut = torch.cat([E2M1_GRID, -E2M1_GRID])
    vals = torch.stack([lut[u & 15], lut[u >> 4]], dim=-1).flatten(1)
    s = torch.pow(2.0, scale.view(torch.uint8).float() - 127).repeat_interleave(32, 1)
    return vals * s


# --------------------------------------------------------------------------------------
# Random weights in the official checkpoint naming (spec section 7.2)
# --------------------------------------------------------------------------------------
class Rng:
    def __init__(self, seed):
        self.g = torch.Generator().manual_seed(seed)

    def normal(self, shape, std=1.0, mean=0.0):
        return torch.randn(shape, generator=self.g) * std + mean

    def uniform(self, shape, lo, hi):
        return torch.rand(shape, generator=self.g) * (hi - lo) + lo

    def perm_rows(self, rows, n, k):
        return torch.stack([torch.randperm(n, generator=self.g)[:k] for _ in range(rows)])


def make_weights(c):
    """Returns {name: tensor} in the released storage format (BF16/F32/F8_E4M3/F8_E8M0/I8/I64)."""
    rng = Rng(c["seed"])
    quant = c["weights"] == "fp8_fp4"
    D, H, Dh, V = c["dim"], c["n_heads"], c["head_dim"], c["vocab"]
    hc = FIXED["hc_mult"]
    mix = (2 + hc) * hc
    sd = {}

    def bf16(name, t):
        sd[name] = t.to(torch.bfloat16)

    def f32(name, t):
        sd[name] = t.float()

    def dense(name, out_f, in_f, gain=1.0, fp8=quant):
        w = rng.normal((out_f, in_f), gain / math.sqrt(in_f))
        if fp8:
            q, s = quantize_fp8_block(w)
            sd[name + ".weight"], sd[name + ".scale"] = q, s
        else:
            bf16(name + ".weight", w)

    def expert(name, out_f, in_f, gain=1.0):
        w = rng.normal((out_f, in_f), gain / math.sqrt(in_f))
        if quant:
            q, s = quantize_fp4_experts(w)
            assert torch.equal(dequant_fp4_ref(q, s), dequant_fp4_ref(*quantize_fp4_experts(dequant_fp4_ref(q, s))))
            sd[name + ".weight"], sd[name + ".scale"] = q, s
        else:
            bf16(name + ".weight", w)

    def norm(name, n):
        bf16(name + ".weight", rng.normal((n,), 0.1, 1.0))

    def hc_site(prefix, site):
        f32(f"{prefix}hc_{site}_fn", rng.normal((mix, hc * D), 1.0 / math.sqrt(hc * D)))
        f32(f"{prefix}hc_{site}_base", rng.normal((mix,), 0.5))
        f32(f"{prefix}hc_{site}_scale", rng.uniform((3,), 0.5, 1.5))

    def compressor(prefix, ratio, width):
        coff = 2 if ratio == 4 else 1
        bf16(prefix + "wkv.weight", rng.normal((coff * width, D), 1.0 / math.sqrt(D)))
        bf16(prefix + "wgate.weight", rng.normal((coff * width, D), 1.0 / math.sqrt(D)))
        f32(prefix + "ape", rng.normal((ratio, coff * width), 0.5))
        norm(prefix + "norm", width)

    def block(prefix, layer_id):
        ratio = c["ratios"][layer_id]
        norm(prefix + "attn_norm", D)
        norm(prefix + "ffn_norm", D)
        hc_site(prefix, "attn")
        hc_site(prefix, "ffn")
        a = prefix + "attn."
        f32(a + "attn_sink", rng.normal((H,), 1.0))
        dense(a + "wq_a", c["q_lora_rank"], D)
        norm(a + "q_norm", c["q_lora_rank"])
        dense(a + "wq_b", H * Dh, c["q_lora_rank"])
        dense(a + "wkv", Dh, D)
        norm(a + "kv_norm", Dh)
        dense(a + "wo_a", c["o_groups"] * c["o_lora_rank"], H * Dh // c["o_groups"])
        dense(a + "wo_b", D, c["o_groups"] * c["o_lora_rank"])
        if ratio:
            compressor(a + "compressor.", ratio, Dh)
            if ratio == 4:
                dense(a + "indexer.wq_b", c["index_n_heads"] * c["index_head_dim"], c["q_lora_rank"])
                bf16(a + "indexer.weights_proj.weight",
                     rng.normal((c["index_n_heads"], D), 1.0 / math.sqrt(D)))
                compressor(a + "indexer.compressor.", ratio, c["index_head_dim"])
        f = prefix + "ffn."
        E, k, I = c["n_experts"], c["topk"], c["moe_inter"]
        bf16(f + "gate.weight", rng.normal((E, D), 1.0 / math.sqrt(D)))
        if layer_id < c["n_hash_layers"]:
            sd[f + "gate.tid2eid"] = rng.perm_rows(V, E, k).to(getattr(torch, c["tid2eid_dtype"]))
        else:
            f32(f + "gate.bias", rng.normal((E,), 0.1))
        for e in range(E):
            expert(f"{f}experts.{e}.w1", I, D)
            expert(f"{f}experts.{e}.w2", D, I)
            expert(f"{f}experts.{e}.w3", I, D)
        dense(f + "shared_experts.w1", I, D)
        dense(f + "shared_experts.w2", D, I)
        dense(f + "shared_experts.w3", I, D)

    bf16("embed.weight", rng.normal((V, D), 1.0))
    for i in range(c["n_layers"]):
        block(f"layers.{i}.", i)
    norm("norm", D)
    bf16("head.weight", rng.normal((V, D), 2.0 / math.sqrt(D)))
    f32("hc_head_fn", rng.normal((hc, hc * D), 1.0 / math.sqrt(hc * D)))
    f32("hc_head_base", rng.normal((hc,), 0.5))
    f32("hc_head_scale", rng.uniform((1,), 0.5, 1.5))
    for m in range(c["n_mtp"]):
        p = f"mtp.{m}."
        block(p, c["n_layers"] + m)
        dense(p + "e_proj", D, D)
        dense(p + "h_proj", D, D)
        norm(p + "enorm", D)
        norm(p + "hnorm", D)
        norm(p + "norm", D)
        f32(p + "hc_head_fn", rng.normal((hc, hc * D), 1.0 / math.sqrt(hc * D)))
        f32(p + "hc_head_base", rng.normal((hc,), 0.5))
        f32(p + "hc_head_scale", rng.uniform((1,), 0.5, 1.5))
    ids = torch.randint(0, V, (c["seq_len"],), generator=rng.g)
    ids[0] = 0  # BOS
    return sd, ids


# --------------------------------------------------------------------------------------
# Running the official code
# --------------------------------------------------------------------------------------
class Official:
    """Imports DeepSeek's inference/model.py + kernel.py (+ convert.py) from a directory."""

    def __init__(self, path):
        sys.path.insert(0, path)
        self.kernel = importlib.import_module("kernel")
        self.model = importlib.import_module("model")
        self.convert = importlib.import_module("convert")
        self.orig = dict(act_quant=self.model.act_quant, fp4_act_quant=self.model.fp4_act_quant,
                         rotate_activation=self.model.rotate_activation,
                         sparse_attn=self.model.sparse_attn,
                         hc_split_sinkhorn=self.model.hc_split_sinkhorn,
                         get_logits=self.model.ParallelHead.get_logits)
        m = self.model
        # Logits for every position, not only the last one (ParallelHead.get_logits keeps x[:, -1]).
        m.ParallelHead.get_logits = lambda head, x: F.linear(x.float(), head.weight)

    # -- QAT simulation switches ---------------------------------------------------------
    def set_sims(self, mode):
        """mode 'off': in-place QAT sims are identities (goldens for the fp32 reference path).
        mode 'tilelang': in-place sims round to e4m3 / e2m1 like kernel_tilelang.py does (the
        pure-torch kernel.py skips that rounding in its in-place branch).
        mode 'tilelang_fp32': the same rounding sims with the fp32 Hadamard, for an fp32
        compute run (the QAT-on golden of the fp32 reference path)."""
        m, k = self.model, self.kernel
        orig_aq = self.orig["act_quant"]

        if mode == "off":
            def act_quant(x, block_size=128, scale_fmt=None, scale_dtype=torch.float32, inplace=False):
                assert inplace, "activation quantisation of a quantised linear reached with sims off"
                return x

            def fp4_act_quant(x, block_size=32, inplace=True):
                assert inplace
                return x
        else:
            def act_quant(x, block_size=128, scale_fmt=None, scale_dtype=torch.float32, inplace=False):
                if not inplace:
                    return orig_aq(x, block_size, scale_fmt, scale_dtype, inplace)
                xb = x.float().unflatten(-1, (-1, block_size))
                amax = xb.abs().amax(dim=-1, keepdim=True).clamp_min(1e-4)
                s = amax * (1.0 / 448.0)
                if scale_fmt is not None or scale_dtype == torch.float8_e8m0fnu:
                    s = torch.pow(2.0, pow2_ceil_exponent(s).float())
                q = (xb / s).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).float() * s
                x.copy_(q.flatten(-2).to(x.dtype))
                return x

            def fp4_act_quant(x, block_size=32, inplace=True):
                assert inplace
                xb = x.float().unflatten(-1, (-1, block_size))
                amax = xb.abs().amax(dim=-1, keepdim=True).clamp_min(6 * 2.0 ** -126)
                s = torch.pow(2.0, pow2_ceil_exponent(amax * (1.0 / 6.0)).float())
                y = (xb / s).clamp(-6.0, 6.0)
                codes = e2m1_codes(y)
                mag = E2M1_GRID[codes & 7]
                q = torch.where((codes & 8) != 0, -mag, mag) * s
                x.copy_(q.flatten(-2).to(x.dtype))
                return x
        m.act_quant, m.fp4_act_quant = act_quant, fp4_act_quant

        # rotate_activation asserts bf16 input; the fp32 run needs the same Hadamard in fp32.
        def rotate_activation(x):
            return k.hadamard_transform(x, scale=x.size(-1) ** -0.5)
        m.rotate_activation = (rotate_activation if mode in ("off", "tilelang_fp32")
                               else self.orig["rotate_activation"])

    # -- building and loading --------------------------------------------------------------
    def build(self, c, compute_dtype, ckpt_path, quantized_linears):
        """Builds Transformer, loads weights; quantized_linears=False dequantises FP8/FP4 exactly."""
        m = self.model
        torch.set_default_dtype(compute_dtype)
        args = m.ModelArgs(**model_args_kwargs(c, max_seq_len=max(64, c["seq_len"])))
        with torch.device("cpu"):
            model = m.Transformer(args)
        model.eval()
        state = load_official_state(self, c, ckpt_path)
        # parameters whose construction dtype is bf16 (wo_a, weights_proj, bf16 Linear) follow
        # the compute dtype; fp32 params (norms, hc, gate, head, compressor) stay fp32.
        for mod in model.modules():
            for pname, p in list(mod.named_parameters(recurse=False)):
                if p.dtype == torch.bfloat16 and compute_dtype == torch.float32:
                    setattr(mod, pname, torch.nn.Parameter(p.data.float(), requires_grad=False))
        own = model.state_dict()
        # MTPBlock.embed / .head are the main model's modules (shared, not in the checkpoint)
        shared = {k for k in own if k.startswith("mtp.") and (".embed." in k or ".head." in k)}
        missing = sorted(set(own) - set(state) - shared)
        unexpected = sorted(set(state) - set(own))
        assert not missing and not unexpected, (missing, unexpected)
        for name, t in state.items():
            assert own[name].shape == t.shape, (name, own[name].shape, t.shape)
        res = model.load_state_dict(state, strict=False)
        assert sorted(res.missing_keys) == sorted(shared) and not res.unexpected_keys, res
        for mb in model.mtp:
            assert mb.embed is model.embed and mb.head is model.head
        # keep the scale attribute the official Linear attaches to quantised weights
        for mod in model.modules():
            if isinstance(mod, m.Linear) and getattr(mod, "scale", None) is not None:
                mod.weight.scale = mod.scale
        if not quantized_linears:
            dequantize_linears(self, model)
        return model


def load_official_state(off, c, ckpt_path):
    """Checkpoint -> state dict of the inference module, the way the official tools do it."""
    from safetensors.torch import load_file
    if c["weights"] == "fp8_fp4":
        # official convert.py: wo_a FP8 -> BF16 (x scale), I8 experts -> float4_e2m1fn_x2 view.
        with tempfile.TemporaryDirectory() as src, tempfile.TemporaryDirectory() as dst:
            shutil.copy(ckpt_path, os.path.join(src, "model.safetensors"))
            with contextlib.redirect_stderr(open(os.devnull, "w")):
                off.convert.main(src, dst, c["n_experts"], 1, None)
            return load_file(os.path.join(dst, "model0-mp1.safetensors"))
    state = load_file(ckpt_path)
    # convert.py drops duplicate mtp embedding/head copies (there are none here) and
    # otherwise keeps names; bf16 checkpoints are loaded directly.
    return state


def dequantize_linears(off, model):
    """Replace FP8 / FP4 weights by exact fp32 dequantisation (official kernel.py helpers)."""
    k, m = off.kernel, off.model
    for mod in model.modules():
        if not isinstance(mod, m.Linear):
            continue
        w = mod.weight
        if w.dtype == torch.float8_e4m3fn:
            n, kk = w.shape
            wd = w.float() * k._expand_block_scale(k._scale_to_f32(mod.scale), n, kk, 128, 128)
        elif w.dtype == torch.float4_e2m1fn_x2:
            wd = k._fp4_to_f32(w) * k._scale_to_f32(mod.scale).repeat_interleave(32, dim=1)
        else:
            continue
        wd_c = wd.to(torch.get_default_dtype())
        assert torch.equal(wd_c.float(), wd), "dequantised weight not exact in the compute dtype"
        mod.weight = torch.nn.Parameter(wd_c, requires_grad=False)
        mod.scale = None


class Recorder:
    """Forward hooks + wrappers that collect named intermediates of one official forward."""

    def __init__(self, off, model, c):
        self.off, self.model, self.c = off, model, c
        self.t = {}
        self.clamp = {}
        self.refs = {}
        self.handles = []
        self.cur_layer = None
        self.site = None
        self.last_split = None
        self.index_q = None
        m = off.model
        rec = self

        def hc_split(*a, **kw):
            out = off.orig["hc_split_sinkhorn"](*a, **kw)
            rec.last_split = out
            return out
        m.hc_split_sinkhorn = hc_split

        def sparse_attn(*a, **kw):
            o = off.orig["sparse_attn"](*a, **kw)
            rec.refs[f"{rec.cur_layer}.attn.o"] = o  # inverse RoPE is applied in place later
            return o
        m.sparse_attn = sparse_attn

        prev_rot = m.rotate_activation

        def rotate(x):
            y = prev_rot(x)
            if rec.index_q is None and rec.site == "indexer_q":
                rec.index_q = y  # FP4 sim (if on) is applied in place right after
            return y
        m.rotate_activation = rotate

        layers = [(f"layers.{i}", b) for i, b in enumerate(model.layers)]
        layers += [(f"mtp.{i}", b) for i, b in enumerate(model.mtp)]
        for name, blk in layers:
            self._hook_block(name, blk)
        self._hook(model.embed, lambda mod, i, o: self.put("embed", o[0]))
        self._hook(model.norm, lambda mod, i, o: self.put("final_norm_out", o[0]))
        orig_head = model.head.hc_head

        def hc_head(x, hc_fn, hc_scale, hc_base):
            y = orig_head(x, hc_fn, hc_scale, hc_base)
            rec.put(rec.tail_prefix() + "hc_head_out", y[0])
            return y
        model.head.hc_head = hc_head
        for i, mb in enumerate(model.mtp):
            p = f"mtp.{i}."
            self._hook(mb.norm, lambda mod, i_, o, p=p: rec.put(p + "final_norm_out", o[0]))
            self._hook(mb.enorm, lambda mod, i_, o, p=p: rec.put(p + "enorm_out", o[0]))
            self._hook(mb.hnorm, lambda mod, i_, o, p=p: rec.put(p + "hnorm_out", o[0]))

    def tail_prefix(self):
        return self.cur_layer + "." if self.cur_layer and self.cur_layer.startswith("mtp") else ""

    def put(self, name, t):
        if name in self.t:
            return
        self.t[name] = t.detach().float().clone() if t.is_floating_point() else t.detach().clone()

    def _hook(self, mod, fn, pre=False):
        h = mod.register_forward_pre_hook(fn) if pre else mod.register_forward_hook(fn)
        self.handles.append(h)

    def _hook_block(self, name, blk):
        rec = self

        def pre_block(mod, inp):
            rec.cur_layer = name
        self._hook(blk, pre_block, pre=True)

        orig_pre, orig_post = type(blk).hc_pre, type(blk).hc_post

        def hc_pre(x, hc_fn, hc_scale, hc_base):
            site = "hc_attn" if hc_fn is blk.hc_attn_fn else "hc_ffn"
            if site == "hc_attn" and name.startswith("mtp"):
                rec.put(f"{name}.in", x[0])
            y, post, comb = orig_pre(blk, x, hc_fn, hc_scale, hc_base)
            pre = rec.last_split[0]
            rec.put(f"{name}.{site}.pre", pre[0])
            rec.put(f"{name}.{site}.post", post[0])
            rec.put(f"{name}.{site}.comb", comb[0])
            rec.put(f"{name}.{site}.collapsed", y[0])
            rec.site = site
            return y, post, comb

        def hc_post(x, residual, post, comb):
            y = orig_post(blk, x, residual, post, comb)
            rec.put(f"{name}.{'attn_resid' if rec.site == 'hc_attn' else 'out'}", y[0])
            return y
        blk.hc_pre, blk.hc_post = hc_pre, hc_post

        self._hook(blk.attn_norm, lambda mod, i, o: rec.put(f"{name}.attn_norm_out", o[0]))
        self._hook(blk.ffn_norm, lambda mod, i, o: rec.put(f"{name}.ffn_norm_out", o[0]))
        self._hook(blk.attn, lambda mod, i, o: rec.put(f"{name}.attn_out", o[0]))
        self._hook(blk.ffn, lambda mod, i, o: rec.put(f"{name}.ffn_out", o[0]))
        at = blk.attn
        self._hook(at.q_norm, lambda mod, i, o: rec.put(f"{name}.attn.qr", o[0]))
        self._hook(at.kv_norm, lambda mod, i, o: rec.refs.__setitem__(f"{name}.attn.kv", o))
        self._hook(at.wq_b, lambda mod, i, o: rec.refs.__setitem__(f"{name}.attn.q", o))
        self._hook(at.wo_b, lambda mod, i, o: rec.put(f"{name}.attn.wo_b_in", i[0][0]))

        def attn_done(mod, i, o):
            kv = rec.refs.pop(f"{name}.attn.kv")
            rec.put(f"{name}.attn.kv", kv[0])
            o_ref = rec.refs.pop(f"{name}.attn.o")
            rec.put(f"{name}.attn.o", o_ref[0])
            q = rec.refs.pop(f"{name}.attn.q")
            rec.put(f"{name}.attn.q", q[0].view(q.size(1), mod.n_heads, mod.head_dim))
            if mod.compress_ratio:
                n = rec.c["seq_len"] // mod.compress_ratio
                rec.put(f"{name}.attn.compressed_kv", mod.kv_cache[0, mod.window_size:mod.window_size + n])
        self._hook(at, attn_done)

        if getattr(at, "compress_ratio", 0) and at.indexer is not None:
            ix = at.indexer

            def ix_pre(mod, inp):
                rec.site, rec.index_q = "indexer_q", None
            self._hook(ix, ix_pre, pre=True)
            self._hook(ix.compressor, lambda mod, i: setattr(rec, "site", "indexer_comp"), pre=True)
            self._hook(ix.weights_proj, lambda mod, i, o: rec.refs.__setitem__(f"{name}.ix.w", o))

            def ix_done(mod, inp, topk):
                x, qr, start_pos, offset = inp
                T = x.size(1)
                ratio = mod.compress_ratio
                n = T // ratio
                # index scores, recomputed with the official formula from the tensors it used
                q = rec.index_q
                w = rec.refs.pop(f"{name}.ix.w") * (mod.softmax_scale * mod.n_heads ** -0.5)
                kvc = mod.kv_cache[:1, :n]
                score = torch.einsum("bshd,btd->bsht", q, kvc)
                score = (score.relu_() * w.unsqueeze(-1)).sum(dim=2)
                mask = torch.arange(n).repeat(T, 1) >= torch.arange(1, T + 1).unsqueeze(1) // ratio
                score = score + torch.where(mask, float("-inf"), 0)
                raw = topk[0].clone()
                raw = torch.where(raw >= 0, raw - offset, raw)
                mine = score[0].topk(min(mod.index_topk, n), dim=-1)[1]
                mine = torch.where(mine >= torch.arange(1, T + 1).unsqueeze(1) // ratio, -1, mine)
                assert torch.equal(mine, raw), "recomputed indexer top-k differs from the official one"
                rec.put(f"{name}.attn.indexer_scores", score[0])
                rec.put(f"{name}.attn.indexer_topk", raw.to(torch.int32))
                rec.put(f"{name}.attn.indexer_kv", kvc[0])
                rec.site = None
            self._hook(ix, ix_done)

        def count_clamp(mod, i, o, kind):
            lim = rec.c["swiglu_limit"]
            st = rec.clamp.setdefault(kind, [0, 0])
            x = o.float()
            st[0] += int((x > lim).sum() + ((x < -lim).sum() if kind.endswith("up") else 0))
            st[1] += x.numel()
        for e in blk.ffn.experts:
            self._hook(e.w1, lambda m, i, o: count_clamp(m, i, o, "routed_gate"))
            self._hook(e.w3, lambda m, i, o: count_clamp(m, i, o, "routed_up"))
        self._hook(blk.ffn.shared_experts.w1, lambda m, i, o: count_clamp(m, i, o, "shared_gate"))
        self._hook(blk.ffn.shared_experts.w3, lambda m, i, o: count_clamp(m, i, o, "shared_up"))

        gate = blk.ffn.gate

        def gate_done(mod, inp, out):
            x = inp[0]
            scores = F.softplus(F.linear(x.float(), mod.weight.float())).sqrt()
            weights, indices = out
            rec.put(f"{name}.router_scores", scores)
            rec.put(f"{name}.router_weights", weights)
            rec.put(f"{name}.router_indices", indices.to(torch.int32))
        self._hook(gate, gate_done)

    def remove(self):
        for h in self.handles:
            h.remove()


def official_forward(off, c, ckpt, ids, compute_dtype, quantized, sims, record):
    """One prefill over the whole prompt; returns (logits [T, V] fp32, intermediates, model)."""
    off.set_sims(sims)
    model = off.build(c, compute_dtype, ckpt, quantized_linears=quantized)
    rec = Recorder(off, model, c) if record else None
    final = {}
    if c["n_mtp"]:
        model.layers[-1].register_forward_hook(lambda mod, i, o: final.__setitem__("h", o))
    with torch.inference_mode():
        logits = model(ids.unsqueeze(0), 0)[0].float()
    inter = rec.t if rec else {}
    if rec:
        inter["__clamp__"] = rec.clamp
    mtp = None
    if c["n_mtp"]:
        # MTP draft for token t+2 at position t: main final residual at t + embedding of token t+1.
        if rec:
            rec.cur_layer = "mtp.0"
        with torch.inference_mode():
            h = final["h"][:, :-1]
            mtp = model.mtp[0](h, 0, ids[1:].unsqueeze(0))[0].float()
    if rec:
        rec.remove()
    return logits, inter, model, mtp


def official_decode(off, c, ckpt, ids, compute_dtype, quantized, sims):
    """Token-by-token decode with the official state machine (fresh model); logits [T, V]."""
    off.set_sims(sims)
    model = off.build(c, compute_dtype, ckpt, quantized_linears=quantized)
    out = []
    with torch.inference_mode():
        for t in range(ids.numel()):
            out.append(model(ids[t:t + 1].unsqueeze(0), t)[0, -1].float())
    return torch.stack(out)


# --------------------------------------------------------------------------------------
# HF transformers port on the same (dequantised) weights
# --------------------------------------------------------------------------------------
HF_KEEP_FP32 = ("attn_hc", "ffn_hc", "hc_head", "sinks", "position_bias", "e_score_correction_bias",
                "q_a_norm", "kv_norm", "input_layernorm", "post_attention_layernorm", "norm")


def transformers_config_kwargs(cfg, n_layers):
    """DeepseekV4Config keyword arguments for an official-style config.json dict.

    transformers' legacy `compress_ratios` parser maps only the HCA rate 128, so the
    layer types and rates are given explicitly (one HCA rate per model)."""
    cfg = dict(cfg)
    cfg.pop("quantization_config", None)
    ratios = cfg.pop("compress_ratios")[:n_layers]
    kind = {0: "sliding_attention", 4: "compressed_sparse_attention"}
    cfg["layer_types"] = [kind.get(r, "heavily_compressed_attention") for r in ratios]
    hca = [r for r in ratios if r not in (0, 4)]
    cfg["compress_rates"] = {"compressed_sparse_attention": 4,
                             "heavily_compressed_attention": hca[0] if hca else 128}
    rs = cfg.pop("rope_scaling")
    cfg["rope_parameters"] = {"rope_type": "yarn", "factor": rs["factor"],
                              "original_max_position_embeddings": rs["original_max_position_embeddings"],
                              "beta_fast": rs["beta_fast"], "beta_slow": rs["beta_slow"]}
    for k in ("architectures", "torch_dtype", "topk_method", "expert_dtype"):
        cfg.pop(k, None)
    return cfg


def hf_forward(c, official_model, ids, dtype=torch.float32):
    from transformers.models.deepseek_v4 import configuration_deepseek_v4 as hc_mod
    from transformers.models.deepseek_v4 import modeling_deepseek_v4 as hm
    import transformers
    config = hc_mod.DeepseekV4Config(**transformers_config_kwargs(hf_config(c), c["n_layers"]))
    config._attn_implementation = "eager"
    config._experts_implementation = "eager"  # the loop in DeepseekV4Experts.forward
    torch.set_default_dtype(torch.float32)
    model = hm.DeepseekV4ForCausalLM(config).float().eval()
    src = {k: v.float() if v.is_floating_point() else v for k, v in official_model.state_dict().items()}
    dst = {}
    E = c["n_experts"]
    for name, t in src.items():
        if name.startswith("mtp."):
            continue
        if ".experts." in name and ".shared_experts." not in name:
            continue
        n = name
        rules = [
            (r"^embed\.weight$", "model.embed_tokens.weight"), (r"^head\.weight$", "lm_head.weight"),
            (r"^norm\.weight$", "model.norm.weight"), (r"^hc_head_fn$", "model.hc_head.hc_fn"),
            (r"^hc_head_base$", "model.hc_head.hc_base"), (r"^hc_head_scale$", "model.hc_head.hc_scale"),
        ]
        import re
        done = False
        for pat, rep in rules:
            if re.match(pat, n):
                n, done = re.sub(pat, rep, n), True
        if not done:
            n = "model." + n
            for a, b in [(".attn_norm.", ".input_layernorm."), (".ffn_norm.", ".post_attention_layernorm."),
                         (".hc_attn_fn", ".attn_hc.fn"), (".hc_attn_base", ".attn_hc.base"),
                         (".hc_attn_scale", ".attn_hc.scale"), (".hc_ffn_fn", ".ffn_hc.fn"),
                         (".hc_ffn_base", ".ffn_hc.base"), (".hc_ffn_scale", ".ffn_hc.scale"),
                         (".attn.attn_sink", ".self_attn.sinks"),
                         (".attn.indexer.compressor.", ".self_attn.compressor.indexer."),
                         (".attn.indexer.weights_proj.", ".self_attn.compressor.indexer.scorer.weights_proj."),
                         (".attn.indexer.wq_b.", ".self_attn.compressor.indexer.q_b_proj."),
                         (".attn.", ".self_attn."), (".ffn.", ".mlp."),
                         (".wq_a.", ".q_a_proj."), (".q_norm.", ".q_a_norm."), (".wq_b.", ".q_b_proj."),
                         (".wkv.", ".kv_proj."), (".wgate.", ".gate_proj."), (".wo_a.", ".o_a_proj."),
                         (".wo_b.", ".o_b_proj."), (".ape", ".position_bias"),
                         (".gate.bias", ".gate.e_score_correction_bias"),
                         (".shared_experts.w1.", ".shared_experts.gate_proj."),
                         (".shared_experts.w2.", ".shared_experts.down_proj."),
                         (".shared_experts.w3.", ".shared_experts.up_proj.")]:
                n = n.replace(a, b)
            n = re.sub(r"(compressor(\.indexer)?)\.norm\.", r"\1.kv_norm.", n)
        if n.endswith("tid2eid"):
            t = t.long()
        dst[n] = t
    for i in range(c["n_layers"]):
        p = f"layers.{i}.ffn.experts."
        dst[f"model.layers.{i}.mlp.experts.gate_up_proj"] = torch.stack(
            [torch.cat([src[f"{p}{e}.w1.weight"], src[f"{p}{e}.w3.weight"]], 0) for e in range(E)])
        dst[f"model.layers.{i}.mlp.experts.down_proj"] = torch.stack(
            [src[f"{p}{e}.w2.weight"] for e in range(E)])
    own = model.state_dict()
    missing = sorted(set(own) - set(dst))
    unexpected = sorted(set(dst) - set(own))
    assert not missing and not unexpected, (missing, unexpected)
    model.load_state_dict(dst, strict=True)
    if dtype != torch.float32:
        # what from_pretrained(dtype=bf16) does: everything bf16 except _keep_in_fp32_modules_strict
        for pname, p in model.named_parameters():
            if not any(k in pname.split(".") for k in HF_KEEP_FP32):
                p.data = p.data.to(dtype)
    with torch.inference_mode():
        out = model(input_ids=ids.unsqueeze(0), use_cache=False)
    return out.logits[0].float(), transformers.__version__


# --------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------
# Which recorded tensors are written (the data budget of tests/data/deepseek_v4 is small).
# "std": what a per-sublayer test needs: each block's input is the previous block's `out`
# (`embed` for layer 0); hc coefficients; the normed sublayer inputs and the sublayer outputs.
STD_INTERMEDIATES = (
    r"^embed$", r"^final_norm_out$", r"^hc_head_out$",
    r"^(layers|mtp)\.\d+\.(attn_norm_out|attn_out|ffn_norm_out|ffn_out|out)$",
    r"^(layers|mtp)\.\d+\.hc_(attn|ffn)\.(pre|post|comb)$",
    r"^(layers|mtp)\.\d+\.router_(scores|weights|indices)$",
    r"^(layers|mtp)\.\d+\.attn\.(kv|compressed_kv|indexer_scores|indexer_topk|indexer_kv)$",
    r"^mtp\.\d+\.(enorm_out|hnorm_out|hc_head_out|final_norm_out)$",
)
# "full" adds every attention/mHC internal of layer 0 (q, o, qr, wo_b input, collapsed, attn_resid).
FULL_EXTRA = (r"^layers\.0\.",)
# "attn" (CSA/HCA config) drops what the hc coefficients let a test rebuild (the residual
# `out`: X' = post*y + comb^T X) and the window kv and MoE input.
ATTN_DROP = (r"\.(out|ffn_norm_out|attn\.kv)$",)
# "min" (quantised config) keeps only sublayer outputs, hc coefficients and routing.
MIN_DROP = (r"\.(out|attn_norm_out|ffn_norm_out|attn\.kv)$",)
# "long" (544-token config) keeps the compressor / indexer tensors, routing choices and the
# final norm output only.
LONG_KEEP = (r"^final_norm_out$", r"\.router_indices$",
             r"\.attn\.(compressed_kv|indexer_kv|indexer_scores|indexer_topk)$")


def keep_intermediate(name, level, n_layers):
    import re
    if level == "long":
        return any(re.search(p, name) for p in LONG_KEEP)
    if name == f"layers.{n_layers - 1}.out":
        return True  # the main model's final residual: also the MTP input
    std = any(re.search(p, name) for p in STD_INTERMEDIATES)
    if level == "full":
        return std or any(re.search(p, name) for p in FULL_EXTRA)
    drop = {"std": (), "attn": ATTN_DROP, "min": MIN_DROP}[level]
    return std and not any(re.search(p, name) for p in drop)


def write_f32(path, t):
    t.detach().float().contiguous().numpy().astype("<f4").tofile(path)


def run_config(off, name, c, out_dir, do_hf, do_decode):
    from safetensors.torch import save_file
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    sd, ids = make_weights(c)
    ckpt = os.path.join(d, "model.safetensors")
    save_file(sd, ckpt, metadata={"format": "pt"})  # one key: the header is then byte-stable
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(hf_config(c), f, indent=2)
        f.write("\n")
    with open(os.path.join(d, "input_ids.txt"), "w") as f:
        f.write(" ".join(str(int(x)) for x in ids) + "\n")
    report = {"config": name, "seed": c["seed"], "seq_len": c["seq_len"]}

    # Primary golden: fp32 compute, weights dequantised exactly, QAT sims off.
    logits, inter, model, mtp = official_forward(off, c, ckpt, ids, torch.float32, False, "off", True)
    write_f32(os.path.join(d, "logits.f32"), logits)
    clamp = inter.pop("__clamp__")
    all_inter = inter
    inter = {k: v.contiguous() for k, v in sorted(inter.items()) if keep_intermediate(k, c["intermediates"], c["n_layers"])}
    if mtp is not None:
        write_f32(os.path.join(d, "mtp_logits.f32"), mtp)
    save_file(inter, os.path.join(d, "intermediates.safetensors"))
    report["intermediates"] = {k: [list(v.shape), str(v.dtype).replace("torch.", "")]
                               for k, v in inter.items()}
    report["argmax"] = logits.argmax(-1).tolist()
    report["logit_absmax"] = float(logits.abs().max())

    # Routing margins (top-k boundary of the biased scores) for scored layers.
    margins = {}
    for i in range(c["n_layers"]):
        if i < c["n_hash_layers"]:
            continue
        s = all_inter[f"layers.{i}.router_scores"] + model.layers[i].ffn.gate.bias.detach().float()
        top = s.sort(dim=-1, descending=True).values
        margins[f"layers.{i}"] = float((top[:, c["topk"] - 1] - top[:, c["topk"]]).min())
    report["min_routing_margin"] = margins
    # Indexer: gap at the top-k boundary among visible entries (only where visible > k).
    ix_margins = {}
    for i in range(c["n_layers"]):
        key = f"layers.{i}.attn.indexer_scores"
        if key not in inter:
            continue
        sc = inter[key]
        gaps, rel_gaps = [], []
        for t in range(sc.size(0)):
            vis = sc[t][torch.isfinite(sc[t])]
            if vis.numel() > c["index_topk"]:
                top = vis.sort(descending=True).values
                a, b = float(top[c["index_topk"] - 1]), float(top[c["index_topk"]])
                gaps.append(a - b)
                rel_gaps.append((a - b) / max(abs(a), abs(b), 1e-30))
        # Queries whose k-th and (k+1)-th scores are within 1e-4 relative: a top-k there
        # may legitimately differ (the C++ golden test exempts exactly these).
        ix_margins[f"layers.{i}"] = {"min_gap": min(gaps), "min_relative_gap": min(rel_gaps),
                                     "near_ties_1e-4": sum(g <= 1e-4 for g in rel_gaps),
                                     "queries_with_choice": len(gaps),
                                     "zero_scores": int((sc == 0).sum())}
    if ix_margins:
        report["indexer_topk_margin"] = ix_margins
    # how often the SwiGLU clamp is active in routed experts (sanity: it must trigger)
    report["swiglu_limit"] = c["swiglu_limit"]
    report["swiglu_clamped_fraction"] = {k: round(v[0] / v[1], 4) for k, v in sorted(clamp.items())}

    # Decode path of the official code vs the prefill golden.
    if do_decode:
        dec = official_decode(off, c, ckpt, ids, torch.float32, False, "off")
        report["official_decode_vs_prefill_max_abs"] = float((dec - logits).abs().max())

    # QAT sims on, fp32 compute: FP8 activation quantisation in front of the FP8/FP4 linears,
    # kv / compressor FP8 and indexer FP4 simulations rounding like kernel_tilelang.py, every
    # activation fp32. The golden of the fp32 reference path with its simulations switched on.
    qf, qinter, _, _ = official_forward(off, c, ckpt, ids, torch.float32, c["weights"] == "fp8_fp4",
                                        "tilelang_fp32", True)
    write_f32(os.path.join(d, "logits_qat_fp32.f32"), qf)
    report["qat_fp32_vs_fp32"] = diff_stats(logits, qf)
    qinter.pop("__clamp__", None)
    report["qat_fp32_indexer_topk_equal_to_sims_off"] = {
        k: bool(torch.equal(v, inter[k])) for k, v in sorted(qinter.items())
        if k.endswith("indexer_topk") and k in inter}
    # With the FP4 simulation the index scores are coarse and ties are common: keep the
    # QAT run's scores and picks so a test can tell a near-tie from a wrong choice.
    qkeep = {k: v.contiguous() for k, v in sorted(qinter.items())
             if k.endswith(("attn.indexer_scores", "attn.indexer_topk"))}
    if qkeep:
        save_file(qkeep, os.path.join(d, "intermediates_qat_fp32.safetensors"))
        report["qat_fp32_indexer_near_ties_1e-4"] = {
            k: near_ties(v, c["index_topk"]) for k, v in qkeep.items() if k.endswith("scores")}

    if c.get("qat_bf16", True):
        # As released: bf16 default dtype, quantised linears with FP8 activation quant, sims on.
        qat, _, _, _ = official_forward(off, c, ckpt, ids, torch.bfloat16,
                                        c["weights"] == "fp8_fp4", "tilelang", False)
        write_f32(os.path.join(d, "logits_qat_bf16.f32"), qat)
        report["qat_bf16_vs_fp32"] = diff_stats(logits, qat)

        # Official code in bf16 (its default dtype) with the QAT sims off: isolates the dtype policy.
        obf, _, _, _ = official_forward(off, c, ckpt, ids, torch.bfloat16, False, "off", False)
        report["official_bf16_simsoff_vs_fp32"] = diff_stats(logits, obf)
        report["qat_bf16_vs_official_bf16_simsoff"] = diff_stats(obf, qat)

    if do_hf and c.get("hf", True):
        hfb, _ = hf_forward(c, model, ids, torch.bfloat16)
        report["hf_bf16_vs_official_fp32"] = diff_stats(logits, hfb)
        report["hf_bf16_vs_official_bf16_simsoff"] = diff_stats(obf, hfb)
        hf, ver = hf_forward(c, model, ids)
        if c.get("write_hf_logits"):
            write_f32(os.path.join(d, "logits_hf.f32"), hf)
        report["hf_version"] = ver
        report["hf_vs_official_fp32"] = diff_stats(logits, hf)
    torch.set_default_dtype(torch.float32)
    report["files"] = {f: sha256(os.path.join(d, f)) for f in sorted(os.listdir(d)) if f != "report.json"}
    with open(os.path.join(d, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    return report


def near_ties(scores, k):
    """Queries whose k-th and (k+1)-th visible scores are within 1e-4 relative."""
    n = 0
    for t in range(scores.size(0)):
        vis = scores[t][torch.isfinite(scores[t])]
        if vis.numel() > k:
            top = vis.sort(descending=True).values
            a, b = float(top[k - 1]), float(top[k])
            n += (a - b) <= 1e-4 * max(abs(a), abs(b), 1e-30)
    return n


def diff_stats(ref, other):
    return {"max_abs": float((other - ref).abs().max()),
            "top1_agree": float((other.argmax(-1) == ref.argmax(-1)).float().mean()),
            "mean_kl": mean_kl(ref, other)}


def mean_kl(p_logits, q_logits):
    lp = p_logits.double().log_softmax(-1)
    lq = q_logits.double().log_softmax(-1)
    return float((lp.exp() * (lp - lq)).sum(-1).mean())


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def write_tensor_tables(out_dir, names):
    """TENSORS.md: every tensor of model.safetensors and intermediates.safetensors, per config."""
    import re
    import struct

    def natural(k):
        return [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", k)]
    lines = ["# Tensors of the tiny DeepSeek-V4 goldens", "",
             "Generated by `tools/reference/make_tiny_v4.py` (do not edit). `{i}` = layer index,",
             "`{e}` = expert index; `count` = how many tensors match the pattern.", ""]
    for n in names:
        d = os.path.join(out_dir, n)
        with open(os.path.join(d, "model.safetensors"), "rb") as f:
            size = struct.unpack("<Q", f.read(8))[0]
            hdr = json.loads(f.read(size))
        hdr.pop("__metadata__", None)
        groups = {}
        for k in sorted(hdr, key=natural):
            kk = re.sub(r"^layers\.\d+\.", "layers.{i}.", re.sub(r"experts\.\d+\.", "experts.{e}.", k))
            sig = (kk, hdr[k]["dtype"], tuple(hdr[k]["shape"]))
            groups[sig] = groups.get(sig, 0) + 1
        lines += [f"## {n}/model.safetensors ({len(hdr)} tensors)", "",
                  "| name | dtype | shape | count |", "|---|---|---|---|"]
        lines += [f"| `{k}` | {dt} | {list(sh)} | {cnt} |" for (k, dt, sh), cnt in groups.items()]
        with open(os.path.join(d, "report.json")) as f:
            inter = json.load(f)["intermediates"]
        groups = {}
        for k, (sh, dt) in inter.items():
            m = re.match(r"^layers\.(\d+)\.", k)
            kk = re.sub(r"^layers\.\d+\.", "layers.{i}.", k)
            groups.setdefault((kk, dt, tuple(sh)), []).append(m.group(1) if m else "")
        lines += ["", f"## {n}/intermediates.safetensors", "",
                  "| name | dtype | shape | layers |", "|---|---|---|---|"]
        lines += [f"| `{k}` | {dt} | {list(sh)} | {','.join(ls)} |" for (k, dt, sh), ls in groups.items()]
        lines.append("")
    with open(os.path.join(out_dir, "TENSORS.md"), "w") as f:
        f.write("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--official", required=True, help="directory holding DeepSeek's inference/model.py, kernel.py, convert.py")
    ap.add_argument("--out", required=True, help="output directory (tests/data/deepseek_v4)")
    ap.add_argument("--configs", nargs="*", default=list(TINY_CONFIGS), help="subset of: " + " ".join(TINY_CONFIGS))
    ap.add_argument("--hf", action="store_true", help="also run the HF transformers port (logits_hf.f32)")
    ap.add_argument("--no-decode-check", action="store_true", help="skip the official token-by-token decode check")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 = reproducible reductions)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    off = Official(os.path.abspath(a.official))
    for name in a.configs:
        rep = run_config(off, name, TINY_CONFIGS[name], a.out, a.hf, not a.no_decode_check)
        print(json.dumps({k: v for k, v in rep.items() if k not in ("intermediates", "files", "argmax")}))
    if set(a.configs) == set(TINY_CONFIGS):
        write_tensor_tables(a.out, a.configs)


if __name__ == "__main__":
    main()
