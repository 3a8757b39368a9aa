#!/usr/bin/env python3
"""Compares dsv4's logits on an exported student with transformers' (fp32, same weights).

  <tools-venv>/bin/python tools/train/compare_dsv4.py --model DIR [--dsv4 build/release/dsv4]

Runs each document of tests/data/text/tinystories_sample.txt (tok512 encode with BOS, as
`dsv4 perplexity` does) through `dsv4 logits --top-k <vocab>` and through
DeepseekV4ForCausalLM loaded from the same model.safetensors, and prints max |Δlogit|,
top-1 agreement and the NLL both give.
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import v4_student as vs  # noqa: E402
from train_v4_student import ROOT, eval_docs  # noqa: E402


def dsv4_logits(dsv4, model, ids, vocab, threads):
    out = subprocess.run([dsv4, "logits", "-m", model, "--prompt-ids", " ".join(map(str, ids)),
                          "--top-k", str(vocab), "-t", str(threads)],
                         check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.strip().split("\n"):
        parts = line.split()
        row = np.zeros(vocab, dtype=np.float64)
        for kv in parts[1:]:
            k, v = kv.split(":")
            row[int(k)] = float(v)
        rows.append(row)
    return torch.tensor(np.stack(rows))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--dsv4", default=os.path.join(ROOT, "build/release/dsv4"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--docs", type=int, default=99)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model, config, cfg = vs.load_official_dir(a.model)
    V = cfg["vocab_size"]
    worst, agree, n, nll_hf, nll_d = 0.0, 0, 0, 0.0, 0.0
    for d in eval_docs()[:a.docs]:
        ids = torch.tensor(d)[None]
        with torch.no_grad():
            hf = model(ids, mtp=False)[0][0].double()
        ds = dsv4_logits(a.dsv4, a.model, d, V, a.threads)
        worst = max(worst, (hf - ds).abs().max().item())
        agree += (hf.argmax(-1) == ds.argmax(-1)).sum().item()
        n += len(d)
        tgt = ids[0, 1:, None]
        nll_hf -= torch.log_softmax(hf[:-1], -1).gather(1, tgt).sum().item()
        nll_d -= torch.log_softmax(ds[:-1], -1).gather(1, tgt).sum().item()
        print(f"doc of {len(d)} tokens: max |dlogit| so far {worst:.3g}", flush=True)
    m = n - len(eval_docs()[:a.docs])
    print(f"max |dlogit| {worst:.3g}; top-1 agree {agree}/{n}; nll hf {nll_hf / m:.5f} dsv4 {nll_d / m:.5f}")


if __name__ == "__main__":
    main()
