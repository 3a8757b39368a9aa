#!/usr/bin/env python3
"""Makes tests/data/deepseek_v4/gguf_tiny/: a tiny llama.cpp `deepseek4` GGUF and its logits.

What it is: the golden generator for tests/model/deepseek_v4_gguf_test.cc. It runs
third-party code and dsv4 only; nothing here re-implements the model or the format:
  1. `dsv4 synth-model` writes a random DeepSeek-V4 checkpoint in the release's storage
     (FP8 dense, FP4 experts; layers window, window, CSA, HCA) with the real vocabulary
     size 129,280, which llama.cpp's converter needs to match the real tokenizer
     (tests/data/tokenizer/deepseek_v4_tokenizer.json.gz and _config.json);
  2. llama.cpp's own convert_hf_to_gguf.py turns it into a deepseek4 GGUF (FP8 → Q8_0,
     FP4 experts → MXFP4, bf16 and f32 kept);
  3. that file is cut to the first 512 vocabulary entries with gguf-py (token_embd,
     output and the hash layer's tid2eid rows; the tokenizer's tokens, token types and
     the merges among them; the chat template dropped), which keeps it small: every
     prompt id is below 512 and the model is row-wise in the vocabulary, so its logits
     are the first 512 of the full model's;
  4. llama.cpp computes the logits of input_ids.txt through the llama-cpp-python
     binding of the same llama.cpp (llamacpp_logits.f32);
  5. dsv4 computes them from the synth-model safetensors, QAT simulations off
     ("qat_simulation": false in its config.json; the first 512 of each row:
     dsv4_safetensors_logits.f32).

Run it from the repository root with a tools venv outside the repository (numpy,
torch, transformers, safetensors, sentencepiece, as tools/reference/README.md) and a
llama.cpp built as docs/benchmarks.md "Building llama.cpp" says, plus its shared
library (-DBUILD_SHARED_LIBS=ON, target llama):
  L=/tmp/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp
  LLAMA_CPP_LIB_PATH=$L/build/bin PYTHONPATH=$L/gguf-py:$L/../.. \\
    ../tools-venv/bin/python tools/goldens/ds4_gguf_tiny.py --dsv4 build/release/dsv4 \\
      --llama-cpp $L --out tests/data/deepseek_v4/gguf_tiny
"""
import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

kVocab = 512
kFullVocab = 129280
kSeed = 7
# A prompt long enough for the window (8), CSA entries (ratio 4) and the indexer's
# choice (top-k 4 of them), and one HCA entry (ratio 128).
kPromptLen = 136


kSynthFlags = ["--d-model", "128", "--layers", "4", "--experts", "4", "--top-k", "2",
               "--moe-inter", "128", "--heads", "2", "--head-dim", "128", "--q-lora-rank", "128",
               "--o-lora-rank", "64", "--o-groups", "2", "--index-heads", "2",
               "--index-head-dim", "64", "--index-topk", "4", "--window", "8"]


def synth(dsv4, out, flags=kSynthFlags):
    subprocess.run([dsv4, "synth-model", "--out", out] + flags +
                   ["--vocab", str(kFullVocab), "--seed", str(kSeed)], check=True)
    # dsv4's run of the safetensors without the QAT simulations (llama.cpp's
    # converter ignores the key): its difference to the GGUF run is then the
    # Q8_0 re-quantisation alone, not amplified by FP8/FP4 activation rounding.
    config_path = os.path.join(out, "config.json")
    config = json.load(open(config_path))
    config["qat_simulation"] = False
    json.dump(config, open(config_path, "w"), indent=2)
    with gzip.open("tests/data/tokenizer/deepseek_v4_tokenizer.json.gz", "rb") as f:
        open(os.path.join(out, "tokenizer.json"), "wb").write(f.read())
    shutil.copy("tests/data/tokenizer/deepseek_v4_tokenizer_config.json",
                os.path.join(out, "tokenizer_config.json"))


def trim(src, dst, keep_chat_template=False):
    import gguf
    reader = gguf.GGUFReader(src)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(dst, arch=arch, endianess=reader.endianess)
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()[:kVocab]
    kept = set(tokens)
    for field in reader.fields.values():
        name = field.name
        if name == gguf.Keys.General.ARCHITECTURE or name.startswith("GGUF."):
            continue
        if name == "tokenizer.chat_template" and not keep_chat_template:
            continue
        val_type = field.types[0]
        sub_type = field.types[-1] if val_type == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        if name == "tokenizer.ggml.tokens":
            value = tokens
        elif name == "tokenizer.ggml.token_type":
            value = value[:kVocab]
        elif name == "tokenizer.ggml.merges":
            value = [m for m in value
                     if all(p in kept for p in m.split(" ")) and m.replace(" ", "") in kept]
        writer.add_key_value(name, value, val_type, sub_type=sub_type)
    datas = []
    for t in reader.tensors:
        data = t.data
        if t.name in ("token_embd.weight", "output.weight") or t.name.endswith("ffn_gate_tid2eid.weight"):
            assert data.shape[0] == kFullVocab, (t.name, data.shape)
            data = np.ascontiguousarray(data[:kVocab])
        datas.append(data)
        writer.add_tensor_info(t.name, data.shape, data.dtype, data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for data in datas:
        writer.write_tensor_data(data, tensor_endianess=reader.endianess)
    writer.close()


def llamacpp_logits(path, ids):
    from llama_cpp import Llama  # the binding of the llama.cpp under test
    llm = Llama(model_path=path, n_ctx=256, n_batch=256, n_ubatch=256, n_threads=2,
                logits_all=True, verbose=False)
    llm.eval(ids)
    return np.array(llm.scores[: len(ids), :kVocab], dtype=np.float32)


def dsv4_logits(dsv4, model_dir, ids):
    out = subprocess.run([dsv4, "logits", "--model", model_dir, "--prompt-ids",
                          " ".join(map(str, ids)), "--top-k", str(kFullVocab), "--threads", "2"],
                         check=True, capture_output=True, text=True).stdout
    rows = np.full((len(ids), kVocab), np.nan, dtype=np.float32)
    for line in out.splitlines():
        fields = line.split()
        if not fields or not fields[0].isdigit():
            continue
        t = int(fields[0])
        for f in fields[1:]:
            i, v = f.split(":")
            if int(i) < kVocab:
                rows[t, int(i)] = float(v)
    assert np.isfinite(rows).all()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsv4", required=True)
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp source tree (its converter)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rng = np.random.default_rng(kSeed)
    ids = [0] + rng.integers(2, kVocab, size=kPromptLen - 1).tolist()
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        model = os.path.join(work, "tiny")
        synth(args.dsv4, model)
        full = os.path.join(work, "full.gguf")
        subprocess.run([sys.executable, os.path.join(args.llama_cpp, "convert_hf_to_gguf.py"),
                        model, "--outfile", full], check=True)
        gguf_path = os.path.join(args.out, "tiny.gguf")
        trim(full, gguf_path)
        llamacpp_logits(gguf_path, ids).tofile(os.path.join(args.out, "llamacpp_logits.f32"))
        dsv4_logits(args.dsv4, model, ids).tofile(
            os.path.join(args.out, "dsv4_safetensors_logits.f32"))
    with open(os.path.join(args.out, "input_ids.txt"), "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")


if __name__ == "__main__":
    main()
