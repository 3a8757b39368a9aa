#!/usr/bin/env python3
"""Writes the exhaustive dtype tables in tests/data/dtype/ from ml_dtypes and numpy.

What it is: the golden generator for tests/tensor/dtype_test.cc and
tests/base/float_types_test.cc, which compare base/float_types.h and
tensor/dtype.h's DequantizeRow bit for bit against these tables. It calls only
third-party code (numpy's float16, ml_dtypes' bfloat16 / float8_e4m3fn /
float8_e8m0fnu / float4_e2m1fn); nothing here re-implements a conversion.

Run it in a tools venv outside the repository:
  python3 -m venv ../tools-venv-gold
  ../tools-venv-gold/bin/pip install numpy ml_dtypes
  ../tools-venv-gold/bin/python tools/goldens/dtype_tables.py tests/data/dtype

Output (all little-endian, no headers; see tests/data/dtype/README.md):
  decode tables, one u32 f32 bit pattern per code, indexed by the code:
    bf16_to_f32.u32 [65536], f16_to_f32.u32 [65536], fp8_e4m3fn_to_f32.u32 [256],
    e8m0fnu_to_f32.u32 [256], fp4_e2m1fn_to_f32.u32 [16]
  encode cases: encode_inputs_f32.u32 [N] (f32 bit patterns) and, for each input,
    encode_bf16.u16 [N], encode_f16.u16 [N], encode_fp8_e4m3fn.u8 [N],
    encode_fp4_e2m1fn.u8 [N] (the code the library rounds it to; fp4 in the low nibble).
"""
import os
import sys
import warnings

import ml_dtypes
import numpy as np

kSeed = 20240601


def DecodeTable(dtype, n_codes):
    storage = np.uint16 if n_codes > 256 else np.uint8
    codes = np.arange(n_codes, dtype=storage)
    return codes.view(dtype).astype(np.float32).view(np.uint32)


def Midpoints(table_u32):
    """f32 midpoints between adjacent finite positive values of a decode table (exact in f32)."""
    v = table_u32.view(np.float32)
    v = np.unique(v[np.isfinite(v)].astype(np.float64))  # drop NaN/inf before widening
    v = v[v >= 0]
    mids = (v[:-1] + v[1:]) / 2
    out = mids.astype(np.float32)
    assert np.all(out.astype(np.float64) == mids), "midpoint not exact in f32"
    return out


def Neighbours(x):
    """x and its f32 neighbours one ulp below and above."""
    x = x.astype(np.float32)
    return np.concatenate([x, np.nextafter(x, np.float32(-np.inf)), np.nextafter(x, np.float32(np.inf))])


def EncodeInputs(rng, tables):
    f32 = np.float32
    edge = np.array(
        [0.0, 1.0, 0.5, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 6.5, 7.0, 8.0, 12.0, 100.0,
         240.0, 256.0, 416.0, 432.0, 440.0, 448.0, 456.0, 460.0, 464.0, 465.0, 470.0, 479.0, 480.0,
         481.0, 500.0, 512.0, 1000.0, 65504.0, 65519.0, 65520.0, 65536.0, 1e5, 3.0e38,
         2.0 ** -6, 2.0 ** -7, 2.0 ** -9, 2.0 ** -10, 2.0 ** -14, 2.0 ** -15, 2.0 ** -24, 2.0 ** -25,
         3 * 2.0 ** -26, 2.0 ** -126, 2.0 ** -127, 2.0 ** -149, 1e-45, 1e-40, 1.0 / 3.0],
        dtype=np.float64).astype(f32)
    special_bits = np.array(
        [0x7f800000, 0x7fc00000, 0x7f800001, 0x7fbfffff, 0x7fffffff, 0x7f7fffff, 0x7f7f8000,
         0x7f7f7fff, 0x00000001, 0x007fffff, 0x00800000, 0x3f808000, 0x3f818000, 0x3f808001,
         0x3f807fff, 0x477ff000, 0x477fefff, 0x387fe000, 0x33000000, 0x33000001],
        dtype=np.uint32).view(f32)
    parts = [edge, special_bits]
    # Ties: midpoints between adjacent values of each target format, +-1 ulp.
    parts.append(Neighbours(Midpoints(tables["fp8_e4m3fn"])))
    parts.append(Neighbours(Midpoints(tables["fp4_e2m1fn"])))
    for name, k in (("f16", 200), ("bf16", 200)):
        mids = Midpoints(tables[name])
        parts.append(Neighbours(rng.choice(mids, size=k, replace=False)))
    # The f16 subnormal range and the fp8 range at random.
    parts.append((rng.uniform(0, 2.0 ** -14, size=150)).astype(f32))
    parts.append((rng.uniform(0, 2.0 ** -6, size=150)).astype(f32))
    parts.append((rng.uniform(-500, 500, size=300)).astype(f32))
    parts.append((rng.uniform(-8, 8, size=300)).astype(f32))
    # Log-uniform magnitudes over the whole f32 range, both signs.
    mags = np.exp2(rng.uniform(-150, 128, size=500)).astype(f32)
    parts.append(mags * rng.choice(np.array([-1, 1], dtype=f32), size=500))
    # Arbitrary bit patterns (includes NaN payloads and subnormals).
    parts.append(rng.integers(0, 2 ** 32, size=500, dtype=np.uint64).astype(np.uint32).view(f32))
    x = np.concatenate(parts).astype(f32)
    x = np.concatenate([x, -x])  # every case with both signs
    # Deduplicate by bit pattern, keep a stable order.
    _, first = np.unique(x.view(np.uint32), return_index=True)
    return x[np.sort(first)]


def Write(out_dir, name, array, dtype):
    array = np.ascontiguousarray(array.astype(dtype).astype(np.dtype(dtype).newbyteorder("<")))
    with open(os.path.join(out_dir, name), "wb") as f:
        f.write(array.tobytes())
    print(f"{name}: {array.size} entries, {array.nbytes} bytes")


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "tests/data/dtype"
    os.makedirs(out_dir, exist_ok=True)
    tables = {
        "bf16": DecodeTable(ml_dtypes.bfloat16, 65536),
        "f16": DecodeTable(np.float16, 65536),
        "fp8_e4m3fn": DecodeTable(ml_dtypes.float8_e4m3fn, 256),
        "e8m0fnu": DecodeTable(ml_dtypes.float8_e8m0fnu, 256),
        "fp4_e2m1fn": DecodeTable(ml_dtypes.float4_e2m1fn, 16),
    }
    for name, table in tables.items():
        Write(out_dir, f"{name}_to_f32.u32", table, np.uint32)

    rng = np.random.default_rng(kSeed)
    x = EncodeInputs(rng, tables)
    Write(out_dir, "encode_inputs_f32.u32", x.view(np.uint32), np.uint32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # overflow to inf/NaN is the point
        Write(out_dir, "encode_bf16.u16", x.astype(ml_dtypes.bfloat16).view(np.uint16), np.uint16)
        Write(out_dir, "encode_f16.u16", x.astype(np.float16).view(np.uint16), np.uint16)
        Write(out_dir, "encode_fp8_e4m3fn.u8", x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8),
              np.uint8)
        Write(out_dir, "encode_fp4_e2m1fn.u8",
              x.astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF, np.uint8)
    print(f"numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__}, seed {kSeed}")


if __name__ == "__main__":
    main()
