#!/usr/bin/env python3
"""Makes tests/data/deepseek_v4/gguf_types/: one tiny deepseek4 GGUF per ggml quant type, and
llama.cpp's logits on each.

What it is: the golden generator for tests/model/deepseek_v4_gguf_types_test.cc. Like
ds4_gguf_tiny.py (whose functions it reuses), it runs third-party code and dsv4 only:
  1. `dsv4 synth-model` writes a random DeepSeek-V4 checkpoint of three layers (window,
     CSA, HCA) whose every matrix has an input dimension that is a multiple of 256 (d_model,
     q_lora_rank, moe_inter, o_lora_rank * o_groups, heads * head_dim / o_groups, head_dim
     (the HCA ape), 2 * head_dim (the CSA compressor and ape), 2 * index_head_dim all 256
     or 512), so that every k-quant and i-quant applies to every matrix; 2 routed experts,
     both used (top-2), so that no quantisation difference can change an expert choice; no
     hash layer;
  2. llama.cpp's convert_hf_to_gguf.py converts it (as ds4_gguf_tiny.py does), and it is
     cut to the first 512 vocabulary entries (ds4_gguf_tiny.trim);
  3. with gguf-py, the window layer is dropped (blk.N becomes blk.N-1 and the per-layer
     metadata arrays lose their first entry), which leaves a CSA layer (its compressor and
     indexer included) and an HCA layer (llama.cpp's deepseek4 needs both kinds: without an
     HCA layer it dies of a division by zero building its inputs) and keeps the files
     small, and every tensor is dequantised to f32 (base.gguf, not kept): the source of
     every quantisation; there token_embd is multiplied by (1 + kEmbeddingNoise * N(0, 1))
     (kEmbeddingNoiseSeed), and step 5 keeps it f32: the first layer's activations are
     the embedding times a few scalars, and on the embedding's lattice (bf16 as
     synth-model writes it: 8-bit significands; a block's scale times small integers
     once quantised; still too coarse in f16) their q8 quantisation hits exact .5 ties
     so often that llama.cpp's logits are defined only to about 0.02 (its own kernel
     paths differ by that much), where off it dsv4 and llama.cpp agree to ~0.005;
  4. `llama-imatrix` makes an importance matrix of base.gguf from kImatrixText, completed
     by complete_imatrix for the matrices it has no entry for, for the types whose
     quantisers need one (kNeedsImatrix);
  5. `llama-quantize --pure --token-embedding-type f32` makes <type>.gguf of each ggml type
     in kTypes: every tensor that llama.cpp quantises at all (every 2-D and 3-D weight but
     the routers' ffn_gate_inp; 40 of them) but token_embd takes the type (39, checked);
     token_embd (step 3), the norms, biases, sinks and routers stay f32; the tool's
     per-tensor lines are kept in quantize_summary.txt;
  6. llama.cpp computes the logits of input_ids.txt on each file through the llama-cpp-python
     binding (one decode of all the ids with logits at every position, 1 thread, f32 KV
     cache, flash attention off): <type>_llamacpp_logits.f32, [kPromptLen, 512] f32;
  7. and on the file with every tensor dequantised to f32 by gguf-py (not kept): llama.cpp
     on exactly the file's weights without its quantisation of the activations (q8_0, q8_1
     or q8_K per weight type): <type>_llamacpp_f32_logits.f32.

Run it from the repository root with the tools venv (numpy, torch, transformers, diskcache,
safetensors, sentencepiece; tools/reference/README.md) and a llama.cpp built as
docs/benchmarks.md "Building llama.cpp" says, with -DBUILD_SHARED_LIBS=ON and the targets
llama, llama-quantize and llama-imatrix (BUILD = its build directory):
  L=/tmp/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp
  LLAMA_CPP_LIB_PATH=$BUILD/bin PYTHONPATH=$L/gguf-py:$L/../.. \\
    ../tools-venv/bin/python tools/goldens/ds4_gguf_types.py --dsv4 build/release/dsv4 \\
      --llama-cpp $L --llama-bin $BUILD/bin --out tests/data/deepseek_v4/gguf_types
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ds4_gguf_tiny  # noqa: E402  (synth, trim, kVocab, kSeed)

kVocab = ds4_gguf_tiny.kVocab
kPromptLen = 64  # 16 CSA entries (ratio 4), all of which the indexer chooses (top-16)
kSynthFlags = ["--d-model", "256", "--layers", "3", "--hash-layers", "0", "--experts", "2",
               "--top-k", "2", "--moe-inter", "256", "--heads", "2", "--head-dim", "256",
               "--q-lora-rank", "256", "--o-lora-rank", "128", "--o-groups", "2",
               "--index-heads", "2", "--index-head-dim", "128", "--index-topk", "16",
               "--window", "8"]
# ggml's quant types, in its order, each with the llama-quantize type that gives it with --pure
# (its default type: "IQ2_S" would give iq2_xs).
kTypes = {"Q4_0": "Q4_0", "Q4_1": "Q4_1", "Q5_0": "Q5_0", "Q5_1": "Q5_1", "Q8_0": "Q8_0",
          "Q2_K": "Q2_K", "Q3_K": "Q3_K", "Q4_K": "Q4_K", "Q5_K": "Q5_K", "Q6_K": "Q6_K",
          "IQ2_XXS": "IQ2_XXS", "IQ2_XS": "IQ2_XS", "IQ3_XXS": "IQ3_XXS", "IQ1_S": "IQ1_S",
          "IQ4_NL": "IQ4_NL", "IQ3_S": "IQ3_S", "IQ2_S": "IQ2_M", "IQ4_XS": "IQ4_XS",
          "IQ1_M": "IQ1_M"}
# The relative noise on token_embd of base.gguf (step 3 of the header), and its seed.
kEmbeddingNoise = 1e-3
kEmbeddingNoiseSeed = 11
# The tensors llama-quantize quantises (without --token-embedding-type, all to the type).
kQuantisedTensors = 40
# The type of token_embd in every file (llama-quantize --token-embedding-type).
kEmbeddingType = "F32"
# The ggml types whose quantisers need an importance matrix (llama-quantize's
# tensor_requires_imatrix; ggml asserts one for iq1/iq2).
kNeedsImatrix = {"IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ1_S", "IQ1_M"}
# The text of the importance matrix (plain ASCII, which the cut vocabulary tokenises).
kImatrixText = " ".join([
    "The quick brown fox jumps over the lazy dog while the rain falls on the old stone wall.",
    "In the beginning the model reads a short text, and every layer sees the same tokens.",
    "A small house stood at the end of the road, and its door was painted red and green.",
    "Numbers such as 12, 345 and 6789 appear in the text; so do words like order and time.",
    "She said that the weather would change before the evening, but nobody believed her.",
]) + "\n"


def file_name(qtype):
    return qtype.lower()


def rewrite_as_f32(src, dst, drop_first_layer, embedding_noise=0.0):
    """Writes src with every tensor dequantised to f32 (gguf-py's dequantisation), less its
    layer 0 if drop_first_layer (blk.N becomes blk.N-1, per-layer metadata arrays lose
    their first entry), and token_embd multiplied by (1 + embedding_noise * N(0, 1)) if
    embedding_noise (the noise drawn with kEmbeddingNoiseSeed)."""
    import gguf
    reader = gguf.GGUFReader(src)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    n_layers = reader.fields[f"{arch}.block_count"].contents()
    writer = gguf.GGUFWriter(dst, arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():
        name = field.name
        if name == gguf.Keys.General.ARCHITECTURE or name.startswith("GGUF."):
            continue
        val_type = field.types[0]
        sub_type = field.types[-1] if val_type == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        if name == gguf.Keys.General.FILE_TYPE:
            value = int(gguf.LlamaFileType.ALL_F32)
        elif drop_first_layer and name == f"{arch}.block_count":
            value = n_layers - 1
        elif (drop_first_layer and name.startswith(arch + ".")
              and val_type == gguf.GGUFValueType.ARRAY and len(value) == n_layers):
            value = value[1:]  # a per-layer array
        writer.add_key_value(name, value, val_type, sub_type=sub_type)
    datas = []
    for t in reader.tensors:
        m = re.match(r"blk\.(\d+)\.(.*)", t.name)
        name = t.name
        if m and drop_first_layer:
            if int(m.group(1)) == 0:
                continue
            name = f"blk.{int(m.group(1)) - 1}.{m.group(2)}"
        assert t.tensor_type not in (gguf.GGMLQuantizationType.I32,
                                     gguf.GGMLQuantizationType.I64), t.name  # no hash layer
        data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        data = np.ascontiguousarray(data.reshape([int(n) for n in reversed(t.shape)]))
        if embedding_noise and name == "token_embd.weight":
            noise = np.random.default_rng(kEmbeddingNoiseSeed).standard_normal(data.shape)
            data = (data * (1 + embedding_noise * noise)).astype(np.float32)
        datas.append(data)
        writer.add_tensor_info(name, data.shape, data.dtype, data.nbytes,
                               gguf.GGMLQuantizationType.F32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for data in datas:
        writer.write_tensor_data(data, tensor_endianess=reader.endianess)
    writer.close()


def complete_imatrix(base, src, dst):
    """Writes llama-imatrix's src with what llama-quantize then needs for every matrix of base.

    llama-imatrix sees only the matrices of the layers' matrix products, so token_embd and
    the compressors' ape (get_rows tables), output_hc_fn and output have no entry (ggml's
    iq1/iq2 quantisers need one for every matrix), and it records the grouped
    attn_output_a per group ([o_groups * K] values) where llama-quantize wants K: each of
    those gets a uniform importance, and each grouped one the mean over its groups."""
    import gguf
    im = gguf.GGUFReader(src)
    sums = {t.name[: -len(".in_sum2")]: np.array(t.data, dtype=np.float32)
            for t in im.tensors if t.name.endswith(".in_sum2")}
    counts = {t.name[: -len(".counts")]: np.array(t.data, dtype=np.float32)
              for t in im.tensors if t.name.endswith(".counts")}
    for t in gguf.GGUFReader(base).tensors:
        if len(t.shape) < 2 or "ffn_gate_inp" in t.name:
            continue
        ne0, ne2 = int(t.shape[0]), int(t.shape[2]) if len(t.shape) > 2 else 1
        if t.name not in sums:
            sums[t.name] = np.ones((ne2, ne0), dtype=np.float32)
            counts[t.name] = np.ones((ne2, 1), dtype=np.float32)
        elif sums[t.name].size != ne0 * ne2:
            assert ne2 == 1 and sums[t.name].size % ne0 == 0, (t.name, sums[t.name].shape)
            sums[t.name] = sums[t.name].reshape(-1, ne0).mean(axis=0, keepdims=True)
            counts[t.name] = counts[t.name].reshape(1, -1)[:, :1]
    writer = gguf.GGUFWriter(dst, arch="imatrix")
    for field in im.fields.values():
        if field.name.startswith("GGUF.") or field.name == gguf.Keys.General.ARCHITECTURE:
            continue
        val_type = field.types[0]
        sub_type = field.types[-1] if val_type == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), val_type, sub_type=sub_type)
    for name in sorted(sums):
        writer.add_tensor(name + ".in_sum2", sums[name])
        writer.add_tensor(name + ".counts", counts[name])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def quantize(llama_bin, base, out, qtype, imatrix):
    cmd = [os.path.join(llama_bin, "llama-quantize"), "--pure", "--token-embedding-type",
           kEmbeddingType.lower()]
    if imatrix:
        # Relative to the work directory, as the file records it (quantize.imatrix.file).
        assert os.path.dirname(imatrix) == os.path.dirname(base)
        cmd += ["--imatrix", os.path.basename(imatrix)]
    cmd += [base, os.path.abspath(out), qtype, "1"]
    r = subprocess.run(cmd, capture_output=True, text=True, errors="replace",
                       cwd=os.path.dirname(base))
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}")
    # Its per-tensor lines: "[  3/ 40]   blk.0.attn_q_a.weight - [  256,   256, 1, 1], type =
    # f32, converting to q4_K .. size = ..." or "..., type = f32, size = ..." (kept).
    lines = [ln.strip() for ln in (r.stdout + r.stderr).splitlines()
             if re.match(r"\s*\[\s*\d+/\s*\d+\]", ln)]
    return " ".join(os.path.basename(a) for a in cmd[1:]), lines


def tensor_types(path):
    import gguf
    return {t.name: t.tensor_type.name for t in gguf.GGUFReader(path).tensors}


def llamacpp_logits(path, ids):
    from llama_cpp import Llama  # the binding of the llama.cpp under test
    llm = Llama(model_path=path, n_ctx=len(ids), n_batch=len(ids), n_ubatch=len(ids),
                n_threads=1, n_threads_batch=1, logits_all=True, flash_attn=False,
                type_k=0, type_v=0, verbose=False)  # 0: GGML_TYPE_F32
    llm.eval(ids)
    return np.array(llm.scores[: len(ids), :kVocab], dtype=np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsv4", required=True)
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp source tree (its converter)")
    ap.add_argument("--llama-bin", required=True, help="llama-quantize's and llama-imatrix's dir")
    ap.add_argument("--out", required=True)
    ap.add_argument("--types", default=",".join(kTypes), help="ggml type names")
    args = ap.parse_args()
    rng = np.random.default_rng(ds4_gguf_tiny.kSeed)
    ids = [0] + rng.integers(2, kVocab, size=kPromptLen - 1).tolist()
    os.makedirs(args.out, exist_ok=True)
    summary = []
    with tempfile.TemporaryDirectory() as work:
        model = os.path.join(work, "tiny")
        ds4_gguf_tiny.synth(args.dsv4, model, kSynthFlags)
        full = os.path.join(work, "full.gguf")
        subprocess.run([sys.executable, os.path.join(args.llama_cpp, "convert_hf_to_gguf.py"),
                        model, "--outfile", full], check=True)
        cut = os.path.join(work, "cut.gguf")
        ds4_gguf_tiny.trim(full, cut)
        base = os.path.join(work, "base.gguf")
        rewrite_as_f32(cut, base, drop_first_layer=True, embedding_noise=kEmbeddingNoise)
        text = os.path.join(work, "imatrix.txt")
        open(text, "w").write(kImatrixText * 4)
        imatrix = os.path.join(work, "imatrix.gguf")
        # Relative names, as the files record them (imatrix.datasets, quantize.imatrix.*).
        imatrix_cmd = [os.path.join(args.llama_bin, "llama-imatrix"), "-m", "base.gguf", "-f",
                       "imatrix.txt", "-o", "imatrix.gguf", "-c", "64", "-t", "1"]
        r = subprocess.run(imatrix_cmd, capture_output=True, text=True, errors="replace",
                           cwd=work)
        if r.returncode != 0:
            sys.exit(f"{' '.join(imatrix_cmd)} failed:\n{r.stdout}\n{r.stderr}")
        summary.append("llama-imatrix -m base.gguf -f imatrix.txt -o imatrix.gguf -c 64 -t 1")
        completed = os.path.join(work, "imatrix_completed.gguf")
        complete_imatrix(base, imatrix, completed)
        summary.append("complete_imatrix(base.gguf, imatrix.gguf, imatrix_completed.gguf)")
        imatrix = completed
        for gtype in args.types.split(","):
            qtype = kTypes[gtype]
            out = os.path.join(args.out, file_name(gtype) + ".gguf")
            cmd, lines = quantize(args.llama_bin, base, out, qtype,
                                  imatrix if gtype in kNeedsImatrix else None)
            types = tensor_types(out)
            counts = {}
            for t in types.values():
                counts[t] = counts.get(t, 0) + 1
            if (set(counts) != {gtype, kEmbeddingType, "F32"}
                    or types["token_embd.weight"] != kEmbeddingType
                    or counts[gtype] != kQuantisedTensors - 1):
                sys.exit(f"{out}: tensor types {counts}, expected {kQuantisedTensors - 1} "
                         f"{gtype}, token_embd {kEmbeddingType} and the rest F32")
            summary.append(f"\n## {gtype}: llama-quantize {cmd}\n"
                           f"{os.path.getsize(out)} bytes; tensor types: "
                           + ", ".join(f"{n} {t}" for t, n in sorted(counts.items())))
            summary.extend(lines)
            llamacpp_logits(out, ids).tofile(
                os.path.join(args.out, file_name(gtype) + "_llamacpp_logits.f32"))
            dequantised = os.path.join(work, file_name(gtype) + "_f32.gguf")
            rewrite_as_f32(out, dequantised, drop_first_layer=False)
            llamacpp_logits(dequantised, ids).tofile(
                os.path.join(args.out, file_name(gtype) + "_llamacpp_f32_logits.f32"))
            print(gtype, os.path.getsize(out), counts, flush=True)
    with open(os.path.join(args.out, "quantize_summary.txt"), "w") as f:
        f.write("\n".join(summary) + "\n")
    with open(os.path.join(args.out, "input_ids.txt"), "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")


if __name__ == "__main__":
    main()
