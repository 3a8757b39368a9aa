#!/usr/bin/env python3
"""Goldens of transformers' DeepseekV4ForCausalLM on the trained student, for a dsv4 test.

  <tools-venv>/bin/python tools/train/make_student_golden.py --model DIR --out DIR/golden

For a prompt (default: the first document of tests/data/text/tinystories_sample.txt,
tok512-encoded with BOS, as `dsv4 perplexity` does), writes to --out:

  input_ids.txt    the prompt ids, one line, space-separated
  logits_hf.f32    [T, vocab] little-endian float32: transformers 5.23.0, fp32, the bf16
                   weights of model.safetensors upcast exactly
  mtp_logits.f32   [T-1, vocab]: row t = the MTP draft for token t+2 (from the main
                   residual at t and the embedding of token t+1), as in
                   tests/data/deepseek_v4/mixed_mtp_bf16
  report.json      versions, sha256 of the weights, the smallest top-k margin of the
                   indexer (CSA layers) over all positions, the NLL of the prompt

The indexer keeps the top index_topk entries. Where two scores tie at the boundary, any
choice is right, and dsv4 and torch may choose differently. So the script refuses a prompt
whose smallest relative margin is below --min-margin.
"""
import argparse
import hashlib
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import v4_student as vs  # noqa: E402
from train_v4_student import eval_docs  # noqa: E402
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as hm  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--doc", type=int, default=0, help="which evaluation document")
    ap.add_argument("--max-tokens", type=int, default=0, help="cut the prompt (0: whole)")
    ap.add_argument("--min-margin", type=float, default=1e-5)
    a = ap.parse_args()
    torch.set_num_threads(1)
    model, config, cfg = vs.load_official_dir(a.model)
    ids = eval_docs()[a.doc]
    if a.max_tokens:
        ids = ids[:a.max_tokens]
    caps = []
    orig = hm.DeepseekV4IndexerScorer.forward

    def scorer(self, q, k, h):
        s = orig(self, q, k, h)
        caps.append(s[0])
        return s

    hm.DeepseekV4IndexerScorer.forward = scorer
    x = torch.tensor(ids)[None]
    with torch.no_grad():
        logits, mtp = model(x)
    hm.DeepseekV4IndexerScorer.forward = orig
    K = config.index_topk
    worst = (float("inf"), None, None)
    for li, s in enumerate(caps):
        for p in range(len(ids)):
            n = (p + 1) // config.compress_rates["compressed_sparse_attention"]
            if n <= K:
                continue
            srt = s[p, :n].sort(descending=True).values
            m = ((srt[K - 1] - srt[K]) / srt[K - 1].abs().clamp_min(1e-30)).item()
            if m < worst[0]:
                worst = (m, li, p)
    if worst[0] < a.min_margin:
        sys.exit(f"index top-k margin {worst[0]:.3g} at CSA layer #{worst[1]}, position {worst[2]}: "
                 "pick another prompt or cut it (--max-tokens)")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "input_ids.txt"), "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")
    logits[0].float().contiguous().numpy().astype("<f4").tofile(os.path.join(a.out, "logits_hf.f32"))
    mtp[0].float().contiguous().numpy().astype("<f4").tofile(os.path.join(a.out, "mtp_logits.f32"))
    lp = torch.log_softmax(logits[0, :-1].double(), -1)
    nll = -lp.gather(1, x[0, 1:, None]).mean().item()
    import transformers
    import safetensors
    rep = {
        "transformers": transformers.__version__, "torch": torch.__version__.split("+")[0],
        "safetensors": safetensors.__version__, "doc": a.doc, "tokens": len(ids),
        "model_sha256": hashlib.sha256(open(os.path.join(a.model, "model.safetensors"), "rb").read()).hexdigest(),
        "min_index_topk_rel_margin": worst[0], "nll": nll,
    }
    with open(os.path.join(a.out, "report.json"), "w") as f:
        json.dump(rep, f, indent=2, sort_keys=True)
        f.write("\n")
    print(json.dumps(rep, indent=2))


if __name__ == "__main__":
    main()
