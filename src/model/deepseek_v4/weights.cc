// Declaring, binding and multiplying DeepSeek-V4 weights (see weights.h).
#include "model/deepseek_v4/weights.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <set>

#include "base/log.h"
#include "ops/matmul.h"
#include "ops/ref/ops_ref.h"
#include "ops/ref/quant_matmul_ref.h"

namespace dsv4::deepseek_v4 {

// ---------------------------------------------------------------------------
// ForEachWeight: the declaration table (spec §7.2 names, §7.3 shapes).
// ---------------------------------------------------------------------------

void ForEachWeight(const DeepSeekV4Config& c, const std::vector<LayerPlan>& plans,
                   const std::function<void(const WeightDecl&)>& fn) {
  const int64_t V = c.vocab_size, D = c.hidden_size, C = c.hc_mult, M = c.hc_mix_dim();
  const int64_t H = c.num_attention_heads, A = c.head_dim, Q = c.q_lora_rank;
  const int64_t G = c.o_groups, O = c.o_lora_rank, E = c.n_routed_experts;
  const int64_t F = c.moe_intermediate_size, k = c.num_experts_per_tok;
  const int64_t IH = c.index_n_heads, ID = c.index_head_dim;
  using K = WeightKind;

  auto top = [&](std::string name, std::vector<int64_t> shape, K kind, bool per_token = true) {
    fn(WeightDecl{
        .name = std::move(name), .shape = std::move(shape), .kind = kind, .per_token = per_token});
  };
  top("embed.weight", {V, D}, K::kMatrix, /*per_token=*/false);  // one row is read per token
  top("head.weight", {V, D}, K::kMatrix);
  top("norm.weight", {D}, K::kVector);
  if (!c.v41()) {  // V4.1: the last FFN's lagged mix collapses the streams
    top("hc_head_fn", {C, C * D}, K::kMatrix);
    top("hc_head_base", {C}, K::kF32Param);
    top("hc_head_scale", {1}, K::kF32Param);
  }

  for (const LayerPlan& p : plans) {
    const bool mtp = p.role == LayerRole::kMtp;
    // The V4.1 DSpark stages have their own expert count.
    const int64_t El = mtp ? c.draft_routed_experts() : E;
    auto add = [&](const std::string& rel, std::vector<int64_t> shape, K kind,
                   int64_t expert = -1) {
      fn(WeightDecl{.name = p.prefix + rel,
                    .shape = std::move(shape),
                    .kind = kind,
                    .layer = p.layer,
                    .mtp = mtp,
                    .expert = expert,
                    .per_token = expert < 0});
    };
    if (mtp && c.v41()) {  // the V4.1 reference DSparkBlock
      const int64_t stage = p.layer - c.num_hidden_layers, n_stages = c.n_draft_layers();
      const int64_t nT = static_cast<int64_t>(c.dspark_target_layer_ids.size());
      const int64_t r = c.dspark_markov_rank;
      if (stage == 0) {
        add("main_proj.weight", {D, nT * D}, K::kLinear);
        add("main_norm.weight", {D}, K::kVector);
      }
      if (stage == n_stages - 1) {
        add("norm.weight", {D}, K::kVector);
        add("markov_head.embed.weight", {V, r}, K::kMatrix);
        add("markov_head.head.weight", {V, r}, K::kMatrix);
        add("confidence_head.proj.weight", {1, D + r}, K::kVector);
      }
    } else if (mtp && c.dspark()) {  // spec §13.3
      const int64_t stage = p.layer - c.num_hidden_layers, n_stages = c.n_draft_layers();
      const int64_t nT = static_cast<int64_t>(c.dspark_target_layer_ids.size());
      const int64_t r = c.dspark_markov_rank;
      if (stage == 0) {
        add("main_proj.weight", {D, nT * D}, K::kLinear);
        add("main_norm.weight", {D}, K::kVector);
      }
      if (stage == n_stages - 1) {
        add("norm.weight", {D}, K::kVector);
        add("hc_head_fn", {C, C * D}, K::kMatrix);
        add("hc_head_base", {C}, K::kF32Param);
        add("hc_head_scale", {1}, K::kF32Param);
        add("markov_head.markov_w1.weight", {V, r}, K::kMatrix);
        add("markov_head.markov_w2.weight", {V, r}, K::kMatrix);
        add("confidence_head.proj.weight", {1, D + r}, K::kVector);
      }
    } else if (mtp) {  // spec §6.3
      add("e_proj.weight", {D, D}, K::kLinear);
      add("h_proj.weight", {D, D}, K::kLinear);
      add("enorm.weight", {D}, K::kVector);
      add("hnorm.weight", {D}, K::kVector);
      add("norm.weight", {D}, K::kVector);
      add("hc_head_fn", {C, C * D}, K::kMatrix);
      add("hc_head_base", {C}, K::kF32Param);
      add("hc_head_scale", {1}, K::kF32Param);
    }
    add("attn_norm.weight", {D}, K::kVector);
    add("ffn_norm.weight", {D}, K::kVector);
    add("hc_attn_fn", {M, C * D}, K::kMatrix);
    add("hc_attn_base", {M}, K::kF32Param);
    add("hc_attn_scale", {3}, K::kF32Param);
    add("hc_ffn_fn", {M, C * D}, K::kMatrix);
    add("hc_ffn_base", {M}, K::kF32Param);
    add("hc_ffn_scale", {3}, K::kF32Param);

    // Attention (spec §4.1, §4.7).
    add("attn.wq_a.weight", {Q, D}, K::kLinear);
    add("attn.q_norm.weight", {Q}, K::kVector);
    add("attn.wq_b.weight", {H * A, Q}, K::kLinear);
    add("attn.wkv.weight", {A, D}, K::kLinear);
    add("attn.kv_norm.weight", {A}, K::kVector);
    add("attn.wo_a.weight", {G * O, H / G * A}, K::kLinear);
    add("attn.wo_b.weight", {D, G * O}, K::kLinear);
    add("attn.attn_sink", {H}, K::kF32Param);
    if (p.compress_ratio > 0 && p.attention != AttentionKind::kCsa2) {  // spec §4.4
      const int64_t r = p.compress_ratio, cf = r == 4 ? 2 : 1;
      add("attn.compressor.wkv.weight", {cf * A, D}, K::kMatrix);
      add("attn.compressor.wgate.weight", {cf * A, D}, K::kMatrix);
      add("attn.compressor.ape", {r, cf * A}, K::kF32Param);
      add("attn.compressor.norm.weight", {A}, K::kVector);
    }
    if (p.attention == AttentionKind::kCsa2) {  // V4.1 reference Compressor, Indexer
      const Csa2Roles& r = p.csa2;
      if (r.kv_source) {
        add("attn.compressor.wkv.weight", {A, D}, K::kMatrix);
        if (p.compress_ratio > 1) add("attn.compressor.wgate.weight", {A, D}, K::kMatrix);
        add("attn.compressor.norm.weight", {A}, K::kVector);
      }
      if (r.index_source) {
        add("attn.indexer.wq_b.weight", {IH * ID, Q}, K::kLinear);
        add("attn.indexer.weights_proj.weight", {IH, D}, K::kMatrix);
      }
      if (r.owns_index_keys) {
        add("attn.indexer.wk.weight", {ID, A}, K::kMatrix);
        add("attn.indexer.k_norm.weight", {ID}, K::kVector);
      }
    }
    if (p.engram >= 0) {  // V4.1 reference Engram
      const int64_t rows = c.engram_num_embeddings[p.engram], Dh = c.engram_head_dim;
      const int64_t cols = (c.engram_max_ngram_size - 1) * c.engram_n_heads;
      fn(WeightDecl{.name = p.prefix + "engram.embed.weight",
                    .shape = {rows, Dh},
                    .kind = K::kEngramTable,
                    .layer = p.layer,
                    .per_token = false});
      add("engram.wkv.weight", {(C + 1) * D, cols * Dh}, K::kLinear);
      add("engram.q_weight", {C, D}, K::kF32Param);
      add("engram.k_weight", {C, D}, K::kF32Param);
    }
    if (p.has_indexer) {  // spec §4.5
      add("attn.indexer.wq_b.weight", {IH * ID, Q}, K::kLinear);
      add("attn.indexer.weights_proj.weight", {IH, D}, K::kMatrix);
      add("attn.indexer.compressor.wkv.weight", {2 * ID, D}, K::kMatrix);
      add("attn.indexer.compressor.wgate.weight", {2 * ID, D}, K::kMatrix);
      add("attn.indexer.compressor.ape", {p.compress_ratio, 2 * ID}, K::kF32Param);
      add("attn.indexer.compressor.norm.weight", {ID}, K::kVector);
    }

    // MoE (spec §5).
    add("ffn.gate.weight", {El, D}, K::kMatrix);
    if (p.router == RouterKind::kHash) {
      add("ffn.gate.tid2eid", {V, k}, K::kIndexTable);
    } else {
      add("ffn.gate.bias", {El}, K::kF32Param);
    }
    for (int64_t e = 0; e < El; ++e) {
      const std::string x = "ffn.experts." + std::to_string(e) + ".";
      add(x + "w1.weight", {F, D}, K::kExpertLinear, e);
      add(x + "w2.weight", {D, F}, K::kExpertLinear, e);
      add(x + "w3.weight", {F, D}, K::kExpertLinear, e);
    }
    add("ffn.shared_experts.w1.weight", {F, D}, K::kLinear);
    add("ffn.shared_experts.w2.weight", {D, F}, K::kLinear);
    add("ffn.shared_experts.w3.weight", {F, D}, K::kLinear);
  }
}

DType PredictedDType(const DeepSeekV4Config& c, WeightKind kind) {
  switch (kind) {
    case WeightKind::kLinear:
      return c.dense_fp8() ? DType::kFp8E4m3 : DType::kBF16;
    case WeightKind::kExpertLinear:
      if (c.expert_dtype == ExpertDType::kFp4) return DType::kFp4E2m1;
      if (c.expert_dtype == ExpertDType::kFp8 || c.dense_fp8()) return DType::kFp8E4m3;
      return DType::kBF16;
    case WeightKind::kMatrix:
    case WeightKind::kVector:
      return DType::kBF16;
    case WeightKind::kF32Param:
      return DType::kF32;
    case WeightKind::kIndexTable:
      return DType::kI64;
    case WeightKind::kEngramTable:
      return DType::kFp8E4m3;
  }
  return DType::kBF16;
}

DType PredictedScaleDType(const DeepSeekV4Config& c, WeightKind kind) {
  if (PredictedDType(c, kind) == DType::kFp4E2m1) return DType::kE8m0;
  return c.quantization_config.scale_fmt.empty() ? DType::kF32 : DType::kE8m0;
}

// ---------------------------------------------------------------------------
// LinearRows: one dispatch on the stored format.
// ---------------------------------------------------------------------------

namespace {

// Rows [row_begin, row_end) of one product, on the calling thread.
void LinearRowsHere(float* out, int64_t out_stride, const float* x, const LinearWeight& w,
                    int64_t n_tokens, int64_t row_begin, int64_t row_end,
                    const ops::PreparedActivations* prepared = nullptr) {
  switch (w.format) {
    case LinearFormat::kDense:
      ops::MatMulRows(out, out_stride, x, w.weight, n_tokens, row_begin, row_end, prepared);
      return;
    case LinearFormat::kFp8Block:
      ops::MatMulFp8BlockRows(out, out_stride, x, w.weight, w.scale, n_tokens, row_begin, row_end,
                              w.fp8_block);
      return;
    case LinearFormat::kFp4Block:
      ops::MatMulFp4BlockRows(out, out_stride, x, w.weight, w.scale, n_tokens, row_begin, row_end);
      return;
  }
}

}  // namespace

void LinearRows(ThreadPool& pool, float* out, int64_t out_stride, const float* x,
                const LinearWeight& w, int64_t n_tokens, int64_t row_begin, int64_t row_end) {
  CHECK(0 <= row_begin && row_begin <= row_end && row_end <= w.rows(),
        "LinearRows: rows [%lld, %lld) of %s", static_cast<long long>(row_begin),
        static_cast<long long>(row_end), w.weight.ShapeString().c_str());
  const int64_t grain = ops::RowGrain(w.cols() * n_tokens);
  // GGUF quant weights: quantised once for every chunk. The workers reach the
  // caller's thread_local through this reference (by name, each would see its own).
  thread_local ops::PreparedActivations own;
  ops::PreparedActivations& prepared = own;
  if (w.format == LinearFormat::kDense) prepared.Prepare(x, n_tokens, w.cols(), w.weight.dtype);
  pool.ParallelFor(
      row_end - row_begin,
      [&](int64_t b, int64_t e, int) {
        LinearRowsHere(out + b, out_stride, x, w, n_tokens, row_begin + b, row_begin + e,
                       &prepared);
      },
      grain);
}

namespace {

// What one row of w costs a LinearMany call of n_tokens tokens, in quarter
// multiply-adds: its multiply-adds, or, where more, its bytes (weights and
// block scales). A product of a few tokens is bound by memory: a decoded
// token's FP8 shared expert reads twice the bytes of an FP4 routed expert for
// the same multiply-adds, and splitting by multiply-adds left one thread well
// behind the other in the MoE step.
int64_t RowCost(const LinearWeight& w, int64_t n_tokens) {
  if (n_tokens == 0) return 0;  // nothing to compute, nothing read
  // A CPU's matvecs stream bytes about a quarter as fast as its tiles do
  // multiply-adds (memory roof against FMA roof): a byte costs about 4
  // multiply-adds. An FP4 row also converts its K/32 scales (FP8 rows share
  // theirs per 128 rows): fitted to the two MoE steps of a decoded token (FP4
  // rows of 2048 and 1024 inputs beside FP8 rows, 2 threads), that costs as
  // much as 128 more bytes; weighing the scales alone left the FP4 side last.
  const int64_t k = w.cols();
  int64_t bytes = DTypeBytes(w.weight.dtype, k);
  if (w.format == LinearFormat::kFp4Block) bytes += k / 32 + 128;
  const int64_t byte_cost = 16 * bytes;
  return std::max(4 * k * n_tokens, byte_cost);
}

}  // namespace

void LinearMany(ThreadPool& pool, std::span<const LinearJob> jobs,
                std::vector<int64_t>& row_offsets) {
  // The jobs' costs laid end to end: job i covers [start[i], start[i + 1]),
  // row r of it starts at start[i] + r · (its cost per row, RowCost). The
  // pool splits that range evenly, so threads get equal work even when the
  // jobs' token counts or weight formats differ (a MoE step in prefill, the
  // FP8 shared expert beside FP4 routed ones in decode); a row goes to the
  // thread whose range holds the start of its cost.
  std::vector<int64_t>& start = row_offsets;
  start.resize(jobs.size() + 1);
  start[0] = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const LinearJob& j = jobs[i];
    const int64_t end = j.row_end < 0 ? j.w->rows() : j.row_end;
    CHECK(0 <= j.row_begin && j.row_begin <= end && end <= j.w->rows(),
          "LinearMany: rows [%lld, %lld) of %s", static_cast<long long>(j.row_begin),
          static_cast<long long>(end), j.w->weight.ShapeString().c_str());
    start[i + 1] = start[i] + (end - j.row_begin) * RowCost(*j.w, j.n_tokens);
  }
  const int64_t total = start[jobs.size()];
  if (total == 0) return;
  // GGUF quant weights: each job's activations quantised once, not per chunk,
  // and a job whose input and weight type are the previous job's (an
  // expert's w1 and w3) takes that job's. The workers reach the caller's
  // thread_locals through these references (by name, each would see its own).
  thread_local std::vector<ops::PreparedActivations> own;
  thread_local std::vector<const ops::PreparedActivations*> own_for_job;
  std::vector<ops::PreparedActivations>& prepared = own;
  std::vector<const ops::PreparedActivations*>& for_job = own_for_job;
  if (prepared.size() < jobs.size()) prepared.resize(jobs.size());
  for_job.assign(jobs.size(), nullptr);
  for (size_t i = 0; i < jobs.size(); ++i) {
    const LinearJob& j = jobs[i];
    prepared[i].Reset();
    if (j.w->format != LinearFormat::kDense || start[i + 1] == start[i]) continue;
    if (i > 0 && for_job[i - 1] != nullptr &&
        for_job[i - 1]->For(j.x, j.n_tokens, j.w->weight) != nullptr) {
      for_job[i] = for_job[i - 1];
      continue;
    }
    prepared[i].Prepare(j.x, j.n_tokens, j.w->cols(), j.w->weight.dtype);
    for_job[i] = &prepared[i];
  }
  pool.ParallelFor(
      total,
      [&](int64_t b, int64_t e, int) {
        for (size_t i = 0; i < jobs.size(); ++i) {
          if (start[i + 1] == start[i] || start[i + 1] <= b || start[i] >= e) continue;
          const LinearJob& j = jobs[i];
          const int64_t per_row = RowCost(*j.w, j.n_tokens);
          const int64_t rows = (start[i + 1] - start[i]) / per_row;
          // First rows whose cost starts at or after b, and at or after e.
          const auto first_at = [&](int64_t at) {
            return std::clamp<int64_t>((at - start[i] + per_row - 1) / per_row, 0, rows);
          };
          const int64_t lo = b <= start[i] ? 0 : first_at(b);
          const int64_t hi = first_at(e);
          if (lo >= hi) continue;
          const int64_t stride = j.out_stride > 0 ? j.out_stride : rows;
          LinearRowsHere(j.out + lo, stride, j.x, *j.w, j.n_tokens, j.row_begin + lo,
                         j.row_begin + hi, for_job[i]);
        }
      },
      4 * ops::kMinMacsPerChunk,     // RowCost counts quarter multiply-adds
      jobs.front().w->weight.data);  // each set of matrices balances its own split
}

// ---------------------------------------------------------------------------
// Binding
// ---------------------------------------------------------------------------

namespace {

bool IsFloatDType(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }
bool IsDenseMatrixDType(DType t) { return IsFloatDType(t) || IsGgmlQuant(t); }

std::string Shape(const std::vector<int64_t>& s) { return ShapeToString(s); }

const char* KindExpectation(WeightKind kind) {
  switch (kind) {
    case WeightKind::kLinear:
      return "f32/bf16/f16, or fp8_e4m3 with an e8m0/f32 `.scale` per 128x128 block";
    case WeightKind::kExpertLinear:
      return "f32/bf16/f16, fp8_e4m3 + 128x128 `.scale`, or FP4 e2m1 packed as i8 [N, K/2] + "
             "e8m0 `.scale` [N, K/32]";
    case WeightKind::kMatrix:
      return "f32, bf16 or f16";
    case WeightKind::kVector:
      return "f32 (bf16/f16 accepted)";
    case WeightKind::kF32Param:
      return "f32 (bf16/f16 and ggml quant types accepted)";
    case WeightKind::kIndexTable:
      return "i64 or i32";
    case WeightKind::kEngramTable:
      return "fp8_e4m3 with an e8m0 `.scale` [rows, Dh/32], or f32/bf16/f16";
  }
  return "?";
}

// One bound tensor: a view (+ scale) or a small copy.
struct Bound {
  TensorView view;
  TensorView scale;
  LinearFormat format = LinearFormat::kDense;
  int64_t fp8_block = 128;  // LinearWeight::fp8_block
  std::vector<float> f32;
  std::vector<int32_t> i32;
};

class Binder {
 public:
  Binder(const CheckpointReader& reader, const DeepSeekV4Config& config,
         std::span<const NameScheme> schemes)
      : reader_(reader), config_(config), schemes_(schemes) {}

  void Bind(const WeightDecl& d) {
    const std::vector<CandidateName> candidates = CandidateNames(d.name, schemes_);
    const CandidateName* found = nullptr;
    const TensorInfo* info = nullptr;
    for (const CandidateName& c : candidates) {
      info = reader_.Find(c.resolved.name);
      if (info != nullptr) {
        found = &c;
        break;
      }
    }
    if (found == nullptr) {
      // A stacked tensor (GGUF experts) is reported once, not once per expert.
      if (candidates.size() == 1 && candidates[0].resolved.expert >= 0 &&
          candidates[0].scheme == NameScheme::kGguf &&
          !stacked_reported_.insert(candidates[0].resolved.name).second) {
        return;
      }
      std::string tried;
      for (const CandidateName& c : candidates) {
        if (tried.find("'" + c.resolved.name + "'") != std::string::npos) continue;
        tried += (tried.empty() ? "" : ", ") + ("'" + c.resolved.name + "'");
      }
      missing_.push_back(d.name + (tried.empty() ? "" : " (looked for " + tried + ")"));
      return;
    }
    NoteSpelling(candidates, found->resolved.name);
    consumed_.insert(info->name);
    const ResolvedName& resolved = found->resolved;
    Bound b;
    bool ok = true;
    if (resolved.hf_stack != HfStack::kNone) {
      ok = BindStacked(d, resolved, *info, b);
    } else if (found->scheme == NameScheme::kGguf && resolved.expert >= 0) {
      ok = BindGgufExpert(d, resolved, *info, b);
    } else {
      switch (d.kind) {
        case WeightKind::kLinear:
        case WeightKind::kExpertLinear:
          ok = BindLinear(d, *info, b);
          break;
        case WeightKind::kMatrix:
          ok = Expect(d, *info, IsDenseMatrixDType(info->dtype));
          if (ok) b.view = info->view();
          break;
        case WeightKind::kVector:
        case WeightKind::kF32Param:
          // llama-quantize quantises every 2-D `*.weight` of a GGUF, the
          // compressors' ape tables included: a parameter of a ggml quant type
          // is dequantised like a float one.
          ok = Expect(d, *info,
                      IsFloatDType(info->dtype) ||
                          (d.kind == WeightKind::kF32Param && IsGgmlQuant(info->dtype)));
          if (ok) {
            b.f32.resize(info->view().numel());
            DequantizeRow(info->dtype, info->data, static_cast<int64_t>(b.f32.size()),
                          b.f32.data());
          }
          break;
        case WeightKind::kIndexTable:
          ok = Expect(d, *info, info->dtype == DType::kI64 || info->dtype == DType::kI32);
          if (ok) ok = CopyIndexTable(d, *info, b);
          break;
        case WeightKind::kEngramTable:
          ok = Expect(d, *info, IsFloatDType(info->dtype) || info->dtype == DType::kFp8E4m3);
          if (ok) {
            b.view = info->view();
            if (info->dtype == DType::kFp8E4m3) {
              ok = BindScale(d, *info, {{d.shape[0], d.shape[1] / 32}}, true, b);
            }
          }
          break;
      }
    }
    if (ok) bound_.emplace(d.name, std::move(b));
  }

  // The spelling of the bound tensors (ModelWeights::naming).
  std::string Naming() const {
    for (NameScheme s : schemes_) {
      if (spelled_all_[static_cast<int>(s)]) return std::string(NameSchemeName(s));
    }
    std::string used;
    for (NameScheme s : schemes_) {
      if (!spelled_some_[static_cast<int>(s)]) continue;
      used += (used.empty() ? "" : ", ") + std::string(NameSchemeName(s));
    }
    return "mixed (" + used + ")";
  }

  Bound& Get(const std::string& name) {
    auto it = bound_.find(name);
    CHECK(it != bound_.end(), "weight '%s' was not bound", name.c_str());
    return it->second;
  }

  Status Finish() const {
    if (missing_.empty() && problems_.empty()) return Status::Ok();
    std::string msg =
        reader_.path() + ": cannot bind the DeepSeek-V4 weights (" + Naming() + " tensor names)";
    if (!missing_.empty()) {
      msg += "\n  " + std::to_string(missing_.size()) + " tensor(s) missing:";
      ListSome(msg, missing_);
      // What the file has that no declared tensor took: usually the missing
      // tensors under a spelling dsv4 does not know.
      std::vector<std::string> unmatched;
      for (const TensorInfo& t : reader_.tensors()) {
        if (!consumed_.contains(t.name)) unmatched.push_back(t.name);
      }
      if (!unmatched.empty()) {
        msg += "\n  " + std::to_string(unmatched.size()) +
               " tensor(s) in the file matched no declared name:";
        ListSome(msg, unmatched);
      }
    }
    for (const std::string& p : problems_) msg += "\n  " + p;
    const std::string hint =
        "the checkpoint does not match its config.json (layer count, sizes, compress_ratios, "
        "num_hash_layers) or is incomplete";
    return missing_.empty() ? InvalidArgument(msg, hint) : NotFound(msg, hint);
  }

 private:
  bool Expect(const WeightDecl& d, const TensorInfo& info, bool dtype_ok) {
    if (dtype_ok && info.shape == d.shape) return true;
    problems_.push_back("tensor '" + info.name + "' is " + Shape(info.shape) + " " +
                        std::string(DTypeName(info.dtype)) + ", expected " + Shape(d.shape) + " " +
                        KindExpectation(d.kind));
    return false;
  }

  static void ListSome(std::string& msg, const std::vector<std::string>& names) {
    constexpr size_t kShown = 24;
    for (size_t i = 0; i < names.size() && i < kShown; ++i) msg += "\n    " + names[i];
    if (names.size() > kShown) {
      msg += "\n    ... and " + std::to_string(names.size() - kShown) + " more";
    }
  }

  // Records which spellings name a found tensor `name`.
  void NoteSpelling(const std::vector<CandidateName>& candidates, const std::string& name) {
    std::array<bool, kNSchemes> spells{};
    for (const CandidateName& c : candidates) {
      if (c.resolved.name == name) spells[static_cast<int>(c.scheme)] = true;
    }
    bool first = true;
    for (NameScheme s : schemes_) {
      const int i = static_cast<int>(s);
      spelled_all_[i] = spelled_all_[i] && spells[i];
      // The first spelling that names it (the one the binder tried first).
      if (spells[i] && first) spelled_some_[i] = true;
      first = first && !spells[i];
    }
  }

  // Finds the `.scale` companion of a quantized weight and checks it: its
  // shape one of `wants` (*which: the index of the first it equals).
  bool BindScale(const WeightDecl& d, const TensorInfo& info,
                 const std::vector<std::vector<int64_t>>& wants, bool fp4, Bound& b,
                 size_t* which = nullptr) {
    std::string official = d.name;
    official.replace(official.size() - std::string(".weight").size(), std::string::npos, ".scale");
    const TensorInfo* s = nullptr;
    const std::vector<CandidateName> candidates = CandidateNames(official, schemes_);
    for (const CandidateName& c : candidates) {
      s = reader_.Find(c.resolved.name);
      if (s != nullptr) {
        NoteSpelling(candidates, s->name);
        consumed_.insert(s->name);
        break;
      }
    }
    if (s == nullptr) {
      missing_.push_back(official + " (the block scales of " + std::string(DTypeName(info.dtype)) +
                         " '" + info.name + "')");
      return false;
    }
    const bool dtype_ok =
        s->dtype == DType::kE8m0 || (!fp4 && (s->dtype == DType::kF32 || s->dtype == DType::kBF16));
    const auto match = std::find(wants.begin(), wants.end(), s->shape);
    if (!dtype_ok || match == wants.end()) {
      std::string expected;
      if (fp4) {
        expected = Shape(wants[0]) + " e8m0 (one per 32 inputs)";
      } else {  // FP8: wants are the 128×128 and 32×32 tilings
        expected = Shape(wants[0]) + " (one per 128x128) or " + Shape(wants[1]) +
                   " (one per 32x32), e8m0 or f32";
      }
      problems_.push_back("scale '" + s->name + "' of '" + info.name + "' is " + Shape(s->shape) +
                          " " + std::string(DTypeName(s->dtype)) + ", expected " + expected);
      return false;
    }
    if (which != nullptr) *which = static_cast<size_t>(match - wants.begin());
    b.scale = s->view();
    return true;
  }

  bool BindLinear(const WeightDecl& d, const TensorInfo& info, Bound& b) {
    const int64_t n = d.shape[0], k = d.shape[1];
    if (IsDenseMatrixDType(info.dtype)) {
      if (!Expect(d, info, true)) return false;
      b.view = info.view();
      b.format = LinearFormat::kDense;
      return true;
    }
    if (info.dtype == DType::kFp8E4m3) {
      if (!Expect(d, info, true)) return false;
      b.view = info.view();
      b.format = LinearFormat::kFp8Block;
      // The scale's shape says the tiling: [ceil(N/128), ceil(K/128)] or
      // [ceil(N/32), ceil(K/32)] (DeepSeek-V4.1-Flash). Where the two are
      // the same (N, K ≤ 32: one scale) they give the same products; 128.
      const std::vector<int64_t> blocks = {ops::ref::kFp8WeightBlock,
                                           ops::ref::kFp8SmallWeightBlock};
      std::vector<std::vector<int64_t>> wants;
      for (const int64_t blk : blocks) wants.push_back({(n + blk - 1) / blk, (k + blk - 1) / blk});
      size_t which = 0;
      if (!BindScale(d, info, wants, false, b, &which)) return false;
      b.fp8_block = blocks[which];
      return true;
    }
    // FP4 e2m1, two per byte: stored as I8 [N, K/2] in the official checkpoints
    // (torch float4_e2m1fn_x2), or already typed fp4 with the logical shape.
    const bool fp4_packed_i8 =
        info.dtype == DType::kI8 && k % 2 == 0 && info.shape == std::vector<int64_t>{n, k / 2};
    const bool fp4_typed = info.dtype == DType::kFp4E2m1 && info.shape == d.shape;
    if (d.kind == WeightKind::kExpertLinear && (fp4_packed_i8 || fp4_typed)) {
      if (k % ops::ref::kFp4WeightBlock != 0) {
        problems_.push_back("FP4 tensor '" + info.name + "' has " + std::to_string(k) +
                            " inputs, not a multiple of the 32-element scale block");
        return false;
      }
      b.view = TensorView::Contiguous(info.data, DType::kFp4E2m1, {n, k});
      b.format = LinearFormat::kFp4Block;
      return BindScale(d, info, {{n, k / ops::ref::kFp4WeightBlock}}, true, b);
    }
    return Expect(d, info, false);
  }

  // HF stacked routed experts: gate_up_proj [E, 2F, D] and down_proj [E, D, F].
  bool BindStacked(const WeightDecl& d, const ResolvedName& r, const TensorInfo& info, Bound& b) {
    const int64_t E = config_.n_routed_experts, F = config_.moe_intermediate_size;
    const int64_t D = config_.hidden_size;
    const std::vector<int64_t> want = r.hf_stack == HfStack::kWhole
                                          ? std::vector<int64_t>{E, D, F}
                                          : std::vector<int64_t>{E, 2 * F, D};
    if (!IsFloatDType(info.dtype) || info.shape != want) {
      if (stacked_reported_.insert(info.name).second) {
        problems_.push_back("tensor '" + info.name + "' is " + Shape(info.shape) + " " +
                            std::string(DTypeName(info.dtype)) + ", expected " + Shape(want) +
                            " f32/bf16/f16 (quantized stacked HF experts are not supported)");
      }
      return false;
    }
    const TensorView expert = info.view()[r.expert];
    switch (r.hf_stack) {
      case HfStack::kGateHalf:
        b.view = expert.Slice(0, F);
        break;
      case HfStack::kUpHalf:
        b.view = expert.Slice(F, 2 * F);
        break;
      case HfStack::kWhole:
        b.view = expert;
        break;
      case HfStack::kNone:
        break;
    }
    b.format = LinearFormat::kDense;
    return true;
  }

  // GGUF routed experts: one [E, N, K] tensor a layer per projection — mxfp4
  // as stored or any other GGUF or float dtype, or FP4 codes I8 [E, N, K/2]
  // with e8m0 scales `<base>.scale` [E, N, K/32] (the MXFP4 split of
  // gguf_reader.h); expert `r.expert` is a slice of it.
  bool BindGgufExpert(const WeightDecl& d, const ResolvedName& r, const TensorInfo& info,
                      Bound& b) {
    const int64_t E = config_.n_routed_experts, n = d.shape[0], k = d.shape[1];
    const bool fp4 = info.dtype == DType::kI8 && k % ops::ref::kFp4WeightBlock == 0 &&
                     info.shape == std::vector<int64_t>{E, n, k / 2};
    const bool dense =
        IsDenseMatrixDType(info.dtype) && info.shape == std::vector<int64_t>{E, n, k};
    if (!fp4 && !dense) {
      if (stacked_reported_.insert(info.name).second) {
        problems_.push_back("tensor '" + info.name + "' is " + Shape(info.shape) + " " +
                            std::string(DTypeName(info.dtype)) + ", expected " + Shape({E, n, k}) +
                            " (mxfp4 or another GGUF type; f32/bf16/f16): " + std::to_string(E) +
                            " experts of " + Shape(d.shape));
      }
      return false;
    }
    if (dense) {
      b.view = info.view()[r.expert];
      b.format = LinearFormat::kDense;
      return true;
    }
    const std::string base = info.name.substr(0, info.name.size() - std::string(".weight").size());
    const TensorInfo* s = reader_.Find(base + ".scale");
    const std::vector<int64_t> want = {E, n, k / ops::ref::kFp4WeightBlock};
    if (s == nullptr || s->dtype != DType::kE8m0 || s->shape != want) {
      if (stacked_reported_.insert(base + ".scale").second) {
        problems_.push_back("tensor '" + info.name + "' has no e8m0 scales " + Shape(want) +
                            " beside it (an MXFP4 tensor's, split at load)");
      }
      return false;
    }
    consumed_.insert(s->name);
    const auto* codes = static_cast<const uint8_t*>(info.data);
    const auto* scales = static_cast<const uint8_t*>(s->data);
    b.view = TensorView::Contiguous(codes + r.expert * n * (k / 2), DType::kFp4E2m1, {n, k});
    b.scale = TensorView::Contiguous(scales + r.expert * n * (k / ops::ref::kFp4WeightBlock),
                                     DType::kE8m0, {n, k / ops::ref::kFp4WeightBlock});
    b.format = LinearFormat::kFp4Block;
    return true;
  }

  bool CopyIndexTable(const WeightDecl& d, const TensorInfo& info, Bound& b) {
    const int64_t n = info.view().numel();
    b.i32.resize(n);
    const int64_t E = config_.n_routed_experts;
    for (int64_t i = 0; i < n; ++i) {
      int64_t v;
      if (info.dtype == DType::kI64) {
        std::memcpy(&v, static_cast<const uint8_t*>(info.data) + 8 * i, 8);
      } else {
        int32_t v32;
        std::memcpy(&v32, static_cast<const uint8_t*>(info.data) + 4 * i, 4);
        v = v32;
      }
      if (v < 0 || v >= E) {
        problems_.push_back("tensor '" + info.name + "' entry [" + std::to_string(i / d.shape[1]) +
                            ", " + std::to_string(i % d.shape[1]) + "] = " + std::to_string(v) +
                            " is not an expert id in [0, " + std::to_string(E) + ")");
        return false;
      }
      b.i32[i] = static_cast<int32_t>(v);
    }
    return true;
  }

  static constexpr int kNSchemes = static_cast<int>(NameScheme::kGguf) + 1;
  const CheckpointReader& reader_;
  const DeepSeekV4Config& config_;
  std::span<const NameScheme> schemes_;
  std::array<bool, kNSchemes> spelled_all_ = {true, true, true, true};
  std::array<bool, kNSchemes> spelled_some_{};
  std::set<std::string> consumed_;  // file tensors a declaration took
  std::map<std::string, Bound> bound_;
  std::vector<std::string> missing_;
  std::vector<std::string> problems_;
  std::set<std::string> stacked_reported_;
};

LinearWeight TakeLinear(Binder& b, const std::string& name) {
  Bound& x = b.Get(name);
  return LinearWeight{
      .weight = x.view, .scale = x.scale, .format = x.format, .fp8_block = x.fp8_block};
}

HyperConnectionWeights TakeHc(Binder& b, const std::string& fn, const std::string& base,
                              const std::string& scale) {
  return HyperConnectionWeights{.fn = b.Get(fn).view,
                                .base = std::move(b.Get(base).f32),
                                .scale = std::move(b.Get(scale).f32)};
}

CompressorWeights TakeCompressor(Binder& b, const std::string& prefix) {
  return CompressorWeights{.wkv = b.Get(prefix + "wkv.weight").view,
                           .wgate = b.Get(prefix + "wgate.weight").view,
                           .ape = std::move(b.Get(prefix + "ape").f32),
                           .norm = std::move(b.Get(prefix + "norm.weight").f32)};
}

LayerWeights TakeLayer(Binder& binder, const DeepSeekV4Config& c, const LayerPlan& p) {
  const std::string& x = p.prefix;
  LayerWeights l;
  l.attn_norm = std::move(binder.Get(x + "attn_norm.weight").f32);
  l.ffn_norm = std::move(binder.Get(x + "ffn_norm.weight").f32);
  l.hc_attn = TakeHc(binder, x + "hc_attn_fn", x + "hc_attn_base", x + "hc_attn_scale");
  l.hc_ffn = TakeHc(binder, x + "hc_ffn_fn", x + "hc_ffn_base", x + "hc_ffn_scale");
  AttentionWeights& a = l.attn;
  a.wq_a = TakeLinear(binder, x + "attn.wq_a.weight");
  a.q_norm = std::move(binder.Get(x + "attn.q_norm.weight").f32);
  a.wq_b = TakeLinear(binder, x + "attn.wq_b.weight");
  a.wkv = TakeLinear(binder, x + "attn.wkv.weight");
  a.kv_norm = std::move(binder.Get(x + "attn.kv_norm.weight").f32);
  a.wo_a = TakeLinear(binder, x + "attn.wo_a.weight");
  a.wo_b = TakeLinear(binder, x + "attn.wo_b.weight");
  a.attn_sink = std::move(binder.Get(x + "attn.attn_sink").f32);
  if (p.compress_ratio > 0 && p.attention != AttentionKind::kCsa2) {
    a.compressor = TakeCompressor(binder, x + "attn.compressor.");
  }
  if (p.attention == AttentionKind::kCsa2) {
    const Csa2Roles& r = p.csa2;
    if (r.kv_source) {
      a.compressor.wkv = binder.Get(x + "attn.compressor.wkv.weight").view;
      if (p.compress_ratio > 1) {
        a.compressor.wgate = binder.Get(x + "attn.compressor.wgate.weight").view;
      }
      a.compressor.norm = std::move(binder.Get(x + "attn.compressor.norm.weight").f32);
    }
    if (r.index_source) {
      a.indexer.wq_b = TakeLinear(binder, x + "attn.indexer.wq_b.weight");
      a.indexer.weights_proj = binder.Get(x + "attn.indexer.weights_proj.weight").view;
    }
    if (r.owns_index_keys) {
      a.indexer.wk = binder.Get(x + "attn.indexer.wk.weight").view;
      a.indexer.k_norm = std::move(binder.Get(x + "attn.indexer.k_norm.weight").f32);
    }
  }
  if (p.engram >= 0) {
    Bound& t = binder.Get(x + "engram.embed.weight");
    l.engram.embed = t.view;
    l.engram.embed_scale = t.scale;
    l.engram.wkv = TakeLinear(binder, x + "engram.wkv.weight");
    l.engram.qk = std::move(binder.Get(x + "engram.q_weight").f32);
    const std::vector<float>& kw = binder.Get(x + "engram.k_weight").f32;
    for (size_t i = 0; i < l.engram.qk.size(); ++i) l.engram.qk[i] *= kw[i];
  }
  if (p.has_indexer) {
    a.indexer.wq_b = TakeLinear(binder, x + "attn.indexer.wq_b.weight");
    a.indexer.weights_proj = binder.Get(x + "attn.indexer.weights_proj.weight").view;
    a.indexer.compressor = TakeCompressor(binder, x + "attn.indexer.compressor.");
  }
  MoeWeights& m = l.moe;
  m.gate = binder.Get(x + "ffn.gate.weight").view;
  if (p.router == RouterKind::kHash) {
    m.tid2eid = std::move(binder.Get(x + "ffn.gate.tid2eid").i32);
  } else {
    m.bias = std::move(binder.Get(x + "ffn.gate.bias").f32);
  }
  const int64_t E = p.role == LayerRole::kMtp ? c.draft_routed_experts() : c.n_routed_experts;
  for (int64_t e = 0; e < E; ++e) {
    const std::string ex = x + "ffn.experts." + std::to_string(e) + ".";
    m.experts.push_back(ExpertWeights{.w1 = TakeLinear(binder, ex + "w1.weight"),
                                      .w3 = TakeLinear(binder, ex + "w3.weight"),
                                      .w2 = TakeLinear(binder, ex + "w2.weight")});
  }
  m.shared = ExpertWeights{.w1 = TakeLinear(binder, x + "ffn.shared_experts.w1.weight"),
                           .w3 = TakeLinear(binder, x + "ffn.shared_experts.w3.weight"),
                           .w2 = TakeLinear(binder, x + "ffn.shared_experts.w2.weight")};
  return l;
}

}  // namespace

Result<ModelWeights> BindWeights(const CheckpointReader& reader, const DeepSeekV4Config& c,
                                 const std::vector<LayerPlan>& plans) {
  // A llama.cpp deepseek4 GGUF file (its embedding's name says so) binds by
  // the GGUF spelling alone; safetensors by any of theirs, decided per tensor.
  const bool gguf = reader.Find(TranslateName("embed.weight", NameScheme::kGguf)->name) != nullptr;
  const std::span<const NameScheme> schemes =
      gguf ? std::span<const NameScheme>(kGgufSchemes) : kSafetensorsSchemes;
  auto present = [&](const std::string& official) {
    for (const CandidateName& n : CandidateNames(official, schemes)) {
      if (reader.Find(n.resolved.name) != nullptr) return true;
    }
    return false;
  };
  if (!present("embed.weight")) {
    return NotFound(reader.path() +
                        ": no embedding tensor: none of 'embed.weight' (official), "
                        "'model.embed_tokens.weight' (HF), 'token_embd.weight' (GGUF)",
                    "is this a DeepSeek-V4 checkpoint?");
  }
  // Draft layers (speculative decoding only) are bound when the checkpoint has
  // them: a NextN layer when its e_proj is present, the DSpark stages when
  // mtp.0.main_proj is (under one of their spellings).
  std::vector<bool> bind_mtp(plans.size(), false);
  const bool dspark = c.dspark() && present("mtp.0.main_proj.weight");
  for (size_t i = 0; i < plans.size(); ++i) {
    if (plans[i].role != LayerRole::kMtp) continue;
    bind_mtp[i] = c.dspark() ? dspark : present(plans[i].prefix + "e_proj.weight");
  }
  // Draft tensors of a kind this config does not describe (e.g. a DSpark
  // module under a config without the dspark_* keys): the main model runs.
  const bool any_bound = std::find(bind_mtp.begin(), bind_mtp.end(), true) != bind_mtp.end();
  if (!any_bound) {
    int64_t n_draft = 0;
    for (const TensorInfo& t : reader.tensors()) {
      n_draft += t.name.rfind("mtp.", 0) == 0 || t.name.rfind("model.mtp.", 0) == 0;
    }
    if (n_draft > 0) {
      LOG_WARNING(
          "{}: {} draft-module tensors (mtp.*) match neither a NextN MTP layer nor "
          "the DSpark module of config.json; running the main model without "
          "speculative decoding",
          reader.path(), n_draft);
    }
  }
  Binder binder(reader, c, schemes);
  ForEachWeight(c, plans, [&](const WeightDecl& d) {
    if (!d.mtp || bind_mtp[d.layer]) binder.Bind(d);
  });
  RETURN_IF_ERROR(binder.Finish());

  ModelWeights w;
  w.naming = binder.Naming();
  w.embed = binder.Get("embed.weight").view;
  w.head = binder.Get("head.weight").view;
  w.norm = std::move(binder.Get("norm.weight").f32);
  if (!c.v41()) w.hc_head = TakeHc(binder, "hc_head_fn", "hc_head_base", "hc_head_scale");
  for (size_t i = 0; i < plans.size(); ++i) {
    const LayerPlan& p = plans[i];
    if (p.role == LayerRole::kMain) {
      w.layers.push_back(TakeLayer(binder, c, p));
    } else if (bind_mtp[i] && c.dspark()) {
      if (!w.dspark) w.dspark.emplace();
      DSparkWeights& d = *w.dspark;
      const std::string& x = p.prefix;
      if (d.stages.empty()) {
        d.main_proj = TakeLinear(binder, x + "main_proj.weight");
        d.main_norm = std::move(binder.Get(x + "main_norm.weight").f32);
      }
      d.stages.push_back(TakeLayer(binder, c, p));
      if (static_cast<int64_t>(d.stages.size()) == c.n_draft_layers()) {
        d.norm = std::move(binder.Get(x + "norm.weight").f32);
        if (c.v41()) {  // no HC head (the last stage's lagged mix collapses); the Markov
                        // head's embed / head
          d.markov_w1 = binder.Get(x + "markov_head.embed.weight").view;
          d.markov_w2 = binder.Get(x + "markov_head.head.weight").view;
        } else {
          d.hc_head = TakeHc(binder, x + "hc_head_fn", x + "hc_head_base", x + "hc_head_scale");
          d.markov_w1 = binder.Get(x + "markov_head.markov_w1.weight").view;
          d.markov_w2 = binder.Get(x + "markov_head.markov_w2.weight").view;
        }
        d.confidence = std::move(binder.Get(x + "confidence_head.proj.weight").f32);
      }
    } else if (bind_mtp[i]) {
      const std::string& x = p.prefix;
      MtpWeights m;
      m.e_proj = TakeLinear(binder, x + "e_proj.weight");
      m.h_proj = TakeLinear(binder, x + "h_proj.weight");
      m.enorm = std::move(binder.Get(x + "enorm.weight").f32);
      m.hnorm = std::move(binder.Get(x + "hnorm.weight").f32);
      m.norm = std::move(binder.Get(x + "norm.weight").f32);
      m.hc_head = TakeHc(binder, x + "hc_head_fn", x + "hc_head_base", x + "hc_head_scale");
      m.block = TakeLayer(binder, c, p);
      w.mtp.push_back(std::move(m));
    }
  }
  return w;
}

}  // namespace dsv4::deepseek_v4
