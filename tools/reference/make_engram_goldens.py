#!/usr/bin/env python3
"""Goldens for DeepSeek-V4.1's Engram (n-gram hash memory), produced by DeepSeek's own
`inference/engram.py` and `inference/model.py`, numpy and HF `tokenizers`.

What this writes into <out> (see tests/data/deepseek_v41/engram/README.md):
  token_map.txt.gz        the compressed token map of the DeepSeek-V4 tokenizer
                          (engram.build_compressed_token_map)
  engram_goldens.json     bucket layouts (EngramLayout.from_args), hash multipliers
                          (engram.compute_hash_multipliers), raw numpy PCG64 draws, and
                          n-gram hash ids (engram.NgramHashState) for the released config
                          and a tiny one, including a prefill/decode split and dead tokens
  engram_block.safetensors  a tiny model.Engram: its weights (checkpoint storage format),
                          hash ids, input and output residual streams (fp32)

The third-party code is NOT part of this file: pass the directory of DeepSeek's V4.1
`inference/` (engram.py, model.py, kernel_cpu.py, ...) with --official.

Usage (from the repository root, with the environment of tools/reference/README.md):
  ../tools-venv/bin/python tools/reference/make_engram_goldens.py \
      --official /tmp/dsv41-official/inference --out tests/data/deepseek_v41/engram
"""
import argparse
import gzip
import importlib
import json
import os
import sys
import types
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F

# The released config's Engram values (inference/config.json of DeepSeek-V4.1-Flash).
RELEASED = dict(
    engram_layer_ids=(1, 14),
    engram_vocab_size=16000000,
    engram_num_embeddings=(384006168, 384016682),
    engram_max_ngram_size=4,
    engram_n_heads=8,
    engram_head_dim=256,
    engram_pad_id=2,
    engram_compressed_vocab_size=99092,
)


def import_official(path):
    """Imports <path>/engram.py and <path>/model.py as the package named after <path>."""
    path = os.path.abspath(path)
    sys.path.insert(0, os.path.dirname(path))
    if "PIL" not in sys.modules:
        try:
            import PIL  # noqa: F401
        except ImportError:
            # model.py imports image_processor.py, which imports PIL at module level; the
            # Engram code never touches it.
            pil = types.ModuleType("PIL")
            pil.Image = types.ModuleType("PIL.Image")
            pil.ImageOps = types.ModuleType("PIL.ImageOps")
            sys.modules.update({"PIL": pil, "PIL.Image": pil.Image, "PIL.ImageOps": pil.ImageOps})
    pkg = os.path.basename(path)
    return (importlib.import_module(pkg + ".engram"), importlib.import_module(pkg + ".model"),
            importlib.import_module(pkg + ".kernel_cpu"))


class HfTokenizer:
    """What build_compressed_token_map needs of a transformers tokenizer, over a raw
    `tokenizers.Tokenizer` (its backend)."""

    def __init__(self, path):
        from tokenizers import Tokenizer

        with gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path) as f:
            self.backend_tokenizer = Tokenizer.from_str(f.read())

    def __len__(self):
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=True)


class StubTokenizer:
    """Token 2k decodes to "w{k}", 2k+1 to " W{k}": they normalize alike, so the compressed
    vocab is vocab_size // 2."""

    def __init__(self, vocab_size):
        self.vocab_size = vocab_size
        self.backend_tokenizer = self

    def __len__(self):
        return self.vocab_size

    def decode(self, ids, skip_special_tokens=False):
        (i,) = ids
        return f"w{i // 2}" if i % 2 == 0 else f" W{i // 2}"

    def id_to_token(self, i):
        return self.decode([i])


def write_token_map(engram, tokenizer_path, out):
    tok = HfTokenizer(tokenizer_path)
    lookup, count = engram.build_compressed_token_map(tok)
    # One line per token id: "+" when it opens a new compressed id (the next one in order),
    # else the compressed id it shares with an earlier token.
    lines, fresh = [f"# vocab {len(lookup)} compressed {count}"], 0
    for cid in lookup:
        if cid == fresh:
            lines.append("+")
            fresh += 1
        else:
            lines.append(str(cid))
    with open(os.path.join(out, "token_map.txt.gz"), "wb") as f:
        with gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as g:
            g.write(("\n".join(lines) + "\n").encode())
    return tok, lookup, count


def layout_case(engram, name, **fields):
    args = SimpleNamespace(**fields)
    layout = engram.EngramLayout.from_args(args)
    flat = [[p for per in layer for p in per] for layer in layout.primes]
    offsets = [np.cumsum([0, *sizes[:-1]]).tolist() for sizes in flat]
    return dict(name=name, params={k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()},
                primes=[[list(per) for per in layer] for layer in layout.primes], offsets=offsets)


def rng_raw_cases():
    """Raw Generator.integers(0, high, dtype=int64) draws: the 32-bit buffered path
    (high - 1 < 2^32), the 64-bit Lemire path, and the edges between them."""
    cases = []
    highs = [1, 2, 3, 7, 1000, 99092, 2**31, 2**32 - 1, 2**32, 2**32 + 1, 2**32 + 2,
             2**40 + 12345, 46542624653440, 2**62, 2**63 - 1]
    for seed, high in zip([0, 1, 10007, 123456789, 2**32 + 5, 10007 * 14, 7, 8, 9, 10, 11, 12, 13, 14, 2**70 + 3],
                          highs):
        g = np.random.default_rng(seed)
        a = g.integers(0, high, size=(17,), dtype=np.int64)
        b = g.integers(0, high, size=(4,), dtype=np.int64)  # a second call continues the stream
        cases.append(dict(seed=str(seed), high=high, values=a.tolist() + b.tolist()))
    # The raw 64-bit stream, as next_uint64 gives it (random_raw).
    from numpy.random import PCG64

    raws = []
    for seed in [0, 10007, 2**64 + 1]:
        raws.append(dict(seed=str(seed), values=[str(v) for v in PCG64(seed).random_raw(40).tolist()]))
    return cases, raws


def hash_case(engram, name, tokenizer, fields, seq, split, dead_span=None):
    args = SimpleNamespace(max_batch_size=1, max_seq_len=len(seq) + 8, **fields)
    layout = engram.EngramLayout.from_args(args)
    ids = torch.tensor([seq], dtype=torch.int64)
    mask = None
    if dead_span is not None:
        mask = torch.ones_like(ids, dtype=torch.bool)
        mask[0, dead_span[0] : dead_span[1]] = False

    def run(state):
        outs, start = [], 0
        for end in [*split, len(seq)]:
            m = None if mask is None else mask[:, start:end]
            outs.append(state(ids[:, start:end], start, m))
            start = end
        return torch.cat(outs, dim=1)

    whole = engram.NgramHashState(args, layout, tokenizer)(ids, 0, mask)
    chunked = run(engram.NgramHashState(args, layout, tokenizer))
    assert torch.equal(whole, chunked)
    return dict(name=name, params={k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()},
                tokens=seq, split=list(split), dead_span=list(dead_span) if dead_span else None,
                hash_ids=whole[0].tolist())


KERNELS = None  # the official kernel_cpu module, set by main()


def e8m0_pow2_scale(amax):
    """2^ceil(log2(amax / 448)), computed by the reference's own fast_round_scale."""
    return KERNELS.fast_round_scale(amax, KERNELS._FP8_MAX_INV)


def quantize_fp8_tiles(w, block=32):
    """fp32 [R, C] -> fp8 e4m3 [R, C], e8m0 [R/block, C/block]: one power-of-2 scale per tile."""
    r, c = w.shape
    tiles = w.unflatten(0, (-1, block)).unflatten(-1, (-1, block))
    s = e8m0_pow2_scale(tiles.abs().amax(dim=(1, 3)).clamp_min(1e-4))
    q = (tiles / s[:, None, :, None]).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q.flatten(2, 3).flatten(0, 1).contiguous(), s.to(torch.float8_e8m0fnu)


def quantize_fp8_rows(w, block=32):
    """fp32 [R, C] -> fp8 e4m3 [R, C], e8m0 [R, C/block]: per-row groups of `block`."""
    g = w.unflatten(-1, (-1, block))
    s = e8m0_pow2_scale(g.abs().amax(dim=-1).clamp_min(1e-4))
    q = (g / s.unsqueeze(-1)).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q.flatten(-2).contiguous(), s.to(torch.float8_e8m0fnu)


def exact_fp32_linear(model):
    """model.linear for fp8 weights, in fp32 and exact: the weight dequantized exactly
    (fp8 x 2^(e-127) per 32x32 tile), the input act-quantized like kernel_cpu.act_quant
    (blocks of 32, power-of-2 scale, e4m3 saturating) but kept fp32, then F.linear."""

    def linear(x, weight, bias=None):
        assert bias is None and weight.dtype == torch.float8_e4m3fn
        s = weight.scale.float()
        w = weight.float() * s.repeat_interleave(32, 0)[: weight.shape[0]].repeat_interleave(32, 1)
        xg = x.float().unflatten(-1, (-1, 32))
        sx = e8m0_pow2_scale(xg.abs().amax(dim=-1).clamp_min(1e-4))
        q = (xg / sx.unsqueeze(-1)).clamp(-448, 448).to(torch.float8_e4m3fn).float()
        xq = (q * sx.unsqueeze(-1)).flatten(-2)
        return F.linear(xq, w)

    return linear


def write_engram_block(engram, model, out):
    from safetensors.torch import save_file

    model.linear = exact_fp32_linear(model)
    torch.manual_seed(4242)
    fields = dict(engram_layer_ids=(3, 5), engram_vocab_size=50, engram_max_ngram_size=3,
                  engram_n_heads=2, engram_head_dim=64, engram_pad_id=2,
                  engram_compressed_vocab_size=32, engram_num_embeddings=(0, 0))
    layout = engram.EngramLayout.from_args(SimpleNamespace(**fields))
    rows = tuple(sum(p for per in layer for p in per) for layer in layout.primes)
    fields["engram_num_embeddings"] = rows
    args = model.ModelArgs(dim=64, hc_mult=4, norm_eps=1e-20, **fields)
    layout = engram.EngramLayout.from_args(args)
    layer_id = 5
    with model.set_dtype(torch.float32):
        prev = model.default_dtype
        model.default_dtype = torch.float8_e4m3fn
        block = model.Engram(args, layer_id, layout)
        model.default_dtype = prev
    n_rows = rows[1]
    table, table_s = quantize_fp8_rows(torch.randn(n_rows, args.engram_head_dim) * 0.5)
    wkv_f = torch.randn(block.wkv.out_features, block.wkv.in_features) / block.wkv.in_features**0.5
    wkv, wkv_s = quantize_fp8_tiles(wkv_f)
    q_w = (1 + 0.3 * torch.randn(args.hc_mult, args.dim)).to(torch.bfloat16)
    k_w = (1 + 0.3 * torch.randn(args.hc_mult, args.dim)).to(torch.bfloat16)
    with torch.no_grad():
        block.embed.weight.copy_(table)
        block.embed.scale.copy_(table_s)
        block.wkv.weight.copy_(wkv)
        block.wkv.scale.copy_(wkv_s)
        block.q_weight.copy_(q_w.float())
        block.k_weight.copy_(k_w.float())
    n_tokens = 6
    n_cols = (args.engram_max_ngram_size - 1) * args.engram_n_heads
    hash_ids = torch.randint(0, n_rows, (1, n_tokens, n_cols), dtype=torch.int64)
    x = torch.randn(1, n_tokens, args.hc_mult, args.dim) * 0.2
    # token 4 is masked off (a dead token: its gate is shut)
    token_mask = torch.ones(1, n_tokens, dtype=torch.bool)
    token_mask[0, 4] = False
    with torch.no_grad():
        y = block(x.clone(), hash_ids)
        y_masked = block(x.clone(), hash_ids, token_mask)
    tensors = {
        "embed.weight": table, "embed.scale": table_s,
        "wkv.weight": wkv, "wkv.scale": wkv_s,
        "q_weight": q_w, "k_weight": k_w,
        "hash_ids": hash_ids[0].to(torch.int32).contiguous(),
        "x": x[0].contiguous(), "y": y[0].contiguous(), "y_masked": y_masked[0].contiguous(),
        "token_mask": token_mask[0].to(torch.int32).contiguous(),
    }
    # no metadata: its order in the header is not reproducible (the shapes are in the README)
    save_file(tensors, os.path.join(out, "engram_block.safetensors"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--official", default="/tmp/dsv41-official/inference",
                    help="DeepSeek-V4.1 inference/ directory (engram.py, model.py, kernel_cpu.py)")
    ap.add_argument("--out", default="tests/data/deepseek_v41/engram")
    ap.add_argument("--tokenizer", default="tests/data/tokenizer/deepseek_v4_tokenizer.json.gz")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.set_num_threads(1)
    global KERNELS
    engram, model, KERNELS = import_official(a.official)

    tok, lookup, count = write_token_map(engram, a.tokenizer, a.out)
    assert count == RELEASED["engram_compressed_vocab_size"], count

    goldens = dict(compressed_vocab_size=count)
    tiny = dict(engram_layer_ids=(0, 2, 7), engram_vocab_size=11, engram_num_embeddings=(10**6,) * 3,
                engram_max_ngram_size=3, engram_n_heads=3, engram_head_dim=32, engram_pad_id=1,
                engram_compressed_vocab_size=20)
    goldens["layouts"] = [layout_case(engram, "released", **RELEASED), layout_case(engram, "tiny", **tiny),
                          layout_case(engram, "ngram6", **{**tiny, "engram_max_ngram_size": 6,
                                                           "engram_vocab_size": 2})]
    mult = []
    for vocab in [99092, 5, 256, 1 << 20, 2**62, 2**63 - 1]:
        for n in [4, 6]:
            m = engram.compute_hash_multipliers((0, 1, 2, 14, 20, 1000), n, vocab)
            mult.append(dict(layer_ids=[0, 1, 2, 14, 20, 1000], max_ngram_size=n, compressed_vocab_size=vocab,
                             multipliers=m.tolist()))
    goldens["multipliers"] = mult
    goldens["rng_integers"], goldens["rng_raw"] = rng_raw_cases()

    rs = np.random.RandomState(77)
    seq = rs.randint(0, len(lookup), size=48).tolist()
    seq[10:13] = [2, 2, 2]  # the pad token itself
    seq[20] = seq[17]
    hashes = [hash_case(engram, "released", tok, RELEASED, seq, split=(30, 31, 35)),
              hash_case(engram, "released_dead", tok, RELEASED, seq, split=(9, 26), dead_span=(5, 8))]
    stub = StubTokenizer(40)
    small = dict(engram_layer_ids=(0, 1), engram_vocab_size=5, engram_num_embeddings=(1000, 1000),
                 engram_max_ngram_size=4, engram_n_heads=2, engram_head_dim=32, engram_pad_id=2,
                 engram_compressed_vocab_size=20)
    seq2 = rs.randint(0, 40, size=40).tolist()
    hashes.append(hash_case(engram, "tiny", stub, small, seq2, split=(1, 2, 17, 18, 19)))
    hashes.append(hash_case(engram, "tiny_dead", stub, small, seq2, split=(3, 21), dead_span=(12, 14)))
    goldens["hashes"] = hashes
    with open(os.path.join(a.out, "engram_goldens.json"), "w") as f:
        json.dump(goldens, f, separators=(",", ":"))
        f.write("\n")

    write_engram_block(engram, model, a.out)
    print("wrote", sorted(os.listdir(a.out)))


if __name__ == "__main__":
    main()
