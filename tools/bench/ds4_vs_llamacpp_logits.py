#!/usr/bin/env python3
"""Compare dsv4's and llama.cpp's logits on the same DeepSeek-V4 model and prompt ids.

dsv4 reads the safetensors checkpoint directory (`dsv4 logits --top-k V` prints every
logit); llama.cpp reads the deepseek4 GGUF converted from it by llama.cpp's
convert_hf_to_gguf.py, through the llama-cpp-python binding of the same llama.cpp
(LLAMA_CPP_LIB_PATH = its build/bin, PYTHONPATH = the llama-cpp-python source tree).
Prints, per prompt position, max and mean |dsv4 - llama.cpp| over the vocabulary (or,
with --top-k K, over dsv4's K largest logits: a long prompt's full logits are too much
text), the standard deviation of dsv4's logits, the correlation, and whether the top-1
ids agree (llama.cpp's over the whole vocabulary).

Usage:
  LLAMA_CPP_LIB_PATH=.../llama.cpp/build/bin PYTHONPATH=.../llama_cpp_python-0.3.36 \
  python tools/bench/ds4_vs_llamacpp_logits.py --dsv4 build/ds4g/dsv4 \
      --model-dir /tmp/ds4g/small --gguf /tmp/ds4g/small.gguf --ids "0 100 2000 30000"
"""
import argparse
import subprocess
import sys

import numpy as np


def dsv4_logits(binary, model_dir, ids, vocab, top_k, threads):
    """[T, V] logits; entries outside dsv4's top_k of a row are NaN."""
    out = subprocess.run(
        [binary, "logits", "--model", model_dir, "--prompt-ids", " ".join(map(str, ids)),
         "--top-k", str(top_k), "--threads", str(threads)],
        check=True, capture_output=True, text=True).stdout
    rows = np.full((len(ids), vocab), np.nan, dtype=np.float64)
    for line in out.splitlines():
        fields = line.split()
        if not fields or not fields[0].isdigit():
            continue
        t = int(fields[0])
        for f in fields[1:]:
            i, v = f.split(":")
            rows[t, int(i)] = float(v)
    if (np.isfinite(rows).sum(axis=1) != top_k).any():
        sys.exit("dsv4 logits did not print top_k logits at every position")
    return rows


def llamacpp_logits(gguf, ids, threads):
    from llama_cpp import Llama  # the binding of the llama.cpp under test
    llm = Llama(model_path=gguf, n_ctx=max(64, len(ids)), n_batch=max(64, len(ids)),
                n_threads=threads, logits_all=True, verbose=False)
    llm.eval(ids)
    return np.array(llm.scores[: len(ids), :], dtype=np.float64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsv4", required=True, help="dsv4 binary")
    ap.add_argument("--model-dir", required=True, help="safetensors checkpoint directory")
    ap.add_argument("--gguf", required=True, help="the same model converted to deepseek4 GGUF")
    ap.add_argument("--ids", required=True, help='prompt token ids, e.g. "0 100 2000"')
    ap.add_argument("--top-k", type=int, default=0,
                    help="compare only dsv4's K largest logits per position (default: all)")
    ap.add_argument("--print-every", type=int, default=1, help="print every N-th position")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    ids = [int(x) for x in a.ids.split()]
    ref = llamacpp_logits(a.gguf, ids, a.threads)
    vocab = ref.shape[1]
    top_k = a.top_k if 0 < a.top_k < vocab else vocab
    ours = dsv4_logits(a.dsv4, a.model_dir, ids, vocab, top_k, a.threads)
    print(f"{len(ids)} positions, compared over {'all' if top_k == vocab else 'dsv4 top'} "
          f"{top_k} ids per position")
    print("pos  max|d|    mean|d|   std(dsv4)  corr      top1 dsv4  top1 llama.cpp  agree")
    agree, dmax, dsum, dn = 0, 0.0, 0.0, 0
    for t in range(len(ids)):
        m = np.isfinite(ours[t])
        d = np.abs(ours[t][m] - ref[t][m])
        dmax, dsum, dn = max(dmax, d.max()), dsum + d.sum(), dn + d.size
        corr = np.corrcoef(ours[t][m], ref[t][m])[0, 1]
        t1, t2 = int(np.nanargmax(ours[t])), int(np.argmax(ref[t]))
        agree += t1 == t2
        if t % a.print_every == 0 or t == len(ids) - 1:
            print(f"{t:3d}  {d.max():.5f}  {d.mean():.5f}  {ours[t][m].std():.5f}    {corr:.6f}  "
                  f"{t1:9d}  {t2:14d}  {'yes' if t1 == t2 else 'no'}")
    print(f"all positions: max|d| {dmax:.5f}, mean|d| {dsum / dn:.5f}, "
          f"top-1 agreement {agree}/{len(ids)}")


if __name__ == "__main__":
    main()
