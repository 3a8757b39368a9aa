"""Float64 numpy reference of the seed-article model family.

Written from the digest (docs/specs/seed-mechanisms.md, group 1, with the
resolutions of its Analysis (a)), not from the C++ code. It keeps the whole
sequence as plain per-position dictionaries, rotates keys per query head at
attention time, and recomputes every statistic from scratch, so it shares no
structure with src/model/seed/.

  block     pre-norm (S-012) or CED x + c*Attn(x), x + MLP(x) (S-013, C-18)
  attention GQA (S-016); CSA local/segment causal windows + importance top-K keys,
            fused 0.4/0.4/0.2 (S-017..S-020, C-07..C-09); or the prose form (S-021,
            csa.fusion_mode "residual_layernorm"): LayerNorm(h + local + segment + global)
            over the attention input h and the unweighted branches, no affine, eps =
            rms_norm_eps, before o_proj and the block residual
  RoPE      interleaved pairs; theta_dyn = theta*max(1, Lctx/f/Lbase)^(2/dim) frozen
            per request (S-025, S-026, C-11); position p/f; segment phase
            floor(p/Lseg)*shift[h] (S-027, C-12)
  HCA       w = sigmoid(fc2 GELU(fc1 [g; mu; sigma])), g = hca_gate_proj f, stats over
            the sequence's tokens up to and including each token (hca.stats "causal", the
            default), or over every token so far including the call's later ones
            ("whole_call"); population std + eps (S-030..S-032, C-15)
  MoE       top-k / group-limited, capacity ceil(cf N k / E), topk_capped reroute,
            fp32-style softmax over the used experts' raw logits (S-041..S-045, C-05)
  CED MLP   fused [I,H] = [gate; up], bias, p_j = silu(gate[j//2]) up[j//2], down [H,I] (C-02)
  TaskAdapter  r-wide bottleneck from the first-token embedding, once per request (C-24)
  KV pruner per-token retain score, tau = min(.35(1+.5r), .6), write-then-evict,
            eff adaptation, budget rule (S-059..S-065, C-25)
"""

import math

import numpy as np

_erf = np.vectorize(math.erf)


def gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x) + eps) * w


def rotate(vec, angles):
    """Rotates interleaved pairs (vec[2i], vec[2i+1]) by angles[i]."""
    out = vec.copy()
    c, s = np.cos(angles), np.sin(angles)
    out[0::2] = vec[0::2] * c - vec[1::2] * s
    out[1::2] = vec[0::2] * s + vec[1::2] * c
    return out


def softmax(v):
    v = np.asarray(v, dtype=np.float64)
    e = np.exp(v - v.max())
    return e / e.sum()


def ranked(scores, allowed=None):
    """Indices by descending score, ties to the lower index."""
    idx = [i for i in range(len(scores)) if allowed is None or allowed[i]]
    return sorted(idx, key=lambda i: (-scores[i], i))


class Margins:
    """Smallest gap seen at each discrete decision (for choosing golden seeds)."""

    def __init__(self):
        self.gaps = {}

    def note(self, kind, values):
        v = sorted(float(x) for x in values)
        for a, b in zip(v, v[1:]):
            g = b - a
            if g == 0.0:  # identical computations (a repeated token): an exact tie, same on both sides
                continue
            self.gaps[kind] = min(self.gaps.get(kind, math.inf), g)

    def note_gap(self, kind, g):
        self.gaps[kind] = min(self.gaps.get(kind, math.inf), abs(float(g)))

    def smallest(self):
        return min(self.gaps.values()) if self.gaps else math.inf


class SeedReference:
    def __init__(self, config, tensors, margins=None):
        self.c = config
        self.t = tensors  # name -> float64 array in logical shape
        self.ext = config.get("extensions", {})
        self.m = margins or Margins()
        c = config
        self.H = c["hidden_size"]
        self.L = c["num_hidden_layers"]
        self.nh = c["num_attention_heads"]
        self.nkv = c.get("num_key_value_heads", self.nh)
        self.d = self.H // self.nh
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.V = c["vocab_size"]

    # ---------------------------------------------------------------- helpers
    def w(self, name):
        return self.t[name]

    def has(self, name):
        return name in self.t

    def lname(self, l, rest):
        return f"model.layers.{l}.{rest}"

    def is_ced_block(self, l):
        if "ced" not in self.ext:
            return False
        mode = self.ext["ced"].get("block", "auto")
        if mode == "all":
            return True
        if mode == "none":
            return False
        return self.has(self.lname(l, "ced_scale_factor")) and not self.has(
            self.lname(l, "input_layernorm.weight"))

    def rope_setup(self, expected_ctx):
        c = self.c
        f = c["rope_scaling"]["factor"] if c.get("rope_scaling") else 1.0
        max_ctx = math.floor(c["max_position_embeddings"] * f)
        theta = c.get("rope_theta", 10000.0)
        if "dynamic_rope" in self.ext:
            dr = self.ext["dynamic_rope"]
            base_len = dr.get("base_len", 2048)
            dim = dr.get("dim", 0) or self.H
            lctx = min(expected_ctx, max_ctx) / f
            theta = theta * max(1.0, lctx / base_len) ** (2.0 / dim)
        inv = theta ** (-2.0 * np.arange(self.d // 2) / self.d)
        seg_len = self.ext["segmented_rope"].get("segment_length", 2048) if "segmented_rope" in self.ext else 0
        return {"theta": theta, "f": f, "inv": inv, "seg": seg_len}

    def angles(self, rope, p, shift_row):
        a = (p / rope["f"]) * rope["inv"]
        if rope["seg"] and shift_row is not None:
            a = a + (p // rope["seg"]) * shift_row
        return a

    def shift(self, l):
        if "segmented_rope" not in self.ext:
            return None
        n = self.lname(l, "self_attn.rotary_emb.segment_shift")
        if self.has(n):
            return self.w(n)
        return self.w("model.rotary_emb.segment_shift")

    # ---------------------------------------------------------------- request state
    def new_request(self, expected_ctx, kv_budget=None):
        st = {
            "rope": self.rope_setup(expected_ctx),
            "length": 0,
            "live": [],  # positions
            "k": [dict() for _ in range(self.L)],  # pos -> raw k [nkv, d] (not rotated)
            "v": [dict() for _ in range(self.L)],
            "imp": [dict() for _ in range(self.L)],
            "g_hist": [[] for _ in range(self.L)],
            "adapter": None,
            "score": {},
        }
        if "kv_pruner" in self.ext:
            kp = self.ext["kv_pruner"]
            st["eff"] = kp.get("efficiency_factor", 0.85)
            st["budget"] = kp.get("kv_budget", 0) or expected_ctx
        return st

    # ---------------------------------------------------------------- blocks
    def attention(self, l, st, h_rows, positions):
        """h_rows [T, H] attention inputs at `positions` (already appended to live)."""
        H, nh, nkv, d = self.H, self.nh, self.nkv, self.d
        wq = self.w(self.lname(l, "self_attn.q_proj.weight"))
        wk = self.w(self.lname(l, "self_attn.k_proj.weight"))
        wv = self.w(self.lname(l, "self_attn.v_proj.weight"))
        wo = self.w(self.lname(l, "self_attn.o_proj.weight"))
        csa = self.ext.get("csa")
        for h, p in zip(h_rows, positions):
            st["k"][l][p] = (wk @ h).reshape(nkv, d)
            st["v"][l][p] = (wv @ h).reshape(nkv, d)
            if csa is not None:
                g = self.w(self.lname(l, "mlp.hca_gate_proj.weight")) @ h
                st["imp"][l][p] = g.mean()
        if csa is not None:
            self.m.note("importance", [st["imp"][l][p] for p in st["live"]])
        shift = self.shift(l)
        rope = st["rope"]
        out = []
        for h, i in zip(h_rows, positions):
            q = (wq @ h).reshape(nh, d)
            keys = [j for j in st["live"] if j <= i]
            o = np.zeros((nh, d))
            if csa is not None:
                wl, ws, wg = csa.get("branch_weights", [0.4, 0.4, 0.2])
                lw, sw = csa.get("local_window", 512), csa.get("segment_window", 4096)
                K = min(csa.get("global_topk", 1024), len(keys))
                by_imp = sorted(keys, key=lambda j: (-st["imp"][l][j], j))
                glob = set(by_imp[:K])
                branches = [(wl, [j for j in keys if j > i - lw]),
                            (ws, [j for j in keys if j > i - sw]),
                            (wg, [j for j in keys if j in glob])]
            else:
                branches = [(1.0, keys)]
            prose = csa is not None and csa.get("fusion_mode", "weighted") == "residual_layernorm"
            if prose:  # S-021: the branches enter the sum with weight 1
                branches = [(1.0, sel) for _, sel in branches]
            for hh in range(nh):
                g = hh // (nh // nkv)
                srow = shift[hh] if shift is not None else None
                qr = rotate(q[hh], self.angles(rope, i, srow))
                sc = {}
                for j in keys:
                    kr = rotate(st["k"][l][j][g], self.angles(rope, j, srow))
                    sc[j] = qr @ kr / math.sqrt(d)
                for wb, sel in branches:
                    if not sel:
                        continue
                    p = softmax([sc[j] for j in sel])
                    o[hh] += wb * sum(pj * st["v"][l][j][g] for pj, j in zip(p, sel))
            o = o.reshape(-1)
            if prose:  # S-021: out = LayerNorm(x + CSA_512(x) + CSA_4096(x) + CSA_global(x))
                z = h + o
                o = (z - z.mean()) / np.sqrt(z.var() + self.eps)
            out.append(wo @ o)
        return np.array(out)

    def swiglu(self, gate_w, up_w, down_w, f, adapter=None, alpha=0.0):
        g = gate_w @ f
        if adapter is not None:
            g = g + alpha * adapter
        return down_w @ (silu(g) * (up_w @ f))

    def ced_mlp(self, l, f):
        W = self.w(self.lname(l, "mlp.ced_weight"))  # logical [I, H]
        I = W.shape[0]
        fused = W @ f
        if self.has(self.lname(l, "mlp.ced_bias")):
            fused = fused + self.w(self.lname(l, "mlp.ced_bias"))
        gate, up = fused[: I // 2], fused[I // 2:]
        prod = np.repeat(silu(gate), 2) * np.repeat(up, 2)  # repeat_interleave x2
        return self.w(self.lname(l, "mlp.down_proj.weight")) @ prod

    def route(self, logits_rows, total_ctx):
        moe = self.ext["moe"]
        E = moe.get("num_experts", 16)
        if moe.get("routing", "topk") == "group_limited":
            k = moe.get("topk_group", 2) * moe.get("per_group_k", 2)
        else:
            k = moe.get("num_experts_per_tok", 2)
            if moe.get("dynamic_k", False):
                k = max(2, math.floor(0.015 * total_ctx))
        k = max(1, min(k, E))
        chosen = []
        for lg in logits_rows:
            self.m.note("router", lg)
            if moe.get("routing", "topk") == "group_limited":
                G = moe.get("n_group", 4)
                per = E // G
                gs = []
                for g in range(G):
                    v = sorted(lg[g * per:(g + 1) * per], reverse=True)
                    gs.append(v[0] + (v[1] if len(v) > 1 else 0.0))
                self.m.note("group", gs)
                groups = ranked(gs)[: moe.get("topk_group", 2)]
                sel = []
                for g in groups:
                    inside = ranked(lg[g * per:(g + 1) * per])
                    sel += [g * per + j for j in inside[: moe.get("per_group_k", 2)]]
                sel = sorted(sel, key=lambda e: (-lg[e], e))[:k]
            else:
                sel = ranked(lg)[:k]
            chosen.append(sel)
        cf = moe.get("capacity_factor")
        if cf is None:
            cf = 1.0 if self.c.get("seed_profile", "P-V4") == "P-V4" else 0.0
        N = len(logits_rows)
        cap = math.ceil(cf * N * k / E) if cf > 0 else 0
        counts = [0] * E
        result = []
        for lg, sel in zip(logits_rows, chosen):
            if cap == 0:
                used = list(sel)
            elif moe.get("assign", "topk_capped") == "seed_greedy":
                used = []
                for e in sel:
                    if counts[e] < cap:
                        used = [e]
                        break
                w0 = softmax([lg[e] for e in sel])
                wmap = {e: w0[i] for i, e in enumerate(sel)}
                for e in used:
                    counts[e] += 1
                result.append([(e, wmap[e]) for e in used])
                continue
            else:
                used = []
                for e in sel:
                    if counts[e] < cap:
                        used.append(e)
                        counts[e] += 1
                        continue
                    for alt in ranked(lg):
                        if alt in sel or alt in used:
                            continue
                        if counts[alt] < cap:
                            used.append(alt)
                            counts[alt] += 1
                            break
                result.append(list(zip(used, softmax([lg[e] for e in used])) if used else []))
                continue
            for e in used:
                counts[e] += 1
            result.append(list(zip(used, softmax([lg[e] for e in used]))))
        return result

    def moe_ffn(self, l, st, f_rows, x_rows):
        moe = self.ext["moe"]
        E = moe.get("num_experts", 16)
        router_w = self.w(self.lname(l, "mlp.gate.weight"))
        src = moe.get("router_input") or {"P-V4": "hca", "P-V4-7B": "hidden_plus_attn"}.get(
            self.c.get("seed_profile", "P-V4"), "hidden")
        rin = f_rows
        if "hca" in self.ext and self.ext["hca"].get("enabled", True):
            hp = self.w(self.lname(l, "mlp.hca_gate_proj.weight"))
            g = np.array([hp @ f for f in f_rows])
            before = len(st["g_hist"][l])
            st["g_hist"][l] += list(g)
            allg = np.array(st["g_hist"][l])
            hca_eps = self.ext["hca"].get("eps", 1e-6)
            stats = self.ext["hca"].get("stats", "causal")
            if stats not in ("causal", "whole_call"):
                raise NotImplementedError(f"hca.stats {stats!r}")
            fc1 = self.w(self.lname(l, "mlp.hca_controller.fc1.weight"))
            b1 = self.w(self.lname(l, "mlp.hca_controller.fc1.bias"))
            fc2 = self.w(self.lname(l, "mlp.hca_controller.fc2.weight"))
            b2 = self.w(self.lname(l, "mlp.hca_controller.fc2.bias"))
            g_hca = []
            for i, gi in enumerate(g):
                # causal: the sequence's tokens up to and including this one;
                # whole_call: every token so far, this call's later ones included.
                rows = allg[: before + i + 1] if stats == "causal" else allg
                mu = rows.mean(axis=0)
                sigma = np.sqrt(rows.var(axis=0) + hca_eps)
                wgt = sigmoid(fc2 @ gelu(fc1 @ np.concatenate([gi, mu, sigma]) + b1) + b2)
                g_hca.append(gi * wgt)
            if src == "hca":
                rin = np.array(g_hca)
        if src == "hidden_plus_attn":
            rin = x_rows
        logits = [router_w @ r for r in rin]
        routes = self.route(logits, st["length"] + len(f_rows))
        F = self.w(self.lname(l, "mlp.experts.0.w1.weight")).shape[0]
        alpha, adapter = self.adapter_for(l, st)
        out = []
        for f, rt in zip(f_rows, routes):
            y = np.zeros(self.H)
            for e, wt in rt:
                pe = self.lname(l, f"mlp.experts.{e}.")
                w1, w3, w2 = self.w(pe + "w1.weight"), self.w(pe + "w3.weight"), self.w(pe + "w2.weight")
                gate_w, up_w = (w3, w1) if moe.get("expert_naming", "deepseek") == "seed" else (w1, w3)
                y += wt * self.swiglu(gate_w, up_w, w2, f, adapter, alpha)
            out.append(y)
        assert F > 0
        return np.array(out), routes

    def adapter_for(self, l, st):
        if "task_adapter" not in self.ext or st["adapter"] is None:
            return 0.0, None
        n = self.lname(l, "mlp.task_gate_weight")
        alpha = float(self.w(n)[0]) if self.has(n) else 0.0
        return alpha, st["adapter"][l]

    def make_adapter(self, st, emb_rows):
        ta = self.ext["task_adapter"]
        t = emb_rows[0] if ta.get("task_source", "first_token") == "first_token" else emb_rows.mean(axis=0)
        P = "model.task_adapter."
        task = self.w(P + "task_embedding.weight") @ t + self.w(P + "task_embedding.bias")
        outs = []
        for l in range(self.L):
            cat = np.concatenate([self.w(P + "layer_embedding.weight")[l], task])
            hid = gelu(self.w(P + "adapter_mlp.0.weight") @ cat + self.w(P + "adapter_mlp.0.bias"))
            outs.append(self.w(P + "adapter_mlp.2.weight") @ hid + self.w(P + "adapter_mlp.2.bias"))
        st["adapter"] = outs

    # ---------------------------------------------------------------- one call
    def forward(self, st, ids):
        T = len(ids)
        pos = list(range(st["length"], st["length"] + T))
        emb = self.w("model.embed_tokens.weight")
        x = np.array([emb[i] for i in ids], dtype=np.float64)
        if "task_adapter" in self.ext and st["adapter"] is None:
            self.make_adapter(st, x)
        st["live"] += pos
        routes_all = []
        for l in range(self.L):
            ced = self.is_ced_block(l)
            if ced:
                h = x.copy()
            else:
                h = np.array([rmsnorm(r, self.w(self.lname(l, "input_layernorm.weight")), self.eps) for r in x])
            a = self.attention(l, st, h, pos)
            scale = float(self.w(self.lname(l, "ced_scale_factor"))[0]) if ced else 1.0
            x = x + scale * a
            norm_name = self.lname(l, "post_attention_layernorm.weight")
            if not ced or self.has(norm_name):
                f = np.array([rmsnorm(r, self.w(norm_name), self.eps) for r in x])
            else:
                f = x.copy()
            if "ced" in self.ext and self.has(self.lname(l, "mlp.ced_weight")):
                y = np.array([self.ced_mlp(l, r) for r in f])
            elif "moe" in self.ext:
                y, routes = self.moe_ffn(l, st, f, x)
                routes_all.append(routes)
            else:
                alpha, adapter = self.adapter_for(l, st)
                y = np.array([self.swiglu(self.w(self.lname(l, "mlp.gate_proj.weight")),
                                          self.w(self.lname(l, "mlp.up_proj.weight")),
                                          self.w(self.lname(l, "mlp.down_proj.weight")), r, adapter, alpha)
                              for r in f])
            x = x + y
        st["length"] += T
        head = self.w("lm_head.weight") if self.has("lm_head.weight") else emb
        logits = np.array([head @ rmsnorm(r, self.w("model.norm.weight"), self.eps) for r in x])
        evicted = []
        if "kv_pruner" in self.ext:
            evicted = self.prune(st, x, pos)
        return logits, {"routes": routes_all, "evicted": evicted}

    def prune(self, st, x, pos):
        kp = self.ext["kv_pruner"]
        P = "model.kv_pruner.score_net."
        for r, p in zip(x, pos):
            z = self.w(P + "2.weight") @ gelu(self.w(P + "0.weight") @ r + self.w(P + "0.bias")) + self.w(P + "2.bias")
            st["score"][p] = float(min(1.0, max(0.0, z[0])))
        live = st["live"]
        nxt = st["length"]
        sink, recent = kp.get("protect_sink", 4), kp.get("protect_recent", 128)
        prot = lambda p: p < sink or p >= nxt - recent
        r = len(live) / (st["budget"] * st["eff"])
        tau = min(kp.get("base_threshold", 0.35) * (1 + 0.5 * r), kp.get("tau_max", 0.6))
        gone = [p for p in live if not prot(p) and st["score"][p] < tau]
        for p in live:
            if not prot(p) and 0.0 < st["score"][p] < 1.0:
                self.m.note_gap("tau", st["score"][p] - tau)
        if gone:
            st["eff"] = min(0.95, st["eff"] * 1.02)
        elif r >= kp.get("prune_pressure", 0.9):
            st["eff"] = max(0.75, st["eff"] * 0.98)
        rest = [p for p in live if p not in gone]
        if len(rest) > st["budget"]:
            cand = sorted([p for p in rest if not prot(p)], key=lambda p: (st["score"][p], p))
            self.m.note("evict", [st["score"][p] for p in cand if 0.0 < st["score"][p] < 1.0])
            while len(rest) > st["budget"] and cand:
                p = cand.pop(0)
                rest.remove(p)
                gone.append(p)
        st["live"] = [p for p in live if p not in gone]
        for p in gone:
            for l in range(self.L):
                st["k"][l].pop(p, None)
                st["v"][l].pop(p, None)
        return sorted(gone)
