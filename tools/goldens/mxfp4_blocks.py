#!/usr/bin/env python3
"""Writes tests/data/dtype/mxfp4_blocks.u8 and mxfp4_dequant.u32 with gguf-py.

What it is: the golden for tests/ops/mxfp4_test.cc, which checks dsv4's scalar
MXFP4 dequantiser (ops/ref/mxfp4_ref.h) bit for bit against gguf-py's own
`gguf.quants.dequantize(..., GGMLQuantizationType.MXFP4)` (llama.cpp's Python
package; it doubles the e2m1 values and halves the e8m0 scale as ggml does).
Nothing here re-implements the format: the blocks are random bytes.

Run it in a tools venv outside the repository:
  python3 -m venv ../tools-venv
  ../tools-venv/bin/pip install numpy gguf
  ../tools-venv/bin/python tools/goldens/mxfp4_blocks.py tests/data/dtype

Output (little-endian, no headers):
  mxfp4_blocks.u8   [64 blocks × 17 bytes]: random codes; scale bytes 0, 1, 2, 126,
                    127, 128, 253, 254 first, then random in [0, 254] (0xff, NaN to
                    dsv4 and 2^127 to ggml, is left out)
  mxfp4_dequant.u32 [64 × 32]: the f32 bit pattern of each value
"""
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

kSeed = 20261206
kBlocks = 64


def main():
    out_dir = sys.argv[1]
    rng = np.random.default_rng(kSeed)
    blocks = rng.integers(0, 256, size=(kBlocks, 17), dtype=np.uint8)
    scales = rng.integers(0, 255, size=kBlocks, dtype=np.uint8)
    scales[:8] = [0, 1, 2, 126, 127, 128, 253, 254]
    blocks[:, 0] = scales
    values = dequantize(blocks.reshape(-1), GGMLQuantizationType.MXFP4).astype(np.float32)
    assert values.size == kBlocks * 32
    blocks.tofile(os.path.join(out_dir, "mxfp4_blocks.u8"))
    values.view(np.uint32).astype("<u4").tofile(os.path.join(out_dir, "mxfp4_dequant.u32"))


if __name__ == "__main__":
    main()
