#!/usr/bin/env python3
"""Tiny random DeepSeek-V4 checkpoints with the DSpark draft module, and goldens produced by
DeepSeek's own DSpark inference code (the `inference/model.py` of DeepSeek-V4-Flash-0731).

What this writes, per config, into <out>/<name>/ (see tests/data/deepseek_v4/README.md):
  config.json                  HF-style config with the keys of the released 0731 config.json
                               (`dspark_*`, `compress_ratios` one entry per main layer plus one
                               per draft stage, `num_nextn_predict_layers` 1 as released)
  model.safetensors            weights in the OFFICIAL checkpoint naming and storage (BF16 / F32)
  input_ids.txt                the prompt, one line of space-separated ids (BOS 0 first)
  logits.f32                   main-model prefill logits [T, vocab] (fp32, QAT sims off)
  dspark_intermediates.safetensors
                               target features, main_x, the draft rings after prefill, the
                               per-stage outputs of the first draft block, main-model logits of
                               every verified position
  draft_trace.safetensors      per speculative step: draft logits (Markov bias included),
                               Markov bias, confidence logits, drafted tokens, accept counts
  trace.json                   the same trace in readable form (tokens, probabilities,
                               confidence, accepted count, bonus token per step)
  report.json                  versions, seeds, checks, sha256 of every file

The third-party code is NOT part of this file: pass the directory holding DeepSeek's 0731
`inference/model.py` together with a pure-torch `kernel.py` with --official (see
tools/reference/README.md for where both come from).

Usage (the environment beside the repository, as tools/reference/README.md creates it):
  ../tools-venv/bin/python tools/reference/make_tiny_dspark.py \
      --official /tmp/dspark-official/inference --out tests/data/deepseek_v4
"""
import argparse
import hashlib
import importlib
import json
import math
import os
import platform
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_tiny_v4 as v4  # noqa: E402  (this repository: weight generator, QAT switches)

# --------------------------------------------------------------------------------------
# Tiny configurations (main-model keys as in make_tiny_v4.py; DSpark keys added)
# --------------------------------------------------------------------------------------
CONFIGS = {
    # (f) window + CSA (ratio 4, indexer) + HCA (ratio 8) main layers, 1 hash + 3 scored MoE
    #     layers, 3 DSpark stages; target layers = the last three main layers (as 0731's
    #     [40, 41, 42] of 43); block 5; 42-token prompt (10 CSA / 5 HCA entries), window 8 <
    #     prompt, so the draft rings are full from the first draft.
    "dspark_mixed_bf16": dict(
        seed=6006, weights="bf16", vocab=256, dim=40, n_layers=4, n_hash_layers=1,
        n_heads=2, head_dim=128, rope_head_dim=64, q_lora_rank=16, o_groups=2, o_lora_rank=16,
        window=8, seq_len=42, n_experts=8, topk=2, moe_inter=16, ratios=[0, 4, 8, 0],
        route_scale=1.5, swiglu_limit=1.5, tid2eid_dtype="int64",
        index_n_heads=8, index_head_dim=128, index_topk=4,
        n_stages=3, block_size=5, noise_token_id=250, target_layer_ids=[1, 2, 3],
        markov_rank=32, gen_tokens=40, markov_alpha=10.0, markov_keep_every=8),
    # (g) window-only main model, 2 target layers that are NOT the last ones (0 and 1 of 3:
    #     tests the concatenation order and capture point), block 3, window 16 > prompt 9 so
    #     the first draft blocks see a partly filled ring; odd sizes (dim 48, 3 heads / groups,
    #     top-3 of 8, vocab 320, markov rank 8).
    "dspark_swa_bf16": dict(
        seed=7007, weights="bf16", vocab=320, dim=48, n_layers=3, n_hash_layers=1,
        n_heads=3, head_dim=128, rope_head_dim=64, q_lora_rank=16, o_groups=3, o_lora_rank=16,
        window=16, seq_len=9, n_experts=8, topk=3, moe_inter=20, ratios=[0, 0, 0],
        route_scale=2.5, swiglu_limit=2.0, tid2eid_dtype="int32",
        index_n_heads=2, index_head_dim=128, index_topk=4,
        n_stages=3, block_size=3, noise_token_id=317, target_layer_ids=[0, 1],
        markov_rank=8, gen_tokens=30, markov_alpha=12.0, markov_keep_every=5),
}


def ext(c):
    """The config as make_tiny_v4 sees it: the draft stages as extra ratio-0 layers."""
    return dict(c, ratios=list(c["ratios"]) + [0] * c["n_stages"], n_mtp=c["n_stages"])


def hf_config(c):
    cfg = v4.hf_config(ext(c))
    # As released (DeepSeek-V4-Flash-0731 config.json): num_nextn_predict_layers stays 1; the
    # number of draft stages is len(compress_ratios) - num_hidden_layers (the inference
    # config.json has n_mtp_layers 3).
    cfg["num_nextn_predict_layers"] = 1
    cfg["dspark_block_size"] = c["block_size"]
    cfg["dspark_noise_token_id"] = c["noise_token_id"]
    cfg["dspark_target_layer_ids"] = list(c["target_layer_ids"])
    cfg["dspark_markov_rank"] = c["markov_rank"]
    return dict(sorted(cfg.items()))


def model_args_kwargs(c, with_dspark, max_seq_len):
    kw = v4.model_args_kwargs(ext(c), max_seq_len)
    kw.update(temperature=0.0,  # greedy: the official sample() takes the argmax
              dspark_block_size=c["block_size"] if with_dspark else 0,
              dspark_noise_token_id=c["noise_token_id"],
              dspark_target_layer_ids=tuple(c["target_layer_ids"]),
              dspark_markov_rank=c["markov_rank"])
    return kw


# --------------------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------------------
def make_main_and_stage_weights(c):
    """make_tiny_v4's generator with the stages as layers L..L+S-1, renamed to mtp.{s}.*"""
    sd, ids = v4.make_weights(dict(ext(c), n_layers=c["n_layers"] + c["n_stages"], n_mtp=0))
    out = {}
    for k, t in sd.items():
        if k.startswith("layers."):
            i = int(k.split(".")[1])
            if i >= c["n_layers"]:
                k = f"mtp.{i - c['n_layers']}." + k.split(".", 2)[2]
        out[k] = t
    return out, ids


def dspark_extra_weights(c, bigram):
    """main_proj/main_norm (stage 0); norm, hc_head, Markov and confidence heads (last stage).
    The Markov head is random plus a planted low-rank bigram table (bigram: prev -> next) so
    that the random draft agrees with the target often enough to exercise acceptance."""
    rng = v4.Rng(c["seed"] + 1)
    D, V, r, hc = c["dim"], c["vocab"], c["markov_rank"], v4.FIXED["hc_mult"]
    nT, last = len(c["target_layer_ids"]), f"mtp.{c['n_stages'] - 1}."
    bf = torch.bfloat16
    sd = {
        "mtp.0.main_proj.weight": rng.normal((D, nT * D), 1.0 / math.sqrt(nT * D)).to(bf),
        "mtp.0.main_norm.weight": rng.normal((D,), 0.1, 1.0).to(bf),
        last + "norm.weight": rng.normal((D,), 0.1, 1.0).to(bf),
        last + "hc_head_fn": rng.normal((hc, hc * D), 1.0 / math.sqrt(hc * D)).float(),
        last + "hc_head_base": rng.normal((hc,), 0.5).float(),
        last + "hc_head_scale": rng.uniform((1,), 0.5, 1.5).float(),
    }
    w1 = rng.normal((V, r), 0.3)
    w2 = rng.normal((V, r), 0.3 / math.sqrt(r))
    codes = rng.normal((V, r), 1.0 / math.sqrt(r))
    for prev, nxt in sorted(bigram.items()):
        w1[prev] = codes[prev]
        w2[nxt] += c["markov_alpha"] * codes[prev]
    sd[last + "markov_head.markov_w1.weight"] = w1.to(bf)
    sd[last + "markov_head.markov_w2.weight"] = w2.to(bf)
    sd[last + "confidence_head.proj.weight"] = rng.normal((1, D + r), 1.0 / math.sqrt(D + r)).to(bf)
    return sd


# --------------------------------------------------------------------------------------
# The official code
# --------------------------------------------------------------------------------------
class Official(v4.Official):
    """DeepSeek-V4-Flash-0731 inference/model.py + a pure-torch kernel.py from one directory.
    Reuses make_tiny_v4's QAT switches (set_sims); no convert.py (BF16 checkpoints only)."""

    def __init__(self, path):  # noqa: super().__init__ expects the V4 ParallelHead.get_logits
        sys.path.insert(0, path)
        self.kernel = importlib.import_module("kernel")
        self.model = importlib.import_module("model")
        m = self.model
        for name in ("DSparkBlock", "DSparkAttention", "DSparkMarkovHead", "DSparkConfidenceHead",
                     "get_dspark_topk_idxs"):
            assert hasattr(m, name), f"{path}/model.py has no {name}: not the 0731 DSpark code"
        self.orig = dict(act_quant=m.act_quant, fp4_act_quant=m.fp4_act_quant,
                         rotate_activation=m.rotate_activation, sparse_attn=m.sparse_attn,
                         hc_split_sinkhorn=m.hc_split_sinkhorn)

    def build_dspark(self, c, state, with_dspark, compute_dtype=torch.float32):
        m = self.model
        torch.set_default_dtype(compute_dtype)
        max_seq = 128
        assert c["seq_len"] + c["gen_tokens"] + 2 * c["block_size"] + 2 <= max_seq
        args = m.ModelArgs(**model_args_kwargs(c, with_dspark, max_seq))
        with torch.device("cpu"):
            model = m.Transformer(args)
        model.eval()
        for mod in model.modules():
            for pname, p in list(mod.named_parameters(recurse=False)):
                if p.dtype == torch.bfloat16 and compute_dtype == torch.float32:
                    setattr(mod, pname, torch.nn.Parameter(p.data.float(), requires_grad=False))
        own = model.state_dict()
        # DSparkBlock.embed / .head are the main model's modules (shared, not in the checkpoint)
        shared = {k for k in own if k.startswith("mtp.") and (".embed." in k or ".head." in k)
                  and ".markov_head." not in k}
        if not with_dspark:
            state = {k: v for k, v in state.items() if not k.startswith("mtp.")}
        missing = sorted(set(own) - set(state) - shared)
        unexpected = sorted(set(state) - set(own))
        assert not missing and not unexpected, (missing, unexpected)
        for name, t in state.items():
            assert own[name].shape == t.shape, (name, own[name].shape, t.shape)
        res = model.load_state_dict(state, strict=False)
        assert sorted(res.missing_keys) == sorted(shared) and not res.unexpected_keys, res
        for mb in model.mtp:
            assert mb.embed is model.embed and mb.head is model.head
        return model


def main_logits_all_positions(model, run):
    """Transformer.forward returns last-position logits; a hook on the main `norm` gives every
    position: logits = norm_out . head^T (what ParallelHead does with full_logits=True)."""
    got = {}
    h = model.norm.register_forward_hook(lambda mod, i, o: got.__setitem__("n", o))
    out = run()
    h.remove()
    return out, F.linear(got["n"][0].float(), model.head.weight.float())


def plain_greedy(off, c, state, ids, n):
    """Greedy decoding with the official prefill + token-by-token decode, no draft."""
    model = off.build_dspark(c, state, with_dspark=False)
    toks = []
    with torch.inference_mode():
        out, _, _ = model(ids.unsqueeze(0), 0)
        toks.append(int(out[0]))
        for t in range(n - 1):
            out, _, _ = model(torch.tensor([[toks[-1]]]), ids.numel() + t)
            toks.append(int(out[0]))
    return toks


# --------------------------------------------------------------------------------------
# The speculative loop (greedy) on top of the official forward / forward_spec
# --------------------------------------------------------------------------------------
class DraftRecorder:
    """Captures, for one chosen forward_spec call, each stage's sub-results and the head."""

    def __init__(self, model):
        self.on, self.t, self.handles = False, {}, []
        last = model.mtp[-1]
        for s, blk in enumerate(model.mtp):
            p = f"draft0.stage{s}."
            self._hook(blk, lambda mod, i, o, p=p: self.put(p + "out", o[0]))
            self._hook(blk.attn_norm, lambda mod, i, o, p=p: self.put(p + "attn_norm_out", o[0]))
            self._hook(blk.attn, lambda mod, i, o, p=p: self.put(p + "attn_out", o[0]))
            self._hook(blk.ffn_norm, lambda mod, i, o, p=p: self.put(p + "ffn_norm_out", o[0]))
            self._hook(blk.ffn, lambda mod, i, o, p=p: self.put(p + "ffn_out", o[0]))
            self._hook(blk.ffn.gate, lambda mod, i, o, p=p: self.put(p + "router_indices",
                                                                    o[1].to(torch.int32)))
            self._hook(blk.ffn.gate, lambda mod, i, o, p=p: self.put(p + "router_weights", o[0]))
        self._hook(last.norm, lambda mod, i, o: self.put("draft0.final_norm_out", o[0]))
        orig = last.hc_head

        def hc_head(x, fn, scale, base):
            y = orig(x, fn, scale, base)
            self.put("draft0.hc_head_out", y[0])
            return y
        last.hc_head = hc_head
        self._hook(model.mtp[0], lambda mod, i: self.put("draft0.stage0.in", i[0][0]), pre=True)

    def _hook(self, mod, fn, pre=False):
        self.handles.append(mod.register_forward_pre_hook(fn) if pre else mod.register_forward_hook(fn))

    def put(self, name, x):
        if self.on and name not in self.t:
            self.t[name] = x.detach().clone() if not x.is_floating_point() else x.detach().float().clone()


def markov_bias(model, tokens):
    """logits_bias[i] = markov_w2 . markov_w1[tokens[i]]: the official DSparkMarkovHead."""
    mh = model.mtp[-1].markov_head
    with torch.inference_mode():
        return torch.stack([mh(torch.tensor([int(t)]))[0][0].float() for t in tokens])


def spec_decode(off, c, state, ids, greedy_ref):
    B, T, G = c["block_size"], ids.numel(), c["gen_tokens"]
    model = off.build_dspark(c, state, with_dspark=True)
    rec = DraftRecorder(model)
    inter, steps = {}, []
    verify_logits, verify_pos = [], []
    feats_dec = {}
    with torch.inference_mode():
        got = {}
        h = model.mtp[0].main_norm.register_forward_hook(lambda mod, i, o: got.__setitem__("x", o))
        (out, last_logits, main_hidden), logits = main_logits_all_positions(
            model, lambda: model(ids.unsqueeze(0), 0))
        assert float((last_logits[0].float() - logits[-1]).abs().max()) < 1e-5, "head hook"
        model.forward_spec(out, main_hidden, 0)  # prefill: writes every stage's window ring
        h.remove()
        inter["main_hidden_prefill"] = main_hidden[0].float().clone()
        inter["main_x_prefill"] = got["x"][0].float().clone()
        for s, blk in enumerate(model.mtp):
            inter[f"dspark.stage{s}.ring_after_prefill"] = blk.attn.kv_cache[0].float().clone()
        emitted = [int(out[0])]
        p, anchor, feat = T - 1, out.clone(), main_hidden[:, -1:]
        while len(emitted) < G:
            rec.on = not steps
            ids_out, dlogits, conf = model.forward_spec(anchor, feat, p)  # draft (writes slot p)
            rec.on = False
            drafts = [int(x) for x in ids_out[0, 1:]]
            prev = [int(x) for x in ids_out[0, :B]]
            bias = markov_bias(model, prev)
            dl = dlogits[0].float().clone()
            probs = dl.softmax(-1)
            # verify token by token with the official decode path (== one batched verify of
            # [anchor, d1..dB] followed by a rollback to the accepted prefix)
            tok, pos, a, fed = int(anchor[0]), p + 1, 0, []
            while True:
                o, lg, mh = model(torch.tensor([[tok]]), pos)
                verify_logits.append(lg[0].float().clone())
                verify_pos.append(pos)
                fed.append((pos, tok, mh))
                feats_dec[pos] = mh[0, 0].float().clone()
                tgt = int(o[0])
                if a < B and tgt == drafts[a]:
                    tok, pos, a = drafts[a], pos + 1, a + 1
                    continue
                bonus = tgt
                break
            steps.append(dict(
                start_pos=p, anchor=int(anchor[0]), anchor_pos=p + 1, drafted=drafts,
                draft_token_prob=[float(probs[i, drafts[i]]) for i in range(B)],
                draft_argmax_is_token=[int(dl[i].argmax()) == drafts[i] for i in range(B)],
                confidence_logit=[float(x) for x in conf[0]],
                confidence_sigmoid=[float(torch.sigmoid(x)) for x in conf[0].double()],
                accepted=a, bonus=bonus, bonus_pos=p + 2 + a,
                verified_positions=[q for q, _, _ in fed],
                _dl=dl, _bias=bias, _conf=conf[0].float().clone(), _prev=prev))
            emitted += drafts[:a] + [bonus]
            # the draft rings need the target features of every committed position: the
            # official API writes one slot per forward_spec call (start_pos = that position)
            for (q, _, fq), (_, tnext, _) in zip(fed[:-1], fed[1:]):
                model.forward_spec(torch.tensor([tnext]), fq, q)
            p, anchor, feat = fed[-1][0], torch.tensor([bonus]), fed[-1][2]
    assert emitted[:G] == greedy_ref[:G], "speculative greedy output differs from plain greedy"
    inter.update(rec.t)
    inter["verify_logits"] = torch.stack(verify_logits)
    inter["verify_positions"] = torch.tensor(verify_pos, dtype=torch.int32)
    inter["main_hidden_decode"] = torch.stack([feats_dec[q] for q in sorted(feats_dec)])
    inter["main_hidden_decode_positions"] = torch.tensor(sorted(feats_dec), dtype=torch.int32)
    trace = {
        "draft_logits": torch.stack([s.pop("_dl") for s in steps]),
        "markov_bias": torch.stack([s.pop("_bias") for s in steps]),
        "confidence": torch.stack([s.pop("_conf") for s in steps]),
        "markov_prev_tokens": torch.tensor([s.pop("_prev") for s in steps], dtype=torch.int32),
        "drafted_tokens": torch.tensor([s["drafted"] for s in steps], dtype=torch.int32),
        "start_pos": torch.tensor([s["start_pos"] for s in steps], dtype=torch.int32),
        "accepted": torch.tensor([s["accepted"] for s in steps], dtype=torch.int32),
        "bonus": torch.tensor([s["bonus"] for s in steps], dtype=torch.int32),
    }
    return inter, trace, steps, emitted[:G]


# --------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------
def bigram_table(c, ids, greedy):
    """prev -> next pairs of the target's own greedy continuation, keeping all but every
    markov_keep_every-th distinct pair (so some drafts miss), first occurrence wins."""
    seq = [int(ids[-1])] + greedy
    table, n = {}, 0
    for a, b in zip(seq[:-1], seq[1:]):
        if a in table:
            continue
        n += 1
        if n % c["markov_keep_every"]:
            table[a] = b
    return table


def run_config(off, name, c, out_dir):
    from safetensors.torch import save_file, load_file
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    sd, ids = make_main_and_stage_weights(c)
    greedy = plain_greedy(off, c, sd, ids, c["gen_tokens"] + c["block_size"] + 1)
    table = bigram_table(c, ids, greedy)
    sd.update(dspark_extra_weights(c, table))
    ckpt = os.path.join(d, "model.safetensors")
    save_file(sd, ckpt, metadata={"format": "pt"})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(hf_config(c), f, indent=2)
        f.write("\n")
    with open(os.path.join(d, "input_ids.txt"), "w") as f:
        f.write(" ".join(str(int(x)) for x in ids) + "\n")
    state = load_file(ckpt)

    # prefill logits (all positions) from a fresh model
    model = off.build_dspark(c, state, with_dspark=True)
    with torch.inference_mode():
        _, logits = main_logits_all_positions(model, lambda: model(ids.unsqueeze(0), 0))
    v4.write_f32(os.path.join(d, "logits.f32"), logits)

    inter, trace, steps, emitted = spec_decode(off, c, state, ids, greedy)
    inter = {k: v.contiguous() for k, v in sorted(inter.items())}
    save_file(inter, os.path.join(d, "dspark_intermediates.safetensors"))
    save_file({k: v.contiguous() for k, v in sorted(trace.items())},
              os.path.join(d, "draft_trace.safetensors"))
    with open(os.path.join(d, "trace.json"), "w") as f:
        json.dump({"prompt_len": ids.numel(), "block_size": c["block_size"],
                   "first_token": emitted[0], "emitted": emitted, "steps": steps}, f, indent=1)
        f.write("\n")

    acc = [s["accepted"] for s in steps]
    report = {
        "config": name, "seed": c["seed"], "seq_len": c["seq_len"], "gen_tokens": c["gen_tokens"],
        "reference": "DeepSeek-V4-Flash-0731 inference/model.py (see README), fp32, QAT sims off",
        "markov_bigram_pairs_planted": len(table),
        "steps": len(steps), "accepted_histogram": {str(k): acc.count(k) for k in range(c["block_size"] + 1)},
        "mean_accepted": sum(acc) / len(acc),
        # how much each part decides the drafted tokens (both should be well above 0)
        "drafts_where_markov_bias_changes_argmax": float(
            ((trace["draft_logits"] - trace["markov_bias"]).argmax(-1)
             != trace["draft_logits"].argmax(-1)).float().mean()),
        "drafts_where_base_logits_change_argmax": float(
            (trace["markov_bias"].argmax(-1) != trace["draft_logits"].argmax(-1)).float().mean()),
        "speculative_equals_plain_greedy": True,
        "intermediates": {k: [list(v.shape), str(v.dtype).replace("torch.", "")] for k, v in inter.items()},
        "trace_tensors": {k: [list(v.shape), str(v.dtype).replace("torch.", "")] for k, v in trace.items()},
        "versions": {"torch": torch.__version__, "python": platform.python_version(),
                     "safetensors": __import__("safetensors").__version__,
                     "numpy": __import__("numpy").__version__},
        "official_files_sha256": {f: v4.sha256(os.path.join(OFFICIAL_DIR, f))
                                  for f in ("model.py", "kernel.py")},
    }
    torch.set_default_dtype(torch.float32)
    report["files"] = {f: v4.sha256(os.path.join(d, f)) for f in sorted(os.listdir(d)) if f != "report.json"}
    with open(os.path.join(d, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    return report


OFFICIAL_DIR = None


def main():
    global OFFICIAL_DIR
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--official", required=True,
                    help="directory holding the 0731 inference/model.py and a pure-torch kernel.py")
    ap.add_argument("--out", required=True, help="output directory (tests/data/deepseek_v4)")
    ap.add_argument("--configs", nargs="*", default=list(CONFIGS), help="subset of: " + " ".join(CONFIGS))
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 = reproducible reductions)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    OFFICIAL_DIR = os.path.abspath(a.official)
    off = Official(OFFICIAL_DIR)
    off.set_sims("off")
    for name in a.configs:
        rep = run_config(off, name, CONFIGS[name], a.out)
        print(json.dumps({k: v for k, v in rep.items()
                          if k not in ("intermediates", "files", "trace_tensors")}))


if __name__ == "__main__":
    main()
