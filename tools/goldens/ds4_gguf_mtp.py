#!/usr/bin/env python3
"""Makes tests/data/deepseek_v4/gguf_mtp/: a tiny deepseek4 GGUF, its NextN MTP GGUF, and
llama.cpp's MTP draft logits.

What it is: the golden generator for the MTP tests of tests/model/deepseek_v4_gguf_test.cc.
It runs third-party code and dsv4 only:
  1. `dsv4 synth-model ... --mtp-layers 1` writes a random DeepSeek-V4 checkpoint with one
     NextN MTP block (mtp.0.*) in the release's storage, real vocabulary size;
  2. llama.cpp's convert_hf_to_gguf.py writes the main GGUF, and with --mtp the MTP GGUF
     (`blk.4.*`, `nextn.eh_proj` = [e_proj | h_proj], the draft's mHC head as output_hc_*);
  3. both are cut to the first 512 vocabulary entries (ds4_gguf_tiny.trim); the main file
     keeps the chat template the converter wrote (llama.cpp's DeepSeek-V4 template);
  4. llama.cpp computes the draft logits of the prompt: tools/goldens/ds4_mtp_llamacpp.cc,
     built against the same llama.cpp (its header says how), pairs the target's NextN hidden
     state at k-1 with token k, as llama.cpp's MTP driver does.

Run it from the repository root with the tools venv and llama.cpp built as for
ds4_gguf_tiny.py (the `llama` target):
  L=/tmp/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp
  PYTHONPATH=$L/gguf-py ../tools-venv/bin/python tools/goldens/ds4_gguf_mtp.py \\
      --dsv4 build/release/dsv4 --llama-cpp $L --out tests/data/deepseek_v4/gguf_mtp
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ds4_gguf_tiny as tiny  # noqa: E402

kPromptLen = 24  # three windows of 8: the draft's window attention wraps


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsv4", required=True)
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp source tree, built")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rng = np.random.default_rng(tiny.kSeed + 1)
    ids = [0] + rng.integers(2, tiny.kVocab, size=kPromptLen - 1).tolist()
    os.makedirs(args.out, exist_ok=True)
    lcpp = args.llama_cpp
    with tempfile.TemporaryDirectory() as work:
        model = os.path.join(work, "tiny")
        tiny.synth(args.dsv4, model, tiny.kSynthFlags + ["--mtp-layers", "1"])
        convert = [sys.executable, os.path.join(lcpp, "convert_hf_to_gguf.py"), model]
        full_main, full_mtp = os.path.join(work, "main.gguf"), os.path.join(work, "mtp.gguf")
        subprocess.run(convert + ["--outfile", full_main], check=True)
        subprocess.run(convert + ["--mtp", "--outfile", full_mtp], check=True)
        main_path = os.path.join(args.out, "tiny.gguf")
        mtp_path = os.path.join(args.out, "mtp-tiny.gguf")
        tiny.trim(full_main, main_path, keep_chat_template=True)
        tiny.trim(full_mtp, mtp_path)
        ids_path = os.path.join(args.out, "input_ids.txt")
        with open(ids_path, "w") as f:
            f.write(" ".join(map(str, ids)) + "\n")
        exe = os.path.join(work, "ds4_mtp_llamacpp")
        subprocess.run(["g++", "-std=c++17", "-O2",
                        os.path.join(os.path.dirname(os.path.abspath(__file__)), "ds4_mtp_llamacpp.cc"),
                        "-I" + os.path.join(lcpp, "include"), "-I" + os.path.join(lcpp, "ggml/include"),
                        "-I" + os.path.join(lcpp, "src"), "-L" + os.path.join(lcpp, "build/bin"),
                        "-Wl,-rpath," + os.path.join(lcpp, "build/bin"),
                        "-lllama", "-lggml", "-lggml-base", "-o", exe], check=True)
        subprocess.run([exe, main_path, mtp_path, ids_path,
                        os.path.join(args.out, "llamacpp_mtp_logits.f32")], check=True)


if __name__ == "__main__":
    main()
