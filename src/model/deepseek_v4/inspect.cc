// The `dsv4 inspect` report for DeepSeek-V4 (see inspect.h).
#include "model/deepseek_v4/inspect.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <type_traits>

#include "model/deepseek_v4/numerics.h"
#include "model/deepseek_v4/plan.h"
#include "model/deepseek_v4/weights.h"

#include "io/safetensors.h"  // OpenCheckpointDir

namespace dsv4::deepseek_v4 {
namespace {

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::string Fmt(const char* fmt, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), fmt, args...);
  return buf;
}

std::string HumanBytes(int64_t b) {
  const double gib = static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0);
  if (gib >= 1.0) return Fmt("%.2f GiB", gib);
  const double mib = static_cast<double>(b) / (1024.0 * 1024.0);
  if (mib >= 1.0) return Fmt("%.2f MiB", mib);
  const double kib = static_cast<double>(b) / 1024.0;
  if (kib >= 1.0) return Fmt("%.2f KiB", kib);
  return Fmt("%lld B", static_cast<long long>(b));
}

std::string KindName(const LayerPlan& p) {
  if (p.role == LayerRole::kMtp) return "mtp";
  if (p.attention == AttentionKind::kHca) return "hca r=" + std::to_string(p.compress_ratio);
  if (p.attention == AttentionKind::kCsa && p.compress_ratio != 4) {
    return "csa r=" + std::to_string(p.compress_ratio);
  }
  return std::string(AttentionKindName(p.attention));
}

// One table of the KV-cache section.
std::string KvTable(const DeepSeekV4Config& c, const std::vector<int64_t>& contexts, bool reference,
                    const RollbackOptions& rb) {
  std::string r = Fmt("  %-12s %6s %9s %11s", "kind", "layers", "B/token", "fixed");
  for (int64_t n : contexts) r += Fmt(" %13s", (std::to_string(n) + " tok").c_str());
  r += "\n";
  std::vector<KvCacheSummary> sums;
  for (int64_t n : contexts) sums.push_back(SummarizeKvCache(c, n, reference, rb));
  const KvCacheSummary zero = SummarizeKvCache(c, 0, reference, rb);
  auto row = [&](const std::string& name, int64_t layers, double per_token, int64_t fixed,
                 const std::function<int64_t(const KvCacheSummary&)>& total) {
    const std::string pt = per_token == std::floor(per_token)
                               ? std::to_string(static_cast<long long>(per_token))
                               : Fmt("%.2f", per_token);
    r += Fmt("  %-12s %6lld %9s %11s", name.c_str(), static_cast<long long>(layers), pt.c_str(),
             HumanBytes(fixed).c_str());
    for (const KvCacheSummary& s : sums) r += Fmt(" %13s", HumanBytes(total(s)).c_str());
    r += "\n";
  };
  double main_per_token = 0.0;
  int64_t main_layers = 0;
  for (size_t k = 0; k < zero.kinds.size(); ++k) {
    const KvCacheKind& kind = zero.kinds[k];
    if (kind.name != "mtp") {
      main_per_token += sums.empty() ? 0.0 : sums[0].kinds[k].bytes_per_token;
      main_layers += kind.layers;
    }
    row(kind.name, kind.layers, sums.empty() ? 0.0 : sums[0].kinds[k].bytes_per_token,
        kind.bytes.total(), [k](const KvCacheSummary& s) { return s.kinds[k].bytes.total(); });
  }
  row("main total", main_layers, main_per_token, zero.main.total(),
      [](const KvCacheSummary& s) { return s.main.total(); });
  for (const KvCacheSummary& s : sums) {
    const CacheBytes& b = s.main;
    r +=
        Fmt("  main at %lld tokens: %lld B = window rings %lld + compressed kv %lld + index "
            "keys %lld + compressor state %lld",
            static_cast<long long>(s.n_tokens), static_cast<long long>(b.total()),
            static_cast<long long>(b.ring), static_cast<long long>(b.compressed),
            static_cast<long long>(b.index_keys), static_cast<long long>(b.state));
    if (!reference) r += Fmt(" + checkpoints %lld", static_cast<long long>(b.checkpoints));
    r += " (" + HumanBytes(b.total()) + "; " + HumanBytes(b.total() - b.state - b.checkpoints) +
         " of window, compressed and index rows)\n";
  }
  return r;
}

}  // namespace

std::string DescribeRelease(const DeepSeekV4Config& c) {
  if (c.v41()) {
    const std::string size = c.hidden_size == 5120 && c.num_hidden_layers == 40
                                 ? "V4.1-Flash (2026-09-10)"
                                 : "a DeepSeek-V4.1";
    return size + (c.dspark() ? " with its DSpark draft module" : "");
  }
  std::string size = c.hidden_size == 4096 && c.num_hidden_layers == 43   ? "V4-Flash"
                     : c.hidden_size == 7168 && c.num_hidden_layers == 61 ? "V4-Pro"
                                                                          : "a DeepSeek-V4";
  if (c.dspark()) {
    return size + " with the DSpark draft module (the -DSpark, Flash-0731 and Pro-0813 releases)";
  }
  if (c.num_nextn_predict_layers > 0) {
    return size + " with the NextN MTP layer (the April 2026 preview release)";
  }
  return size + " without a draft module";
}

std::string HumanCount(int64_t n) {
  const double v = static_cast<double>(n);
  if (v >= 1e12) return Fmt("%.2fT", v / 1e12);
  if (v >= 1e9) return Fmt("%.2fB", v / 1e9);
  if (v >= 1e6) return Fmt("%.2fM", v / 1e6);
  if (v >= 1e3) return Fmt("%.2fK", v / 1e3);
  return Fmt("%lld", static_cast<long long>(n));
}

ParameterCounts CountParameters(const DeepSeekV4Config& c, const CheckpointReader* reader) {
  ParameterCounts out;
  const std::vector<LayerPlan> plans = BuildLayerPlans(c);
  // Routed experts: k of E are read per token. Accumulated per layer in
  // elements and divided once, so the count is exact for E | k·n.
  int64_t expert_elems = 0;
  ForEachWeight(c, plans, [&](const WeightDecl& d) {
    const int64_t n = Numel(d.shape);
    ++out.n_tensors;
    if (d.mtp) {
      out.mtp += n;
    } else {
      out.total += n;
      if (d.expert >= 0) {
        expert_elems += n;
        out.experts += n;
      } else if (d.kind == WeightKind::kEngramTable) {
        // n_cols rows of the table per token
        out.engram += n;
        out.engram_active += (c.engram_max_ngram_size - 1) * c.engram_n_heads * d.shape[1];
      } else if (d.per_token) {
        out.active += n;
      }
    }
    if (reader == nullptr) {
      const DType dt = PredictedDType(c, d.kind);
      out.bytes_by_dtype[std::string(DTypeName(dt))] += DTypeBytes(dt, n);
      if (dt == DType::kFp8E4m3 || dt == DType::kFp4E2m1) {
        const DType st = PredictedScaleDType(c, d.kind);
        const int64_t rows = d.shape[0], cols = d.shape[1];
        const int64_t blk = c.v41() ? 32 : 128;  // FP8 scale tiles
        const int64_t n_scales = dt == DType::kFp4E2m1 || d.kind == WeightKind::kEngramTable
                                     ? rows * (cols / 32)
                                     : ((rows + blk - 1) / blk) * ((cols + blk - 1) / blk);
        out.bytes_by_dtype[std::string(DTypeName(st))] += DTypeBytes(st, n_scales);
      }
    }
  });
  out.active += expert_elems / c.n_routed_experts * c.num_experts_per_tok + out.engram_active;
  if (reader != nullptr) {
    out.measured = true;
    for (const TensorInfo& t : reader->tensors()) {
      out.bytes_by_dtype[std::string(DTypeName(t.dtype))] += t.nbytes;
      if (t.name.rfind("mtp.", 0) == 0 || t.name.rfind("model.mtp.", 0) == 0) {
        out.draft_bytes += t.nbytes;
      }
    }
  }
  return out;
}

KvCacheSummary SummarizeKvCache(const DeepSeekV4Config& c, int64_t n, bool reference,
                                const RollbackOptions& rb) {
  KvCacheSummary out;
  out.n_tokens = n;
  for (const LayerPlan& p : BuildLayerPlans(c)) {
    const std::string name = KindName(p);
    auto it = std::find_if(out.kinds.begin(), out.kinds.end(),
                           [&](const KvCacheKind& k) { return k.name == name; });
    if (it == out.kinds.end()) {
      KvCacheKind kind;
      kind.name = name;
      it = out.kinds.insert(out.kinds.end(), kind);
    }
    // The MTP cache keeps every row (model.h NewMtpCache).
    RollbackOptions layer_rb = rb;
    if (p.role == LayerRole::kMtp) layer_rb.horizon = RollbackOptions::kAll;
    const CacheBytes b =
        reference ? ReferenceCacheBytes(p.cache, n) : EngineCacheBytes(p.cache, n, layer_rb);
    ++it->layers;
    it->bytes += b;
    const CacheSpec& s = p.cache;
    const double value_bytes = reference ? 2.0 : 4.0;
    double per_token = 0.0;
    if (s.compress_ratio > 0) {
      per_token = static_cast<double>(s.head_dim + s.indexer_head_dim) * value_bytes /
                  static_cast<double>(s.compress_ratio);
    }
    if (!reference && layer_rb.horizon == RollbackOptions::kAll) {
      per_token += static_cast<double>(s.head_dim) * value_bytes;  // every window row kept
      if (s.compress_ratio > 0) {
        per_token +=
            static_cast<double>(s.coff() * (s.head_dim + s.indexer_head_dim) * 2) * value_bytes;
      }
    }
    it->bytes_per_token += per_token;
    if (p.role == LayerRole::kMain) out.main += b;
  }
  // "mtp" last.
  std::stable_partition(out.kinds.begin(), out.kinds.end(),
                        [](const KvCacheKind& k) { return k.name != "mtp"; });
  return out;
}

std::string KvCacheReport(const DeepSeekV4Config& c, const std::vector<int64_t>& contexts,
                          const RollbackOptions& rb) {
  std::string r =
      "KV cache per sequence, spec §4.9 layout (bf16 values, fp32 compressor "
      "state; B/token = growth per token):\n";
  r += KvTable(c, contexts, /*reference=*/true, rb);
  // The compressed entries and index keys as the release stores them, per
  // token: V4's entries FP8 with the RoPE dims in bf16, V4.1's FP4 with an e4m3
  // scale per 16 (4.5 bits a value); index keys FP4 with an e8m0 scale per 32.
  double stored = 0.0;
  for (const LayerPlan& p : BuildLayerPlans(c)) {
    if (p.role != LayerRole::kMain || p.cache.compress_ratio == 0) continue;
    const double per_entry =
        (c.v41() ? p.cache.head_dim * 4.5 / 8
                 : (p.cache.head_dim - c.qk_rope_head_dim) + 2.0 * c.qk_rope_head_dim) +
        p.cache.indexer_head_dim * 4.25 / 8;
    stored += per_entry / static_cast<double>(p.cache.compress_ratio);
  }
  r +=
      Fmt("  as the release stores them (%s entries, FP4 index keys): %.0f B/token of "
          "compressed entries and keys\n",
          c.v41() ? "FP4" : "FP8 + bf16 RoPE dims", stored);
  r +=
      Fmt("this engine (fp32 values; Truncate in place over the last %lld tokens, "
          "checkpoints every %lld tokens; the MTP cache keeps every row):\n",
          static_cast<long long>(rb.horizon), static_cast<long long>(rb.checkpoint_interval));
  r += KvTable(c, contexts, /*reference=*/false, rb);
  return r;
}

namespace {

Status CheckContexts(const std::vector<int64_t>& contexts) {
  for (int64_t n : contexts) {
    if (n < 1) {
      return InvalidArgument("context length " + std::to_string(n) + " for the KV-cache report",
                             "pass --context N with N ≥ 1 tokens");
    }
  }
  return Status::Ok();
}

// The report of InspectReport with the counts given; `bytes_heading` heads the
// bytes section.
std::string Report(const DeepSeekV4Config& c, const ParameterCounts& n,
                   const std::string& bytes_heading, const std::string& source) {
  std::string r;
  r += (c.v41() ? "DeepSeek-V4.1 model: " : "DeepSeek-V4 model: ") + source + "\n";
  r += "release: " + DescribeRelease(c) + "\n";
  r += "config:\n";
  r +=
      Fmt("  vocab %lld, hidden %lld, layers %lld (+%lld %s), heads %lld x %lld "
          "(rope %lld), kv heads %lld\n",
          (long long)c.vocab_size, (long long)c.hidden_size, (long long)c.num_hidden_layers,
          (long long)c.n_draft_layers(), c.dspark() ? "DSpark stages" : "MTP",
          (long long)c.num_attention_heads, (long long)c.head_dim, (long long)c.qk_rope_head_dim,
          (long long)c.num_key_value_heads);
  r +=
      Fmt("  q_lora_rank %lld, output %lld groups x rank %lld, sliding window %lld, "
          "max positions %lld\n",
          (long long)c.q_lora_rank, (long long)c.o_groups, (long long)c.o_lora_rank,
          (long long)c.sliding_window, (long long)c.max_position_embeddings);
  r +=
      Fmt("  MoE: %lld routed experts, %lld per token, %lld shared, width %lld; %lld hash "
          "layers; scoring %s, topk %s, route scale %g, swiglu limit %g\n",
          (long long)c.n_routed_experts, (long long)c.num_experts_per_tok,
          (long long)c.n_shared_experts, (long long)c.moe_intermediate_size,
          (long long)c.num_hash_layers, std::string(ScoringFuncName(c.scoring_func)).c_str(),
          c.topk_method.c_str(), c.routed_scaling_factor, c.swiglu_limit);
  r += Fmt("  mHC: %lld streams, %lld Sinkhorn iterations, hc_eps %g; rms_norm_eps %g\n",
           (long long)c.hc_mult, (long long)c.hc_sinkhorn_iters, c.hc_eps, c.rms_norm_eps);
  r += Fmt("  RoPE: theta %g on window layers; theta %g", c.rope_theta, c.compress_rope_theta);
  if (c.rope_scaling.enabled) {
    r += Fmt(" + YaRN x%g (original %lld, beta %g/%g)", c.rope_scaling.factor,
             (long long)c.rope_scaling.original_max_position, c.rope_scaling.beta_fast,
             c.rope_scaling.beta_slow);
  }
  r += " on compressed layers\n";
  r += Fmt("  indexer: %lld heads x %lld, top-k %lld\n", (long long)c.index_n_heads,
           (long long)c.index_head_dim, (long long)c.index_topk);
  const QuantizationConfig& q = c.quantization_config;
  r += "  weights: dense " +
       (q.present ? "fp8 " + q.fmt + " (" + (q.scale_fmt.empty() ? "f32" : q.scale_fmt) +
                        (c.v41() ? " scales per 32x32)" : " scales per 128x128)")
                  : std::string("unquantized")) +
       ", routed experts " + std::string(ExpertDTypeName(c.expert_dtype)) + ", torch_dtype " +
       c.torch_dtype + "\n";
  // What DeepSeekV4Model::Load picks unless told (--wo-a-input overrides the last).
  const NumericsOptions nd = DefaultNumerics(c.qat_simulation);
  const auto on_off = [](bool on) { return on ? std::string("on") : std::string("off"); };
  if (c.v41()) {
    r += std::string("  numerics: ") +
         (c.qat_simulation
              ? "the reference's QAT roundings (qat_simulation): FP8 activations before FP8/FP4 "
                "linears (blocks of 32), window kv FP8 (blocks of 32), compressed kv FP4 (e4m3 "
                "scale per 16), index queries and keys FP4 (power-of-two scale per 32)"
              : "no QAT roundings (qat_simulation false)") +
         "\n";
    std::string kv, ix, eg;
    for (int64_t l : c.kv_source_layers) kv += (kv.empty() ? "" : ", ") + std::to_string(l);
    for (int64_t l : c.index_source_layers) ix += (ix.empty() ? "" : ", ") + std::to_string(l);
    for (int64_t l : c.engram_layer_ids) eg += (eg.empty() ? "" : ", ") + std::to_string(l);
    r += "  CSA2: kv sources [" + kv + "], index sources [" + ix + "]";
    if (c.candidate_source_layer >= 0) {
      r += Fmt(", candidate source %lld (%lld blocks of %lld entries)",
               (long long)c.candidate_source_layer, (long long)c.candidate_topk_blocks,
               (long long)c.candidate_block_size);
    }
    r += "\n";
    if (!c.engram_layer_ids.empty()) {
      const int64_t cols = (c.engram_max_ngram_size - 1) * c.engram_n_heads;
      const int64_t row_bytes = c.engram_head_dim + c.engram_head_dim / 32;  // fp8 + e8m0
      const int64_t n_layers = static_cast<int64_t>(c.engram_layer_ids.size());
      r += Fmt(
          "  Engram: layers [%s], %lld-grams down to 2-grams x %lld heads: %lld rows of %lld "
          "per layer and token, %lld B read per token (fp8 rows + e8m0 scales) of tables "
          "of",
          eg.c_str(), (long long)c.engram_max_ngram_size, (long long)c.engram_n_heads,
          (long long)cols, (long long)c.engram_head_dim, (long long)(n_layers * cols * row_bytes));
      for (int64_t rows : c.engram_num_embeddings) {
        r += Fmt(" %lld", (long long)rows);
      }
      r += " rows\n";
    }
  } else {
    r += std::string("  numerics: ") +
         (c.qat_simulation ? "the release's (qat_simulation)"
                           : "no QAT simulations (qat_simulation false)") +
         ": FP8 activation quantisation " + on_off(nd.act_quant) + ", kv FP8 simulation " +
         on_off(nd.kv_quant) + ", indexer FP4 simulation " + on_off(nd.index_quant) +
         ", wo_a input " + (nd.o_bf16 ? "bf16" : "f32") + " (--wo-a-input)\n";
  }
  r += Fmt("  bos %d, eos %d\n", c.bos_token_id, c.eos_token_id);
  // Every scalar field of the table (config.h), as read.
  std::string line = "  fields:";
  VisitConfigFields(c, [&](const ConfigField& field, const auto& value) {
    std::string item = std::string(" ") + field.key + "=";
    using T = std::decay_t<decltype(value)>;
    if constexpr (std::is_same_v<T, std::string>) {
      item += value;
    } else if constexpr (std::is_same_v<T, bool>) {
      item += value ? "true" : "false";
    } else if constexpr (std::is_same_v<T, double>) {
      item += Fmt("%g", value);
    } else {
      item += std::to_string(value);
    }
    if (line.size() + item.size() > 100) {
      r += line + "\n";
      line = "         ";
    }
    line += item;
  });
  r += line + "\n";

  const std::vector<LayerPlan> plans = BuildLayerPlans(c);
  int64_t n_window = 0, n_csa = 0, n_hca = 0, n_hash = 0;
  r += "layer plan:\n";
  for (const LayerPlan& p : plans) {
    r += Fmt("  %3lld  ", (long long)p.layer) + DescribeLayerPlan(p) + "\n";
    if (p.role != LayerRole::kMain) continue;
    n_window += p.attention == AttentionKind::kWindow;
    n_csa += p.attention == AttentionKind::kCsa;
    n_hca += p.attention == AttentionKind::kHca;
    n_hash += p.router == RouterKind::kHash;
  }
  if (c.v41()) {
    int64_t full = 0, reindex = 0, reuse = 0;
    for (const LayerPlan& p : plans) {
      if (p.role != LayerRole::kMain || p.attention != AttentionKind::kCsa2) continue;
      full += p.csa2.kv_source;
      reindex += !p.csa2.kv_source && p.csa2.index_source;
      reuse += !p.csa2.index_source;
    }
    r +=
        Fmt("  main layers: %lld window, %lld CSA2 (%lld full, %lld reindex, %lld reuse); all "
            "scored\n",
            (long long)n_window, (long long)(full + reindex + reuse), (long long)full,
            (long long)reindex, (long long)reuse);
  } else {
    r += Fmt("  main layers: %lld window, %lld CSA, %lld HCA; %lld hash-routed, %lld scored\n",
             (long long)n_window, (long long)n_csa, (long long)n_hca, (long long)n_hash,
             (long long)(c.num_hidden_layers - n_hash));
  }
  if (Status s = c.CheckForwardSupported(); !s.ok()) {
    r += "  forward: not runnable yet — " + s.message() + "\n";
  } else {
    r += "  forward: supported\n";
  }

  r += "parameters:\n";
  r += Fmt("  total %s (%lld), main model\n", HumanCount(n.total).c_str(), (long long)n.total);
  r +=
      Fmt("  active per token %s (%lld): %lld of %lld routed experts, embedding table "
          "excluded\n",
          HumanCount(n.active).c_str(), (long long)n.active, (long long)c.num_experts_per_tok,
          (long long)c.n_routed_experts);
  if (n.experts > 0 || n.engram > 0) {
    r += Fmt("  of the total: backbone %s, routed experts %s",
             HumanCount(n.total - n.experts - n.engram).c_str(), HumanCount(n.experts).c_str());
    if (n.engram > 0) {
      r += Fmt(", Engram tables %s (%s read per token)", HumanCount(n.engram).c_str(),
               HumanCount(n.engram_active).c_str());
    }
    r += "\n";
  }
  r += Fmt("  draft module (%s) %s (%lld), not in the total\n", c.dspark() ? "DSpark" : "NextN MTP",
           HumanCount(n.mtp).c_str(), (long long)n.mtp);
  if (c.dspark()) {
    std::string targets;
    for (int64_t t : c.dspark_target_layer_ids)
      targets += (targets.empty() ? "" : ", ") + std::to_string(t);
    r +=
        Fmt("  DSpark: %lld window-only stages, block %lld tokens (noise id %d), targets [%s], "
            "Markov rank %lld; its rings hold %lld x %lld values per stage (KV table: mtp)\n",
            (long long)c.n_draft_layers(), (long long)c.dspark_block_size, c.dspark_noise_token_id,
            targets.c_str(), (long long)c.dspark_markov_rank, (long long)c.sliding_window,
            (long long)c.head_dim);
  }
  if (n.measured && n.mtp > 0) {
    r += Fmt("  draft tensors in the checkpoint: %s\n", HumanBytes(n.draft_bytes).c_str());
  }
  r += bytes_heading;
  int64_t total_bytes = 0;
  for (const auto& [name, bytes] : n.bytes_by_dtype) {
    r += Fmt("  %-10s %14lld  %s\n", name.c_str(), (long long)bytes, HumanBytes(bytes).c_str());
    total_bytes += bytes;
  }
  r +=
      Fmt("  %-10s %14lld  %s\n", "total", (long long)total_bytes, HumanBytes(total_bytes).c_str());
  return r;
}

}  // namespace

std::string InspectReport(const DeepSeekV4Config& c, const CheckpointReader* reader,
                          const std::string& source) {
  const ParameterCounts n = CountParameters(c, reader);
  return Report(c, n,
                n.measured
                    ? "bytes by dtype (measured, " + std::to_string(reader->tensors().size()) +
                          " tensors in the checkpoint):\n"
                    : "bytes by dtype (predicted from config.json; no weights read):\n",
                source);
}

Result<std::string> InspectGguf(const std::vector<const GgufFile*>& parts,
                                const std::vector<int64_t>& contexts, const GgufFile* draft) {
  RETURN_IF_ERROR(CheckContexts(contexts));
  if (parts.empty()) return InvalidArgument("InspectGguf: no file", "pass a .gguf file");
  ASSIGN_OR_RETURN(DeepSeekV4Config config, draft != nullptr
                                                ? DeepSeekV4Config::FromGguf(*parts.front(), *draft)
                                                : DeepSeekV4Config::FromGguf(*parts.front()));
  std::vector<const GgufFile*> files = parts;
  if (draft != nullptr) files.push_back(draft);
  ParameterCounts n = CountParameters(config, nullptr);
  n.bytes_by_dtype.clear();
  n.measured = true;
  int64_t n_tensors = 0;
  for (const GgufFile* part : files) {
    for (const GgufTensorInfo& t : part->ggml_tensors()) {
      const auto traits = GetGgmlTypeTraits(t.ggml_type);
      n.bytes_by_dtype[traits ? std::string(traits->name)
                              : "type " + std::to_string(t.ggml_type)] += t.nbytes;
      ++n_tensors;
    }
  }
  std::string source = parts.front()->path();
  if (parts.size() > 1) source += " (" + std::to_string(parts.size()) + "-part gguf-split set)";
  if (draft != nullptr) source += " + draft " + draft->path();
  std::string heading = "bytes by GGUF tensor type (measured, " + std::to_string(n_tensors) +
                        " tensors in the file" + (files.size() > 1 ? "s" : "") + "):\n";
  // The config's quantisation note speaks of a release's FP8; a GGUF's
  // weights are whatever types the file holds.
  std::string report = Report(config, n, heading, source);
  const std::string dense = "weights: dense unquantized";
  if (const size_t at = report.find(dense); at != std::string::npos) {
    report.replace(at, dense.size(), "weights: dense as the GGUF stores them (types below)");
  }
  return report +
         "weights: used as stored (MXFP4 experts too; with --kquant-activations f32 dsv4 "
         "repacks those to FP4 + e8m0 scales at load)\n" +
         KvCacheReport(config, contexts);
}

Result<std::string> InspectPath(const std::string& path, const std::vector<int64_t>& contexts) {
  namespace fs = std::filesystem;
  RETURN_IF_ERROR(CheckContexts(contexts));
  std::error_code ec;
  const bool is_dir = fs::is_directory(path, ec);
  const std::string config_path = is_dir ? path + "/config.json" : path;
  if (!fs::exists(config_path, ec)) {
    return NotFound(config_path + ": no such file",
                    "pass a model directory holding config.json, or a config.json file");
  }
  ASSIGN_OR_RETURN(DeepSeekV4Config config, DeepSeekV4Config::FromFile(config_path));
  std::shared_ptr<const CheckpointReader> reader;
  std::string weights_note;
  const bool has_weights = is_dir && (fs::exists(path + "/model.safetensors", ec) ||
                                      fs::exists(path + "/model.safetensors.index.json", ec));
  if (has_weights) {
    ASSIGN_OR_RETURN(auto opened, OpenCheckpointDir(path));
    reader = std::shared_ptr<const CheckpointReader>(std::move(opened));
    auto bound = BindWeights(*reader, config, BuildLayerPlans(config));
    weights_note = bound.ok()
                       ? "weights: every declared tensor bound (" + bound->naming + " names)\n"
                       : "weights: " + bound.status().message() + "\n";
  } else {
    weights_note = "weights: none (config.json only)\n";
  }
  return InspectReport(config, reader.get(), path) + weights_note + KvCacheReport(config, contexts);
}

}  // namespace dsv4::deepseek_v4
