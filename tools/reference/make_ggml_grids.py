#!/usr/bin/env python3
"""Writes src/tensor/ggml_grids.h: the lattice grids and sign tables of GGUF's
i-quants, from gguf-py (third party: PyPI `gguf`, MIT licence, its
gguf/quants.py, which carries llama.cpp's tables in a packed form).

The tables, as llama.cpp's ggml-common.h defines them:
  iq2xxs_grid[256], iq2xs_grid[512], iq2s_grid[1024]: 8 values each
      (bytes 0x08, 0x19, 0x2b), one uint64_t per row, value j in byte j;
  iq3xxs_grid[256], iq3s_grid[512]: 4 values each, one uint32_t per row;
  iq1s_grid[2048]: 8 int8 values in {-1, 0, 1} each, one uint64_t per row
      (bytes 0xff, 0x00, 0x01);
  ksigns_iq2xs[128]: a 7-bit sign index to the 8 sign bits (bit j: value j
      negative; the eighth bit makes the count of set bits even);
  kmask_iq2xs[8]: 1 << j.

Run (outside the repo venv): python -m venv ../tools-venv &&
../tools-venv/bin/pip install gguf numpy &&
../tools-venv/bin/python tools/reference/make_ggml_grids.py
"""
import os

import numpy as np
from gguf import quants

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "src", "tensor", "ggml_grids.h")


def grid_rows(cls):
    cls.init_grid()
    g = np.asarray(cls.grid, dtype=np.float32).reshape(cls.grid_shape)
    rows = g.astype(np.int64)
    assert np.array_equal(rows.astype(np.float32), g), cls.__name__
    return rows


def packed(rows):
    """Each row's values as little-endian bytes of one integer."""
    out = []
    for r in rows:
        v = 0
        for j, x in enumerate(r):
            v |= (int(x) & 0xFF) << (8 * j)
        out.append(v)
    return out


def emit_array(lines, ctype, name, values, width_hex, per_line):
    lines.append(f"inline constexpr {ctype} {name}[{len(values)}] = {{")
    for i in range(0, len(values), per_line):
        chunk = values[i:i + per_line]
        lines.append("    " + ", ".join(f"0x{v:0{width_hex}x}" for v in chunk) + ",")
    lines.append("};")
    lines.append("")


def main():
    tables = [
        ("uint64_t", "kIq2xxsGrid", grid_rows(quants.IQ2_XXS), 16, 4),
        ("uint64_t", "kIq2xsGrid", grid_rows(quants.IQ2_XS), 16, 4),
        ("uint64_t", "kIq2sGrid", grid_rows(quants.IQ2_S), 16, 4),
        ("uint32_t", "kIq3xxsGrid", grid_rows(quants.IQ3_XXS), 8, 8),
        ("uint32_t", "kIq3sGrid", grid_rows(quants.IQ3_S), 8, 8),
        ("uint64_t", "kIq1sGrid", grid_rows(quants.IQ1_S), 16, 4),
    ]
    ksigns = list(np.frombuffer(quants.IQ2_XXS.ksigns, dtype=np.uint8))
    assert len(ksigns) == 128
    for i, s in enumerate(ksigns):
        assert s & 0x7F == i and bin(int(s)).count("1") % 2 == 0
    assert float(quants.IQ1_S.delta) == 0.125 and float(quants.IQ1_M.delta) == 0.125

    lines = [
        "// GENERATED FILE, do not edit: tools/reference/make_ggml_grids.py writes it",
        "// (../tools-venv/bin/python tools/reference/make_ggml_grids.py).",
        "//",
        "// The lattice grids and sign tables of GGUF's i-quants (tensor/ggml_quants.h),",
        "// as llama.cpp's ggml-common.h defines them, taken from gguf-py's",
        "// gguf/quants.py (PyPI `gguf`, MIT licence; llama.cpp/ggml, MIT licence,",
        "// Copyright (c) 2023-2024 The ggml authors).",
        "//",
        "// Row r of a grid packs its values little-endian: value j is byte j of the",
        "// uint64_t (8 values) or uint32_t (4 values). The iq2 grids hold the bytes",
        "// 0x08, 0x19, 0x2b; iq3xxs 0x04..0x3e; iq3s 0x01..0x0f (odd); iq1s the int8",
        "// values -1, 0, 1 (bytes 0xff, 0x00, 0x01). kKsignsIq2xs maps a 7-bit sign",
        "// index to 8 sign bits (bit j set: value j negated; bit 7 keeps the parity",
        "// even); kKmaskIq2xs[j] = 1 << j. kIq1sDelta: the iq1_s / iq1_m offset.",
        "#ifndef DSV4_TENSOR_GGML_GRIDS_H_",
        "#define DSV4_TENSOR_GGML_GRIDS_H_",
        "",
        "#include <cstdint>",
        "",
        "namespace dsv4 {",
        "",
    ]
    for ctype, name, rows, width_hex, per_line in tables:
        emit_array(lines, ctype, name, packed(rows), width_hex, per_line)
    emit_array(lines, "uint8_t", "kKsignsIq2xs", [int(s) for s in ksigns], 2, 16)
    emit_array(lines, "uint8_t", "kKmaskIq2xs", [1 << j for j in range(8)], 2, 8)
    lines += [
        "inline constexpr float kIq1sDelta = 0.125f;",
        "",
        "}  // namespace dsv4",
        "",
        "#endif  // DSV4_TENSOR_GGML_GRIDS_H_",
        "",
    ]
    with open(OUT, "w") as f:
        f.write("\n".join(lines))
    print(OUT)


if __name__ == "__main__":
    main()
