#!/usr/bin/env python3
"""A tiny random-weight Llama GGUF quantised to Q4_K_M by llama.cpp's own tool.

1. Writes an f32 Llama GGUF with gguf-py (PyPI `gguf`): d_model 256, d_ff 512,
   2 layers, 4 heads of 64 (2 kv heads), vocab 512, random weights (seeded),
   untied classifier, and the stories260K SentencePiece vocabulary copied from
   models/stories260K/stories260K.gguf so the engine's loader (and llama.cpp)
   accept it. Dimensions are multiples of 256 so every matrix can be a k-quant.
2. Runs `llama-quantize <f32> tests/data/kquant/tiny_llama_q4_k_m.gguf Q4_K_M`
   (llama.cpp, built outside this repo; pass its path). The f32 file is not
   kept.
3. With a second argument, also writes the quantised model with every tensor
   dequantised to f32 by gguf-py (gguf.quants.dequantize) to that path, for
   running llama.cpp on exactly the quantised weights without its q8_K
   activation quantisation (README.md).

With --type Q8_0 the same f32 model is quantised to Q8_0 instead, into
tests/data/kquant/tiny_llama_q8_0.gguf (every matrix q8_0, norms f32).

Usage: python make_tiny_llama_kquant.py /path/to/llama-quantize [dequantised.gguf]
                                        [--type Q4_K_M|Q8_0]
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter, quants

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")
OUTS = {"Q4_K_M": "tiny_llama_q4_k_m.gguf", "Q8_0": "tiny_llama_q8_0.gguf"}

D, F, L, H, KV, V, CTX = 256, 512, 2, 4, 2, 512, 256
HD = D // H


def copy_vocab(w):
    r = GGUFReader(os.path.join(ROOT, "models", "stories260K", "stories260K.gguf"))
    f = r.fields
    w.add_tokenizer_model(str(bytes(f["tokenizer.ggml.model"].parts[-1]), "utf-8"))
    tokens = [bytes(f["tokenizer.ggml.tokens"].parts[i]) for i in f["tokenizer.ggml.tokens"].data]
    w.add_token_list(tokens)
    w.add_token_scores([float(f["tokenizer.ggml.scores"].parts[i][0])
                        for i in f["tokenizer.ggml.scores"].data])
    w.add_token_types([int(f["tokenizer.ggml.token_type"].parts[i][0])
                       for i in f["tokenizer.ggml.token_type"].data])
    for key, add in (("unknown_token_id", w.add_unk_token_id), ("bos_token_id", w.add_bos_token_id),
                     ("eos_token_id", w.add_eos_token_id)):
        add(int(f["tokenizer.ggml." + key].parts[-1][0]))
    assert len(tokens) == V


def write_dequantised(src, dst):
    r = GGUFReader(src)
    w = GGUFWriter(dst, "llama")
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        t = f.types[0]
        if k == "general.file_type":
            w.add_uint32(k, 0)
        elif t == GGUFValueType.ARRAY:
            if f.types[1] == GGUFValueType.STRING:
                w.add_array(k, [bytes(f.parts[i]) for i in f.data])
            else:
                w.add_array(k, [f.parts[i][0].item() for i in f.data])
        elif t == GGUFValueType.STRING:
            w.add_string(k, bytes(f.parts[-1]).decode())
        else:
            w.add_key_value(k, f.parts[-1][0].item(), t)
    for t in r.tensors:
        a = quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w.add_tensor(t.name, a.reshape([int(x) for x in reversed(t.shape)]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    args = sys.argv[1:]
    qtype = "Q4_K_M"
    if "--type" in args:
        i = args.index("--type")
        qtype = args[i + 1] if i + 1 < len(args) else ""
        del args[i:i + 2]
    if len(args) not in (1, 2) or qtype not in OUTS:
        sys.exit(__doc__)
    out = os.path.join(HERE, OUTS[qtype])
    quantize = args[0]
    rng = np.random.default_rng(20261130)

    def mat(n, k, scale=1.0):  # [n, k] outermost first; ggml ne = (k, n)
        return (rng.standard_normal((n, k)) * scale / np.sqrt(k)).astype(np.float32)

    def norm():
        return (1.0 + 0.1 * rng.standard_normal(D)).astype(np.float32)

    with tempfile.TemporaryDirectory() as tmp:
        f32_path = os.path.join(tmp, "tiny_f32.gguf")
        w = GGUFWriter(f32_path, "llama")
        w.add_name("tiny-random-llama-kquant")
        w.add_context_length(CTX)
        w.add_embedding_length(D)
        w.add_feed_forward_length(F)
        w.add_block_count(L)
        w.add_head_count(H)
        w.add_head_count_kv(KV)
        w.add_rope_dimension_count(HD)
        w.add_rope_freq_base(10000.0)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_file_type(0)  # all f32
        copy_vocab(w)
        w.add_tensor("token_embd.weight", (rng.standard_normal((V, D))).astype(np.float32))
        for l in range(L):
            p = f"blk.{l}."
            w.add_tensor(p + "attn_norm.weight", norm())
            w.add_tensor(p + "attn_q.weight", mat(D, D))
            w.add_tensor(p + "attn_k.weight", mat(KV * HD, D))
            w.add_tensor(p + "attn_v.weight", mat(KV * HD, D))
            w.add_tensor(p + "attn_output.weight", mat(D, D))
            w.add_tensor(p + "ffn_norm.weight", norm())
            w.add_tensor(p + "ffn_gate.weight", mat(F, D))
            w.add_tensor(p + "ffn_up.weight", mat(F, D))
            w.add_tensor(p + "ffn_down.weight", mat(D, F))
        w.add_tensor("output_norm.weight", norm())
        w.add_tensor("output.weight", mat(V, D, 4.0))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        subprocess.run([quantize, f32_path, out, qtype], check=True)
    r = GGUFReader(out)
    for t in r.tensors:
        print(f"{t.name:28s} {t.tensor_type.name:5s} {list(t.shape)}")
    print(out, os.path.getsize(out), "bytes")
    if len(args) == 2:
        write_dequantised(out, args[1])
        print("dequantised:", args[1])


if __name__ == "__main__":
    main()
