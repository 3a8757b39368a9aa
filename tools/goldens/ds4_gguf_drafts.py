#!/usr/bin/env python3
"""Makes tests/data/deepseek_v4/gguf_drafts/: two tiny DeepSeek-V4 checkpoints with draft modules,
as llama.cpp's converter writes them, for the draft goldens their directories already hold
(made by DeepSeek's own inference code, tools/reference/make_tiny_v4.py and make_tiny_dspark.py):
  dspark_main.gguf, dspark.gguf   tests/data/deepseek_v4/dspark_mixed_bf16 (V4-Flash-0731 style,
                                  a 3-stage DSpark module): the main model (deepseek4), and the
                                  DSpark module as `convert_hf_to_gguf.py --dspark` writes it
                                  (architecture dflash)
  mtp_main.gguf, mtp.gguf         tests/data/deepseek_v4/mixed_mtp_bf16 (the April release's
                                  layout, one NextN MTP block): the main model, and the block
                                  as `convert_hf_to_gguf.py --mtp` writes it

What it is: input data for tests/model/deepseek_v4_dspark_test.cc and deepseek_v4_golden_test.cc,
which run the reference's draft goldens on these files. llama.cpp's own converter does the work,
with three changes for these bf16 checkpoints, made by replacing converter methods at run time:
  - their routed experts are bf16, not the release's FP4: they are stacked per layer as BF16
    `ffn_*_exps` where the converter repacks FP4 to MXFP4;
  - the NextN `eh_proj` stays BF16 where the converter makes it Q8_0 (hidden size 40 is not a
    whole number of Q8_0 blocks);
  - they have no tokenizer (vocabulary 256): no vocabulary is written (the DSpark file gets the
    mask token id, dspark_noise_token_id, which the converter takes from the tokenizer's
    config).
Every weight then keeps its bits, so the files compute what the checkpoints compute.

Run from the repository root with the tools venv and llama.cpp's source (nothing built):
  L=/tmp/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp
  PYTHONPATH=$L/gguf-py:$L ../tools-venv/bin/python tools/goldens/ds4_gguf_drafts.py \\
      --out tests/data/deepseek_v4/gguf_drafts
"""
import argparse
import os
import sys

import numpy as np
import torch

import convert_hf_to_gguf  # llama.cpp's converter (on PYTHONPATH)
import gguf
from conversion.base import LazyTorchTensor
from conversion.deepseek import DeepseekV4DSparkModel, DeepseekV4Model

kData = "tests/data/deepseek_v4"


def write_bf16_experts(self, bid, proj, tensor_key):
    consumed, stack = [], []
    for eid in range(self.hparams["n_routed_experts"]):
        name = f"layers.{bid}.ffn.experts.{eid}.{proj}.weight"
        stack.append(LazyTorchTensor.to_eager(self.model_tensors[name]()).to(torch.bfloat16))
        consumed.append(name)
    data = torch.stack(stack).contiguous().view(torch.int16).numpy().view(np.uint16)
    self.gguf_writer.add_tensor(self.format_tensor_name(tensor_key, bid), data,
                                raw_shape=data.shape, raw_dtype=gguf.GGMLQuantizationType.BF16)
    return consumed


def no_vocab(self):
    if isinstance(self, DeepseekV4DSparkModel):
        self.gguf_writer.add_mask_token_id(self.hparams["dspark_noise_token_id"])


force_quant = DeepseekV4Model.tensor_force_quant


def eh_proj_bf16(self, name, new_name, bid, n_dims):
    if new_name.endswith(".nextn.eh_proj.weight"):
        return gguf.GGMLQuantizationType.BF16
    return force_quant(self, name, new_name, bid, n_dims)


def convert(model_dir, outfile, *flags):
    sys.argv = ["convert_hf_to_gguf.py", model_dir, "--outfile", outfile, "--outtype", "f32",
                *flags]
    convert_hf_to_gguf.main()
    DeepseekV4Model.mtp_only = False  # main() sets it on the class for --mtp


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    DeepseekV4Model._write_mxfp4_expert_tensor = write_bf16_experts
    DeepseekV4Model.set_vocab = no_vocab
    DeepseekV4DSparkModel.set_vocab = no_vocab
    DeepseekV4Model.tensor_force_quant = eh_proj_bf16
    os.makedirs(args.out, exist_ok=True)
    dspark = os.path.join(kData, "dspark_mixed_bf16")
    convert(dspark, os.path.join(args.out, "dspark_main.gguf"))
    convert(dspark, os.path.join(args.out, "dspark.gguf"), "--dspark")
    mtp = os.path.join(kData, "mixed_mtp_bf16")
    convert(mtp, os.path.join(args.out, "mtp_main.gguf"))
    convert(mtp, os.path.join(args.out, "mtp.gguf"), "--mtp")


if __name__ == "__main__":
    main()
