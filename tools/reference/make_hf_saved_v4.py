#!/usr/bin/env python3
"""Tiny DeepSeek-V4 checkpoints as HF transformers' `save_pretrained` writes them.

For each tiny official-format checkpoint in tests/data/deepseek_v4/<name>/ (made by
make_tiny_v4.py), this loads it with transformers' own DeepSeek-V4 port
(`DeepseekV4ForCausalLM.from_pretrained`, which renames the official tensors on load)
in bf16, as a user who fine-tunes the model would, and saves it back twice:

  <out>/<name>/default/    save_pretrained(dir): transformers' default, which reverses
                           its load-time renames: official layer names under `model.`
                           next to HF names (`model.embed_tokens.weight`, ...)
  <out>/<name>/internal/   save_pretrained(dir, save_original_format=False): HF's
                           internal names (`model.layers.N.self_attn.q_a_proj.weight`,
                           `...compressor.indexer.scorer.weights_proj.weight`, stacked
                           experts `mlp.experts.gate_up_proj`, ...)

transformers drops `mtp.*` on load (`_keys_to_ignore_on_load_unexpected`), so the saved
files have no draft layer. A user who wants it back copies the release's `mtp.*`
tensors in; this script does that for configs with an MTP layer: under their official
names in `internal/` and under `model.mtp.*` in `default/`.

Nothing here is a golden of its own: the test (tests/model/deepseek_v4_hf_saved_test.cc)
checks that dsv4 gives the same logits on these files as on the official-name copy.

Usage (venv as in tools/reference/README.md):
  <tools-venv>/bin/python tools/reference/make_hf_saved_v4.py \
      --data tests/data/deepseek_v4 --out tests/data/deepseek_v4/hf_saved
"""
import argparse
import hashlib
import json
import os
import shutil

import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tiny_v4 import transformers_config_kwargs  # noqa: E402  (this folder's script)

CONFIGS = ["mixed_mtp_bf16", "swa_bf16_v2"]


def hf_config(src):
    """transformers' DeepseekV4Config for an official config.json."""
    from transformers.models.deepseek_v4.configuration_deepseek_v4 import DeepseekV4Config
    cfg = json.load(open(os.path.join(src, "config.json")))
    kwargs = transformers_config_kwargs(cfg, cfg["num_hidden_layers"])
    hca = {t for t in kwargs["layer_types"] if t == "heavily_compressed_attention"}
    ratios = {r for r in cfg["compress_ratios"][:cfg["num_hidden_layers"]] if r not in (0, 4)}
    assert len(ratios) <= 1 or not hca, "transformers has one HCA rate per model"
    return DeepseekV4Config(**kwargs)


def add_mtp(saved_dir, official_file, prefix):
    """Appends the official checkpoint's mtp.* tensors to the saved model.safetensors."""
    path = os.path.join(saved_dir, "model.safetensors")
    with safe_open(path, "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
        meta = f.metadata()
    with safe_open(official_file, "pt") as f:
        mtp = {prefix + k: f.get_tensor(k) for k in f.keys() if k.startswith("mtp.")}
    assert mtp, "no mtp.* tensors in " + official_file
    tensors.update(mtp)
    save_file(tensors, path, metadata=meta)
    return len(mtp)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, help="tests/data/deepseek_v4")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import transformers
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    report = {"transformers": transformers.__version__, "torch": torch.__version__, "configs": {}}
    for name in CONFIGS:
        src = os.path.join(args.data, name)
        model = AutoModelForCausalLM.from_pretrained(src, config=hf_config(src), dtype=torch.bfloat16)
        entry = {}
        for mode, kwargs in (("default", {}), ("internal", {"save_original_format": False})):
            out = os.path.join(args.out, name, mode)
            shutil.rmtree(out, ignore_errors=True)
            model.save_pretrained(out, **kwargs)
            n_mtp = 0
            if json.load(open(os.path.join(src, "config.json"))).get("num_nextn_predict_layers", 0):
                n_mtp = add_mtp(out, os.path.join(src, "model.safetensors"),
                                "model." if mode == "default" else "")
            with safe_open(os.path.join(out, "model.safetensors"), "pt") as f:
                names = sorted(f.keys())
            entry[mode] = {"tensors": len(names), "mtp_tensors_added": n_mtp,
                           "files": {fn: sha256(os.path.join(out, fn)) for fn in sorted(os.listdir(out))}}
        report["configs"][name] = entry
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump(report, f, indent=2, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
