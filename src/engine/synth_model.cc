// WriteSyntheticDeepSeekV4: plan every tensor (name, stored dtype, shape, how
// to fill it), size the expert count to the target, then stream random bytes
// through io::SafetensorsWriter one chunk at a time.
#include "engine/synth_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "base/timer.h"
#include "engine/loader.h"
#include "io/safetensors_writer.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/token_map.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

// How a tensor's bytes are made.
enum class Fill {
  kFp8,         // F8_E4M3 values of magnitude 0.25..3.75 (LUT over random bytes)
  kFp8Scale,    // F8_E8M0 [ceil(N/128), ceil(K/128)]: 2^-round(log2(1.3·√K))
  kFp4,         // I8 bytes of two random e2m1 nibbles
  kFp4Scale,    // F8_E8M0 [N, K/32]: 2^-round(log2(2.9·√K))
  kBf16Rand,    // BF16 uniform with std 1/√K
  kBf16One,     // BF16 1.0 (norm weights)
  kF32Rand,     // F32 uniform with std 1/√K
  kF32Zero,     // F32 0 (sinks, router bias)
  kF32One,      // F32 1 (mHC scales)
  kTid2Eid,     // I64 [V, k]: k distinct experts per token id
  kRouterBias,  // F32 [E]: −router_skew · ln(1 + e) (0 without skew)
};

struct Planned {
  SafetensorsEntry entry;
  Fill fill;
  int64_t fan_in = 1;  // K of the matrix the values belong to
  int64_t bytes = 0;
  int shard = 0;
};

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool EndsWithGz(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, ".gz") == 0;
}

class Planner {
 public:
  explicit Planner(const SynthModelOptions& o) : o_(o) {}

  void Add(const std::string& name, const std::string& dtype, std::vector<int64_t> shape, Fill fill,
           int64_t fan_in = 1) {
    Planned p{{name, dtype, std::move(shape)}, fill, fan_in};
    p.bytes = *SafetensorsEntryBytes(p.entry);
    out_.push_back(std::move(p));
  }
  // FP8 linear [n, k] + its e8m0 scale per 128×128 tile (V4.1: 32×32).
  void Fp8(const std::string& prefix, int64_t n, int64_t k) {
    const int64_t b = o_.arch == "v4.1" ? 32 : 128;
    Add(prefix + ".weight", "F8_E4M3", {n, k}, Fill::kFp8, k);
    Add(prefix + ".scale", "F8_E8M0", {CeilDiv(n, b), CeilDiv(k, b)}, Fill::kFp8Scale, k);
  }
  // FP4 linear [n, k] as I8 [n, k/2] + per-32 e8m0 scale [n, k/32].
  void Fp4(const std::string& prefix, int64_t n, int64_t k) {
    Add(prefix + ".weight", "I8", {n, k / 2}, Fill::kFp4, k);
    Add(prefix + ".scale", "F8_E8M0", {n, k / 32}, Fill::kFp4Scale, k);
  }
  void Bf16(const std::string& name, int64_t n, int64_t k) {
    Add(name, "BF16", {n, k}, Fill::kBf16Rand, k);
  }
  void Norm(const std::string& name, int64_t n) { Add(name, "BF16", {n}, Fill::kBf16One); }

  // A block's norms, mHC sites and attention projections (V4.1: wo_a in bf16).
  void NormsHcAttention(const std::string& p, bool wo_a_bf16) {
    const SynthModelOptions& o = o_;
    const int64_t D = o.d_model, hc = 4, mix = (2 + hc) * hc;
    Norm(p + "attn_norm.weight", D);
    Norm(p + "ffn_norm.weight", D);
    for (const char* site : {"hc_attn", "hc_ffn"}) {
      Add(p + site + "_fn", "F32", {mix, hc * D}, Fill::kF32Rand, hc * D);
      Add(p + site + "_base", "F32", {mix}, Fill::kF32Zero);
      Add(p + site + "_scale", "F32", {3}, Fill::kF32One);
    }
    Fp8(p + "attn.wq_a", o.q_lora_rank, D);
    Norm(p + "attn.q_norm.weight", o.q_lora_rank);
    Fp8(p + "attn.wq_b", o.n_heads * o.head_dim, o.q_lora_rank);
    Fp8(p + "attn.wkv", o.head_dim, D);
    Norm(p + "attn.kv_norm.weight", o.head_dim);
    const int64_t wo_a_rows = o.o_groups * o.o_lora_rank,
                  wo_a_cols = o.n_heads * o.head_dim / o.o_groups;
    if (wo_a_bf16) {
      Bf16(p + "attn.wo_a.weight", wo_a_rows, wo_a_cols);
    } else {
      Fp8(p + "attn.wo_a", wo_a_rows, wo_a_cols);
    }
    Fp8(p + "attn.wo_b", D, o.o_groups * o.o_lora_rank);
    Add(p + "attn.attn_sink", "F32", {o.n_heads}, Fill::kF32Zero);
  }

  // A block's MoE: the router (hash table or selection bias), the routed
  // experts in FP4 and the shared one in FP8.
  void Moe(const std::string& p, bool hash, int64_t n_experts) {
    const SynthModelOptions& o = o_;
    const int64_t D = o.d_model;
    Bf16(p + "ffn.gate.weight", n_experts, D);
    if (hash) {
      Add(p + "ffn.gate.tid2eid", "I64", {o.vocab, o.top_k}, Fill::kTid2Eid);
    } else {
      Add(p + "ffn.gate.bias", "F32", {n_experts}, Fill::kRouterBias);
    }
    for (int64_t e = 0; e < n_experts; ++e) {
      const std::string x = p + "ffn.experts." + std::to_string(e) + ".";
      Fp4(x + "w1", o.moe_inter, D);
      Fp4(x + "w2", D, o.moe_inter);
      Fp4(x + "w3", o.moe_inter, D);
    }
    Fp8(p + "ffn.shared_experts.w1", o.moe_inter, D);
    Fp8(p + "ffn.shared_experts.w2", D, o.moe_inter);
    Fp8(p + "ffn.shared_experts.w3", o.moe_inter, D);
  }

  // One block under `p` ("layers.N." or a DSpark stage's "mtp.S.").
  void Layer(const std::string& p, int64_t ratio, bool hash, int64_t n_experts) {
    const SynthModelOptions& o = o_;
    const int64_t D = o.d_model;
    NormsHcAttention(p, /*wo_a_bf16=*/false);
    if (ratio > 0) {
      const int64_t c = ratio == 4 ? 2 : 1;  // CSA compresses overlapping pairs
      Bf16(p + "attn.compressor.wkv.weight", c * o.head_dim, D);
      Bf16(p + "attn.compressor.wgate.weight", c * o.head_dim, D);
      Add(p + "attn.compressor.ape", "F32", {ratio, c * o.head_dim}, Fill::kF32Rand, 2500);
      Norm(p + "attn.compressor.norm.weight", o.head_dim);
    }
    if (ratio == 4) {
      Fp8(p + "attn.indexer.wq_b", o.index_n_heads * o.index_head_dim, o.q_lora_rank);
      Bf16(p + "attn.indexer.weights_proj.weight", o.index_n_heads, D);
      Bf16(p + "attn.indexer.compressor.wkv.weight", 2 * o.index_head_dim, D);
      Bf16(p + "attn.indexer.compressor.wgate.weight", 2 * o.index_head_dim, D);
      Add(p + "attn.indexer.compressor.ape", "F32", {4, 2 * o.index_head_dim}, Fill::kF32Rand,
          2500);
      Norm(p + "attn.indexer.compressor.norm.weight", o.index_head_dim);
    }
    Moe(p, hash, n_experts);
  }

  void Top() {
    const int64_t D = o_.d_model, hc = 4;
    Add("embed.weight", "BF16", {o_.vocab, D}, Fill::kBf16Rand, 1);
    Bf16("head.weight", o_.vocab, D);
    Norm("norm.weight", D);
    Add("hc_head_fn", "F32", {hc, hc * D}, Fill::kF32Rand, hc * D);
    Add("hc_head_base", "F32", {hc}, Fill::kF32Zero);
    Add("hc_head_scale", "F32", {1}, Fill::kF32One);
  }

  // NextN MTP block m (spec §13.1): the draft's own input projections, norms
  // and mHC head around a window-attention, score-routed block.
  void MtpBlock(int64_t m, int64_t n_experts) {
    const int64_t D = o_.d_model, hc = 4;
    const std::string p = "mtp." + std::to_string(m) + ".";
    Fp8(p + "e_proj", D, D);
    Fp8(p + "h_proj", D, D);
    Norm(p + "enorm.weight", D);
    Norm(p + "hnorm.weight", D);
    Norm(p + "norm.weight", D);
    Add(p + "hc_head_fn", "F32", {hc, hc * D}, Fill::kF32Rand, hc * D);
    Add(p + "hc_head_base", "F32", {hc}, Fill::kF32Zero);
    Add(p + "hc_head_scale", "F32", {1}, Fill::kF32One);
    Layer(p, /*ratio=*/0, /*hash=*/false, n_experts);
  }

  // DSpark stage s of S (spec §13.3): a window-attention, score-routed block;
  // stage 0 projects the target features, the last stage carries the heads.
  void DSparkStage(int64_t s, int64_t n_experts) {
    const SynthModelOptions& o = o_;
    const int64_t D = o.d_model, hc = 4, r = o.dspark_markov_rank;
    const int64_t nT = o.dspark_stages;  // target layers: the last nT main layers
    const std::string p = "mtp." + std::to_string(s) + ".";
    if (s == 0) {
      Fp8(p + "main_proj", D, nT * D);
      Norm(p + "main_norm.weight", D);
    }
    if (s == o.dspark_stages - 1) {
      Norm(p + "norm.weight", D);
      Add(p + "hc_head_fn", "F32", {hc, hc * D}, Fill::kF32Rand, hc * D);
      Add(p + "hc_head_base", "F32", {hc}, Fill::kF32Zero);
      Add(p + "hc_head_scale", "F32", {1}, Fill::kF32One);
      Bf16(p + "markov_head.markov_w1.weight", o.vocab, r);
      Bf16(p + "markov_head.markov_w2.weight", o.vocab, r);
      Bf16(p + "confidence_head.proj.weight", 1, D + r);
    }
    Layer(p, /*ratio=*/0, /*hash=*/false, n_experts);
  }

  // A DeepSeek-V4.1 layer (the reference's Block): V4's attention and MoE
  // tensors, wo_a in bf16, the CSA2 compressor and indexer of its roles, Engram.
  // Layers l ≥ n_layers are the DSpark stages (the reference's DSparkBlock,
  // "mtp.S."): window only, no Engram.
  void V41Layer(int64_t l, const V41Schedule& sc, int64_t n_experts,
                const std::vector<int64_t>& engram_rows) {
    const SynthModelOptions& o = o_;
    const int64_t D = o.d_model, hc = 4, A = o.head_dim;
    const int64_t ID = o.index_head_dim, IH = o.index_n_heads;
    const bool stage = l >= o.n_layers;
    const std::string p =
        stage ? "mtp." + std::to_string(l - o.n_layers) + "." : "layers." + std::to_string(l) + ".";
    auto has = [](const std::vector<int64_t>& v, int64_t x) {
      return std::find(v.begin(), v.end(), x) != v.end();
    };
    NormsHcAttention(p, /*wo_a_bf16=*/true);
    const int64_t ratio = stage ? 0 : sc.compress_ratios[l];
    if (has(sc.kv_sources, l)) {
      Bf16(p + "attn.compressor.wkv.weight", A, D);
      if (ratio > 1) Bf16(p + "attn.compressor.wgate.weight", A, D);
      Norm(p + "attn.compressor.norm.weight", A);
    }
    if (has(sc.index_sources, l)) {
      Fp8(p + "attn.indexer.wq_b", IH * ID, o.q_lora_rank);
      Bf16(p + "attn.indexer.weights_proj.weight", IH, D);
      if (has(sc.kv_sources, l)) {
        Bf16(p + "attn.indexer.wk.weight", ID, A);
        Norm(p + "attn.indexer.k_norm.weight", ID);
      }
    }
    for (size_t i = 0; i < sc.engram_layers.size(); ++i) {
      if (sc.engram_layers[i] != l) continue;
      const int64_t Dh = 256, cols = 3 * 8;  // 4-grams down to 2-grams, 8 heads (the release's)
      Add(p + "engram.embed.weight", "F8_E4M3", {engram_rows[i], Dh}, Fill::kFp8, Dh);
      Add(p + "engram.embed.scale", "F8_E8M0", {engram_rows[i], Dh / 32}, Fill::kFp4Scale, Dh);
      Fp8(p + "engram.wkv", (hc + 1) * D, cols * Dh);
      Add(p + "engram.q_weight", "BF16", {hc, D}, Fill::kBf16One);
      Add(p + "engram.k_weight", "BF16", {hc, D}, Fill::kBf16One);
    }
    Moe(p, /*hash=*/false, n_experts);
  }

  // V4.1 DSpark stage s of S (the reference's DSparkBlock): stage 0 projects
  // the target features, the last carries the norm, the Markov head (embed,
  // head) and the confidence head; no HC head.
  void V41DSparkStage(int64_t s, const V41Schedule& sc, int64_t n_experts) {
    const SynthModelOptions& o = o_;
    const int64_t D = o.d_model, r = o.dspark_markov_rank;
    const int64_t nT = o.dspark_stages;  // target layers: the last nT main layers
    const std::string p = "mtp." + std::to_string(s) + ".";
    if (s == 0) {
      Fp8(p + "main_proj", D, nT * D);
      Norm(p + "main_norm.weight", D);
    }
    if (s == o.dspark_stages - 1) {
      Norm(p + "norm.weight", D);
      Bf16(p + "markov_head.embed.weight", o.vocab, r);
      Bf16(p + "markov_head.head.weight", o.vocab, r);
      Bf16(p + "confidence_head.proj.weight", 1, D + r);
    }
    V41Layer(o.n_layers + s, sc, n_experts, {});
  }

  std::vector<Planned>& planned() { return out_; }

 private:
  const SynthModelOptions& o_;
  std::vector<Planned> out_;
};

std::vector<int64_t> CompressRatios(int64_t n_layers) {
  // V4-Flash's schedule (spec §1.2): two window layers, then CSA / HCA
  // alternating; small models keep one window layer first.
  std::vector<int64_t> r(n_layers);
  const int64_t n_window = n_layers >= 4 ? 2 : 1;
  for (int64_t l = 0; l < n_layers; ++l) {
    r[l] = l < n_window ? 0 : ((l - n_window) % 2 == 0 ? 4 : 128);
  }
  return r;
}

// The Engram tables' rows: each layer's 24 prime-sized buckets from
// engram_vocab (the reference's EngramLayout: distinct primes, in order).
std::vector<int64_t> EngramRows(const SynthModelOptions& o, const V41Schedule& sc) {
  auto prime = [](int64_t n) {
    if (n < 2) return false;
    for (int64_t d = 2; d * d <= n; ++d) {
      if (n % d == 0) return false;
    }
    return true;
  };
  std::vector<int64_t> rows;
  int64_t last = 0;  // primes are never reused: each search starts past the last one handed out
  for (size_t i = 0; i < sc.engram_layers.size(); ++i) {
    int64_t sum = 0;
    for (int n = 0; n < 3; ++n) {
      int64_t cur = o.engram_vocab - 1;
      for (int h = 0; h < 8; ++h) {
        cur = std::max(cur, last) + 1;
        while (!prime(cur)) ++cur;
        last = cur;
        sum += cur;
      }
    }
    rows.push_back(sum);
  }
  return rows;
}

// The V4.1 DSpark stages' MoE (routed experts, top-k): the release's ratio to
// the main model's (128 of 384 experts, top 3 of 6).
std::pair<int64_t, int64_t> V41DraftExperts(const SynthModelOptions& o, int64_t n_experts) {
  const int64_t k = std::max<int64_t>(1, o.top_k / 2);
  return {std::max(k, n_experts / 3), k};
}

std::vector<Planned> Plan(const SynthModelOptions& o, int64_t n_experts) {
  Planner p(o);
  if (o.arch == "v4.1") {
    const int64_t D = o.d_model;
    p.Add("embed.weight", "BF16", {o.vocab, D}, Fill::kBf16Rand, 1);
    p.Bf16("head.weight", o.vocab, D);
    p.Norm("norm.weight", D);
    const V41Schedule sc = MakeV41Schedule(o.n_layers);
    const std::vector<int64_t> rows = EngramRows(o, sc);
    for (int64_t l = 0; l < o.n_layers; ++l) p.V41Layer(l, sc, n_experts, rows);
    for (int64_t s = 0; s < o.dspark_stages; ++s) {
      p.V41DSparkStage(s, sc, V41DraftExperts(o, n_experts).first);
    }
    return std::move(p.planned());
  }
  p.Top();
  const std::vector<int64_t> ratios = CompressRatios(o.n_layers);
  for (int64_t l = 0; l < o.n_layers; ++l) {
    p.Layer("layers." + std::to_string(l) + ".", ratios[l], l < o.n_hash_layers, n_experts);
  }
  for (int64_t m = 0; m < o.mtp_layers; ++m) p.MtpBlock(m, n_experts);
  for (int64_t s = 0; s < o.dspark_stages; ++s) p.DSparkStage(s, n_experts);
  return std::move(p.planned());
}

int64_t TotalBytes(const std::vector<Planned>& plan) {
  int64_t total = 0;
  for (const Planned& p : plan) total += p.bytes;
  return total;
}

Status CheckOptions(const SynthModelOptions& o) {
  auto bad = [](const std::string& flag, int64_t v, const std::string& want) {
    return InvalidArgument("synth-model: --" + flag + " = " + std::to_string(v) + " must be " +
                           want);
  };
  if (o.out_dir.empty()) return InvalidArgument("synth-model: --out is required");
  if (!(o.size_gb > 0.0) || o.size_gb > 4096.0) {
    return InvalidArgument("synth-model: --size-gb must be in (0, 4096]");
  }
  // Every FP8/FP4 linear's input width must be a multiple of 128: the model
  // quantises activations to FP8 in 128-wide blocks, as the reference does.
  const char* kBlocks = "a multiple of 128 (FP8 activation blocks)";
  if (o.d_model < 128 || o.d_model % 128 != 0) return bad("d-model", o.d_model, kBlocks);
  if (o.q_lora_rank < 128 || o.q_lora_rank % 128 != 0) {
    return bad("q-lora-rank", o.q_lora_rank, kBlocks);
  }
  if (o.o_lora_rank < 1 || (o.o_groups * o.o_lora_rank) % 128 != 0) {
    return bad("o-lora-rank", o.o_lora_rank,
               "such that o-groups × o-lora-rank is " + std::string(kBlocks));
  }
  if (o.n_layers < 1 || o.n_layers > 1024) return bad("layers", o.n_layers, "in 1..1024");
  if (o.n_experts < 0 || o.n_experts > 16384) return bad("experts", o.n_experts, "in 0..16384");
  if (o.top_k < 1 || (o.n_experts > 0 && o.top_k > o.n_experts)) {
    return bad("top-k", o.top_k, "in 1..experts");
  }
  if (o.moe_inter < 128 || o.moe_inter % 128 != 0) return bad("moe-inter", o.moe_inter, kBlocks);
  if (o.head_dim < 64 || o.head_dim % 2 != 0) return bad("head-dim", o.head_dim, "even, ≥ 64");
  if (o.n_heads < 1 || o.o_groups < 1 || o.n_heads % o.o_groups != 0) {
    return bad("o-groups", o.o_groups, "a divisor of --heads");
  }
  if ((o.n_heads * o.head_dim / o.o_groups) % 128 != 0) {
    return bad("head-dim", o.head_dim,
               "such that heads × head-dim / o-groups is " + std::string(kBlocks));
  }
  if (o.vocab < 2) return bad("vocab", o.vocab, "at least 2");
  if (o.n_hash_layers < 0 || o.n_hash_layers > o.n_layers) {
    return bad("hash-layers", o.n_hash_layers, "in 0..layers");
  }
  if (o.sliding_window < 1) return bad("window", o.sliding_window, "positive");
  if (o.index_head_dim < 64 || (o.index_head_dim & (o.index_head_dim - 1)) != 0) {
    return bad("index-head-dim", o.index_head_dim, "a power of two ≥ 64");
  }
  if (o.index_n_heads < 1 || o.index_topk < 1) {
    return bad("index-heads", o.index_n_heads, "positive (with a positive index top-k)");
  }
  if (o.shard_bytes < 1) return bad("shard-bytes", o.shard_bytes, "positive");
  if (o.dspark_stages < 0 || o.dspark_stages > o.n_layers) {
    return bad("dspark-stages", o.dspark_stages, "in 0..layers (the last layers feed the stages)");
  }
  if (o.mtp_layers < 0 || o.mtp_layers > 8) return bad("mtp-layers", o.mtp_layers, "in 0..8");
  if (o.mtp_layers > 0 && o.dspark_stages > 0) {
    return InvalidArgument("synth-model: --mtp-layers and --dspark-stages both name mtp.* blocks",
                           "a release ships one draft kind: NextN MTP (April) or DSpark (0731)");
  }
  if (o.dspark_block < 1 || o.dspark_block > 64)
    return bad("dspark-block", o.dspark_block, "in 1..64");
  if (o.arch != "v4" && o.arch != "v4.1") {
    return InvalidArgument("synth-model: --arch " + o.arch + " is not v4 or v4.1");
  }
  if (o.arch == "v4.1") {
    if (o.mtp_layers > 0 || o.n_hash_layers > 1) {
      return InvalidArgument(
          "synth-model --arch v4.1: no hash layers and no NextN MTP layers (V4.1 drafts with "
          "its DSpark stages)",
          "drop --hash-layers and --mtp-layers (--dspark-stages S adds the DSpark stages)");
    }
    if (o.engram_vocab < 2 || o.engram_vocab > (int64_t{1} << 30)) {
      return bad("engram-vocab", o.engram_vocab, "in 2..2^30");
    }
  }
  return Status::Ok();
}

// A V4.1 config.json with the inference ModelArgs keys, as the release's.
nlohmann::ordered_json ConfigV41(const SynthModelOptions& o, int64_t n_experts,
                                 int64_t compressed_vocab) {
  const V41Schedule sc = MakeV41Schedule(o.n_layers);
  nlohmann::ordered_json c;
  c["model_type"] = "deepseek_v41";
  c["vocab_size"] = o.vocab;
  c["dim"] = o.d_model;
  c["moe_inter_dim"] = o.moe_inter;
  c["n_layers"] = o.n_layers;
  c["n_mtp_layers"] = 0;
  c["n_heads"] = o.n_heads;
  c["n_routed_experts"] = n_experts;
  c["n_shared_experts"] = 1;
  c["n_activated_experts"] = o.top_k;
  c["score_func"] = "sqrtsoftplus";
  c["route_scale"] = 1.5;
  c["swiglu_limit"] = 10.0;
  c["q_lora_rank"] = o.q_lora_rank;
  c["head_dim"] = o.head_dim;
  c["rope_head_dim"] = 64;
  c["norm_eps"] = 1e-20;
  c["o_groups"] = o.o_groups;
  c["o_lora_rank"] = o.o_lora_rank;
  c["window_size"] = o.sliding_window;
  c["kv_source_layers"] = sc.kv_sources;
  c["index_source_layers"] = sc.index_sources;
  c["original_seq_len"] = 65536;
  c["rope_theta"] = 10000;
  c["rope_factor"] = 16;
  c["beta_fast"] = 32;
  c["beta_slow"] = 1;
  c["index_n_heads"] = o.index_n_heads;
  c["index_head_dim"] = o.index_head_dim;
  c["index_topk"] = o.index_topk;
  c["candidate_source_layer"] = sc.candidate_source;
  c["candidate_topk_blocks"] = 2048;
  c["candidate_block_size"] = 8;
  c["hc_mult"] = 4;
  c["hc_sinkhorn_iters"] = 20;
  c["hc_eps"] = 1e-6;
  c["engram_layer_ids"] = sc.engram_layers;
  c["engram_vocab_size"] = o.engram_vocab;
  c["engram_num_embeddings"] = EngramRows(o, sc);
  c["engram_max_ngram_size"] = 4;
  c["engram_pad_id"] = 2;
  c["engram_compressed_vocab_size"] = compressed_vocab;
  c["engram_n_heads"] = 8;
  c["engram_head_dim"] = 256;
  c["dtype"] = "fp8";
  c["expert_dtype"] = "fp4";
  c["compress_rope_theta"] = 160000;
  std::vector<int64_t> ratios = sc.compress_ratios;
  ratios.insert(ratios.end(), o.dspark_stages, 0);  // the stages: window only
  c["compress_ratios"] = ratios;
  if (o.dspark_stages > 0) {
    std::vector<int64_t> targets;
    for (int64_t l = o.n_layers - o.dspark_stages; l < o.n_layers; ++l) targets.push_back(l);
    const auto [draft_experts, draft_k] = V41DraftExperts(o, n_experts);
    c["n_mtp_layers"] = o.dspark_stages;
    c["dspark_block_size"] = o.dspark_block;
    c["dspark_noise_token_id"] = o.vocab - 1;
    c["dspark_target_layer_ids"] = targets;
    c["dspark_markov_rank"] = o.dspark_markov_rank;
    c["dspark_n_routed_experts"] = draft_experts;
    c["dspark_n_activated_experts"] = draft_k;
  }
  c["synthetic"] = "random weights written by dsv4 synth-model (not a trained model)";
  return c;
}

nlohmann::ordered_json Config(const SynthModelOptions& o, int64_t n_experts,
                              const std::vector<int64_t>& ratios) {
  nlohmann::ordered_json c;
  c["architectures"] = {"DeepseekV4ForCausalLM"};
  c["model_type"] = "deepseek_v4";
  c["attention_bias"] = false;
  c["bos_token_id"] = 0;
  c["eos_token_id"] = 1;
  c["expert_dtype"] = "fp4";
  c["hc_eps"] = 1e-6;
  c["hc_mult"] = 4;
  c["hc_sinkhorn_iters"] = 20;
  c["head_dim"] = o.head_dim;
  c["hidden_act"] = "silu";
  c["hidden_size"] = o.d_model;
  c["index_head_dim"] = o.index_head_dim;
  c["index_n_heads"] = o.index_n_heads;
  c["index_topk"] = o.index_topk;
  c["max_position_embeddings"] = 1048576;
  c["moe_intermediate_size"] = o.moe_inter;
  c["n_routed_experts"] = n_experts;
  c["n_shared_experts"] = 1;
  c["norm_topk_prob"] = true;
  c["num_attention_heads"] = o.n_heads;
  c["num_experts_per_tok"] = o.top_k;
  c["num_hidden_layers"] = o.n_layers;
  c["num_hash_layers"] = o.n_hash_layers;
  c["num_key_value_heads"] = 1;
  c["num_nextn_predict_layers"] = o.mtp_layers;
  c["o_groups"] = o.o_groups;
  c["o_lora_rank"] = o.o_lora_rank;
  c["q_lora_rank"] = o.q_lora_rank;
  c["qk_rope_head_dim"] = 64;
  c["quantization_config"] = {{"activation_scheme", "dynamic"},
                              {"fmt", "e4m3"},
                              {"quant_method", "fp8"},
                              {"scale_fmt", "ue8m0"},
                              {"weight_block_size", {128, 128}}};
  c["rms_norm_eps"] = 1e-6;
  c["rope_scaling"] = {{"beta_fast", 32},
                       {"beta_slow", 1},
                       {"factor", 16},
                       {"original_max_position_embeddings", 65536},
                       {"type", "yarn"}};
  c["rope_theta"] = 10000;
  c["routed_scaling_factor"] = 1.5;
  c["scoring_func"] = "sqrtsoftplus";
  c["sliding_window"] = o.sliding_window;
  c["swiglu_limit"] = 10.0;
  c["tie_word_embeddings"] = false;
  c["topk_method"] = "noaux_tc";
  c["torch_dtype"] = "bfloat16";
  c["vocab_size"] = o.vocab;
  c["compress_rope_theta"] = 160000;
  std::vector<int64_t> all_ratios = ratios;  // draft blocks: window layers after the main ones
  all_ratios.insert(all_ratios.end(), o.mtp_layers + o.dspark_stages, 0);
  c["compress_ratios"] = all_ratios;
  if (o.dspark_stages > 0) {  // spec §13.2
    std::vector<int64_t> targets;
    for (int64_t l = o.n_layers - o.dspark_stages; l < o.n_layers; ++l) targets.push_back(l);
    c["dspark_block_size"] = o.dspark_block;
    c["dspark_noise_token_id"] = o.vocab - 1;
    c["dspark_target_layer_ids"] = targets;
    c["dspark_markov_rank"] = o.dspark_markov_rank;
  }
  c["synthetic"] = "random weights written by dsv4 synth-model (not a trained model)";
  return c;
}

// xoshiro256** — fast, seedable, good enough for weights.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& s : s_) {
      seed += 0x9E3779B97F4A7C15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      s = z ^ (z >> 31);
    }
  }
  uint64_t Next() {
    const uint64_t r = Rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return r;
  }
  // Uniform in [-1, 1).
  float Signed() { return static_cast<float>(static_cast<int64_t>(Next()) * 0x1p-63); }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::array<uint64_t, 4> s_;
};

uint8_t E8m0For(double value) {
  const double e = 127.0 + std::round(std::log2(value));
  return static_cast<uint8_t>(std::clamp(e, 1.0, 254.0));
}

uint16_t Bf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);  // round to nearest even
}

// Fills buf (a chunk of tensor p starting at byte `offset`) per p.fill.
void FillChunk(const Planned& p, int64_t offset, std::span<uint8_t> buf, Rng& rng,
               const std::array<uint8_t, 256>& fp8_lut, int64_t n_experts, double router_skew) {
  const size_t n = buf.size();
  auto random_bytes = [&] {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const uint64_t r = rng.Next();
      std::memcpy(buf.data() + i, &r, 8);
    }
    const uint64_t r = rng.Next();
    for (size_t j = 0; i < n; ++i, ++j) buf[i] = static_cast<uint8_t>(r >> (8 * j));
  };
  switch (p.fill) {
    case Fill::kFp8:
      random_bytes();
      for (size_t i = 0; i < n; ++i) buf[i] = fp8_lut[buf[i]];
      return;
    case Fill::kFp4:
      random_bytes();
      return;
    case Fill::kFp8Scale:
      std::fill(buf.begin(), buf.end(), E8m0For(1.0 / (1.3 * std::sqrt(double(p.fan_in)))));
      return;
    case Fill::kFp4Scale:
      std::fill(buf.begin(), buf.end(), E8m0For(1.0 / (2.9 * std::sqrt(double(p.fan_in)))));
      return;
    case Fill::kBf16Rand: {
      const float a = static_cast<float>(std::sqrt(3.0 / p.fan_in));  // uniform: std a/√3
      for (size_t i = 0; i + 2 <= n; i += 2) {
        const uint16_t b = Bf16Bits(a * rng.Signed());
        std::memcpy(buf.data() + i, &b, 2);
      }
      return;
    }
    case Fill::kBf16One:
      for (size_t i = 0; i + 2 <= n; i += 2) {
        buf[i] = 0x80;
        buf[i + 1] = 0x3F;
      }
      return;
    case Fill::kF32Rand: {
      const float a = static_cast<float>(std::sqrt(3.0 / p.fan_in));
      for (size_t i = 0; i + 4 <= n; i += 4) {
        const float f = a * rng.Signed();
        std::memcpy(buf.data() + i, &f, 4);
      }
      return;
    }
    case Fill::kF32Zero:
      std::fill(buf.begin(), buf.end(), 0);
      return;
    case Fill::kRouterBias:
      // Low ids favoured, falling off as ln(1 + e): a Zipf-like expert use.
      for (size_t i = 0; i + 4 <= n; i += 4) {
        const int64_t e = (offset + static_cast<int64_t>(i)) / 4;
        const float b = static_cast<float>(-router_skew * std::log1p(static_cast<double>(e)));
        std::memcpy(buf.data() + i, &b, 4);
      }
      return;
    case Fill::kF32One:
      for (size_t i = 0; i + 4 <= n; i += 4) {
        const float one = 1.0f;
        std::memcpy(buf.data() + i, &one, 4);
      }
      return;
    case Fill::kTid2Eid: {
      const int64_t k = p.entry.shape[1];
      for (size_t i = 0; i + 8 <= n; i += 8) {
        const int64_t element = (offset + static_cast<int64_t>(i)) / 8;
        const int64_t token = element / k, j = element % k;
        // k distinct experts per token: a hashed start, then consecutive ones.
        const uint64_t h = static_cast<uint64_t>(token) * 0x9E3779B97F4A7C15ull;
        const int64_t e = static_cast<int64_t>((h >> 20) % n_experts + j) % n_experts;
        std::memcpy(buf.data() + i, &e, 8);
      }
      return;
    }
  }
}

std::array<uint8_t, 256> Fp8Lut() {
  // Random byte → e4m3 with exponent field 5..8 (magnitudes 0.25..3.75,
  // rms ≈ 1.3), random sign and mantissa.
  std::array<uint8_t, 256> lut;
  for (int b = 0; b < 256; ++b) {
    const int sign = (b >> 7) & 1, exp = 5 + ((b >> 3) & 3), man = b & 7;
    lut[b] = static_cast<uint8_t>(sign << 7 | exp << 3 | man);
  }
  return lut;
}

}  // namespace

V41Schedule MakeV41Schedule(int64_t L) {
  V41Schedule sc;
  const int64_t n_window = L >= 4 ? 2 : 1, rest = L - n_window;
  const int64_t n2 = rest - rest / 2;  // ratio-2 layers first, then ratio 1
  sc.compress_ratios.assign(L, 0);
  std::vector<int64_t> r2_sources;
  for (int64_t l = n_window; l < L; ++l) {
    const bool two = l < n_window + n2;
    sc.compress_ratios[l] = two ? 2 : 1;
    const int64_t i = two ? l - n_window : l - n_window - n2;
    if (two && i % 6 == 0) {
      sc.kv_sources.push_back(l);
      sc.index_sources.push_back(l);
      r2_sources.push_back(l);
    } else if (!two && i == 0) {
      sc.kv_sources.push_back(l);
      sc.index_sources.push_back(l);
      sc.candidate_source = l;
    } else if (!two && i % (L - n_window - n2 >= 8 ? 4 : 2) == 0) {
      sc.index_sources.push_back(l);
    }
  }
  if (L > 1) sc.engram_layers.push_back(1);
  if (!r2_sources.empty()) {
    const int64_t e = r2_sources[std::min<size_t>(2, r2_sources.size() - 1)];
    if (e != 1) sc.engram_layers.push_back(e);
  }
  return sc;
}

Result<SynthModelReport> WriteSyntheticDeepSeekV4(const SynthModelOptions& o) {
  const Timer timer;
  RETURN_IF_ERROR(CheckOptions(o));
  int64_t n_experts = o.n_experts;
  if (n_experts == 0) {
    // Size grows linearly in the expert count: solve for the target.
    const int64_t at1 = TotalBytes(Plan(o, 1)), at2 = TotalBytes(Plan(o, 2));
    const double target = o.size_gb * 1e9;
    n_experts = static_cast<int64_t>(std::llround((target - at1) / double(at2 - at1))) + 1;
    n_experts = std::clamp<int64_t>(n_experts, o.top_k, 16384);
  }
  std::vector<Planned> plan = Plan(o, n_experts);
  const bool v41 = o.arch == "v4.1";
  const std::vector<int64_t> ratios =
      v41 ? MakeV41Schedule(o.n_layers).compress_ratios : CompressRatios(o.n_layers);
  // V4.1: the tokenizer goes beside the weights; its compressed token map's
  // size is a config field (the Engram hash multipliers derive from it).
  int64_t compressed_vocab = 0;
  std::string tokenizer_src = o.tokenizer_path;
  if (v41) {
    if (tokenizer_src.empty()) {
      tokenizer_src =
          (fs::path(DSV4_SOURCE_DIR) / "tests/data/tokenizer/deepseek_v4_tokenizer.json.gz")
              .string();
    }
    ASSIGN_OR_RETURN(std::unique_ptr<BpeTokenizer> bpe, LoadTokenizerJson(tokenizer_src, ""));
    if (bpe->vocab_size() > o.vocab) {
      return InvalidArgument("synth-model --arch v4.1: " + tokenizer_src +
                                 " is not a byte-level BPE tokenizer.json of at most --vocab " +
                                 std::to_string(o.vocab) + " tokens",
                             "pass --tokenizer with the model's tokenizer.json (the release's "
                             "has 129280 tokens: --vocab 129280)");
    }
    ASSIGN_OR_RETURN(CompressedTokenMap map, BuildCompressedTokenMap(*bpe));
    compressed_vocab = map.count;
  }

  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) {
    return IoError("synth-model: cannot create " + o.out_dir + ": " + ec.message(),
                   "check the --out path");
  }
  // Shards of at most shard_bytes (a tensor never splits).
  int n_shards = 1;
  int64_t in_shard = 0;
  for (Planned& p : plan) {
    if (in_shard > 0 && in_shard + p.bytes > o.shard_bytes) {
      ++n_shards;
      in_shard = 0;
    }
    p.shard = n_shards - 1;
    in_shard += p.bytes;
  }
  // Within a shard, data by element size, largest first (aligned, as the
  // safetensors library lays it out).
  std::stable_sort(plan.begin(), plan.end(), [](const Planned& a, const Planned& b) {
    if (a.shard != b.shard) return a.shard < b.shard;
    return *SafetensorsDTypeSize(a.entry.dtype) > *SafetensorsDTypeSize(b.entry.dtype);
  });
  auto shard_name = [&](int s) {
    if (n_shards == 1) return std::string("model.safetensors");
    char buf[64];
    std::snprintf(buf, sizeof(buf), "model-%05d-of-%05d.safetensors", s + 1, n_shards);
    return std::string(buf);
  };

  {
    std::ofstream cfg(fs::path(o.out_dir) / "config.json");
    cfg << (v41 ? ConfigV41(o, n_experts, compressed_vocab) : Config(o, n_experts, ratios)).dump(2)
        << "\n";
    if (!cfg.good()) return IoError("synth-model: cannot write " + o.out_dir + "/config.json");
  }
  if (v41) {
    const std::string name = EndsWithGz(tokenizer_src) ? "tokenizer.json.gz" : "tokenizer.json";
    fs::copy_file(tokenizer_src, fs::path(o.out_dir) / name, fs::copy_options::overwrite_existing,
                  ec);
    if (ec) {
      return IoError("synth-model: cannot copy " + tokenizer_src + " into " + o.out_dir + ": " +
                     ec.message());
    }
  }
  if (n_shards > 1) {
    nlohmann::ordered_json index;
    index["metadata"] = {{"total_size", TotalBytes(plan)}};
    nlohmann::ordered_json map = nlohmann::ordered_json::object();
    for (const Planned& p : plan) map[p.entry.name] = shard_name(p.shard);
    index["weight_map"] = map;
    std::ofstream out(fs::path(o.out_dir) / "model.safetensors.index.json");
    out << index.dump(2) << "\n";
    if (!out.good()) return IoError("synth-model: cannot write the shard index in " + o.out_dir);
  }

  Rng rng(o.seed);
  const std::array<uint8_t, 256> lut = Fp8Lut();
  std::vector<uint8_t> chunk(size_t{4} << 20);
  size_t next = 0;
  for (int s = 0; s < n_shards; ++s) {
    std::vector<SafetensorsEntry> entries;
    const size_t first = next;
    while (next < plan.size() && plan[next].shard == s) entries.push_back(plan[next++].entry);
    ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsWriter> w,
                     SafetensorsWriter::Create((fs::path(o.out_dir) / shard_name(s)).string(),
                                               entries, {{"format", "pt"}}));
    for (size_t i = first; i < next; ++i) {
      const Planned& p = plan[i];
      for (int64_t off = 0; off < p.bytes; off += static_cast<int64_t>(chunk.size())) {
        const size_t n = static_cast<size_t>(std::min<int64_t>(chunk.size(), p.bytes - off));
        std::span<uint8_t> buf(chunk.data(), n);
        FillChunk(p, off, buf, rng, lut, n_experts, o.router_skew);
        RETURN_IF_ERROR(w->Append(buf));
      }
    }
    RETURN_IF_ERROR(w->Finish());
  }
  SynthModelReport r;
  r.total_bytes = TotalBytes(plan);
  r.n_tensors = static_cast<int64_t>(plan.size());
  r.n_experts = n_experts;
  r.n_shards = n_shards;
  r.compress_ratios = ratios;
  r.seconds = timer.Seconds();
  return r;
}

}  // namespace dsv4
