#!/usr/bin/env python3
"""Distils stories260K (llama2.c) into a small DeepSeek-V4 student with the same tokenizer.

Steps (all seeded, fp32 on CPU, torch with 2 threads):
  gen    sample stories from the teacher with dsv4 (`dsv4 run` on stories260K.bin, one
         seed per story, temperature 1, no top-p/top-k, stopping where run.c stops);
         BOS + the ids, written to <out>/data.npz
  train  the student (v4_student.STUDENT) on those sequences. Loss per position:
           KL(teacher || student) on the main logits (teacher logits recomputed per batch)
         + mtp_weight · KL(teacher || MTP) for the draft of token t+2 (the MTP block reads the
           student's own final residual, detached; embedding and head detached)
         + index_weight · KL(main attention over the CSA entries || indexer scores) per CSA
           layer: the indexer's top-k is not differentiable, so the indexer learns to
           predict where the main attention looks (DSA-style; indexer inputs detached,
           target detached)
         Scored MoE layers balance their experts with the aux-loss-free bias update
         (e_score_correction_bias += rate · sign(mean load − load)).
         Logs to <out>/train.log; evaluates NLL on a held-out text file (tok512 encode of
         each document, as `dsv4 perplexity` does) every --eval-every steps.
  export write <out>/model/{config.json, model.safetensors} in the official V4 layout

Usage (venv as in tools/reference/README.md; nice it on a shared machine):
  <tools-venv>/bin/python tools/train/train_v4_student.py --out OUT gen
  <tools-venv>/bin/python tools/train/train_v4_student.py --out OUT train --steps 3000
  <tools-venv>/bin/python tools/train/train_v4_student.py --out OUT export
"""
import argparse
import json
import math
import os
import shutil
import struct
import sys
import time

# OpenMP threads that spin at barriers lose most of their time to a busy shared machine
# (steps 5-10x slower next to compiler jobs); passive waiting costs little when alone.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from stories_teacher import Llama2c  # noqa: E402
import v4_student as vs  # noqa: E402
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as hm  # noqa: E402

TEACHER = os.path.join(ROOT, "models/stories260K/stories260K.bin")
TOKENIZER = os.path.join(ROOT, "models/stories260K/tok512.bin")
EVAL_TEXT = os.path.join(ROOT, "tests/data/text/tinystories_sample.txt")


# ------------------------------------------------------------------------------------
# llama2.c tokenizer (run.c's encode), for the held-out NLL
# ------------------------------------------------------------------------------------
class Tok512:
    def __init__(self, path, vocab=512):
        raw = open(path, "rb").read()
        off = 4
        self.pieces, self.scores = [], []
        for _ in range(vocab):
            s, n = struct.unpack_from("<fi", raw, off)
            off += 8
            self.pieces.append(raw[off:off + n])
            self.scores.append(s)
            off += n
        self.lookup = {p: i for i, p in enumerate(self.pieces)}

    def encode(self, text, bos=True):
        ids = [1] if bos else []
        if not text:
            return ids
        ids.append(self.lookup[b" "])
        for ch in text:
            b = ch.encode("utf-8", "surrogatepass")
            if b in self.lookup:
                ids.append(self.lookup[b])
            else:
                ids.extend(x + 3 for x in b)
        while True:
            best, at = -1e10, -1
            for i in range(len(ids) - 1):
                j = self.lookup.get(self.pieces[ids[i]] + self.pieces[ids[i + 1]])
                if j is not None and self.scores[j] > best:
                    best, at, bid = self.scores[j], i, j
            if at < 0:
                return ids
            ids[at:at + 2] = [bid]


def eval_docs():
    text = open(EVAL_TEXT, encoding="utf-8").read()
    tok = Tok512(TOKENIZER)
    return [tok.encode(d.strip(" \t\r\n")) for d in text.split("<|endoftext|>") if d.strip(" \t\r\n")]


@torch.no_grad()
def nll_docs(logits_fn, docs):
    tot, n = 0.0, 0
    for d in docs:
        ids = torch.tensor(d)[None]
        lp = torch.log_softmax(logits_fn(ids)[0, :-1].float(), -1)
        tot -= lp.gather(1, ids[0, 1:, None]).sum().item()
        n += len(d) - 1
    return tot / n


# ------------------------------------------------------------------------------------
def cmd_gen(a):
    """Stories from the teacher as dsv4 samples them (run.c's sampler, stopping at the end of
    a story): one `dsv4 run` per seed 0..n-1 at temperature 1, no top-p / top-k."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    def one(seed):
        out = subprocess.run([a.dsv4, "run", "-m", TEACHER, "-n", str(a.seq_len), "--seed", str(seed),
                              "--print-ids", "--temp", "1.0", "--top-p", "1.0", "--top-k", "0",
                              "-t", "1"], check=True, capture_output=True, text=True).stdout
        return [1] + [int(x) for x in out.split()]

    t0 = time.time()
    with ThreadPoolExecutor(a.threads) as ex:
        stories = list(ex.map(one, range(a.seed * 1000003, a.seed * 1000003 + a.n_seq)))
    lens = np.array([len(s) for s in stories], dtype=np.int64)
    os.makedirs(a.out, exist_ok=True)
    np.savez(os.path.join(a.out, "data.npz"), ids=np.concatenate(stories).astype(np.int16),
             offsets=np.concatenate([[0], np.cumsum(lens)]))
    print(f"gen {a.n_seq} stories, {lens.sum()} tokens (mean {lens.mean():.1f}, max {lens.max()}), "
          f"{time.time() - t0:.0f} s", flush=True)


def load_stories(out):
    d = np.load(os.path.join(out, "data.npz"))
    ids, off = d["ids"].astype(np.int64), d["offsets"]
    return [torch.from_numpy(ids[off[i]:off[i + 1]]) for i in range(len(off) - 1)]


def pad_batch(stories):
    """[B, T] ids padded with 0 and the [B, T] mask of real input positions that have a
    next token to predict (the last token of each story has none)."""
    T = max(len(s) for s in stories)
    ids = torch.zeros(len(stories), T, dtype=torch.long)
    mask = torch.zeros(len(stories), T, dtype=torch.bool)
    for i, s in enumerate(stories):
        ids[i, :len(s)] = s
        mask[i, :len(s) - 1] = True
    return ids, mask


def kd(student_logits, teacher_logits, mask):
    """Mean over the masked positions of KL(teacher || student)."""
    t = torch.log_softmax(teacher_logits.float(), -1)
    s = torch.log_softmax(student_logits.float(), -1)
    return (t.exp() * (t - s)).sum(-1)[mask].mean()


class IndexerTap:
    """Collects, per CSA layer, the indexer's scores (with grad, inputs detached) and the
    main attention's queries over the compressed entries, for the indexer loss."""

    def __init__(self, model):
        self.items = []
        self.active = False
        tap = self
        orig_idx_fwd = hm.DeepseekV4Indexer.forward
        orig_scorer_fwd = hm.DeepseekV4IndexerScorer.forward
        orig_attn = hm.eager_attention_forward

        def idx_fwd(self_, hidden_states, q_residual, position_ids, cache, layer_idx):
            if tap.active:
                hidden_states, q_residual = hidden_states.detach(), q_residual.detach()
            return orig_idx_fwd(self_, hidden_states, q_residual, position_ids, cache, layer_idx)

        def scorer_fwd(self_, q, compressed_kv, hidden_states):
            s = orig_scorer_fwd(self_, q, compressed_kv, hidden_states)
            if tap.active:
                tap.items.append({"scores": s})
            return s

        def attn(module, query, key, value, attention_mask, scaling, dropout=0.0, **kw):
            comp = getattr(module, "compressor", None)
            if tap.active and isinstance(comp, hm.DeepseekV4CSACompressor):
                S = query.shape[2]
                with torch.no_grad():
                    ck = key[:, 0, S:]  # [B, T, D] compressed entries
                    logits = torch.einsum("bhsd,btd->bhst", query, ck) * scaling
                    tap.items[-1]["attn_logits"] = logits
            return orig_attn(module, query, key, value, attention_mask, scaling, dropout, **kw)

        hm.DeepseekV4Indexer.forward = idx_fwd
        hm.DeepseekV4IndexerScorer.forward = scorer_fwd
        hm.eager_attention_forward = attn

    def loss(self, ratio):
        total, n = 0.0, len(self.items)
        for it in self.items:
            s, lg = it["scores"], it["attn_logits"]  # [B, S, T], [B, H, S, T]
            B, S, T = s.shape
            pos = torch.arange(S)
            causal = torch.arange(T)[None, :] < ((pos + 1) // ratio)[:, None]  # [S, T]
            rows = causal.any(-1)
            neg = torch.finfo(torch.float32).min
            p = torch.softmax(lg.masked_fill(~causal, neg), -1).sum(1)  # [B, S, T]
            p = (p / p.sum(-1, keepdim=True)).masked_fill(~causal, 0.0)
            ls = torch.log_softmax(s.masked_fill(~causal, neg), -1)
            kl = (p * (torch.log(p.clamp_min(1e-12)) - ls)).masked_fill(~causal, 0.0).sum(-1)
            total = total + kl[:, rows].mean()
        self.items = []
        return total / max(1, n)


class LoadTap:
    """Expert loads of the scored MoE layers, for the aux-loss-free bias update."""

    def __init__(self, model):
        self.counts = {}
        for layer in list(model.lm.model.layers) + [model.mtp.block]:
            gate = layer.mlp.gate
            if isinstance(gate, hm.DeepseekV4TopKRouter):
                gate.register_forward_hook(self._hook)

    def _hook(self, module, args, out):
        idx = out[2]
        c = torch.bincount(idx.reshape(-1), minlength=module.num_experts).float()
        self.counts[module] = self.counts.get(module, 0) + c

    @torch.no_grad()
    def update(self, rate):
        for gate, c in self.counts.items():
            gate.e_score_correction_bias += rate * torch.sign(c.mean() - c)
        self.counts = {}


def lr_at(step, a):
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    frac = (step - a.warmup) / max(1, a.steps - a.warmup)
    return a.lr * (a.min_lr_frac + (1 - a.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * frac)))


def save_official(model, config, path):
    from safetensors.torch import save_file
    os.makedirs(path, exist_ok=True)
    save_file(vs.to_official(model, config), os.path.join(path, "model.safetensors"),
              metadata={"format": "pt"})
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(vs.official_config(), f, indent=2)
        f.write("\n")
    # Its teacher's stories end where run.c stops: at EOS or at a new BOS.
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": [2, 1]}, f, indent=2)
        f.write("\n")
    shutil.copyfile(TOKENIZER, os.path.join(path, "tok512.bin"))  # dsv4 finds it beside config.json


def cmd_train(a):
    torch.set_num_threads(a.threads)
    stories = load_stories(a.out)
    val, train = stories[:a.n_val], stories[a.n_val:]
    teacher = Llama2c(TEACHER)
    config = vs.hf_config(vs.official_config())
    model = vs.init_student(config, a.seed)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    itap, ltap = IndexerTap(model), LoadTap(model)
    ratio = config.compress_rates["compressed_sparse_attention"]
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "hc" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "hc" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd},
                             {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    if a.compile_hc:
        # Sinkhorn's 20 iterations on [B, S, 4, 4] are many small ops: fused by inductor
        hm.DeepseekV4HyperConnection.forward = torch.compile(hm.DeepseekV4HyperConnection.forward,
                                                             dynamic=True)
    # batches of stories of similar length (less padding), in a seeded random order
    by_len = sorted(range(len(train)), key=lambda i: (len(train[i]), i))
    batches = [by_len[i:i + a.batch] for i in range(0, len(by_len) - a.batch + 1, a.batch)]
    docs = eval_docs()
    log = open(os.path.join(a.out, "train.log"), "a")

    def say(s):
        print(s, flush=True)
        log.write(s + "\n")
        log.flush()

    say(f"# params {n_params} ({n_params * 2 / 1e6:.2f} MB bf16); train seqs {len(train)}, "
        f"val {len(val)}, train tokens {sum(len(s) for s in train)}; teacher eval nll "
        f"{nll_docs(lambda x: teacher.forward(x), docs):.4f}")
    say("# step lr loss kd_main kd_mtp idx_kl wall_s cpu_s tokens | val_kd val_kd_mtp eval_nll")
    t_start = time.time()

    def epoch_order(e):
        return torch.randperm(len(batches), generator=torch.Generator().manual_seed(a.seed + 100 + e)).tolist()

    start = 0
    ckpt_path = os.path.join(a.out, "ckpt.pt")
    if a.resume and os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        start = ck["step"]
        say(f"# resumed at step {start}")
    cpu0 = time.process_time()
    for step in range(start, a.steps):
        e, k = divmod(step, len(batches))
        batch, mask = pad_batch([train[i] for i in batches[epoch_order(e)[k]]])
        for grp in opt.param_groups:
            grp["lr"] = lr_at(step, a)
        t0, c0 = time.time(), time.process_time()
        tl = teacher.forward(batch)
        itap.active = a.index_weight > 0
        logits, mtp = model(batch)
        itap.active = False
        l_main = kd(logits, tl, mask)
        l_mtp = kd(mtp, tl[:, 1:], mask[:, 1:])
        l_idx = itap.loss(ratio) if a.index_weight > 0 else torch.zeros(())
        loss = l_main + a.mtp_weight * l_mtp + a.index_weight * l_idx
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        ltap.update(a.bias_rate)
        dt, dc = time.time() - t0, time.process_time() - c0
        line = (f"{step + 1} {lr_at(step, a):.2e} {loss.item():.4f} {l_main.item():.4f} "
                f"{l_mtp.item():.4f} {l_idx.item():.4f} {dt:.2f} {dc:.2f} {batch.numel()}")
        if (step + 1) % a.eval_every == 0 or step + 1 == a.steps:
            model.eval()
            with torch.no_grad():
                vk, vm = [], []
                for i in range(0, len(val), a.batch):
                    vb, vmask = pad_batch(val[i:i + a.batch])
                    vt = teacher.forward(vb)
                    lg, mt = model(vb)
                    vk.append(kd(lg, vt, vmask).item())
                    vm.append(kd(mt, vt[:, 1:], vmask[:, 1:]).item())
                nll = nll_docs(lambda x: model(x, mtp=False)[0], docs)
            model.train()
            line += f" | {np.mean(vk):.4f} {np.mean(vm):.4f} {nll:.4f}"
            save_official(model, config, os.path.join(a.out, "model"))
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step + 1},
                       os.path.join(a.out, "ckpt.pt"))
        if (step + 1) % a.log_every == 0 or "|" in line:
            say(line + f"  [{time.time() - t_start:.0f} s wall, {time.process_time() - cpu0:.0f} s cpu]")
    say(f"# done: {a.steps} steps in {time.time() - t_start:.0f} s")


def cmd_export(a):
    config = vs.hf_config(vs.official_config())
    model = vs.Student(config)
    model.load_state_dict(torch.load(os.path.join(a.out, "ckpt.pt"))["model"])
    save_official(model, config, os.path.join(a.out, "model"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="work folder: data, log, checkpoints, model/")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen")
    g.add_argument("--n-seq", type=int, default=8192)
    g.add_argument("--seq-len", type=int, default=511, help="at most this many tokens after BOS")
    g.add_argument("--dsv4", default=os.path.join(ROOT, "build/release/dsv4"))
    t = sub.add_parser("train")
    t.add_argument("--steps", type=int, default=3000)
    t.add_argument("--batch", type=int, default=8)
    t.add_argument("--lr", type=float, default=3e-3)
    t.add_argument("--min-lr-frac", type=float, default=0.1)
    t.add_argument("--warmup", type=int, default=100)
    t.add_argument("--wd", type=float, default=0.01)
    t.add_argument("--clip", type=float, default=1.0)
    t.add_argument("--mtp-weight", type=float, default=0.5)
    t.add_argument("--index-weight", type=float, default=0.1)
    t.add_argument("--bias-rate", type=float, default=1e-3)
    t.add_argument("--n-val", type=int, default=64)
    t.add_argument("--eval-every", type=int, default=250)
    t.add_argument("--log-every", type=int, default=10)
    t.add_argument("--resume", type=int, default=1, help="continue from <out>/ckpt.pt if present")
    t.add_argument("--compile-hc", type=int, default=1, help="torch.compile the mHC module")
    sub.add_parser("export")
    a = ap.parse_args()
    {"gen": cmd_gen, "train": cmd_train, "export": cmd_export}[a.cmd](a)


if __name__ == "__main__":
    main()
