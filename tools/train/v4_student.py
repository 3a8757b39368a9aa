"""The DeepSeek-V4 student: its config, transformers' DeepseekV4ForCausalLM plus a NextN
MTP block, and conversion to and from the official checkpoint layout that dsv4 loads
(tests/data/deepseek_v4/README.md "Storage format", spec §6.3 and §7).

transformers' port drops `mtp.*`, so the MTP block (`MTP` below) is built here from the
port's own modules: enorm / hnorm / e_proj / h_proj, one sliding-window decoder layer with
scored (non-hash) MoE, its own HC head and final norm; embedding and LM head are the main
model's.
"""
import copy
import json
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

from transformers.models.deepseek_v4 import configuration_deepseek_v4 as hc_mod
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as hm

# The student. compress_ratios has one entry per layer plus one for the MTP layer (0).
STUDENT = dict(
    vocab_size=512, hidden_size=128, num_hidden_layers=4, num_hash_layers=1,
    compress_ratios=[0, 4, 16, 4, 0],
    num_attention_heads=4, head_dim=64, qk_rope_head_dim=32, q_lora_rank=64,
    o_groups=2, o_lora_rank=64, sliding_window=32,
    n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=128, n_shared_experts=1,
    routed_scaling_factor=1.5, swiglu_limit=10.0,
    index_n_heads=4, index_head_dim=64, index_topk=8,
    num_nextn_predict_layers=1, bos_token_id=1, eos_token_id=2,
)


def official_config(s=STUDENT):
    """config.json with the keys of the released DeepSeek-V4 config.json."""
    cfg = {
        "architectures": ["DeepseekV4ForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "hc_eps": 1e-6, "hc_mult": 4, "hc_sinkhorn_iters": 20,
        "hidden_act": "silu", "initializer_range": 0.02, "max_position_embeddings": 1048576,
        "model_type": "deepseek_v4", "norm_topk_prob": True, "num_key_value_heads": 1,
        "rms_norm_eps": 1e-6,
        "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 16.0,
                         "original_max_position_embeddings": 65536, "type": "yarn"},
        "rope_theta": 10000.0, "compress_rope_theta": 160000.0, "scoring_func": "sqrtsoftplus",
        "tie_word_embeddings": False, "topk_method": "noaux_tc", "torch_dtype": "bfloat16",
        "use_cache": True,
    }
    cfg.update(copy.deepcopy(s))
    return dict(sorted(cfg.items()))


def hf_config(cfg):
    """transformers' DeepseekV4Config for an official config.json dict (as
    tools/reference/make_tiny_v4.py maps it: explicit layer types, one HCA rate)."""
    cfg = dict(copy.deepcopy(cfg))
    n = cfg["num_hidden_layers"]
    ratios = cfg.pop("compress_ratios")[:n]
    kind = {0: "sliding_attention", 4: "compressed_sparse_attention"}
    cfg["layer_types"] = [kind.get(r, "heavily_compressed_attention") for r in ratios]
    hca = sorted({r for r in ratios if r not in (0, 4)})
    assert len(hca) <= 1, "transformers has one HCA rate per model"
    cfg["compress_rates"] = {"compressed_sparse_attention": 4,
                             "heavily_compressed_attention": hca[0] if hca else 128}
    rs = cfg.pop("rope_scaling")
    cfg["rope_parameters"] = {"rope_type": "yarn", "factor": rs["factor"],
                              "original_max_position_embeddings": rs["original_max_position_embeddings"],
                              "beta_fast": rs["beta_fast"], "beta_slow": rs["beta_slow"]}
    for k in ("architectures", "torch_dtype", "topk_method", "expert_dtype", "quantization_config"):
        cfg.pop(k, None)
    c = hc_mod.DeepseekV4Config(**cfg)
    c._attn_implementation = "eager"
    c._experts_implementation = "eager"
    return c


def mtp_config(config):
    c = copy.deepcopy(config)
    c.num_hidden_layers = 1
    c.layer_types = ["sliding_attention"]
    c.mlp_layer_types = ["moe"]
    return c


class MTP(nn.Module):
    """NextN MTP block (spec §6.3). Input: the main model's final residual X [B, S, 4, D]
    (before its HC head) and the embeddings of the next tokens [B, S, D]."""

    def __init__(self, config):
        super().__init__()
        mc = mtp_config(config)
        D = config.hidden_size
        self.enorm = hm.DeepseekV4RMSNorm(D, eps=config.rms_norm_eps)
        self.hnorm = hm.DeepseekV4RMSNorm(D, eps=config.rms_norm_eps)
        self.e_proj = nn.Linear(D, D, bias=False)
        self.h_proj = nn.Linear(D, D, bias=False)
        self.block = hm.DeepseekV4DecoderLayer(mc, 0)
        self.hc_head = hm.DeepseekV4HyperHead(mc)
        self.norm = hm.DeepseekV4RMSNorm(D, eps=config.rms_norm_eps)

    def forward(self, x_main, next_embeds, position_embeddings, position_ids, attention_mask):
        x = self.h_proj(self.hnorm(x_main)) + self.e_proj(self.enorm(next_embeds)).unsqueeze(2)
        x = self.block(x, position_embeddings=position_embeddings, position_ids=position_ids,
                       attention_mask=attention_mask, input_ids=None)
        return self.norm(self.hc_head(x))


class Student(nn.Module):
    """DeepseekV4ForCausalLM + MTP. forward returns (main logits, MTP logits) where MTP row
    t is the draft for token t+2 from the main residual at t and the embedding of ids[t+1]."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.lm = hm.DeepseekV4ForCausalLM(config)
        self.mtp = MTP(config)
        self._residual = None
        self.lm.model.hc_head.register_forward_hook(self._grab)

    def _grab(self, module, args, out):
        self._residual = args[0]

    def forward(self, ids, mtp=True, mtp_detach=True):
        out = self.lm(input_ids=ids, use_cache=False)
        if not mtp:
            return out.logits, None
        m = self.lm.model
        x = self._residual[:, :-1]
        emb_w, head_w = m.embed_tokens.weight, self.lm.lm_head.weight
        if mtp_detach:
            x, emb_w, head_w = x.detach(), emb_w.detach(), head_w.detach()
        e = F.embedding(ids[:, 1:], emb_w)
        S = x.shape[1]
        pos = torch.arange(S).unsqueeze(0)
        pe = {"main": m.rotary_emb(e, position_ids=pos, layer_type="main"),
              "compress": m.rotary_emb(e, position_ids=pos, layer_type="compress")}
        mask = hm.create_sliding_window_causal_mask(config=self.config, inputs_embeds=e,
                                                    attention_mask=None, past_key_values=None,
                                                    position_ids=pos)
        h = self.mtp(x, e, pe, pos, mask)
        return out.logits, F.linear(h, head_w)


def init_student(config, seed):
    """Seeded init: HF's _init_weights, plus distinct random tid2eid rows."""
    torch.manual_seed(seed)
    model = Student(config)
    model.lm.apply(model.lm._init_weights)  # already done by post_init; the MTP next
    model.mtp.apply(model.lm._init_weights)
    g = torch.Generator().manual_seed(seed + 1)
    for layer in model.lm.model.layers:
        gate = layer.mlp.gate
        if isinstance(gate, hm.DeepseekV4HashRouter):
            rows = [torch.randperm(config.n_routed_experts, generator=g)[:gate.top_k]
                    for _ in range(config.vocab_size)]
            gate.tid2eid.copy_(torch.stack(rows))
    return model


# ------------------------------------------------------------------------------------
# Official names (spec §7.2) <-> this module's names
# ------------------------------------------------------------------------------------
_RULES = [(".attn_norm.", ".input_layernorm."), (".ffn_norm.", ".post_attention_layernorm."),
          (".hc_attn_fn", ".attn_hc.fn"), (".hc_attn_base", ".attn_hc.base"),
          (".hc_attn_scale", ".attn_hc.scale"), (".hc_ffn_fn", ".ffn_hc.fn"),
          (".hc_ffn_base", ".ffn_hc.base"), (".hc_ffn_scale", ".ffn_hc.scale"),
          (".attn.attn_sink", ".self_attn.sinks"),
          (".attn.indexer.compressor.", ".self_attn.compressor.indexer."),
          (".attn.indexer.weights_proj.", ".self_attn.compressor.indexer.scorer.weights_proj."),
          (".attn.indexer.wq_b.", ".self_attn.compressor.indexer.q_b_proj."),
          (".attn.", ".self_attn."), (".ffn.", ".mlp."),
          (".wq_a.", ".q_a_proj."), (".q_norm.", ".q_a_norm."), (".wq_b.", ".q_b_proj."),
          (".wkv.", ".kv_proj."), (".wgate.", ".gate_proj."), (".wo_a.", ".o_a_proj."),
          (".wo_b.", ".o_b_proj."), (".ape", ".position_bias"),
          (".gate.bias", ".gate.e_score_correction_bias"),
          (".shared_experts.w1.", ".shared_experts.gate_proj."),
          (".shared_experts.w2.", ".shared_experts.down_proj."),
          (".shared_experts.w3.", ".shared_experts.up_proj.")]
_TOP = {"embed.weight": "lm.model.embed_tokens.weight", "head.weight": "lm.lm_head.weight",
        "norm.weight": "lm.model.norm.weight", "hc_head_fn": "lm.model.hc_head.hc_fn",
        "hc_head_base": "lm.model.hc_head.hc_base", "hc_head_scale": "lm.model.hc_head.hc_scale"}
_MTP_TOP = {"enorm.weight": "enorm.weight", "hnorm.weight": "hnorm.weight",
            "e_proj.weight": "e_proj.weight", "h_proj.weight": "h_proj.weight",
            "norm.weight": "norm.weight", "hc_head_fn": "hc_head.hc_fn",
            "hc_head_base": "hc_head.hc_base", "hc_head_scale": "hc_head.hc_scale"}


def _layer_name(rest, prefix):
    n = "." + rest
    for a, b in _RULES:
        n = n.replace(a, b)
    n = re.sub(r"(compressor(\.indexer)?)\.norm\.", r"\1.kv_norm.", n)
    return prefix + n[1:]


def official_to_module_name(name):
    """Official tensor name -> Student state_dict name (experts excluded: stacked)."""
    if name in _TOP:
        return _TOP[name]
    m = re.match(r"^layers\.(\d+)\.(.*)$", name)
    if m:
        return _layer_name(m.group(2), f"lm.model.layers.{m.group(1)}.")
    m = re.match(r"^mtp\.0\.(.*)$", name)
    assert m, name
    if m.group(1) in _MTP_TOP:
        return "mtp." + _MTP_TOP[m.group(1)]
    return _layer_name(m.group(1), "mtp.block.")


# Storage dtypes of the BF16 release layout (tests/data/deepseek_v4/README.md).
_F32 = re.compile(r"(hc_(attn|ffn|head)_(fn|base|scale)|attn_sink|\.ape|gate\.bias)$")


def official_names(config):
    """Every official tensor name of the student, experts included."""
    names = list(_TOP)
    E = config.n_routed_experts

    def block(p, ratio, hash_layer):
        out = [p + s for s in ("attn_norm.weight", "ffn_norm.weight")]
        out += [f"{p}hc_{a}_{b}" for a in ("attn", "ffn") for b in ("fn", "base", "scale")]
        out += [p + "attn." + s for s in ("attn_sink", "wq_a.weight", "q_norm.weight", "wq_b.weight",
                                         "wkv.weight", "kv_norm.weight", "wo_a.weight", "wo_b.weight")]
        if ratio:
            out += [p + "attn.compressor." + s for s in ("wkv.weight", "wgate.weight", "ape", "norm.weight")]
        if ratio == 4:
            out += [p + "attn.indexer." + s for s in (
                "wq_b.weight", "weights_proj.weight", "compressor.wkv.weight",
                "compressor.wgate.weight", "compressor.ape", "compressor.norm.weight")]
        out += [p + "ffn.gate.weight", p + ("ffn.gate.tid2eid" if hash_layer else "ffn.gate.bias")]
        out += [f"{p}ffn.experts.{e}.w{k}.weight" for e in range(E) for k in (1, 2, 3)]
        out += [f"{p}ffn.shared_experts.w{k}.weight" for k in (1, 2, 3)]
        return out

    ratios = {"sliding_attention": 0, "compressed_sparse_attention": 4,
              "heavily_compressed_attention": config.compress_rates["heavily_compressed_attention"]}
    for i, t in enumerate(config.layer_types):
        names += block(f"layers.{i}.", ratios[t], config.mlp_layer_types[i] == "hash_moe")
    names += [f"mtp.0.{s}" for s in _MTP_TOP]
    names += block("mtp.0.", 0, False)
    return names


def _expert(name):
    m = re.match(r"^(layers\.\d+|mtp\.0)\.ffn\.experts\.(\d+)\.w([123])\.weight$", name)
    return (m.group(1), int(m.group(2)), int(m.group(3))) if m else None


def _experts_prefix(block):
    return ("mtp.block." if block == "mtp.0" else f"lm.model.{block}.") + "mlp.experts."


def to_official(model, config):
    """Student -> {official name: tensor} in the BF16 release storage dtypes."""
    sd = model.state_dict()
    I = config.moe_intermediate_size
    out, used = {}, set()
    for name in official_names(config):
        ex = _expert(name)
        if ex:
            blk, e, k = ex
            p = _experts_prefix(blk)
            gu, dn = sd[p + "gate_up_proj"][e], sd[p + "down_proj"][e]
            t = {1: gu[:I], 3: gu[I:], 2: dn}[k]
            used.update({p + "gate_up_proj", p + "down_proj"})
        else:
            mn = official_to_module_name(name)
            t = sd[mn]
            used.add(mn)
        if name.endswith("tid2eid"):
            out[name] = t.to(torch.int64).contiguous()
        elif _F32.search(name):
            out[name] = t.float().contiguous()
        else:
            out[name] = t.to(torch.bfloat16).contiguous()
    rope = {k for k in sd if "inv_freq" in k}
    left = set(sd) - used - rope
    assert not left, sorted(left)
    return out


def from_official(model, config, tensors):
    """Loads official-name tensors into the Student (fp32)."""
    sd = model.state_dict()
    new = {}
    stacks = {}
    for name, t in tensors.items():
        ex = _expert(name)
        if ex:
            stacks.setdefault(ex[0], {})[(ex[1], ex[2])] = t.float()
            continue
        mn = official_to_module_name(name)
        new[mn] = t.long() if name.endswith("tid2eid") else t.float()
    for blk, d in stacks.items():
        p = _experts_prefix(blk)
        E = config.n_routed_experts
        new[p + "gate_up_proj"] = torch.stack([torch.cat([d[(e, 1)], d[(e, 3)]], 0) for e in range(E)])
        new[p + "down_proj"] = torch.stack([d[(e, 2)] for e in range(E)])
    missing = sorted(k for k in set(sd) - set(new) if "inv_freq" not in k)
    unexpected = sorted(set(new) - set(sd))
    assert not missing and not unexpected, (missing, unexpected)
    model.load_state_dict(new, strict=False)


def load_official_dir(path):
    from safetensors.torch import load_file
    cfg = json.load(open(f"{path}/config.json"))
    config = hf_config(cfg)
    torch.manual_seed(0)
    model = Student(config).float().eval()
    from_official(model, config, load_file(f"{path}/model.safetensors"))
    return model, config, cfg
