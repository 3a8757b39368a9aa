#!/usr/bin/env python3
"""The best decode efficiency a DeepSeek-V4 checkpoint allows on a host.

A decoded token reads each weight class (FP8, FP4 experts, bf16, f32) once.
Each class takes at least max(its bytes / the memory bandwidth, its bytes /
the kernels' arithmetic ceiling for it), however well reads and arithmetic
overlap; the token's other work (attention, routing, the caller's serial
steps: from a pool trace, tools/bench/pool_regions.py) comes on top. The
bound on `dsv4 bench`'s decode_efficiency is then

    bytes per token / (Σ_class max(bytes / bandwidth, bytes / ceiling) + other)
    / bandwidth.

Ceilings are what the one-token kernels read per second with the matrix in
cache, same thread count, e.g. `matmul_bench 2 2 50 fp4_e2m1 2048 decode`
(GB/s of weights and scales). Usage:

  tools/bench/v4_decode_bound.py /tmp/perf_synth4g --bandwidth 61.9 \\
      --ceiling fp8=70 --ceiling fp4=45 --ceiling bf16=115 --ceiling f32=180 \\
      --other-us 1800

Bytes per token follow `dsv4 bench`'s plan: the routed experts of a layer
count top-k / E of their sum, the embedding one row, MTP layers none.
"""
import argparse
import json
import pathlib
import struct
import sys
from collections import defaultdict

# Storage dtype -> weight class whose kernel reads it (scales go with their weights).
CLASS = {"F8_E4M3": "fp8", "F8_E8M0": "fp8", "I8": "fp4", "BF16": "bf16", "F32": "f32"}


def tensors(model_dir):
    """(name, dtype, shape, bytes) of the checkpoint's tensors, as dsv4 opens it: the
    tensors model.safetensors.index.json names, else those of model.safetensors."""
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = sorted(set(weight_map.values()))
    else:
        weight_map, files = None, ["model.safetensors"]
    for name in files:
        with open(model_dir / name, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
        for key, v in header.items():
            if key != "__metadata__" and (weight_map is None or weight_map.get(key) == name):
                yield key, v["dtype"], v["shape"], v["data_offsets"][1] - v["data_offsets"][0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir", type=pathlib.Path)
    ap.add_argument("--bandwidth", type=float, required=True, help="measured GB/s (the probe)")
    ap.add_argument("--ceiling", action="append", default=[], metavar="CLASS=GBS",
                    help="kernel GB/s from cache for fp8, fp4, bf16, f32 (repeatable)")
    ap.add_argument("--other-us", type=float, default=0.0,
                    help="µs per token outside the weight products (attention, serial steps)")
    args = ap.parse_args()
    try:
        ceiling = {k: float(v) for k, v in (c.split("=") for c in args.ceiling)}
        if args.bandwidth <= 0 or any(v <= 0 for v in ceiling.values()) or args.other_us < 0:
            raise ValueError("bandwidth and ceilings must be positive, --other-us not negative")
        config = json.loads((args.model_dir / "config.json").read_text())
        experts, top_k = config["n_routed_experts"], config["num_experts_per_tok"]
        per_class = defaultdict(float)
        expert_scales = defaultdict(float)  # (layer, class) -> bytes of all routed experts
        for name, dtype, shape, nbytes in tensors(args.model_dir):
            if name.startswith("mtp."):
                continue
            cls = CLASS.get(dtype, "other")
            if ".ffn.experts." in name and dtype == "F8_E8M0":
                cls = "fp4" if config.get("expert_dtype") == "fp4" else "fp8"  # with its weights
            if name == "embed.weight" or name.endswith(".tid2eid"):
                nbytes = nbytes / max(1, shape[0])  # one row per token
            if ".ffn.experts." in name:
                expert_scales[(name.split(".")[1], cls)] += nbytes
            else:
                per_class[cls] += nbytes
        for (_, cls), total in expert_scales.items():
            per_class[cls] += total / experts * top_k
    except (OSError, KeyError, ValueError, struct.error) as e:
        sys.exit(f"v4_decode_bound: {args.model_dir}: {e!r}; "
                 "hint: a DeepSeek-V4 checkpoint directory, --ceiling CLASS=GBS")
    total_bytes = sum(per_class.values())
    bound_us = args.other_us
    print(f"{'class':6} {'MB/token':>9} {'memory us':>10} {'arith us':>9} {'bound us':>9}")
    for cls, b in sorted(per_class.items(), key=lambda kv: -kv[1]):
        mem = b / args.bandwidth / 1e3
        arith = b / ceiling[cls] / 1e3 if cls in ceiling else 0.0
        bound_us += max(mem, arith)
        print(f"{cls:6} {b / 1e6:9.1f} {mem:10.0f} {arith:9.0f} {max(mem, arith):9.0f}")
    print(f"other work {args.other_us:.0f} us; token at least {bound_us:.0f} us")
    best = total_bytes / (bound_us * 1e3) / args.bandwidth
    print(f"weight bytes per token {total_bytes:.0f}; best decode_efficiency {best:.3f} "
          f"(without the other work {total_bytes / ((bound_us - args.other_us) * 1e3) / args.bandwidth:.3f})")


if __name__ == "__main__":
    main()
