"""Writes tiny random checkpoints of the seed-article profiles plus goldens.

For each profile (P-V4, P-CED, P-V4-7B; docs/specs/seed-mechanisms.md §0.5) this
writes into tests/data/seed/<profile>/:
  config.json          model_type "deepseek_v4_seed", every mechanism of the profile on
  model.safetensors    f32 weights; CED weights stored column-major where the
                       metadata "dsv4.layout.<name>" = "col_major" says so
  tok512.bin           the stories260K tokenizer (copied from models/stories260K)
  golden.json          input ids, the request's expected context, and what each run
                       must reproduce (file names of raw little-endian f32 logits)
  *.f32                logits from seed_reference.py (float64 numpy, stored as f32)

Runs: "prefill" (all ids in one call), "incremental" (one id per call), and for
P-V4-7B "prefill_decode" (a prefill chunk, then one id per call, with the KV pruner
evicting; the live positions after every call are recorded).

Variants: the same weights under a config with some extension fields changed
(VARIANTS; e.g. P-V4 with csa.fusion_mode "residual_layernorm", S-021, or with
hca.stats "whole_call", the non-causal reading of C-15). Each variant's
prefill and incremental logits go to <variant>_<run>_logits.f32 and golden.json
"variants" records the changed fields ("extensions_patch") and its runs.

The weights are drawn from a fixed seed; seeds are skipped until every discrete
decision (router ranks, group scores, CSA importance ranks, pruner threshold and
eviction ranks) has a margin of at least MIN_MARGIN, so fp32 rounding in the
engine cannot flip one.

Usage (numpy only):
  python3 -m venv ../tools-venv-seed && ../tools-venv-seed/bin/pip install numpy
  ../tools-venv-seed/bin/python tools/reference/make_seed_checkpoints.py
"""

import argparse
import json
import os
import shutil
import struct

import numpy as np

from seed_reference import Margins, SeedReference

MIN_MARGIN = 2e-5
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

IDS = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426]

BASE = {
    "model_type": "deepseek_v4_seed",
    "vocab_size": 512,
    "hidden_size": 32,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-6,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
}

PROFILES = {
    "P-V4": dict(BASE, **{
        "seed_profile": "P-V4",
        "num_hidden_layers": 2,
        "intermediate_size": 64,
        "max_position_embeddings": 32,
        "rope_scaling": {"type": "linear", "factor": 2.0},
        "extensions": {
            "csa": {"local_window": 3, "segment_window": 6, "global_topk": 4,
                    "branch_weights": [0.4, 0.4, 0.2]},
            "hca": {"hidden": 16},
            "dynamic_rope": {"base_len": 8, "dim": 8},
            "moe": {"num_experts": 16, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
                    "routing": "group_limited", "n_group": 4, "topk_group": 2, "per_group_k": 2,
                    "router_input": "hca", "capacity_factor": 1.0, "assign": "topk_capped"},
        },
    }),
    "P-CED": dict(BASE, **{
        "seed_profile": "P-CED",
        "num_hidden_layers": 3,
        "intermediate_size": 48,
        "max_position_embeddings": 64,
        "extensions": {"ced": {"layout": "auto", "block": "auto"}},
    }),
    "P-V4-7B": dict(BASE, **{
        "seed_profile": "P-V4-7B",
        "num_hidden_layers": 2,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
        "extensions": {
            "segmented_rope": {"segment_length": 4},
            "moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
                    "routing": "topk", "router_input": "hidden_plus_attn", "capacity_factor": 0.0},
            "task_adapter": {"adapter_dim": 8, "task_source": "first_token"},
            "kv_pruner": {"hidden": 16, "protect_recent": 2, "protect_sink": 1, "kv_budget": 8},
        },
    }),
}

# Config variants run on a profile's weights: name -> {extension: {field: value}}.
VARIANTS = {
    "P-V4": {"residual_layernorm": {"csa": {"fusion_mode": "residual_layernorm"}},
             "whole_call_hca": {"hca": {"stats": "whole_call"}}},
}


def patched(cfg, patch):
    out = json.loads(json.dumps(cfg))
    for ext, fields in patch.items():
        out["extensions"].setdefault(ext, {}).update(fields)
    return out


# Runs per profile: (expected context = the cache size, number of prompt ids, prefill chunk).
RUNS = {
    "P-V4": {"max_tokens": 48, "n_ids": 12},
    "P-CED": {"max_tokens": 16, "n_ids": 12},
    "P-V4-7B": {"max_tokens": 16, "n_ids": 16, "prefill_chunk": 10},
}


def make_tensors(cfg, rng):
    H, L, nh = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]
    nkv, V, I = cfg["num_key_value_heads"], cfg["vocab_size"], cfg["intermediate_size"]
    d = H // nh
    ext = cfg.get("extensions", {})
    t, layout = {}, {}

    def n(shape, s):
        return rng.standard_normal(shape) * s

    t["model.embed_tokens.weight"] = n((V, H), 0.5)
    t["model.norm.weight"] = 1.0 + n((H,), 0.1)
    t["lm_head.weight"] = n((V, H), 0.3)
    if "segmented_rope" in ext:
        t["model.rotary_emb.segment_shift"] = n((nh, d // 2), 0.7)
    for l in range(L):
        p = f"model.layers.{l}."
        ced_block = "ced" in ext and l < 2  # P-CED: layers 0, 1 CED blocks; layer 2 pre-norm
        if ced_block:
            t[p + "ced_scale_factor"] = np.array([0.873 + 0.05 * l])
            if l == 1:  # C-18 auto: a CED block that still has a norm before the MLP
                t[p + "post_attention_layernorm.weight"] = 1.0 + n((H,), 0.1)
        else:
            t[p + "input_layernorm.weight"] = 1.0 + n((H,), 0.1)
            t[p + "post_attention_layernorm.weight"] = 1.0 + n((H,), 0.1)
        s = 1.0 / np.sqrt(H)
        t[p + "self_attn.q_proj.weight"] = n((nh * d, H), 1.5 * s)
        t[p + "self_attn.k_proj.weight"] = n((nkv * d, H), 1.5 * s)
        t[p + "self_attn.v_proj.weight"] = n((nkv * d, H), s)
        t[p + "self_attn.o_proj.weight"] = n((H, nh * d), s)
        if "segmented_rope" in ext and l == 0:  # layer 0 its own shift, layer 1 the shared one
            t[p + "self_attn.rotary_emb.segment_shift"] = n((nh, d // 2), 0.7)
        if "csa" in ext or "hca" in ext:
            t[p + "mlp.hca_gate_proj.weight"] = n((H, H), s)
        if "hca" in ext:
            hid = ext["hca"]["hidden"]
            t[p + "mlp.hca_controller.fc1.weight"] = n((hid, 3 * H), 1.0 / np.sqrt(3 * H))
            t[p + "mlp.hca_controller.fc1.bias"] = n((hid,), 0.1)
            t[p + "mlp.hca_controller.fc2.weight"] = n((H, hid), 1.0 / np.sqrt(hid))
            t[p + "mlp.hca_controller.fc2.bias"] = n((H,), 0.1)
        if "ced" in ext and l < 2:
            t[p + "mlp.ced_weight"] = n((I, H), s)
            t[p + "mlp.ced_bias"] = n((I,), 0.1)
            t[p + "mlp.down_proj.weight"] = n((H, I), 1.0 / np.sqrt(I))
            if l == 0:
                layout[p + "mlp.ced_weight"] = "col_major"
        elif "moe" in ext:
            moe = ext["moe"]
            E, F = moe["num_experts"], moe["moe_intermediate_size"]
            t[p + "mlp.gate.weight"] = n((E, H), 3.0 * s)
            for e in range(E):
                q = p + f"mlp.experts.{e}."
                t[q + "w1.weight"] = n((F, H), s)
                t[q + "w3.weight"] = n((F, H), s)
                t[q + "w2.weight"] = n((H, F), 1.0 / np.sqrt(F))
        else:
            t[p + "mlp.gate_proj.weight"] = n((I, H), s)
            t[p + "mlp.up_proj.weight"] = n((I, H), s)
            t[p + "mlp.down_proj.weight"] = n((H, I), 1.0 / np.sqrt(I))
        if "task_adapter" in ext:
            t[p + "mlp.task_gate_weight"] = np.array([0.5 + 0.25 * l])
    if "task_adapter" in ext:
        r = ext["task_adapter"]["adapter_dim"]
        F = ext["moe"]["moe_intermediate_size"] if "moe" in ext else I
        P = "model.task_adapter."
        t[P + "layer_embedding.weight"] = n((L, r), 1.0)
        t[P + "task_embedding.weight"] = n((r, H), 1.0 / np.sqrt(H))
        t[P + "task_embedding.bias"] = n((r,), 0.1)
        t[P + "adapter_mlp.0.weight"] = n((r, 2 * r), 1.0 / np.sqrt(2 * r))
        t[P + "adapter_mlp.0.bias"] = n((r,), 0.1)
        t[P + "adapter_mlp.2.weight"] = n((F, r), 1.0 / np.sqrt(r))
        t[P + "adapter_mlp.2.bias"] = n((F,), 0.1)
    if "kv_pruner" in ext:
        hp = ext["kv_pruner"]["hidden"]
        P = "model.kv_pruner.score_net."
        t[P + "0.weight"] = n((hp, H), 1.0 / np.sqrt(H))
        t[P + "0.bias"] = n((hp,), 0.1)
        t[P + "2.weight"] = n((1, hp), 0.6 / np.sqrt(hp))
        t[P + "2.bias"] = np.array([0.45])
    # Stored as f32: the reference computes with exactly the stored values.
    t = {k: v.astype(np.float32).astype(np.float64) for k, v in t.items()}
    return t, layout


def write_safetensors(path, tensors, layout):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = tensors[name].astype(np.float32)
        raw = (np.ascontiguousarray(a.T) if layout.get(name) == "col_major" else a).tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {"format": "pt"}
    for name, lay in layout.items():
        header["__metadata__"]["dsv4.layout." + name] = lay
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def run_profile(name, cfg, seed):
    rng = np.random.default_rng(seed)
    tensors, layout = make_tensors(cfg, rng)
    margins = Margins()
    ref = SeedReference(cfg, tensors, margins)
    spec = RUNS[name]
    ids = IDS[: spec["n_ids"]]
    out = {"runs": {}}
    st = ref.new_request(spec["max_tokens"])
    logits, _ = ref.forward(st, ids)
    out["runs"]["prefill"] = {"chunks": [len(ids)], "logits": logits}
    st = ref.new_request(spec["max_tokens"])
    rows, live = [], []
    for i in ids:
        lg, _ = ref.forward(st, [i])
        rows.append(lg[0])
        live.append(list(st["live"]))
    out["runs"]["incremental"] = {"chunks": [1] * len(ids), "logits": np.array(rows), "live": live}
    if "prefill_chunk" in spec:
        c = spec["prefill_chunk"]
        st = ref.new_request(spec["max_tokens"])
        lg, info = ref.forward(st, ids[:c])
        rows, live, effs = [lg[-1]], [list(st["live"])], [st["eff"]]
        for i in ids[c:]:
            lg, _ = ref.forward(st, [i])
            rows.append(lg[0])
            live.append(list(st["live"]))
            effs.append(st["eff"])
        out["runs"]["prefill_decode"] = {"chunks": [c] + [1] * (len(ids) - c),
                                         "logits": np.array(rows), "live": live, "eff": effs,
                                         "last_only": True}
    out["theta"] = st["rope"]["theta"]
    out["variants"] = {}
    for vname, patch in VARIANTS.get(name, {}).items():
        vref = SeedReference(patched(cfg, patch), tensors, margins)
        vst = vref.new_request(spec["max_tokens"])
        vlogits, _ = vref.forward(vst, ids)
        vst = vref.new_request(spec["max_tokens"])
        vrows = [vref.forward(vst, [i])[0][0] for i in ids]
        out["variants"][vname] = {
            "patch": patch,
            "runs": {"prefill": {"chunks": [len(ids)], "logits": vlogits},
                     "incremental": {"chunks": [1] * len(ids), "logits": np.array(vrows)}}}
    return tensors, layout, out, margins, ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "seed"))
    ap.add_argument("--profiles", nargs="*", default=list(PROFILES))
    args = ap.parse_args()
    for name in args.profiles:
        cfg = PROFILES[name]
        for seed in range(1000, 1100):
            tensors, layout, out, margins, ids = run_profile(name, cfg, seed)
            if margins.smallest() >= MIN_MARGIN:
                break
            print(f"{name}: seed {seed} has a decision margin {margins.smallest():.2e}, next")
        else:
            raise SystemExit(f"{name}: no seed with margins >= {MIN_MARGIN}")
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
        write_safetensors(os.path.join(d, "model.safetensors"), tensors, layout)
        shutil.copyfile(os.path.join(REPO, "models", "stories260K", "tok512.bin"), os.path.join(d, "tok512.bin"))
        golden = {"profile": name, "seed": seed, "input_ids": ids,
                  "max_tokens": RUNS[name]["max_tokens"], "theta": out["theta"],
                  "min_decision_margin": margins.smallest() if margins.gaps else None,
                  "margins": {k: v for k, v in margins.gaps.items()}, "runs": {}}
        for run, r in out["runs"].items():
            fname = f"{run}_logits.f32"
            r["logits"].astype("<f4").tofile(os.path.join(d, fname))
            entry = {"chunks": r["chunks"], "logits": fname, "rows": int(r["logits"].shape[0]),
                     "last_only": bool(r.get("last_only", False))}
            if "live" in r and "kv_pruner" in cfg.get("extensions", {}):
                entry["live_after_call"] = r["live"]
            if "eff" in r:
                entry["eff_after_call"] = r["eff"]
            golden["runs"][run] = entry
        for vname, v in out["variants"].items():
            golden.setdefault("variants", {})[vname] = {"extensions_patch": v["patch"], "runs": {}}
            for run, r in v["runs"].items():
                fname = f"{vname}_{run}_logits.f32"
                r["logits"].astype("<f4").tofile(os.path.join(d, fname))
                golden["variants"][vname]["runs"][run] = {
                    "chunks": r["chunks"], "logits": fname, "rows": int(r["logits"].shape[0]),
                    "last_only": False}
        with open(os.path.join(d, "golden.json"), "w") as f:
            json.dump(golden, f, indent=1)
            f.write("\n")
        print(f"{name}: seed {seed}, margin {margins.smallest():.2e}, theta {out['theta']:.6f} -> {d}")


if __name__ == "__main__":
    main()
