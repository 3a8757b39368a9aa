#!/usr/bin/env python3
"""Goldens for GGUF q4_K / q6_K dequantisation, from gguf-py (third party).

Builds random 256-value blocks (random bytes, with finite f16 scales d/dmin in
a sane range, plus a few edge blocks: zero scales, f16 subnormal scales,
negative scales, all-ones bytes), dequantises them with gguf-py's numpy
reference (gguf.quants.dequantize) and writes, per type, one file:

  tests/data/kquant/<type>_golden.bin:
    char[4] "KQG1", u32 ggml type (12 = q4_K, 14 = q6_K), u32 n_blocks,
    n_blocks * block_bytes raw block bytes (ggml layout),
    n_blocks * 256 little-endian f32 expected values.

Run (outside the repo venv): python -m venv ../tools-venv-gold &&
../tools-venv-gold/bin/pip install gguf numpy &&
../tools-venv-gold/bin/python tools/reference/make_kquant_goldens.py
"""
import os
import struct

import numpy as np
from gguf import GGMLQuantizationType, quants
from gguf.constants import GGML_QUANT_SIZES

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "kquant")
N_BLOCKS = 24


def f16_bytes(x):
    return np.array([x], dtype=np.float16).view(np.uint8)


def make_blocks(qtype, rng):
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    assert block_elems == 256
    blocks = rng.integers(0, 256, size=(N_BLOCKS, block_bytes), dtype=np.uint8)
    # f16 scale positions: q4_K d at 0, dmin at 2; q6_K d at the last 2 bytes.
    pos = [0, 2] if qtype == GGMLQuantizationType.Q4_K else [block_bytes - 2]
    for b in range(N_BLOCKS):
        for p in pos:
            if b == 0:
                v = 0.0
            elif b == 1:
                v = 3.0e-6  # f16 subnormal
            elif b == 2:
                v = -0.0123
            else:
                v = float(rng.uniform(-1.0, 1.0)) * 10.0 ** float(rng.uniform(-4, 0))
            blocks[b, p:p + 2] = f16_bytes(v)
    blocks[3, :] = 0xFF
    blocks[3, pos[0]:pos[0] + 2] = f16_bytes(0.5)
    if len(pos) > 1:
        blocks[3, pos[1]:pos[1] + 2] = f16_bytes(0.25)
    return blocks


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(20261130)
    for qtype, name in ((GGMLQuantizationType.Q4_K, "q4_k"), (GGMLQuantizationType.Q6_K, "q6_k")):
        blocks = make_blocks(qtype, rng)
        values = quants.dequantize(blocks.reshape(-1), qtype).astype("<f4").reshape(-1)
        assert values.size == N_BLOCKS * 256 and np.all(np.isfinite(values))
        path = os.path.join(OUT, f"{name}_golden.bin")
        with open(path, "wb") as f:
            f.write(b"KQG1" + struct.pack("<II", int(qtype), N_BLOCKS))
            f.write(blocks.tobytes())
            f.write(values.tobytes())
        print(path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
