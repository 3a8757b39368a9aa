#!/usr/bin/env python3
"""Goldens for the GGUF quant types' dequantisation, from gguf-py (third party).

For each type below: random blocks (random bytes, with the f16 scales set to
finite values in a sane range, plus edge blocks: zero scale, f16 subnormal
scale, negative scale, all-ones bytes), dequantised by gguf-py's numpy
reference (gguf.quants.dequantize), one file per type:

  tests/data/ggml_quants/<type>_golden.bin:
    char[4] "GQG1", u32 ggml type, u32 block_elems, u32 n_blocks,
    n_blocks * block_bytes raw block bytes (ggml layout),
    n_blocks * block_elems little-endian f32 expected values.

Run (outside the repo venv): python -m venv ../tools-venv &&
../tools-venv/bin/pip install gguf numpy &&
../tools-venv/bin/python tools/reference/make_ggml_quant_goldens.py
"""
import os
import struct

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "ggml_quants")
N_BLOCKS = 24

# Byte offsets of each type's f16 scales in its block (ggml-common.h).
F16_POS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q5_K: [0, 2],
    T.IQ2_XXS: [0], T.IQ2_XS: [0], T.IQ2_S: [0], T.IQ3_XXS: [0], T.IQ3_S: [0],
    T.IQ1_S: [0], T.IQ1_M: [], T.IQ4_NL: [0], T.IQ4_XS: [0],
}


def f16_bits(x):
    return int(np.array([x], dtype=np.float16).view(np.uint16)[0])


def set_iq1m_scale(block, v):
    # iq1_m keeps its f16 scale in the top nibbles of its four u16 scale words.
    bits = f16_bits(v)
    sc = block[48:56].view(np.uint16).copy()
    for i in range(4):
        sc[i] = (int(sc[i]) & 0x0FFF) | (((bits >> (4 * i)) & 0xF) << 12)
    block[48:56] = sc.view(np.uint8)


def scale_value(b, rng):
    if b == 0:
        return 0.0
    if b == 1:
        return 3.0e-6  # f16 subnormal
    if b == 2:
        return -0.0123
    return float(rng.uniform(-1.0, 1.0)) * 10.0 ** float(rng.uniform(-4, 0))


def make_blocks(qtype, rng):
    _, block_bytes = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(N_BLOCKS, block_bytes), dtype=np.uint8)
    blocks[3, :] = 0xFF
    for b in range(N_BLOCKS):
        for j, p in enumerate(F16_POS[qtype]):
            v = 0.5 / (j + 1) if b == 3 else scale_value(b, rng)
            blocks[b, p:p + 2] = np.array([f16_bits(v)], dtype=np.uint16).view(np.uint8)
        if qtype == T.IQ1_M:
            set_iq1m_scale(blocks[b], 0.5 if b == 3 else scale_value(b, rng))
    return blocks


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(20261206)
    for qtype in F16_POS:
        block_elems, _ = GGML_QUANT_SIZES[qtype]
        blocks = make_blocks(qtype, rng)
        values = quants.dequantize(blocks.reshape(-1), qtype).astype("<f4").reshape(-1)
        assert values.size == N_BLOCKS * block_elems
        assert np.all(np.isfinite(values)), qtype.name
        path = os.path.join(OUT, qtype.name.lower() + "_golden.bin")
        with open(path, "wb") as f:
            f.write(b"GQG1")
            f.write(struct.pack("<III", int(qtype), block_elems, N_BLOCKS))
            f.write(blocks.tobytes())
            f.write(values.tobytes())
        print(path, N_BLOCKS, "blocks")


if __name__ == "__main__":
    main()
