#!/usr/bin/env python3
"""A synthetic llama-architecture GGUF whose dims divide 256, for k-quant side by sides.

stories260K's dims (64, 172) do not divide the k-quants' 256-value blocks, so
llama-quantize falls back to other types on it. This writes a model with
stories260K's tokenizer (vocabulary 512) and chosen dims, random f16 weights
(normal, std 1/sqrt(fan-in)), which llama.cpp's llama-quantize can turn into
Q4_K_M / Q6_K and which both engines load:

  python3 -m venv /tmp/gvenv && /tmp/gvenv/bin/pip install numpy gguf
  /tmp/gvenv/bin/python tools/bench/synth_llama_gguf.py \
      --tokenizer-from models/stories260K/stories260K.gguf --out /tmp/llq/f16.gguf
  llama-quantize /tmp/llq/f16.gguf /tmp/llq/q4_k_m.gguf Q4_K_M

Needs numpy and gguf (PyPI: llama.cpp's gguf-py); not used by any test.
"""
import argparse

import gguf
import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer-from", required=True, help="a llama GGUF whose tokenizer to copy")
    ap.add_argument("--out", required=True)
    ap.add_argument("--dim", type=int, default=2048)
    ap.add_argument("--ffn", type=int, default=5632)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    for name, v in (("dim", args.dim), ("ffn", args.ffn)):
        if v % 256:
            ap.error(f"--{name} {v} is not a multiple of 256 (the k-quant block)")

    src = gguf.GGUFReader(args.tokenizer_from)
    f = src.fields
    tokens = [bytes(f["tokenizer.ggml.tokens"].parts[i]).decode("utf-8")
              for i in f["tokenizer.ggml.tokens"].data]
    scores = [float(f["tokenizer.ggml.scores"].parts[i][0]) for i in f["tokenizer.ggml.scores"].data]
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0])
             for i in f["tokenizer.ggml.token_type"].data]
    vocab = len(tokens)

    w = gguf.GGUFWriter(args.out, "llama")
    w.add_name("synthetic llama (dsv4 tools/bench/synth_llama_gguf.py)")
    w.add_context_length(2048)
    w.add_embedding_length(args.dim)
    w.add_feed_forward_length(args.ffn)
    w.add_block_count(args.layers)
    w.add_head_count(args.heads)
    w.add_head_count_kv(args.kv_heads)
    w.add_rope_dimension_count(args.dim // args.heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    rng = np.random.default_rng(args.seed)
    hd = args.dim // args.heads
    kv = args.kv_heads * hd

    def mat(rows, cols):  # [rows, cols]: rows outputs of cols inputs
        return (rng.standard_normal((rows, cols), dtype=np.float32) / np.sqrt(cols)).astype(np.float16)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w.add_tensor("token_embd.weight", mat(vocab, args.dim))
    w.add_tensor("output_norm.weight", norm(args.dim))
    w.add_tensor("output.weight", mat(vocab, args.dim))
    for i in range(args.layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", norm(args.dim))
        w.add_tensor(p + "attn_q.weight", mat(args.dim, args.dim))
        w.add_tensor(p + "attn_k.weight", mat(kv, args.dim))
        w.add_tensor(p + "attn_v.weight", mat(kv, args.dim))
        w.add_tensor(p + "attn_output.weight", mat(args.dim, args.dim))
        w.add_tensor(p + "ffn_norm.weight", norm(args.dim))
        w.add_tensor(p + "ffn_gate.weight", mat(args.ffn, args.dim))
        w.add_tensor(p + "ffn_up.weight", mat(args.ffn, args.dim))
        w.add_tensor(p + "ffn_down.weight", mat(args.dim, args.ffn))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
