#!/usr/bin/env python3
"""Writes the io reader test data and fuzz seeds with third-party writers.

The safetensors files come from the `safetensors` PyPI package (0.8.0) and the
GGUF file from the `gguf` PyPI package (0.19.0, llama.cpp's gguf-py), so the
C++ readers are checked against the formats as their reference writers produce
them. Each data file has a JSON sidecar with the values numpy / gguf-py decode
from it (expected.json); the tests compare the C++ readers against that.

Usage (from the repo root):
  python3 -m venv tools/.venv
  tools/.venv/bin/pip install numpy==2.4.6 ml_dtypes==0.6.0 safetensors==0.8.0 gguf==0.19.0
  tools/.venv/bin/python tests/data/io/make_io_data.py
"""
import json
import os
import shutil
import struct

import gguf
import ml_dtypes
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize, quantize
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
CORPUS = os.path.join(REPO, "tests", "fuzz", "corpus")


def values(a):
    """Decoded values as a flat JSON-able list (floats as float64, exactly)."""
    a = np.asarray(a)
    if a.dtype.kind in "iub":
        return [int(x) for x in a.reshape(-1)]
    return [float(x) for x in a.astype(np.float64).reshape(-1)]


def describe(a, dtype):
    return {"dtype": dtype, "shape": list(a.shape), "values": values(a)}


def make_safetensors():
    rng = np.random.default_rng(1234)
    t = {
        "f32": (np.arange(6, dtype=np.float32).reshape(2, 3) * 0.5 - 1.0),
        "f16": np.array([1.0, -2.0, 0.5, 65504.0], dtype=np.float16),
        "bf16": np.array([1.0, -3.5, 1e-3], dtype=np.float32).astype(ml_dtypes.bfloat16),
        "fp8": np.array([0.0, 1.0, -448.0, 0.015625], dtype=np.float32).astype(ml_dtypes.float8_e4m3fn),
        "e8m0": np.array([1.0, 2.0 ** -10, 2.0 ** 20], dtype=np.float32).astype(ml_dtypes.float8_e8m0fnu),
        "i8": np.array([[-128, -1], [0, 127]], dtype=np.int8),
        "u8": np.array([0, 1, 127, 128, 255], dtype=np.uint8),
        "i32": np.array([-2147483648, 0, 2147483647], dtype=np.int32),
        "i64": np.array([-(2 ** 40), 2 ** 40 + 1], dtype=np.int64),
        # FP4 e2m1 packed two per byte, as DeepSeek-V4 stores routed experts: I8 [O, I/2].
        "packed_fp4": rng.integers(-128, 128, size=(2, 4), dtype=np.int8),
        "scalar": np.array(3.25, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "big": rng.standard_normal((16, 33)).astype(np.float32),
        # Readable by the format but not bindable here:
        "flags": np.array([True, False, True]),
        "f64": np.array([1.5, -2.25]),
        "rank5": np.arange(2, dtype=np.float32).reshape(1, 1, 1, 2, 1),
    }
    dtypes = {"f32": "F32", "f16": "F16", "bf16": "BF16", "fp8": "F8_E4M3", "e8m0": "F8_E8M0",
              "i8": "I8", "u8": "U8", "i32": "I32", "i64": "I64", "packed_fp4": "I8",
              "scalar": "F32", "empty": "F32", "big": "F32", "flags": "BOOL", "f64": "F64",
              "rank5": "F32"}
    path = os.path.join(HERE, "tiny.safetensors")
    save_file(t, path, metadata={"format": "np", "producer": "make_io_data.py"})
    expected = {k: describe(v, dtypes[k]) for k, v in t.items()}
    # The raw packed bytes too, so the FP4 view can be checked nibble by nibble.
    packed = t["packed_fp4"].view(np.uint8).reshape(-1)
    expected["packed_fp4"]["bytes"] = [int(b) for b in packed]
    # Element 2j is the low nibble of byte j, 2j+1 the high nibble; ml_dtypes decodes the codes.
    codes = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(-1).astype(np.uint8)
    expected["packed_fp4"]["fp4_values"] = values(
        codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32))

    # Sharded: three tensors over two shards plus the Hugging Face style index.
    shard_dir = os.path.join(HERE, "sharded")
    shutil.rmtree(shard_dir, ignore_errors=True)
    os.makedirs(shard_dir)
    shards = {
        "model-00001-of-00002.safetensors": {
            "layers.0.w": np.arange(12, dtype=np.float32).reshape(3, 4),
            "layers.0.b": np.array([7, -7], dtype=np.int32),
        },
        "model-00002-of-00002.safetensors": {
            "head.weight": np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32).astype(ml_dtypes.bfloat16),
            # Present in the shard but not in the index: must not be exposed.
            "stray": np.zeros(2, dtype=np.float32),
        },
    }
    weight_map = {}
    sharded_expected = {}
    total = 0
    for name, tensors in shards.items():
        save_file(tensors, os.path.join(shard_dir, name))
        for k, v in tensors.items():
            total += v.nbytes
            if k != "stray":
                weight_map[k] = name
                sharded_expected[k] = describe(v, {"layers.0.w": "F32", "layers.0.b": "I32",
                                                   "head.weight": "BF16"}[k])
    with open(os.path.join(shard_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    return expected, sharded_expected


def make_gguf():
    path = os.path.join(HERE, "tiny.gguf")
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.1)
    w.add_bool("test.bool", True)
    w.add_string("test.str", "héllo wörld ✓")
    w.add_uint64("test.u64", 2 ** 63 + 5)
    w.add_int64("test.i64", -(2 ** 62))
    w.add_float64("test.f64", 1.0 / 3.0)
    w.add_array("test.arr_str", ["a", "", "日本語", "<0x0A>"])
    w.add_array("test.arr_f32", [0.5, -1.25, 3.0e-8])
    w.add_array("test.arr_i32", [1, -2, 2147483647])
    w.add_array("test.arr_bool", [True, False])
    w.add_key_value("test.arr_u8", [1, 2, 255], gguf.GGUFValueType.ARRAY,
                    sub_type=gguf.GGUFValueType.UINT8)
    w.add_key_value("test.arr_i64", [5, -6], gguf.GGUFValueType.ARRAY,
                    sub_type=gguf.GGUFValueType.INT64)
    w.add_key_value("test.arr_f64", [0.25, -8.0], gguf.GGUFValueType.ARRAY,
                    sub_type=gguf.GGUFValueType.FLOAT64)
    w.add_context_length(128)
    w.add_embedding_length(32)

    rng = np.random.default_rng(99)
    f32 = np.arange(24, dtype=np.float32).reshape(3, 8) / 8.0
    f16 = np.array([[1, -2, 0.5, 3], [4, 5, 6, -7]], dtype=np.float16)
    bf16 = np.array([[1.0, -3.5], [2.0, 0.125]], dtype=np.float32).astype(ml_dtypes.bfloat16)
    q8_src = rng.standard_normal((2, 64)).astype(np.float32)
    q8 = quantize(q8_src, Q.Q8_0)  # uint8 [2, 68]
    i32 = np.array([[1, -1, 2147483647]], dtype=np.int32)
    q4k_bytes = rng.integers(0, 256, size=(2, 144), dtype=np.uint8)  # 2 rows x 256 elements
    w.add_tensor("t.f32", f32)
    w.add_tensor("t.f16", f16)
    w.add_tensor("t.bf16", bf16.view(np.uint16), raw_shape=bf16.shape, raw_dtype=Q.BF16)
    w.add_tensor("t.q8_0", q8, raw_dtype=Q.Q8_0)
    w.add_tensor("t.i32", i32)
    w.add_tensor("t.q4_k", q4k_bytes, raw_dtype=Q.Q4_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    expected = {
        "t.f32": describe(f32, "f32"),
        "t.f16": describe(f16, "f16"),
        "t.bf16": describe(bf16, "bf16"),
        "t.q8_0": describe(dequantize(q8, Q.Q8_0), "q8_0"),
        "t.i32": describe(i32, "i32"),
        "t.q4_k": {"dtype": "q4_K", "shape": [2, 256], "ggml_type": int(Q.Q4_K)},
        "test.f32": float(np.float32(0.1)),
        "test.f64": 1.0 / 3.0,
        "test.arr_f32": [float(np.float32(x)) for x in [0.5, -1.25, 3.0e-8]],
    }
    return expected


def make_llama2c(path, dim, hidden, layers, heads, kv_heads, vocab, seq, shared):
    hd = dim // heads
    n = (vocab * dim + layers * dim + layers * dim * dim * 2 + layers * kv_heads * hd * dim * 2
         + layers * dim + layers * hidden * dim * 3 + dim + seq * hd // 2 * 2
         + (0 if shared else vocab * dim))
    with open(path, "wb") as f:
        f.write(struct.pack("<7i", dim, hidden, layers, heads, kv_heads,
                            vocab if shared else -vocab, seq))
        f.write(np.arange(n, dtype=np.float32).tobytes())


def make_quant_types_seed(path):
    # One two-block row of random bytes per GGUF quant type dsv4 dequantises
    # (random scales included: the dequantisers must take any bytes).
    rng = np.random.default_rng(1206)
    w = gguf.GGUFWriter(path, arch="llama")
    for q in [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q2_K, Q.Q3_K, Q.Q5_K, Q.IQ2_XXS, Q.IQ2_XS,
              Q.IQ2_S, Q.IQ3_XXS, Q.IQ3_S, Q.IQ1_S, Q.IQ1_M, Q.IQ4_NL, Q.IQ4_XS, Q.MXFP4]:
        _, block_bytes = gguf.constants.GGML_QUANT_SIZES[q]
        raw = rng.integers(0, 256, size=(1, 2 * block_bytes), dtype=np.uint8)
        w.add_tensor("t." + q.name.lower(), raw, raw_dtype=q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def make_corpus():
    for name in ["fuzz_gguf", "fuzz_safetensors", "fuzz_llama2c"]:
        d = os.path.join(CORPUS, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    models = os.path.join(REPO, "models", "stories260K")

    def head(src, dst, n=65536):
        with open(src, "rb") as f:
            data = f.read(n)
        with open(dst, "wb") as f:
            f.write(data)

    shutil.copy(os.path.join(HERE, "tiny.gguf"), os.path.join(CORPUS, "fuzz_gguf", "tiny.gguf"))
    make_quant_types_seed(os.path.join(CORPUS, "fuzz_gguf", "quant_types.gguf"))
    head(os.path.join(models, "stories260K.gguf"),
         os.path.join(CORPUS, "fuzz_gguf", "stories260K_head64k.gguf"))
    shutil.copy(os.path.join(HERE, "tiny.safetensors"),
                os.path.join(CORPUS, "fuzz_safetensors", "tiny.safetensors"))
    for shard in sorted(os.listdir(os.path.join(HERE, "sharded"))):
        shutil.copy(os.path.join(HERE, "sharded", shard),
                    os.path.join(CORPUS, "fuzz_safetensors", shard))
    make_llama2c(os.path.join(CORPUS, "fuzz_llama2c", "tiny_shared.bin"), 8, 12, 2, 2, 1, 6, 4, True)
    make_llama2c(os.path.join(CORPUS, "fuzz_llama2c", "tiny_separate.bin"), 4, 4, 1, 1, 1, 3, 2,
                 False)
    head(os.path.join(models, "stories260K.bin"),
         os.path.join(CORPUS, "fuzz_llama2c", "stories260K_head64k.bin"))


def main():
    st, sharded = make_safetensors()
    gg = make_gguf()
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump({"safetensors": st, "sharded": sharded, "gguf": gg}, f, indent=1)
    make_corpus()


if __name__ == "__main__":
    main()
