#!/usr/bin/env python3
"""Goldens for q8_0 activation quantisation, from gguf-py (third party).

Random 32-value blocks of f32 activations (several magnitudes) plus edge
blocks (all zeros; ties at ±k.5 steps, which round away from zero; a tiny and
a huge scale; one value far above the rest), quantised with gguf-py's numpy
port of ggml's quantize_row_q8_0_ref (gguf.quants.quantize, Q8_0), written as

  tests/data/kquant/q8_0_act_golden.bin:
    char[4] "Q80G", u32 n_blocks,
    n_blocks * 32 little-endian f32 inputs,
    n_blocks * 34 bytes of q8_0 blocks (f16 d, 32 int8 codes).

Run (outside the repo venv): python -m venv ../tools-venv-gold &&
../tools-venv-gold/bin/pip install gguf numpy &&
../tools-venv-gold/bin/python tools/reference/make_q8_0_goldens.py
"""
import os
import struct

import numpy as np
from gguf import GGMLQuantizationType, quants

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "kquant",
                   "q8_0_act_golden.bin")


def main():
    rng = np.random.default_rng(8)
    blocks = []
    for scale in (1e-3, 0.1, 1.0, 7.0, 300.0):
        blocks.append(rng.standard_normal((8, 32)).astype(np.float32) * np.float32(scale))
    edge = np.zeros((6, 32), dtype=np.float32)
    # Ties: amax 127 makes d = 1 and id = 1, so x = k + 0.5 is a tie.
    edge[1, :] = np.arange(-15.5, 16.5, 1.0, dtype=np.float32)
    edge[1, 0] = 127.0
    edge[2, :] = -edge[1, :]
    edge[3, :] = rng.standard_normal(32).astype(np.float32) * np.float32(1e-30)
    edge[4, :] = rng.standard_normal(32).astype(np.float32) * np.float32(1e4)
    edge[5, :] = rng.standard_normal(32).astype(np.float32) * np.float32(0.01)
    edge[5, 17] = np.float32(50.0)
    blocks.append(edge)
    x = np.concatenate(blocks).astype(np.float32)
    q = quants.quantize(x.reshape(-1), GGMLQuantizationType.Q8_0)
    q = np.asarray(q, dtype=np.uint8).reshape(-1)
    n = x.shape[0]
    assert q.size == n * 34
    with open(OUT, "wb") as f:
        f.write(b"Q80G")
        f.write(struct.pack("<I", n))
        f.write(x.astype("<f4").tobytes())
        f.write(q.tobytes())
    print(f"wrote {n} blocks to {OUT}")


if __name__ == "__main__":
    main()
