#!/usr/bin/env python3
"""Tiny random DeepSeek-V4.1 checkpoints and goldens, produced by DeepSeek's own V4.1 inference code.

What this writes, per config, into <out>/<name>/ (see tests/data/deepseek_v41/README.md):
  config.json                 the official inference `ModelArgs` keys (as the release's
                              inference/config.json), plus model_type and qat_simulation
  model.safetensors           weights in the official naming (the reference state_dict) and
                              storage format: FP8 e4m3 + E8M0 32x32 block scales, FP4 e2m1
                              experts (I8, two per byte) + E8M0 per-32 scales, FP8 Engram tables
  engram_token_map.i32        the compressed token map of the config's stub tokenizer (int32 [V])
  input_ids.txt               the prompt, space-separated ids
  logits.f32                  [T, V] prefill from position 0 in one call, fp32, QAT simulations ON
  logits_noqat.f32            [T, V] the same with every QAT simulation off
  decode_logits.f32           [T - P, V] prefill of the first P tokens, then one token per call
                              (the reference's decode path, shared index keys as it publishes them)
  decode_logits_owner.f32     the same decode with every index source reading its own kv source's
                              index keys (the "architectural" reading, dsv4's --v41-index-keys owner)
  intermediates.safetensors   named activations of the QAT-on prefill (fp32 / int32)
  report.json                 what the runs exercised (dropped candidate blocks, decode steps whose
                              index keys come from another layer, engram collisions), sha256s

The third-party code is NOT part of this file: pass the directory holding DeepSeek's V4.1
`inference/` package with --official (its model.py, engram.py and a kernel module; every kernel
function the forward calls is replaced here by an exact fp32 torch version, so only the names
need to exist).

Usage (the environment beside the repository, tools/reference/README.md):
  ../tools-venv/bin/python tools/reference/make_tiny_v41.py \
      --official /tmp/dsv41-official/inference --out tests/data/deepseek_v41
"""
import argparse
import dataclasses
import hashlib
import importlib
import json
import math
import os
import re
import sys

import numpy as np
import torch
import torch.nn.functional as F

# --------------------------------------------------------------------------------------
# Tiny configurations (official ModelArgs field names).
# --------------------------------------------------------------------------------------
# Layer roles of `csa2_fp8` (the released model has the same roles at 40 layers):
#   0 window only (ratio 0) + Engram     4 kv + index + candidate source, ratio 1 + Engram
#   1 kv + index source, ratio 2 (full)  5 consumer of layer 4 (ratio 1, reuse)
#   2 consumer of layer 1 (reuse)        6 index source inside layer 4's candidates (reindex)
#   3 index source, ratio 2 (reindex)    7 consumer of layer 6's picks (reuse)
# candidate_topk_blocks x candidate_block_size - (block_size - 1) >= index_topk, so the
# reachable candidates always fill the top-k (no pick among -inf ties, whose order torch
# leaves to the implementation).
CONFIGS = {
    "csa2_fp8": dict(
        seed=4101, dtype="fp8", vocab=256, dim=64, n_layers=8, n_heads=2, head_dim=64,
        rope_head_dim=32, q_lora_rank=32, o_groups=2, o_lora_rank=32, window=8,
        n_experts=8, topk=2, moe_inter=64, route_scale=1.5, swiglu_limit=1.5,
        compress_ratios=[0, 2, 2, 2, 1, 1, 1, 1], kv_source_layers=[1, 4],
        index_source_layers=[1, 3, 4, 6], candidate_source_layer=4,
        candidate_topk_blocks=3, candidate_block_size=4, index_n_heads=16, index_head_dim=32,
        index_topk=8, engram_layer_ids=[0, 4], engram_max_ngram_size=3, engram_n_heads=2,
        engram_head_dim=32, engram_vocab_size=40, seq_len=44, prefill_len=24),
    # BF16 weights, another schedule: sources first, hc_mult 2, 4-grams, top-3 routing.
    "csa2_bf16": dict(
        seed=4102, dtype="bf16", vocab=192, dim=48, n_layers=5, n_heads=3, head_dim=64,
        rope_head_dim=16, q_lora_rank=24, o_groups=3, o_lora_rank=16, window=6,
        n_experts=6, topk=3, moe_inter=32, route_scale=2.5, swiglu_limit=2.0, hc_mult=2,
        compress_ratios=[2, 2, 1, 1, 0], kv_source_layers=[0, 2],
        index_source_layers=[0, 1, 2, 3], candidate_source_layer=2,
        candidate_topk_blocks=2, candidate_block_size=4, index_n_heads=16, index_head_dim=32,
        index_topk=4, engram_layer_ids=[1], engram_max_ngram_size=4, engram_n_heads=3,
        engram_head_dim=32, engram_vocab_size=30, seq_len=33, prefill_len=13),
    # csa2_bf16's schedule with a DSpark draft head: 3 window-only stages (their own expert
    # count and top-k), target layers 1 (after its Engram) and 3, a window the prefill overflows
    # and the decode steps wrap.
    "dspark_bf16": dict(
        seed=4103, dtype="bf16", vocab=192, dim=48, n_layers=5, n_heads=3, head_dim=64,
        rope_head_dim=16, q_lora_rank=24, o_groups=3, o_lora_rank=16, window=6,
        n_experts=6, topk=3, moe_inter=32, route_scale=2.5, swiglu_limit=2.0, hc_mult=2,
        compress_ratios=[2, 2, 1, 1, 0, 0, 0, 0], kv_source_layers=[0, 2],
        index_source_layers=[0, 1, 2, 3], candidate_source_layer=2,
        candidate_topk_blocks=2, candidate_block_size=4, index_n_heads=16, index_head_dim=32,
        index_topk=4, engram_layer_ids=[1], engram_max_ngram_size=4, engram_n_heads=3,
        engram_head_dim=32, engram_vocab_size=30, seq_len=22, prefill_len=12,
        dspark=dict(n_mtp_layers=3, dspark_block_size=4, dspark_noise_token_id=187,
                    dspark_target_layer_ids=(1, 3), dspark_markov_rank=16,
                    dspark_n_routed_experts=4, dspark_n_activated_experts=2)),
}

FP8_MAX = 448.0
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
E2M1_MIDS = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
E2M1_TIE_UP = torch.tensor([False, True, False, True, False, True, False])


def model_args(off, c, max_seq_len=64):
    kw = dict(
        max_batch_size=1, max_seq_len=max_seq_len, temperature=0.0, dtype=c["dtype"],
        expert_dtype="fp4" if c["dtype"] == "fp8" else None, vocab_size=c["vocab"],
        dim=c["dim"], moe_inter_dim=c["moe_inter"], n_layers=c["n_layers"], n_mtp_layers=0,
        n_heads=c["n_heads"], n_routed_experts=c["n_experts"], n_shared_experts=1,
        n_activated_experts=c["topk"], score_func="sqrtsoftplus", gate_temp=1.0,
        norm_topk_prob=True, route_scale=c["route_scale"], swiglu_limit=c["swiglu_limit"],
        q_lora_rank=c["q_lora_rank"], head_dim=c["head_dim"], rope_head_dim=c["rope_head_dim"],
        norm_eps=1e-20, o_groups=c["o_groups"], o_lora_rank=c["o_lora_rank"],
        window_size=c["window"], compress_ratios=tuple(c["compress_ratios"]),
        kv_source_layers=tuple(c["kv_source_layers"]),
        index_source_layers=tuple(c["index_source_layers"]), compress_rope_theta=160000.0,
        original_seq_len=32, rope_theta=10000.0, rope_factor=4, beta_fast=32, beta_slow=1,
        index_n_heads=c["index_n_heads"], index_head_dim=c["index_head_dim"],
        index_topk=c["index_topk"], candidate_source_layer=c["candidate_source_layer"],
        candidate_topk_blocks=c["candidate_topk_blocks"],
        candidate_block_size=c["candidate_block_size"], hc_mult=c.get("hc_mult", 4),
        hc_sinkhorn_iters=20, hc_eps=1e-6, engram_layer_ids=tuple(c["engram_layer_ids"]),
        engram_max_ngram_size=c["engram_max_ngram_size"],
        engram_vocab_size=c["engram_vocab_size"], engram_n_heads=c["engram_n_heads"],
        engram_head_dim=c["engram_head_dim"], engram_pad_id=2, vision_n_layers=0,
        dspark_block_size=0)
    kw.update(c.get("dspark", {}))
    args = off.model.ModelArgs(**kw, engram_num_embeddings=(0,) * len(c["engram_layer_ids"]),
                               engram_compressed_vocab_size=0)
    layout = off.engram.EngramLayout.from_args(args)
    rows = tuple(sum(p for per_ngram in layer for p in per_ngram) for layer in layout.primes)
    return dataclasses.replace(args, engram_num_embeddings=rows)


class StubTokenizer:
    """Just enough of an HF tokenizer for the reference `build_compressed_token_map`: words with
    case, accent, spacing and compatibility-form variants (so distinct ids normalise alike) and
    partial UTF-8 byte tokens (keyed by their raw form)."""

    WORDS = ["the", "cat", "café", "naïve", "ﬁle", "Ｈello", "over", "end"]

    def __init__(self, vocab):
        self.vocab = vocab
        self.backend_tokenizer = self

    def __len__(self):
        return self.vocab

    def decode(self, ids, skip_special_tokens=False):
        (i,) = ids
        if i < 3:
            return ["<bos>", "<eos>", "<pad>"][i]
        if i % 17 == 0:
            return "\ufffd"  # a partial byte token
        w = self.WORDS[i % len(self.WORDS)] + ("" if i % 5 else str(i % 3))
        form = (i // len(self.WORDS)) % 4
        if form == 1:
            w = " " + w.upper()
        elif form == 2:
            w = w.capitalize() + "\n"
        elif form == 3:
            w = "  " + w
        return w

    def id_to_token(self, i):
        return f"<0x{i:02X}>"


# --------------------------------------------------------------------------------------
# Exact fp32 stand-ins for the reference kernels (QAT simulations switchable)
# --------------------------------------------------------------------------------------
def pow2_scale(amax, max_inv):
    x = (amax.float() * torch.tensor(max_inv, dtype=torch.float32)).contiguous()
    bits = x.view(torch.int32)
    log2_ceil = ((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    return ((log2_ceil + 127) << 23).view(torch.float32)


def fp8_qdq(x, block):
    g = x.float().unflatten(-1, (-1, block))
    s = pow2_scale(g.abs().amax(-1).clamp_min(1e-4), 1.0 / FP8_MAX).unsqueeze(-1)
    q = (g / s).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).float()
    return (q * s).flatten(-2)


def e2m1_round(v):
    mag = v.abs().unsqueeze(-1)
    code = (mag > E2M1_MIDS).sum(-1) + ((mag == E2M1_MIDS) & E2M1_TIE_UP).sum(-1)
    return E2M1[code] * torch.where(torch.signbit(v), -1.0, 1.0)


def fp4_qdq(x, block, e4m3_scale):
    g = x.float().unflatten(-1, (-1, block))
    amax = g.abs().amax(-1)
    if e4m3_scale:
        s = (amax.clamp_min(6 * 2.0 ** -9) / 6.0).clamp(-FP8_MAX, FP8_MAX)
        s = s.to(torch.float8_e4m3fn).float()
    else:
        s = pow2_scale(amax.clamp_min(6 * 2.0 ** -126), 1.0 / 6.0)
    v = (g / s.unsqueeze(-1)).clamp(-6.0, 6.0)
    return (e2m1_round(v) * s.unsqueeze(-1)).flatten(-2)


def dequant_weight(w):
    if w.dtype == torch.float8_e4m3fn:
        s = w.scale.float().repeat_interleave(32, 0)[: w.size(0)].repeat_interleave(32, 1)
        return w.float() * s[:, : w.size(1)]
    if w.dtype == torch.float4_e2m1fn_x2:
        b = w.view(torch.uint8)
        table = torch.cat([E2M1, -E2M1])
        vals = torch.stack([table[(b & 0xF).long()], table[(b >> 4).long()]], -1).flatten(-2)
        return vals * w.scale.float().repeat_interleave(32, 1)
    return w.float()


class Kernels:
    """Installs fp32 versions of the functions model.py imports from its kernel module."""

    def __init__(self, m):
        self.m, self.qat = m, True

        def linear(x, weight, bias=None):
            assert bias is None
            quantized = weight.dtype in (torch.float8_e4m3fn, torch.float4_e2m1fn_x2)
            if quantized and self.qat:
                x = fp8_qdq(x, 32)
            return F.linear(x.float(), dequant_weight(weight))

        def act_quant(x, block_size=128, scale_fmt=None, scale_dtype=None, inplace=False):
            assert inplace and scale_fmt == "ue8m0"
            if self.qat:
                x.copy_(fp8_qdq(x, block_size))
            return x

        def fp4_act_quant(x, block_size=32, inplace=False, scale_dtype=torch.float8_e8m0fnu):
            assert inplace
            if self.qat:
                x.copy_(fp4_qdq(x, block_size, scale_dtype == torch.float8_e4m3fn))
            return x

        def sparse_attn(q, kv, attn_sink, topk_idxs, softmax_scale):
            # exact softmax over the valid indices plus the sink (denominator only), fp32
            b, m, h, d = q.shape
            idx = topk_idxs.long()
            valid = idx >= 0
            keys = kv.float()[torch.arange(b).view(b, 1, 1), idx.clamp_min(0)]  # [b,m,k,d]
            s = torch.einsum("bmhd,bmkd->bmhk", q.float(), keys) * softmax_scale
            s = s.masked_fill(~valid.unsqueeze(2), -torch.inf)
            mx = torch.maximum(s.amax(-1), attn_sink.float().view(1, 1, h))
            p = torch.exp(s - mx.unsqueeze(-1))
            den = p.sum(-1) + torch.exp(attn_sink.float().view(1, 1, h) - mx)
            return torch.einsum("bmhk,bmkd->bmhd", p / den.unsqueeze(-1), keys)

        m.linear = linear
        m.act_quant = act_quant
        m.fp4_act_quant = fp4_act_quant
        m.sparse_attn = sparse_attn

        def head_forward(head, x, full_logits=True):
            return F.linear(x.float(), head.weight.float())

        m.ParallelHead.forward = head_forward


# --------------------------------------------------------------------------------------
# Weights: seeded, in the reference's storage dtypes; checkpoint dtypes as released
# --------------------------------------------------------------------------------------
def quantize_fp8_blocks(w):
    rows, cols = w.shape
    pad_r, pad_c = -rows % 32, -cols % 32
    wp = F.pad(w, (0, pad_c, 0, pad_r))
    tiles = wp.unflatten(0, (-1, 32)).unflatten(-1, (-1, 32))
    s = pow2_scale(tiles.abs().amax(dim=(1, 3)).clamp_min(1e-4), 1.0 / FP8_MAX)
    q = (tiles / s[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.flatten(2, 3).flatten(0, 1)[:rows, :cols].contiguous(), s


def quantize_fp8_rows(w):
    g = w.unflatten(-1, (-1, 32))
    s = pow2_scale(g.abs().amax(-1).clamp_min(1e-4), 1.0 / FP8_MAX)
    q = (g / s.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.flatten(-2), s


def quantize_fp4(w):
    g = w.unflatten(-1, (-1, 32))
    s = pow2_scale(g.abs().amax(-1).clamp_min(6 * 2.0 ** -126), 1.0 / 6.0)
    v = (g / s.unsqueeze(-1)).clamp(-6, 6)
    mag = v.abs().unsqueeze(-1)
    code = (mag > E2M1_MIDS).sum(-1) + ((mag == E2M1_MIDS) & E2M1_TIE_UP).sum(-1)
    code = (code | (torch.signbit(v) & (code > 0)).to(code.dtype) << 3).to(torch.uint8).flatten(-2)
    packed = (code[..., 0::2] | (code[..., 1::2] << 4)).contiguous()
    return packed, s


def bf16_exact(t):
    return t.to(torch.bfloat16).float()


@torch.no_grad()
def init_weights(model, m, seed):
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float32)

    modules = dict(model.named_modules())
    for name, p in model.named_parameters():
        owner_name, _, leaf = name.rpartition(".")
        owner = modules[owner_name]
        if p.dtype == torch.float8_e8m0fnu:
            continue  # written with its weight
        if p.dtype == torch.float8_e4m3fn:
            if isinstance(owner, m.ParallelEngramEmbedding):
                q, s = quantize_fp8_rows(randn(*p.shape))
            else:
                q, s = quantize_fp8_blocks(randn(*p.shape) * p.size(1) ** -0.5)
            p.copy_(q)
            owner.scale.copy_(s.to(torch.float8_e8m0fnu))
        elif p.dtype == torch.float4_e2m1fn_x2:
            packed, s = quantize_fp4(randn(p.size(0), 2 * p.size(1)) * (2 * p.size(1)) ** -0.5)
            p.view(torch.uint8).copy_(packed)
            owner.scale.copy_(s.to(torch.float8_e8m0fnu))
        elif leaf == "weight" and "norm" in owner_name.rsplit(".", 1)[-1]:
            p.copy_(bf16_exact(1 + 0.1 * randn(*p.shape)))
        elif isinstance(owner, m.ParallelEmbedding):
            p.copy_(bf16_exact(randn(*p.shape) * 0.5))
        elif leaf in ("q_weight", "k_weight"):
            p.copy_(bf16_exact(1 + 0.3 * randn(*p.shape)))
        elif leaf == "attn_sink" or leaf.startswith("hc_") or leaf == "bias":
            p.copy_(0.5 * randn(*p.shape))
        elif p.dim() >= 2:
            p.copy_(bf16_exact(randn(*p.shape) * p.size(-1) ** -0.5))
        else:
            p.copy_(bf16_exact(0.5 * randn(*p.shape)))


def checkpoint_tensors(model):
    """state_dict -> the release's storage dtypes: FP8 e4m3, E8M0, FP4 as I8 [N, K/2], F32 for the
    mHC parameters, sinks and router biases, BF16 for everything else (values are bf16-exact)."""
    out = {}
    for name, t in model.state_dict().items():
        if re.fullmatch(r"mtp\.\d+\.(embed|head)\.weight", name):
            continue  # the DSpark stages' references to the shared embedding and head
        leaf = name.rsplit(".", 1)[-1]
        if t.dtype in (torch.float8_e4m3fn, torch.float8_e8m0fnu):
            out[name] = t.contiguous()
        elif t.dtype == torch.float4_e2m1fn_x2:
            out[name] = t.view(torch.uint8).view(torch.int8).contiguous()
        elif leaf == "attn_sink" or leaf.startswith("hc_") or (leaf == "bias" and ".gate." in name):
            out[name] = t.float().contiguous()
        else:
            assert torch.equal(t.float(), bf16_exact(t.float())), name
            out[name] = t.to(torch.bfloat16).contiguous()
    return out


# --------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------
class Official:
    def __init__(self, path):
        parent, pkg = os.path.split(os.path.abspath(path))
        sys.path.insert(0, parent)
        self.model = importlib.import_module(pkg + ".model")
        self.engram = importlib.import_module(pkg + ".engram")
        self.kernels = Kernels(self.model)


def build(off, c, args, state):
    torch.set_default_dtype(torch.float32)
    model = off.model.Transformer(args, StubTokenizer(c["vocab"]))
    if state is None:
        init_weights(model, off.model, c["seed"])
    else:
        model.load_state_dict(state)
    for prm in model.parameters():  # bf16-stored weights (wo_a, ...) run in fp32, values exact
        if prm.dtype == torch.bfloat16:
            prm.data = prm.data.float()
    return model.eval()


def reset_runtime(off):
    off.model.shared_attn = off.model.SharedAttentionRuntime()
    off.model.get_window_topk_idxs.cache_clear()


def owner_reading(model, on):
    """With `on`, each kv source that owns index keys publishes them before its layer runs, so
    every index source reads its own kv source's keys, whether or not a group completed."""
    handles = []
    if on:
        for layer in model.layers:
            attn = layer.attn
            if attn.is_kv_source and attn.indexer is not None and attn.indexer.owns_k:
                def pre(mod, inp, ix=attn.indexer):
                    sys.modules[type(mod).__module__].shared_attn.index_k = ix.k_cache
                handles.append(attn.register_forward_pre_hook(pre))
    return handles


class Recorder:
    def __init__(self, model, args):
        self.t, self.handles = {}, []
        for i, layer in enumerate(model.layers):
            self.hook(layer, lambda mod, inp, out, i=i: self.put(f"layers.{i}.out", out[0]))
            self.hook(layer, lambda mod, inp, out, i=i: self.put(f"layers.{i}.pre_mix", out[1]))
            self.hook(layer.attn, lambda mod, inp, out, i=i: self.put(f"layers.{i}.attn_out", out))
            self.hook(layer.ffn, lambda mod, inp, out, i=i: self.put(f"layers.{i}.ffn_out", out))
            if layer.engram is not None:
                self.hook(layer.engram, lambda mod, inp, out, i=i: self.engram(i, inp, out))
            if layer.attn.indexer is not None:
                self.hook(layer.attn.indexer, lambda mod, inp, out, i=i: self.indexer(i, mod, inp, out))

    def hook(self, mod, fn):
        self.handles.append(mod.register_forward_hook(fn))

    def put(self, name, t):
        self.t[name] = t[0].detach().clone().float().contiguous()

    def engram(self, i, inp, out):
        self.t[f"layers.{i}.engram.hash_ids"] = inp[1][0].to(torch.int32).contiguous()
        self.put(f"layers.{i}.engram_out", out)

    def indexer(self, i, mod, inp, out):
        offset = inp[4]
        idx = out[0].clone()
        idx = torch.where(idx >= 0, idx - offset, idx)
        self.t[f"layers.{i}.attn.indexer_topk"] = idx.to(torch.int32).contiguous()
        shared = sys.modules[type(mod).__module__].shared_attn
        if mod.is_candidate_source:
            self.t[f"layers.{i}.attn.candidates"] = shared.candidates[0].to(torch.int32).contiguous()

    def remove(self):
        for h in self.handles:
            h.remove()


@torch.inference_mode()
def prefill(off, model, ids, qat, record=False):
    reset_runtime(off)
    off.kernels.qat = qat
    rec = Recorder(model, None) if record else None
    _, logits, _ = model(torch.tensor([ids]), 0)
    if rec:
        rec.remove()
    return logits[0].float(), (rec.t if rec else None)


@torch.inference_mode()
def decode(off, c, args, state, ids, owner):
    """A fresh model: prefill the first P tokens in one call, then one token per call.
    Returns the logits after each decoded token [T - P, V]."""
    model = build(off, c, args, state)
    reset_runtime(off)
    off.kernels.qat = True
    handles = owner_reading(model, owner)
    p = c["prefill_len"]
    model(torch.tensor([ids[:p]]), 0)
    out = []
    for pos in range(p, len(ids)):
        _, logits, _ = model(torch.tensor([[ids[pos]]]), pos)
        out.append(logits[0, -1].float())
    for h in handles:
        h.remove()
    return torch.stack(out)


def index_key_reads(off, c, args, state, ids, owner):
    """Per decode step and index source: the layer whose index keys it scored against."""
    model = build(off, c, args, state)
    reset_runtime(off)
    off.kernels.qat = True
    hooks = owner_reading(model, owner)
    key_owner = {id(layer.attn.indexer.k_cache): i for i, layer in enumerate(model.layers)
                 if layer.attn.indexer is not None and layer.attn.indexer.owns_k}
    current = {}
    for i, layer in enumerate(model.layers):
        ix = layer.attn.indexer
        if ix is None:
            continue

        def after(mod, inp, out, i=i):
            current[i] = key_owner[id(sys.modules[type(mod).__module__].shared_attn.index_k)]
        hooks.append(ix.register_forward_hook(after))
    p = c["prefill_len"]
    with torch.inference_mode():
        model(torch.tensor([ids[:p]]), 0)
        steps = []
        for pos in range(p, len(ids)):
            current.clear()
            model(torch.tensor([[ids[pos]]]), pos)
            steps.append(dict(current))
    for h in hooks:
        h.remove()
    return steps


@torch.inference_mode()
def spec_decode(off, c, args, state, ids):
    """The reference's draft calls (its model.py __main__, batch 1, temperature 0): prefill the
    first P tokens and let forward_spec seed the stages' windows with main_hidden, then per
    position: forward the prompt's token there and forward_spec from that call's argmax (the
    anchor) and main_hidden. Returns main_hidden of every position [T, nT*D] and per step the
    anchor, the block's drafts [B], their logits (Markov bias in) [B, V] and confidence [B]."""
    model = build(off, c, args, state)
    reset_runtime(off)
    off.model.get_dspark_topk_idxs.cache_clear()
    off.kernels.qat = True
    p = c["prefill_len"]
    out_ids, _, mh = model(torch.tensor([ids[:p]]), 0)
    assert model.forward_spec(out_ids[:, -1], mh, 0) is None
    hiddens, anchors, drafts, logits, conf, main = [mh[0]], [], [], [], [], []
    for pos in range(p, len(ids)):
        out_ids, lg, mh = model(torch.tensor([[ids[pos]]]), pos)
        hiddens.append(mh[0])
        main.append(lg[0, -1].float())
        anchor = out_ids[:, -1]
        o, dl, cf = model.forward_spec(anchor, mh, pos)
        assert int(o[0, 0]) == int(anchor[0])
        anchors.append(int(anchor[0]))
        drafts.append(o[0, 1:].to(torch.int32))
        logits.append(dl[0].float())
        conf.append(cf[0].float())
    return dict(main_hidden=torch.cat(hiddens), anchor=torch.tensor(anchors, dtype=torch.int32),
                drafts=torch.stack(drafts), logits=torch.stack(logits), confidence=torch.stack(conf),
                main_logits=torch.stack(main))


def write_f32(path, t):
    t.detach().float().contiguous().numpy().astype("<f4").tofile(path)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def run(off, name, c, out_root):
    from safetensors.torch import save_file

    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    args = model_args(off, c)
    tok = StubTokenizer(c["vocab"])
    token_map, n_compressed = off.engram.build_compressed_token_map(tok)
    args = dataclasses.replace(args, engram_compressed_vocab_size=n_compressed)

    model = build(off, c, args, None)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    save_file(checkpoint_tensors(model), os.path.join(out, "model.safetensors"))

    gen = torch.Generator().manual_seed(c["seed"] + 1)
    ids = [0] + torch.randint(3, c["vocab"], (c["seq_len"] - 1,), generator=gen).tolist()
    for a, b in ((5, 1), (9, 2), (17, 1), (30, 4)):  # repeated n-grams: the engram hash repeats
        if a + 3 < len(ids):
            ids[a:a + 2] = ids[b:b + 2]
    with open(os.path.join(out, "input_ids.txt"), "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")
    np.asarray(token_map, dtype="<i4").tofile(os.path.join(out, "engram_token_map.i32"))

    logits, inter = prefill(off, model, ids, qat=True, record=True)
    write_f32(os.path.join(out, "logits.f32"), logits)
    logits_noqat, _ = prefill(off, build(off, c, args, state), ids, qat=False)
    write_f32(os.path.join(out, "logits_noqat.f32"), logits_noqat)
    save_file(inter, os.path.join(out, "intermediates.safetensors"))

    dec = decode(off, c, args, state, ids, owner=False)
    write_f32(os.path.join(out, "decode_logits.f32"), dec)
    dec_owner = decode(off, c, args, state, ids, owner=True)
    write_f32(os.path.join(out, "decode_logits_owner.f32"), dec_owner)
    reads = index_key_reads(off, c, args, state, ids, owner=False)
    spec = spec_decode(off, c, args, state, ids) if "dspark" in c else None
    if spec is not None:
        write_f32(os.path.join(out, "spec_main_hidden.f32"), spec["main_hidden"])
        spec["anchor"].numpy().astype("<i4").tofile(os.path.join(out, "spec_anchor.i32"))
        spec["drafts"].numpy().astype("<i4").tofile(os.path.join(out, "spec_drafts.i32"))
        write_f32(os.path.join(out, "spec_logits.f32"), spec["logits"])
        write_f32(os.path.join(out, "spec_confidence.f32"), spec["confidence"])

    cfg = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(args).items()
           if not k.startswith("vision") and k not in ("max_batch_size", "temperature",
                                                       "image_token_id")}
    cfg = {"model_type": "deepseek_v41", "qat_simulation": True, **cfg}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
        f.write("\n")

    p = c["prefill_len"]
    report = dict(
        seed=c["seed"], seq_len=len(ids), prefill_len=p, compressed_vocab=n_compressed,
        argmax=logits.argmax(-1).tolist(),
        prefill_vs_decode_max_abs=float((logits[p:] - dec).abs().max()),
        prefill_vs_decode_owner_max_abs=float((logits[p:] - dec_owner).abs().max()),
        qat_vs_noqat_max_abs=float((logits - logits_noqat).abs().max()),
        decode_steps_reading_other_layers_keys=sum(
            1 for s in reads if any(src != i and src not in args.kv_source_layers or
                                    (i in args.kv_source_layers and src != i) for i, src in s.items())),
        decode_index_key_sources=[{str(k): v for k, v in s.items()} for s in reads],
    )
    if spec is not None:
        report["spec_main_logits_vs_decode_max_abs"] = float((spec["main_logits"] - dec).abs().max())
        report["spec_anchor"] = spec["anchor"].tolist()
        report["spec_drafts"] = spec["drafts"].tolist()
    for k in [k for k in inter if k.endswith("candidates")]:
        mask, bs = inter[k], c["candidate_block_size"]
        ratio = args.compress_ratios[args.candidate_source_layer]
        dropped = 0
        for t in range(mask.size(0)):
            reachable = -(-((t + 1) // ratio) // bs)
            kept = sum(1 for b in range(reachable) if mask[t, b * bs:(b + 1) * bs].any())
            dropped += kept < reachable
        report["queries_with_candidate_blocks_dropped"] = dropped
    hashes = [v for k, v in inter.items() if k.endswith("hash_ids")]
    report["engram_hash_ids_distinct_per_column"] = [
        [len(set(h[:, j].tolist())) for j in range(h.size(1))] for h in hashes]
    report["sha256"] = {f: sha256(os.path.join(out, f)) for f in sorted(os.listdir(out))
                        if f != "report.json"}
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    print(name, "T", len(ids), "compressed", n_compressed,
          "prefill-vs-decode", report["prefill_vs_decode_max_abs"],
          "owner", report["prefill_vs_decode_owner_max_abs"],
          "qat-vs-noqat", report["qat_vs_noqat_max_abs"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--official", required=True, help="DeepSeek's V4.1 inference/ package dir")
    ap.add_argument("--out", required=True)
    ap.add_argument("--configs", nargs="*", default=list(CONFIGS))
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    off = Official(a.official)
    for name in a.configs:
        run(off, name, CONFIGS[name], a.out)


if __name__ == "__main__":
    main()
