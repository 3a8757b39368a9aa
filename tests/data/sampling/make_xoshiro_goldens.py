#!/usr/bin/env python3
"""Makes xoshiro_goldens.txt: reference outputs of xoshiro256** for
tests/sampling/sampler_test.cc, from the `randomgen` package (PyPI, NCSA/BSD;
its Xoshiro256 is Blackman & Vigna's xoshiro256** 1.0).

Usage: python3 make_xoshiro_goldens.py > xoshiro_goldens.txt   (pip install randomgen numpy)
Each line: the four state words, then the first 8 outputs, all decimal.
"""
import numpy as np
from randomgen import Xoshiro256

STATES = [
    [1, 2, 3, 4],
    [0x0123456789ABCDEF, 0xFEDCBA9876543210, 0xDEADBEEFCAFEBABE, 0x0F1E2D3C4B5A6978],
    [0, 0, 0, 1],
]
for s in STATES:
    g = Xoshiro256(0)
    st = g.state
    st["s"] = np.array(s, dtype=np.uint64)
    g.state = st
    print(" ".join(str(x) for x in s + [int(v) for v in g.random_raw(8)]))
