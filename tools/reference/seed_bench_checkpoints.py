"""Random seed-family checkpoints for the benchmarks in docs/benchmarks.md ("Seed family").

Not test data (nothing here is committed except this script): larger shapes than
tests/data/seed, written to --out (default /tmp/dsv4-seed-bench):

  prenorm/      pre-norm reference blocks (S-012), dense SwiGLU, every layer
  ced_col/      CED blocks (S-013: no norms, ced_scale_factor) with the fused MLP
                (S-037), ced_weight stored column-major (the CED layout, S-074)
  ced_row/      the same CED model with ced_weight stored row-major
  p_v4_7b/      a small P-V4-7B-shaped model (segmented RoPE, MoE, TaskAdapter,
                SemanticKVPruner) for decode speed and KV-pruner savings

prenorm and ced_* share H, heads, L and intermediate_size, as the seed's v3.5 and
v4.1 do; the CED fused width is intermediate_size (gate and up halves of I/2), so
its MLP holds 2·I·H weights against the dense block's 3·I·H.

Usage (numpy only; the environment beside the repository, as
tools/reference/make_seed_checkpoints.py creates it):
  ../tools-venv-seed/bin/python tools/reference/seed_bench_checkpoints.py
"""

import argparse
import json
import os

import numpy as np

from make_seed_checkpoints import make_tensors, write_safetensors

H, NH, NKV, I, L, V = 768, 12, 4, 2048, 4, 512

BASE = {
    "model_type": "deepseek_v4_seed", "vocab_size": V, "hidden_size": H,
    "num_attention_heads": NH, "num_key_value_heads": NKV, "num_hidden_layers": L,
    "intermediate_size": I, "max_position_embeddings": 1024, "rope_theta": 10000.0,
    "rms_norm_eps": 1e-6, "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False,
}


def block_tensors(rng, ced):
    s = 1.0 / np.sqrt(H)
    d = H // NH
    t = {"model.embed_tokens.weight": rng.standard_normal((V, H)) * 0.5,
         "model.norm.weight": np.ones(H), "lm_head.weight": rng.standard_normal((V, H)) * 0.3}
    for l in range(L):
        p = f"model.layers.{l}."
        t[p + "self_attn.q_proj.weight"] = rng.standard_normal((NH * d, H)) * s
        t[p + "self_attn.k_proj.weight"] = rng.standard_normal((NKV * d, H)) * s
        t[p + "self_attn.v_proj.weight"] = rng.standard_normal((NKV * d, H)) * s
        t[p + "self_attn.o_proj.weight"] = rng.standard_normal((H, NH * d)) * s
        if ced:
            t[p + "ced_scale_factor"] = np.array([0.873])
            t[p + "mlp.ced_weight"] = rng.standard_normal((I, H)) * s
            t[p + "mlp.ced_bias"] = np.zeros(I)
            t[p + "mlp.down_proj.weight"] = rng.standard_normal((H, I)) / np.sqrt(I)
        else:
            t[p + "input_layernorm.weight"] = np.ones(H)
            t[p + "post_attention_layernorm.weight"] = np.ones(H)
            t[p + "mlp.gate_proj.weight"] = rng.standard_normal((I, H)) * s
            t[p + "mlp.up_proj.weight"] = rng.standard_normal((I, H)) * s
            t[p + "mlp.down_proj.weight"] = rng.standard_normal((H, I)) / np.sqrt(I)
    return t


def write(out, name, cfg, tensors, layout):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(d, "model.safetensors"), tensors, layout)
    print(d)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/dsv4-seed-bench")
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    write(args.out, "prenorm", dict(BASE, seed_profile="P-V4"), block_tensors(rng, False), {})
    ced = block_tensors(rng, True)
    ced_cfg = dict(BASE, seed_profile="P-CED", extensions={"ced": {"layout": "auto", "block": "auto"}})
    write(args.out, "ced_col", ced_cfg, ced,
          {f"model.layers.{l}.mlp.ced_weight": "col_major" for l in range(L)})
    write(args.out, "ced_row", ced_cfg, ced, {})
    cfg7b = dict(BASE, seed_profile="P-V4-7B", hidden_size=256, num_attention_heads=8,
                 num_key_value_heads=2, intermediate_size=512, extensions={
                     "segmented_rope": {"segment_length": 256},
                     "moe": {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 256,
                             "routing": "topk", "router_input": "hidden_plus_attn",
                             "capacity_factor": 0.0},
                     "task_adapter": {"adapter_dim": 32, "task_source": "first_token"},
                     "kv_pruner": {"hidden": 64, "protect_recent": 32, "protect_sink": 4}})
    t, layout = make_tensors(cfg7b, rng)
    write(args.out, "p_v4_7b", cfg7b, t, layout)


if __name__ == "__main__":
    main()
