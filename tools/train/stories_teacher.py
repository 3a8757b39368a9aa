"""stories260K (Karpathy's llama2.c format) in torch: the distillation teacher.

The .bin layout (docs/formats.md, src/io/llama2c.h): a header of 7 int32
(dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a negative
vocab_size means an unshared classifier), then fp32 arrays: token embedding [V, D],
rms_att [L, D], wq [L, D, D], wk [L, KV, D], wv [L, KV, D], wo [L, D, D], rms_ffn [L, D],
w1 [L, H, D], w2 [L, D, H], w3 [L, H, D], rms_final [D], the unused freq_cis_real/imag
[S, hd/2] each, and the classifier [V, D] when unshared.

The forward is run.c's: RMSNorm (eps 1e-5), interleaved-pair RoPE with theta 10000,
grouped-query attention, SwiGLU FFN. `forward` scores whole sequences (teacher logits for
the distillation loss); `sample` generates a batch of sequences with a KV cache.
"""
import struct

import numpy as np
import torch
import torch.nn.functional as F


class Llama2c:
    def __init__(self, path):
        raw = open(path, "rb").read()
        d, h, nl, nh, nkv, v, s = struct.unpack("<7i", raw[:28])
        self.shared = v > 0
        v = abs(v)
        self.dim, self.hidden, self.n_layers, self.n_heads, self.n_kv = d, h, nl, nh, nkv
        self.vocab, self.seq_len = v, s
        self.hd = d // nh
        kv = nkv * self.hd
        a = np.frombuffer(raw, dtype="<f4", offset=28)
        off = 0

        def take(*shape):
            nonlocal off
            n = int(np.prod(shape))
            t = torch.from_numpy(a[off:off + n].copy()).view(*shape)
            off += n
            return t

        self.embed = take(v, d)
        self.rms_att = take(nl, d)
        self.wq, self.wk, self.wv = take(nl, d, d), take(nl, kv, d), take(nl, kv, d)
        self.wo = take(nl, d, d)
        self.rms_ffn = take(nl, d)
        self.w1, self.w2, self.w3 = take(nl, h, d), take(nl, d, h), take(nl, h, d)
        self.rms_final = take(d)
        off += s * self.hd  # freq_cis_real, freq_cis_imag (recomputed below)
        self.cls = self.embed if self.shared else take(v, d)
        assert off == a.size, (off, a.size)
        i = torch.arange(0, self.hd, 2, dtype=torch.float32)
        freq = 1.0 / torch.pow(10000.0, i / self.hd)
        ang = torch.arange(s, dtype=torch.float32)[:, None] * freq[None, :]
        self.cos, self.sin = torch.cos(ang), torch.sin(ang)  # [S, hd/2]

    @staticmethod
    def _rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    def _rope(self, x, pos):
        # x [B, T, H, hd]; rotates the pairs (2i, 2i+1)
        c, s = self.cos[pos][None, :, None, :], self.sin[pos][None, :, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)

    def _layer(self, l, x, pos, cache=None):
        B, T, _ = x.shape
        hn = self._rms(x, self.rms_att[l])
        q = (hn @ self.wq[l].T).view(B, T, self.n_heads, self.hd)
        k = (hn @ self.wk[l].T).view(B, T, self.n_kv, self.hd)
        v = (hn @ self.wv[l].T).view(B, T, self.n_kv, self.hd)
        q, k = self._rope(q, pos), self._rope(k, pos)
        if cache is not None:
            if cache[l] is not None:
                k = torch.cat([cache[l][0], k], 1)
                v = torch.cat([cache[l][1], v], 1)
            cache[l] = (k, v)
        rep = self.n_heads // self.n_kv
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        att = torch.einsum("bthd,bshd->bhts", q, k) / (self.hd ** 0.5)
        S = k.shape[1]
        mask = torch.arange(S)[None, :] > (S - T + torch.arange(T))[:, None]
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        o = torch.einsum("bhts,bshd->bthd", att, v).reshape(B, T, -1)
        x = x + o @ self.wo[l].T
        hn = self._rms(x, self.rms_ffn[l])
        return x + (F.silu(hn @ self.w1[l].T) * (hn @ self.w3[l].T)) @ self.w2[l].T

    @torch.no_grad()
    def forward(self, ids, start=0, cache=None):
        """Logits [B, T, V] (fp32) for ids [B, T] at positions start..start+T-1."""
        pos = torch.arange(start, start + ids.shape[1])
        x = self.embed[ids]
        for l in range(self.n_layers):
            x = self._layer(l, x, pos, cache)
        return self._rms(x, self.rms_final) @ self.cls.T

    @torch.no_grad()
    def sample(self, batch, n, generator, temperature=1.0, bos=1):
        """[batch, n+1] ids: BOS then n tokens sampled at `temperature` (multinomial)."""
        ids = torch.full((batch, 1), bos, dtype=torch.long)
        cache = [None] * self.n_layers
        out = [ids]
        for t in range(n):
            logits = self.forward(out[-1], start=t, cache=cache)[:, -1]
            p = torch.softmax(logits / temperature, dim=-1)
            out.append(torch.multinomial(p, 1, generator=generator))
        return torch.cat(out, 1)
