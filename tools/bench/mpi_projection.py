#!/usr/bin/env python3
"""Decode and prefill tokens/s of DeepSeek-V4 split over N machines (docs/distributed.md).

The cost model of `mpirun -n N dsv4 ...` as implemented (stages run one after
the other; no micro-batch overlap):

  pipeline, decode    t = W / B  +  N · (lat + m / bw)  +  lat      (ring of N hops, command)
  pipeline, prefill   t = 2 · M · T / F  +  N · (lat + T · m / bw)  (per prompt of T tokens)
  expert,   decode    t = Σ_layers [dense_l / B + X_N · e / B + (N − 1) · (lat + k · D · 4 / (N · bw))]
                          + rest / B
  expert,   prefill   t = 2 · (M_dense + M_experts / N) · T / F + Σ_layers (N − 1)(lat + T · k · D · 4 / (N · bw))

W: weight bytes a decoded token reads (below), B: one machine's RAM bandwidth,
m: the residual streams of one token, C · D · 4 bytes (what `dsv4 bench`
measures per hop under mpirun), lat / bw: the link's one-way latency and
bandwidth, M: weight multiply-adds per token, F: one machine's FLOP/s, k:
experts per token, e: one routed expert's bytes, X_N: the expected largest
number of a token's k experts that fall on one of N machines (expert ids split
in N blocks; simulated), dense_l: a layer's bytes other than routed experts.
A pipeline splits the weights (capacity) but runs the stages in turn, so one
sequence decodes at one machine's speed less the hops; expert parallel
replicates attention and the shared experts and splits the routed ones.

Weight bytes are counted from config.json with the storage of the releases
(FP8 e4m3 dense + e8m0 128×128 scales, FP4 e2m1 experts + e8m0 per-32 scales,
bf16 embedding/head/compressors/router, f32 mHC); checked against the tensor
table of a `dsv4 synth-model` checkpoint with --check DIR.

Usage:
  tools/bench/mpi_projection.py CONFIG.json|v4.1-flash [...] [--ram-gbs 100] [--tflops 1]
      [--prompt 512] [--machines 1,2,4,8]
  tools/bench/mpi_projection.py --check /tmp/perf_synth4g
"""
import argparse
import json
import pathlib
import random
import sys

# name: (bandwidth GB/s, one-way latency µs of a small MPI message) — assumptions, stated in
# docs/distributed.md (TCP for Ethernet, verbs for RDMA).
LINKS = {"10GbE": (1.25, 30.0), "25GbE": (3.125, 25.0), "100GbE": (12.5, 20.0),
         "RDMA 100G": (12.5, 3.0)}

# DeepSeek-V4.1-Flash's text model as docs/specs/deepseek-v4.md §10.1 reads it (UNVERIFIED
# there; no released config.json in this repository): its compressors on the kv sources alone,
# its indexers on the index sources. The Engram tables are looked up (a few rows per token):
# their ~196 GB count for capacity, not for bandwidth.
V41_FLASH = {
    "hidden_size": 5120, "num_hidden_layers": 40, "hc_mult": 4, "num_attention_heads": 64,
    "head_dim": 512, "q_lora_rank": 1280, "o_groups": 8, "o_lora_rank": 1024,
    "n_routed_experts": 384, "num_experts_per_tok": 6, "moe_intermediate_size": 2304,
    "index_n_heads": 32, "index_head_dim": 128, "vocab_size": 129280,
    "compress_ratios": [0, 0] + [2] * 18 + [1] * 20,
    "kv_source_layer_ids": [2, 8, 14, 20], "index_source_layer_ids": [2, 8, 14, 20, 24, 28, 32, 36],
}

FP8 = 1 + 1 / (128 * 128)
FP4 = 0.5 + 1 / 32


def count(c):
    """Per-token bytes: (per main layer [(dense bytes, expert bytes, macs_dense, macs_expert)],
    rest bytes, rest macs, one routed expert's bytes)."""
    D, L, C = c["hidden_size"], c["num_hidden_layers"], c.get("hc_mult", 4)
    H, A = c["num_attention_heads"], c["head_dim"]
    q, G, o = c["q_lora_rank"], c["o_groups"], c["o_lora_rank"]
    E, k, F = c["n_routed_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
    Hi, Ai = c.get("index_n_heads", 0), c.get("index_head_dim", 0)
    V = c["vocab_size"]
    ratios = c.get("compress_ratios", [0] * L)[:L]
    mix = (2 + C) * C
    layers = []
    expert = 3 * D * F * FP4
    kv_sources = c.get("kv_source_layer_ids")
    index_sources = c.get("index_source_layer_ids")
    for l, r in enumerate(ratios):
        attn = D * q + q * H * A + D * A + o * H * A + G * o * D  # FP8
        macs = attn
        bf16 = D * E + 2 * D  # router, norms
        if r and (kv_sources is None or l in kv_sources):
            ov = 2 if r == 4 else 1
            bf16 += 2 * D * A * ov  # compressor wkv, wgate
            macs += 2 * D * A * ov
        if (r == 4 and index_sources is None) or (index_sources and l in index_sources):
            attn += q * Hi * Ai  # indexer wq_b
            bf16 += D * Hi + 2 * D * Ai * 2  # weights_proj, its compressor
            macs += q * Hi * Ai + D * Hi + 4 * D * Ai
        shared = 3 * D * F
        dense = (attn + shared) * FP8 + bf16 * 2 + 2 * mix * C * D * 4
        layers.append((dense, k * expert, macs + shared + D * E, k * 3 * D * F))
    rest = D * 2 + V * D * 2 + mix * C * D * 4  # one embedding row, head, HC head
    return layers, rest, V * D, expert


def total_bytes(c):
    """All main-model weights (every expert, the whole embedding): what the machines hold."""
    layers, rest, _, expert = count(c)
    E, k = c["n_routed_experts"], c["num_experts_per_tok"]
    dense = sum(d for d, _, _, _ in layers)
    return dense, len(layers) * E * expert, rest + c["vocab_size"] * c["hidden_size"] * 2


def expected_max_share(E, k, n, trials=20000, seed=1):
    """E[max over n blocks of the picks of k distinct experts of E in that block]."""
    if n == 1:
        return float(k)
    rnd = random.Random(seed)
    total = 0
    for _ in range(trials):
        picks = rnd.sample(range(E), k)
        counts = [0] * n
        for e in picks:
            counts[e * n // E] += 1
        total += max(counts)
    return total / trials


def project(c, n, link, ram, flops, prompt):
    bw, lat = LINKS[link][0] * 1e9, LINKS[link][1] * 1e-6
    layers, rest, rest_macs, expert = count(c)
    D, C, k = c["hidden_size"], c.get("hc_mult", 4), c["num_experts_per_tok"]
    W = sum(d + e for d, e, _, _ in layers) + rest
    M = sum(a + b for _, _, a, b in layers) + rest_macs
    m = C * D * 4
    hops = n if n > 1 else 0
    pipe_decode = W / ram + hops * (lat + m / bw) + (lat if n > 1 else 0)
    pipe_prefill = 2 * M * prompt / flops + hops * (lat + prompt * m / bw)
    X = expected_max_share(c["n_routed_experts"], k, n)
    ex_decode = rest / ram + sum(d / ram + X * expert / ram for d, _, _, _ in layers)
    ex_prefill = 2 * (M - sum(b for *_, b in layers) * (1 - 1 / n)) * prompt / flops
    if n > 1:
        row = k * D * 4
        ex_decode += len(layers) * (n - 1) * (lat + row / (n * bw)) + lat
        ex_prefill += len(layers) * (n - 1) * (lat + prompt * row / (n * bw))
    return 1 / pipe_decode, prompt / pipe_prefill, 1 / ex_decode, prompt / ex_prefill, W


def check(model_dir):
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from v4_decode_bound import tensors  # noqa: E402
    c = json.loads((model_dir / "config.json").read_text())
    L, E, k = c["num_hidden_layers"], c["n_routed_experts"], c["num_experts_per_tok"]
    real = 0
    for name, _, shape, nbytes in tensors(model_dir):
        if name.startswith("mtp."):
            continue
        if name == "embed.weight":
            real += nbytes // shape[0]
        elif ".experts." in name:
            real += nbytes * k / E
        elif name.startswith("layers.") and int(name.split(".")[1]) >= L:
            continue
        else:
            real += nbytes
    layers, rest, _, _ = count(c)
    model = sum(d + e for d, e, _, _ in layers) + rest
    print(f"{model_dir}: tensor table {real / 1e6:.1f} MB per token, this count "
          f"{model / 1e6:.1f} MB ({100 * (model / real - 1):+.2f}%)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("configs", nargs="*", type=pathlib.Path)
    ap.add_argument("--ram-gbs", type=float, default=100.0, help="RAM bandwidth per machine")
    ap.add_argument("--tflops", type=float, default=1.0, help="prefill FLOP/s per machine")
    ap.add_argument("--prompt", type=int, default=512, help="prefill prompt tokens")
    ap.add_argument("--machines", default="1,2,4,8")
    ap.add_argument("--check", type=pathlib.Path, help="a checkpoint dir: count vs tensor table")
    a = ap.parse_args()
    if a.check:
        check(a.check)
    ns = [int(x) for x in a.machines.split(",")]
    print(f"RAM {a.ram_gbs:g} GB/s and {a.tflops:g} TFLOP/s per machine, prompt {a.prompt} "
          "tokens; tokens/s of one sequence, decode / prefill, per link")
    print("| model | GB read per token | split | N | GB of weights per machine | " +
          " | ".join(LINKS) + " |")
    print("|---|---|---|---|---|" + "---|" * len(LINKS))
    for path in a.configs:
        name = str(path) if str(path) == "v4.1-flash" else path.stem.replace("_config", "")
        c = V41_FLASH if str(path) == "v4.1-flash" else json.loads(path.read_text())
        c = c.get("text_config", c)
        dense, experts, rest = total_bytes(c)
        for n in ns:
            for split in (["one machine"] if n == 1 else ["pipeline", "expert"]):
                cells, W = [], 0
                for link in LINKS:
                    pd, pp, ed, ep, W = project(c, n, link, a.ram_gbs * 1e9, a.tflops * 1e12,
                                                a.prompt)
                    cells.append(f"{ed:.2f} / {ep:.0f}" if split == "expert"
                                 else f"{pd:.2f} / {pp:.0f}")
                held = (dense + experts / n + rest if split == "expert"
                        else (dense + experts) / n + rest)  # rank 0 holds embedding and head
                print(f"| {name} | {W / 1e9:.1f} | {split} | {n} | {held / 1e9:.0f} | " +
                      " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
