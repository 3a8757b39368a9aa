#!/usr/bin/env python3
"""The quantised mixes of a deepseek4 GGUF that docs/benchmarks.md times dsv4 and llama.cpp on.

From the converter's file (Q8_0 dense, MXFP4 experts, bf16/f32 rest) it writes, with llama.cpp's
own tools (built outside this repository; --llama-bin is their directory):
  q4_k_m.gguf   llama-quantize --allow-requantize Q4_K_M (its usual mix: q4_K, q6_K for some
                matrices, the rest kept)
  iq2_xxs.gguf  llama-quantize --allow-requantize --imatrix IQ2_XXS, with an importance matrix
                from llama-imatrix on a short text, completed for the matrices it records no
                entry for (tools/goldens/ds4_gguf_types.py complete_imatrix)
Usage: ds4_gguf_mixes.py --llama-bin DIR --q8 Q8.gguf [--threads N]
(the outputs go beside Q8.gguf). Needs gguf-py and numpy (a tools venv).
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "goldens"))
from ds4_gguf_types import complete_imatrix, kImatrixText  # noqa: E402


def run(cmd, cwd):
    print("+", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, errors="replace")
    if r.returncode != 0:
        sys.exit(f"failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-bin", required=True)
    ap.add_argument("--q8", required=True)
    ap.add_argument("--threads", default=str(os.cpu_count() or 1))
    args = ap.parse_args()
    work = os.path.dirname(os.path.abspath(args.q8))
    q8 = os.path.basename(args.q8)
    quantize = os.path.join(args.llama_bin, "llama-quantize")
    if not os.path.exists(os.path.join(work, "q4_k_m.gguf")):
        run([quantize, "--allow-requantize", q8, "q4_k_m.gguf", "Q4_K_M", args.threads], work)
    if not os.path.exists(os.path.join(work, "iq2_xxs.gguf")):
        with open(os.path.join(work, "imatrix.txt"), "w") as f:
            f.write(kImatrixText * 4)
        run([os.path.join(args.llama_bin, "llama-imatrix"), "-m", q8, "-f", "imatrix.txt", "-o",
             "imatrix.gguf", "-c", "64", "-t", args.threads], work)
        complete_imatrix(os.path.join(work, q8), os.path.join(work, "imatrix.gguf"),
                         os.path.join(work, "imatrix_completed.gguf"))
        run([quantize, "--allow-requantize", "--imatrix", "imatrix_completed.gguf", q8,
             "iq2_xxs.gguf", "IQ2_XXS", args.threads], work)


if __name__ == "__main__":
    main()
