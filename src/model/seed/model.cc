// SeedModel: binding and the reference forward pass (see model.h).
#include "model/seed/model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <deque>
#include <filesystem>

#include "base/log.h"
#include "io/safetensors.h"
#include "ops/matmul.h"
#include "ops/ref/ops_ref.h"

namespace dsv4::seed {
namespace {

std::vector<float> ToF32(const TensorView& v) {
  std::vector<float> out(v.numel());
  DequantizeRow(v.dtype, v.data, v.numel(), out.data());
  return out;
}

std::string LayerName(int64_t l, const std::string& rest) {
  return "model.layers." + std::to_string(l) + "." + rest;
}

// The layout of every tensor that metadata marks ("dsv4.layout.<tensor>").
using LayoutMap = std::map<std::string, Layout>;

}  // namespace

// Collects every binding problem, then fails once with all of them.
// Layouts: a 2-D tensor marked col_major is the logical [rows, cols] stored
// column by column (stride (1, rows)); Get returns it as a row-major f32 copy,
// so every consumer reads the logical matrix (mlp.ced_weight alone is bound in
// place, by GetStored). Other ranks and block-quantised dtypes cannot be
// col_major: refused, naming the tensor.
class Binder {
 public:
  Binder(const CheckpointReader& r, const LayoutMap& layouts, std::deque<OwnedMatrix>& copies)
      : r_(r), layouts_(layouts), copies_(copies) {}
  bool Has(const std::string& name) const { return r_.Find(name) != nullptr; }
  // The tensor as stored, whatever its layout metadata says.
  TensorView GetStored(const std::string& name, std::initializer_list<int64_t> shape) {
    auto v = r_.Get(name, shape);
    if (!v.ok()) {
      Problem(v.status().message());
      return {};
    }
    return *v;
  }
  // The logical tensor, row-major.
  TensorView Get(const std::string& name, std::initializer_list<int64_t> shape) {
    TensorView v = GetStored(name, shape);
    if (v.data == nullptr || StoredLayout(name) != Layout::kColMajor) return v;
    if (v.rank != 2) {
      Problem(name + ": layout metadata says col_major, but the tensor has " +
              std::to_string(v.rank) + " dimension(s) (only a matrix has a column-major layout)");
      return {};
    }
    if (IsBlockDType(v.dtype)) {
      Problem(name + ": col_major " + std::string(DTypeName(v.dtype)) + " is not supported");
      return {};
    }
    auto view = CheckedStridedView(v.data, v.numel(), v.dtype, v.sizes[0], v.sizes[1], 1,
                                   v.sizes[0], name);  // S-078: bounds-checked
    if (!view.ok()) {
      Problem(view.status().ToString());
      return {};
    }
    LOG_INFO("{}: stored col_major, bound as a row-major f32 copy", name);
    copies_.push_back(ToLayout(*view, Layout::kRowMajor));
    return copies_.back().view;
  }
  std::vector<float> Vec(const std::string& name, std::initializer_list<int64_t> shape) {
    TensorView v = Get(name, shape);
    return v.data == nullptr ? std::vector<float>(Numel(shape), 0.0f) : ToF32(v);
  }
  Layout StoredLayout(const std::string& name) const {
    auto it = layouts_.find(name);
    return it == layouts_.end() ? Layout::kRowMajor : it->second;
  }
  void Problem(const std::string& p) {
    if (n_ < 40) problems_ += "\n  " + p;
    ++n_;
  }
  Status status() const {
    if (n_ == 0) return Status::Ok();
    return NotFound(r_.path() + ": " + std::to_string(n_) +
                        " tensor problem(s) for the seed model:" + problems_,
                    "the checkpoint does not match config.json (see docs/seed-mechanisms.md for "
                    "the tensor names)");
  }

 private:
  static int64_t Numel(std::initializer_list<int64_t> s) {
    int64_t n = 1;
    for (int64_t x : s) n *= x;
    return n;
  }
  const CheckpointReader& r_;
  const LayoutMap& layouts_;
  std::deque<OwnedMatrix>& copies_;
  std::string problems_;
  int64_t n_ = 0;
};

namespace {

// The safetensors __metadata__ of the reader (every shard's, merged), when it is safetensors.
std::map<std::string, std::string> ReaderMetadata(const CheckpointReader& r) {
  if (const auto* st = dynamic_cast<const SafetensorsFile*>(&r)) return st->metadata();
  std::map<std::string, std::string> out;
  if (const auto* sh = dynamic_cast<const ShardedSafetensors*>(&r)) {
    for (const auto& f : sh->shards()) out.insert(f->metadata().begin(), f->metadata().end());
  }
  return out;
}

// Reads the layout signals of the metadata. "dsv4.layout.<tensor>" = "col_major" |
// "row_major" is the one dsv4 reads; any other key that speaks of a layout or
// strides (e.g. "dsv4.stride.<tensor>") is refused rather than ignored, so a
// checkpoint is never read in a layout its writer did not mean. Every problem is
// reported at once, each naming the key.
Result<LayoutMap> ReadLayouts(const CheckpointReader& r,
                              const std::map<std::string, std::string>& meta) {
  static constexpr std::string_view kPrefix = "dsv4.layout.";
  LayoutMap out;
  std::string problems;
  int n = 0;
  auto problem = [&](const std::string& p) {
    if (n++ < 40) problems += "\n  " + p;
  };
  for (const auto& [key, value] : meta) {
    std::string lower = key;
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (key.starts_with(kPrefix)) {
      const std::string name = key.substr(kPrefix.size());
      if (r.Find(name) == nullptr) {
        problem("'" + key + "' names no tensor of the checkpoint");
      } else if (value == "col_major") {
        out[name] = Layout::kColMajor;
      } else if (value == "row_major") {
        out[name] = Layout::kRowMajor;
      } else {
        problem("'" + key + "' = '" + value + "' (the layout is col_major or row_major)");
      }
    } else if (lower.find("layout") != std::string::npos ||
               lower.find("stride") != std::string::npos) {
      problem("'" + key + "' = '" + value + "' is a layout signal dsv4 does not read");
    }
  }
  if (n == 0) return out;
  return InvalidArgument(r.path() + ": " + std::to_string(n) +
                             " layout metadata problem(s) for the seed model:" + problems,
                         "mark a column-major tensor (stride (1, rows)) with \"dsv4.layout.<tensor "
                         "name>\": \"col_major\" in __metadata__ (docs/seed-mechanisms.md)");
}

}  // namespace

// ---------------------------------------------------------------- cache

SeedCache::SeedCache(const SeedConfig& c, int64_t max_tokens, int64_t budget_override) {
  const int64_t L = c.num_hidden_layers;
  kv_dim_ = c.kv_dim();
  hidden_ = c.hidden_size;
  slot_pos_.assign(max_tokens, -1);
  k_.assign(L, std::vector<float>(max_tokens * kv_dim_));
  v_.assign(L, std::vector<float>(max_tokens * kv_dim_));
  importance_.assign(L, std::vector<float>(c.csa.enabled ? max_tokens : 0));
  prune_score_.assign(max_tokens, 1.0f);
  hca_hist_.assign(L, {});
  if (c.hca.enabled && c.moe.enabled) {  // per-sequence HCA history: room for every token
    for (auto& h : hca_hist_) h.reserve(static_cast<size_t>(max_tokens * hidden_));
  }
  live_.reserve(static_cast<size_t>(max_tokens));
  adapter_out_.assign(L, {});
  rope_ = MakeRopeParams(c, max_tokens);
  if (c.kv_pruner.enabled) {
    CHECK(budget_override < 0 || budget_override >= c.kv_pruner.min_budget(),
          "SeedRuntimeOptions::pruner_budget below kv_pruner.min_budget()");
    const int64_t budget = budget_override >= 0        ? budget_override
                           : c.kv_pruner.kv_budget > 0 ? c.kv_pruner.kv_budget
                                                       : max_tokens;
    pruner_ = std::make_unique<KvPrunerPolicy>(c.kv_pruner, budget);
    pruner_->Reserve(max_tokens);
  }
  num_experts_ = c.moe.enabled ? c.moe.num_experts : 0;
  router_.assign(L, {});
  Reset();
}

void SeedCache::Reset() {
  length_ = 0;
  std::fill(slot_pos_.begin(), slot_pos_.end(), -1);
  live_.clear();
  for (auto& imp : importance_) std::fill(imp.begin(), imp.end(), 0.0f);
  std::fill(prune_score_.begin(), prune_score_.end(), 1.0f);
  for (auto& h : hca_hist_) h.clear();  // capacity kept: no allocation on reuse
  for (auto& a : adapter_out_) a.clear();
  adapter_ready_ = false;
  if (pruner_) pruner_->Reset();    // S-063: the adapted efficiency factor is per request
  for (RouterState& r : router_) {  // S-053: the reweighting bias is per request
    r.bias.assign(num_experts_, 0.0f);
    r.cumulative.assign(num_experts_, 0);
    r.reweight_count = 0;
  }
  evicted_total_ = 0;
  peak_live_ = 0;
}

void SeedCache::Evict(int64_t pos) {
  for (size_t i = 0; i < live_.size(); ++i) {
    if (slot_pos_[live_[i]] == pos) {
      slot_pos_[live_[i]] = -1;
      live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(i));
      ++evicted_total_;
      return;
    }
  }
}

void SeedCache::Truncate(int64_t n) {
  CHECK(n >= 0 && n <= length_);
  if (n == 0) {  // a new request (the engine reuses its slots' caches)
    Reset();
    return;
  }
  // A rollback to n > 0 keeps the pruner's evictions among positions < n and
  // its efficiency factor (they cannot be undone).
  std::vector<int32_t> keep;
  for (int32_t s : live_) {
    if (slot_pos_[s] < n) {
      keep.push_back(s);
    } else {
      slot_pos_[s] = -1;
    }
  }
  live_ = std::move(keep);
  for (auto& h : hca_hist_) {
    if (h.size() > static_cast<size_t>(n * hidden_)) h.resize(static_cast<size_t>(n * hidden_));
  }
  length_ = n;
}

std::vector<int64_t> SeedCache::live_positions() const {
  std::vector<int64_t> p;
  for (int32_t s : live_) p.push_back(slot_pos_[s]);
  return p;
}

int64_t SeedCache::slot_of(int64_t pos) const {
  for (int32_t s : live_) {
    if (slot_pos_[s] == pos) return s;
  }
  return -1;
}

bool SeedCache::holds(int64_t pos) const {
  for (int32_t s : live_) {
    if (slot_pos_[s] == pos) return true;
  }
  return false;
}

Status SeedCache::EvictRange(int64_t begin, int64_t end) {
  if (begin < 0 || end < begin || end > length_) {
    return OutOfRange("evict hint [" + std::to_string(begin) + ", " + std::to_string(end) +
                          ") is outside the sequence [0, " + std::to_string(length_) + ")",
                      "hint only positions already in the cache (S-064)");
  }
  for (int64_t p = begin; p < end; ++p) Evict(p);
  return Status::Ok();
}

// ---------------------------------------------------------------- loading

Result<std::unique_ptr<SeedModel>> SeedModel::Load(std::shared_ptr<const CheckpointReader> reader,
                                                   const SeedConfig& config,
                                                   const SeedLoadOptions& options) {
  RETURN_IF_ERROR(config.Validate().WithContext(reader->path()));
  std::unique_ptr<SeedModel> m(new SeedModel());
  m->config_ = config;
  // The modes the forward pass and the router take, resolved once here.
  m->moe_modes_ = ResolveMoeModes(config.moe);
  m->task_source_ = config.task_adapter.task_source == "first_token" ? TaskSource::kFirstToken
                                                                     : TaskSource::kMean;
  m->reader_ = reader;
  m->pool_ = std::make_unique<ThreadPool>(std::max(1, options.threads));
  ASSIGN_OR_RETURN(
      LayoutMap layouts,
      ReadLayouts(*reader, options.metadata.empty() ? ReaderMetadata(*reader) : options.metadata));
  RETURN_IF_ERROR(m->Bind(*reader, layouts));
  m->router_state_.assign(config.num_hidden_layers, {});
  m->op_counts_.assign(config.num_hidden_layers, {});
  m->info_.architecture =
      std::string(kSeedModelType) + " (" + std::string(ProfileName(config.profile)) + ")";
  m->info_.vocab_size = config.vocab_size;
  m->info_.max_context = config.max_context();
  m->info_.bos_id = config.bos_token_id;
  m->info_.eos_id = config.eos_token_id;
  int64_t n = 0;
  for (const TensorInfo& t : reader->tensors()) {
    int64_t e = 1;
    for (int64_t s : t.shape) e *= s;
    n += e;
  }
  m->info_.n_params = n;  // S-008: counted from the tensors, never from declared sizes
  return m;
}

Status SeedModel::Bind(const CheckpointReader& r, const std::map<std::string, Layout>& layouts) {
  const SeedConfig& c = config_;
  const int64_t H = c.hidden_size, nh = c.num_attention_heads, d = c.head_dim(),
                L = c.num_hidden_layers, V = c.vocab_size;
  Binder b(r, layouts, relaid_);
  embed_ = b.Get("model.embed_tokens.weight", {V, H});
  final_norm_ = b.Vec("model.norm.weight", {H});
  if (b.Has("lm_head.weight") || !c.tie_word_embeddings) {
    lm_head_ = b.Get("lm_head.weight", {V, H});
  } else {
    lm_head_ = embed_;
  }
  std::vector<float> shared_shift;
  if (c.segmented_rope.enabled && b.Has("model.rotary_emb.segment_shift")) {
    shared_shift = b.Vec("model.rotary_emb.segment_shift", {nh, d / 2});
  }
  layers_.resize(L);
  plans_.resize(L);
  for (int64_t l = 0; l < L; ++l) {
    BindBlock(b, l);
    BindAttention(b, l, shared_shift);
    BindFfn(r, b, l);
  }
  BindAdapterAndPruner(b);
  return b.status();
}

// Block topology (S-012 / S-013): CED when ced_scale_factor is present and
// the norms absent; the layer's modes, chosen once here.
void SeedModel::BindBlock(Binder& b, int64_t l) {
  const SeedConfig& c = config_;
  const int64_t H = c.hidden_size;
  Layer& y = layers_[l];
  SeedLayerPlan& p = plans_[l];
  auto n = [&](const std::string& rest) { return LayerName(l, rest); };
  bool ced_block = false;
  if (c.ced.enabled) {
    if (c.ced.block == "all") {
      ced_block = true;
    } else if (c.ced.block == "auto") {
      ced_block = b.Has(n("ced_scale_factor")) && !b.Has(n("input_layernorm.weight"));
    }
  }
  p.block = ced_block ? BlockKind::kCed : BlockKind::kPreNorm;
  p.hca_stats = c.hca.stats == "whole_call" ? HcaStats::kWholeCall
                : c.hca.stats == "batch"    ? HcaStats::kBatch
                                            : HcaStats::kCausal;
  p.router_input = c.moe.router_input == "hca"                ? RouterInput::kHca
                   : c.moe.router_input == "hidden_plus_attn" ? RouterInput::kHiddenPlusAttn
                                                              : RouterInput::kHidden;
  if (ced_block) {
    std::vector<float> s = b.Vec(n("ced_scale_factor"), {1});
    y.ced_scale = s[0];
    if (b.Has(n("post_attention_layernorm.weight"))) {  // C-18 auto
      p.ced_mlp_norm = true;
      y.ffn_norm = b.Vec(n("post_attention_layernorm.weight"), {H});
    }
  } else {
    y.attn_norm = b.Vec(n("input_layernorm.weight"), {H});
    y.ffn_norm = b.Vec(n("post_attention_layernorm.weight"), {H});
  }
}

// Attention projections, segmented RoPE shifts (S-028: per layer or shared),
// and the CSA importance / HCA controller weights (S-030, S-035).
void SeedModel::BindAttention(Binder& b, int64_t l, const std::vector<float>& shared_shift) {
  const SeedConfig& c = config_;
  const int64_t H = c.hidden_size, nh = c.num_attention_heads, d = c.head_dim(), KV = c.kv_dim();
  Layer& y = layers_[l];
  SeedLayerPlan& p = plans_[l];
  auto n = [&](const std::string& rest) { return LayerName(l, rest); };
  y.wq = b.Get(n("self_attn.q_proj.weight"), {nh * d, H});
  y.wk = b.Get(n("self_attn.k_proj.weight"), {KV, H});  // C-10: H → nkv·d
  y.wv = b.Get(n("self_attn.v_proj.weight"), {KV, H});
  y.wo = b.Get(n("self_attn.o_proj.weight"), {H, nh * d});
  if (c.segmented_rope.enabled) {
    if (b.Has(n("self_attn.rotary_emb.segment_shift"))) {
      y.shift_storage = b.Vec(n("self_attn.rotary_emb.segment_shift"), {nh, d / 2});
    } else if (!shared_shift.empty()) {
      y.shift_storage = shared_shift;
    } else {
      b.Problem(n("self_attn.rotary_emb.segment_shift") + " (or model.rotary_emb.segment_shift) [" +
                std::to_string(nh) + ", " + std::to_string(d / 2) +
                "] is missing (segmented_rope is on)");
    }
    y.segment_shift = y.shift_storage.empty() ? nullptr : y.shift_storage.data();
  }
  p.csa = c.csa.enabled;
  p.csa_global = p.csa && c.csa.global_mode == "seed" ? CsaGlobal::kSeed : CsaGlobal::kCausal;
  p.csa_layernorm_fusion = p.csa && c.csa.fusion_mode == "residual_layernorm";
  p.hca = c.hca.enabled && c.moe.enabled;
  if (p.csa || p.hca) y.hca_gate_proj = b.Get(n("mlp.hca_gate_proj.weight"), {H, H});
  if (p.hca) {
    const int64_t hid = c.hca.hidden;
    y.hca.fc1 = b.Get(n("mlp.hca_controller.fc1.weight"), {hid, 3 * H});
    y.hca.fc1_b = b.Vec(n("mlp.hca_controller.fc1.bias"), {hid});
    y.hca.fc2 = b.Get(n("mlp.hca_controller.fc2.weight"), {H, hid});
    y.hca.fc2_b = b.Vec(n("mlp.hca_controller.fc2.bias"), {H});
  }
}

// FFN kind: CED fused when ced_weight is there, else MoE when configured,
// else dense; and the TaskAdapter's per-layer gate.
void SeedModel::BindFfn(const CheckpointReader& r, Binder& b, int64_t l) {
  const SeedConfig& c = config_;
  const int64_t H = c.hidden_size, I = c.intermediate_size, F = c.expert_width();
  Layer& y = layers_[l];
  SeedLayerPlan& p = plans_[l];
  auto n = [&](const std::string& rest) { return LayerName(l, rest); };
  if (c.ced.enabled && b.Has(n("mlp.ced_weight"))) {
    p.ffn = FfnKind::kCedFused;
    BindCedFused(r, b, l);
  } else if (c.moe.enabled) {
    p.ffn = FfnKind::kMoe;
    const int64_t E = c.moe.num_experts;
    y.router = b.Get(n("mlp.gate.weight"), {E, H});
    y.experts.resize(E);
    const bool seed_names = c.moe.expert_naming == "seed";  // S-072
    for (int64_t e = 0; e < E; ++e) {
      const std::string pe = "mlp.experts." + std::to_string(e) + ".";
      TensorView w1 = b.Get(n(pe + "w1.weight"), {F, H});
      TensorView w3 = b.Get(n(pe + "w3.weight"), {F, H});
      y.experts[e].gate = seed_names ? w3 : w1;
      y.experts[e].up = seed_names ? w1 : w3;
      y.experts[e].down = b.Get(n(pe + "w2.weight"), {H, F});
    }
  } else {
    p.ffn = FfnKind::kDense;
    y.gate = b.Get(n("mlp.gate_proj.weight"), {I, H});  // S-003: rows == I
    y.up = b.Get(n("mlp.up_proj.weight"), {I, H});
    y.down = b.Get(n("mlp.down_proj.weight"), {H, I});
  }
  if (c.task_adapter.enabled && b.Has(n("mlp.task_gate_weight"))) {
    y.task_alpha = b.Vec(n("mlp.task_gate_weight"), {1})[0];
  }
}

// The CED fused MLP's weight in its stored or configured layout (S-075 …
// S-078), its bias and down projection.
void SeedModel::BindCedFused(const CheckpointReader& r, Binder& b, int64_t l) {
  const SeedConfig& c = config_;
  const int64_t H = c.hidden_size;
  Layer& y = layers_[l];
  auto n = [&](const std::string& rest) { return LayerName(l, rest); };
  // The fused width comes from the tensor when it is an even [2F, H] (a layer the
  // S-143 converter rewrote from a dense [F, H] SwiGLU is 2F wide), else the config's.
  const TensorInfo* ti = r.Find(n("mlp.ced_weight"));
  const int64_t I =
      ti != nullptr && ti->shape.size() == 2 && ti->shape[0] > 0 && ti->shape[0] % 2 == 0
          ? ti->shape[0]
          : c.intermediate_size;
  TensorView w = b.GetStored(n("mlp.ced_weight"), {I, H});
  if (w.data != nullptr) {
    const Layout stored = b.StoredLayout(n("mlp.ced_weight"));
    if (stored == Layout::kColMajor) {
      if (IsBlockDType(w.dtype)) {
        b.Problem(n("mlp.ced_weight") + ": col_major " + std::string(DTypeName(w.dtype)) +
                  " is not supported");
      }
      // S-078: a view over the tensor's own bytes, no copy, bounds-checked.
      auto view = CheckedStridedView(w.data, w.numel(), w.dtype, I, H, 1, I, n("mlp.ced_weight"));
      if (view.ok()) {
        w = *view;
      } else {
        b.Problem(view.status().ToString());
      }
    }
    Layout want = stored;
    if (c.ced.layout == "true") want = Layout::kColMajor;
    if (c.ced.layout == "false") want = Layout::kRowMajor;
    if (want != stored) {  // S-075: override logged; S-077: an explicit copy
      LOG_INFO("{}: ced_layout={} overrides the stored {} layout (a {} copy is made)",
               n("mlp.ced_weight"), c.ced.layout, LayoutName(stored), LayoutName(want));
      y.ced_copy = ToLayout(w, want);
      w = y.ced_copy.view;
    }
    plans_[l].ced_layout = DetectLayout(w);
  }
  y.ced.fused = w;
  y.ced.bias = b.Has(n("mlp.ced_bias")) ? b.Vec(n("mlp.ced_bias"), {I}) : std::vector<float>{};
  y.ced.down = b.Get(n("mlp.down_proj.weight"), {H, I});
  if (c.task_adapter.enabled) {
    b.Problem(n("mlp.ced_weight") + ": the TaskAdapter cannot gate a CED fused MLP");
  }
}

// The TaskAdapter (S-057) and the SemanticKVPruner's score net.
void SeedModel::BindAdapterAndPruner(Binder& b) {
  const SeedConfig& c = config_;
  const int64_t H = c.hidden_size, L = c.num_hidden_layers;
  if (c.task_adapter.enabled) {
    const int64_t ra = c.task_adapter.adapter_dim;
    const int64_t Fa = c.moe.enabled ? c.expert_width() : c.intermediate_size;
    adapter_.layer_embedding = b.Get("model.task_adapter.layer_embedding.weight", {L, ra});
    adapter_.task_embedding = b.Get("model.task_adapter.task_embedding.weight", {ra, H});
    adapter_.task_embedding_b = b.Vec("model.task_adapter.task_embedding.bias", {ra});
    adapter_.mlp0 = b.Get("model.task_adapter.adapter_mlp.0.weight", {ra, 2 * ra});
    adapter_.mlp0_b = b.Vec("model.task_adapter.adapter_mlp.0.bias", {ra});
    adapter_.mlp2 = b.Get("model.task_adapter.adapter_mlp.2.weight", {Fa, ra});
    adapter_.mlp2_b = b.Vec("model.task_adapter.adapter_mlp.2.bias", {Fa});
  }
  if (c.kv_pruner.enabled) {
    const int64_t hp = c.kv_pruner.hidden;
    pruner_.fc1 = b.Get("model.kv_pruner.score_net.0.weight", {hp, H});
    pruner_.fc1_b = b.Vec("model.kv_pruner.score_net.0.bias", {hp});
    pruner_.fc2 = b.Get("model.kv_pruner.score_net.2.weight", {1, hp});
    pruner_.fc2_b = b.Vec("model.kv_pruner.score_net.2.bias", {1})[0];
    has_pruner_ = true;
  }
}

std::unique_ptr<SequenceCache> SeedModel::NewCache(int64_t max_tokens) const {
  CHECK(max_tokens > 0);
  return std::unique_ptr<SequenceCache>(new SeedCache(config_, max_tokens, runtime_.pruner_budget));
}

void SeedModel::SetRuntimeOptions(const SeedRuntimeOptions& o) {
  runtime_ = o;
  router_unfrozen_ = o.router;
  router_unfrozen_.freeze = false;
}

void SeedModel::SetThreads(int n_threads) {
  pool_ = std::make_unique<ThreadPool>(std::max(1, n_threads));
}

std::string_view CedDispatchName(CedDispatch d) {
  switch (d) {
    case CedDispatch::kAuto:
      return "auto";
    case CedDispatch::kFused:
      return "fused";
    case CedDispatch::kBaseline:
      return "baseline";
  }
  return "?";
}

void SeedModel::ResetCounters() {
  ced_counts_ = {};
  for (BlockOpCounts& c : op_counts_) c = {};
}

int64_t SeedModel::kv_bytes_per_token() const {
  return config_.num_hidden_layers * 2 * config_.kv_dim() * static_cast<int64_t>(sizeof(float));
}

// ---------------------------------------------------------------- forward

void SeedModel::SwiGluRows(const TensorView& gate, const TensorView& up, const TensorView& down,
                           const float* adapter, float alpha, const float* f, int64_t T,
                           float* out) {
  const int64_t Fw = gate.size(0), H = config_.hidden_size;
  std::vector<float>& g = swiglu_g_;
  std::vector<float>& u = swiglu_u_;
  g.resize(T * Fw);
  u.resize(T * Fw);
  ops::MatMul(*pool_, g.data(), f, gate, T);
  ops::MatMul(*pool_, u.data(), f, up, T);
  if (prof_ != nullptr) prof_->matmul += 3;  // gate, up, down
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < Fw; ++j) {
      float gj = g[t * Fw + j];
      if (adapter != nullptr) gj += alpha * adapter[j];  // S-055: gate' = gate + α·adapter_out
      g[t * Fw + j] = ops::ref::Silu(gj) * u[t * Fw + j];
    }
  }
  (void)H;
  ops::MatMul(*pool_, out, g.data(), down, T);
}

void SeedModel::CedMlp(int64_t l, const float* f, int64_t T, float* out) {
  const SeedRuntimeOptions& o = runtime_;
  const bool fused = o.ced_dispatch == CedDispatch::kFused ||
                     (o.ced_dispatch == CedDispatch::kAuto && T >= o.ced_min_batch);
  if (!ced_logged_[fused ? 0 : 1]) {  // S-015: the choice is logged once per path
    ced_logged_[fused ? 0 : 1] = true;
    LOG_INFO(
        "seed: CED MLP (layer {}): a {}-token batch takes the {} path (ced_dispatch={}, "
        "ced_min_batch={}; logged once per path)",
        l, T, fused ? "CED fused" : "baseline (unfused gate/up)", CedDispatchName(o.ced_dispatch),
        o.ced_min_batch);
  }
  if (fused) {
    ++ced_counts_.fused;
    CedMlpForward(*pool_, layers_[l].ced, f, T, out, ced_scratch_);
    if (prof_ != nullptr) prof_->matmul += 2;  // fused [I, H] product, down
  } else {
    ++ced_counts_.baseline;
    CedMlpBaseline(*pool_, layers_[l].ced, f, T, out, ced_scratch_);
    if (prof_ != nullptr) prof_->matmul += 3;  // gate half, up half, down
  }
}

// C-13 / C-15: the HCA controller of layer l on the FFN input f [T, H]:
// moe_scratch_.g_hca (the gated features) and w_mean (S-034's skip signal).
void SeedModel::HcaGating(int64_t l, const float* f, int64_t T, SeedCache& c) {
  const SeedConfig& cfg = config_;
  const Layer& y = layers_[l];
  const SeedLayerPlan& p = plans_[l];
  const int64_t H = cfg.hidden_size;
  MoeScratch& m = moe_scratch_;
  m.g.resize(T * H);
  ops::MatMul(*pool_, m.g.data(), f, y.hca_gate_proj, T);
  if (prof_ != nullptr) prof_->matmul += 3;  // hca_gate_proj, controller fc1, fc2
  std::vector<float>& hist = c.hca_hist_[l];
  hist.insert(hist.end(), m.g.begin(), m.g.begin() + T * H);
  m.g_hca.resize(T * H);
  const int64_t n = static_cast<int64_t>(hist.size()) / H;  // c.length_ + T rows
  if (p.hca_stats == HcaStats::kCausal) {  // C-15: each token over the sequence up to it
    PrefixFeatureStats(hist.data(), n - T, T, H, cfg.hca.eps, m.mu, m.sigma);
    HcaGatePerToken(*pool_, y.hca, m.g.data(), T, H, m.mu, m.sigma, m.g_hca.data(), m.w_mean.data(),
                    m.hca);
  } else {
    if (p.hca_stats == HcaStats::kWholeCall) {  // every token so far, this call's later ones
      FeatureStats(hist.data(), n, H, cfg.hca.eps, m.mu, m.sigma);
    } else {  // "batch", the seed's mode: this call's tokens
      FeatureStats(m.g.data(), T, H, cfg.hca.eps, m.mu, m.sigma);
    }
    HcaGate(*pool_, y.hca, m.g.data(), T, H, m.mu, m.sigma, m.g_hca.data(), m.w_mean.data(), m.hca);
  }
}

void SeedModel::Ffn(int64_t l, const float* f, const float* x_after_attn, int64_t T, SeedCache& c,
                    float* out, SeedStepStats& stats, Status& status) {
  const SeedConfig& cfg = config_;
  const Layer& y = layers_[l];
  const SeedLayerPlan& p = plans_[l];
  const int64_t H = cfg.hidden_size;
  const float* adapter =
      cfg.task_adapter.enabled && !c.adapter_out_[l].empty() ? c.adapter_out_[l].data() : nullptr;
  if (p.ffn == FfnKind::kDense) {
    SwiGluRows(y.gate, y.up, y.down, adapter, y.task_alpha, f, T, out);
    return;
  }
  if (p.ffn == FfnKind::kCedFused) {
    CedMlp(l, f, T, out);
    return;
  }
  // MoE.
  const int64_t E = cfg.moe.num_experts;
  MoeScratch& m = moe_scratch_;
  m.w_mean.assign(T, 1.0f);
  const float* router_in = f;
  if (p.hca) {
    HcaGating(l, f, T, c);
    if (p.router_input == RouterInput::kHca) router_in = m.g_hca.data();
  }
  if (p.router_input == RouterInput::kHiddenPlusAttn) router_in = x_after_attn;
  const double skip = runtime_.hca_skip_override ? runtime_.hca_skip_threshold
                                                 : (p.hca ? cfg.hca.skip_threshold : 0.0);
  // S-034: skipped tokens get a zero FFN output and are not dispatched.
  m.rows.clear();
  for (int64_t t = 0; t < T; ++t) {
    if (!(skip > 0 && m.w_mean[t] < skip)) m.rows.push_back(t);
  }
  std::fill(out, out + T * H, 0.0f);
  const int64_t N = static_cast<int64_t>(m.rows.size());
  m.logits_all.resize(T * E);
  m.logits.resize(N * E);
  ops::MatMul(*pool_, m.logits_all.data(), router_in, y.router, T);
  if (prof_ != nullptr) ++prof_->matmul;  // router
  for (int64_t i = 0; i < N; ++i) {
    std::copy_n(m.logits_all.data() + m.rows[i] * E, E, m.logits.data() + i * E);
  }
  const RouterOptions& ro_base = runtime_.router;
  const bool freeze_here =
      ro_base.freeze && (ro_base.freeze_layers.empty() ||
                         std::find(ro_base.freeze_layers.begin(), ro_base.freeze_layers.end(), l) !=
                             ro_base.freeze_layers.end());
  // Layers outside freeze_layers route unfrozen (router_unfrozen_, built by SetRuntimeOptions).
  const RouterOptions& ro = ro_base.freeze && !freeze_here ? router_unfrozen_ : ro_base;
  // S-052 (Mode C through Forward): externally supplied weights [N, k] for this layer.
  const float* external = nullptr;
  if (auto it = runtime_.external_weights.find(l); it != runtime_.external_weights.end()) {
    const int64_t k = EffectiveK(cfg.moe, moe_modes_, c.length_ + T);
    if (static_cast<int64_t>(it->second.size()) != N * k) {
      status = InvalidArgument("layer " + std::to_string(l) +
                                   " router: " + std::to_string(it->second.size()) +
                                   " external routing weights for " + std::to_string(N) +
                                   " tokens × k = " + std::to_string(k),
                               "give [tokens, k] weights for the call's dispatched tokens (S-052)");
      return;
    }
    external = it->second.data();
  }
  RouteResult& rr = stats.routes[l];
  Status st = Route(cfg.moe, moe_modes_, ro, c.router_[l], m.logits.data(), N, c.length_ + T,
                    external, rr, &m.route);
  if (!st.ok()) {
    status = st.WithContext("layer " + std::to_string(l) + " router");
    return;
  }
  std::vector<int64_t>& telemetry = router_state_[l].cumulative;  // S-046, every sequence
  if (telemetry.empty()) telemetry.assign(E, 0);
  for (int64_t e = 0; e < E; ++e) telemetry[e] += rr.counts[e];
  // S-048: dispatch the dispatched rows per expert, combine back in place.
  const float* xin = f;
  if (N != T) {
    m.x.resize(N * H);
    for (int64_t i = 0; i < N; ++i) std::copy_n(f + m.rows[i] * H, H, m.x.data() + i * H);
    xin = m.x.data();
  }
  float* dst = out;
  if (N != T) {
    m.out.resize(N * H);
    dst = m.out.data();
  }
  DispatchCombine(
      rr, E, xin, N, H,
      [&](int32_t e, const float* in, int64_t n, float* eo) {
        const Expert& ex = y.experts[e];
        SwiGluRows(ex.gate, ex.up, ex.down, adapter, y.task_alpha, in, n, eo);
      },
      dst, m.dispatch);
  if (N != T) {
    for (int64_t i = 0; i < N; ++i) std::copy_n(m.out.data() + i * H, H, out + m.rows[i] * H);
  }
}

namespace {

// S-021 (C-09, csa.fusion_mode "residual_layernorm"): o ← LayerNorm(o + h),
// no affine, over the H features of one token, before o_proj.
void ResidualLayerNorm(float* o, const float* h, int64_t H, double eps) {
  double mean = 0, var = 0;
  for (int64_t cc = 0; cc < H; ++cc) mean += o[cc] + h[cc];
  mean /= static_cast<double>(H);
  for (int64_t cc = 0; cc < H; ++cc) {
    const double z = o[cc] + h[cc] - mean;
    var += z * z;
  }
  var /= static_cast<double>(H);
  for (int64_t cc = 0; cc < H; ++cc) {
    o[cc] = static_cast<float>((o[cc] + h[cc] - mean) / std::sqrt(var + eps));
  }
}

// Rows [T, H] of `in` through RMSNorm with `weight`, or copied when `norm` is false.
void NormOrCopyRows(bool norm, const std::vector<float>& weight, const float* in, int64_t T,
                    int64_t H, double eps, float* out) {
  for (int64_t t = 0; t < T; ++t) {
    if (norm) {
      ops::ref::RmsNorm(out + t * H, in + t * H, weight.data(), H, static_cast<float>(eps));
    } else {
      std::copy_n(in + t * H, H, out + t * H);
    }
  }
}

}  // namespace

Status SeedModel::CheckForward(std::span<const int32_t> tokens, const SeedCache& c,
                               std::span<float> logits, bool all_logits) const {
  const int64_t T = static_cast<int64_t>(tokens.size()), V = config_.vocab_size;
  if (T == 0) return InvalidArgument("Forward: no tokens");
  const int64_t pos0 = c.length_;
  if (pos0 + T > info_.max_context) {  // S-007
    return OutOfRange("seed model: positions up to " + std::to_string(pos0 + T) +
                          " exceed the model's context " + std::to_string(info_.max_context),
                      "add rope_scaling {\"type\": \"linear\", \"factor\": f} to serve longer "
                      "contexts (S-007)");
  }
  if (c.live_tokens() + T > c.slots()) {
    return ResourceExhausted("seed model: the KV cache holds " + std::to_string(c.live_tokens()) +
                                 " of " + std::to_string(c.slots()) + " slots; " +
                                 std::to_string(T) + " more do not fit",
                             "make a larger cache, or enable the kv_pruner");
  }
  for (int32_t id : tokens) {
    if (id < 0 || id >= V) {
      return InvalidArgument("seed model: token id " + std::to_string(id) + " is outside [0, " +
                             std::to_string(V) + ")");
    }
  }
  const size_t want = all_logits ? static_cast<size_t>(T * V) : static_cast<size_t>(V);
  if (logits.size() < want) return InvalidArgument("Forward: logits buffer too small");
  return Status::Ok();
}

void SeedModel::BeginStep(const SeedCache& c, int64_t T) {
  const SeedConfig& cfg = config_;
  const int64_t H = cfg.hidden_size, nhd = cfg.num_attention_heads * cfg.head_dim(),
                KV = cfg.kv_dim();
  stats_.routes.resize(cfg.num_hidden_layers);  // kept between calls; Route rewrites MoE layers
  for (RouteResult& r : stats_.routes) r.k = 0, r.expert.clear(), r.weight.clear();
  stats_.pruner_scores.clear();
  stats_.pruner.evict.clear();  // kept (capacity reused), like the rest of the stats
  stats_.pruner.r = stats_.pruner.tau = 0;
  stats_.pruner.forced = 0;
  stats_.live_tokens = 0;
  // Scratch that grows with the live keys: sized once for this cache's slots.
  if (static_cast<int64_t>(fwd_scratch_.pos.capacity()) < c.slots()) {
    fwd_scratch_.pos.reserve(static_cast<size_t>(c.slots()));
    fwd_scratch_.score.reserve(static_cast<size_t>(c.slots()));
    fwd_scratch_.seed_sel.reserve(static_cast<size_t>(c.slots()));
    stats_.pruner.evict.reserve(static_cast<size_t>(c.slots()));
    attn_scratch_.Reserve(c.slots(), cfg.head_dim());
  }
  FwdScratch& fs = fwd_scratch_;  // grow-only buffers: no per-call allocation once warm
  for (std::vector<float>* b : {&fs.x, &fs.h, &fs.a, &fs.fin, &fs.ffn, &fs.g}) b->resize(T * H);
  fs.q.resize(T * nhd);
  fs.att.resize(T * nhd);
  fs.k.resize(T * KV);
  fs.v.resize(T * KV);
}

Status SeedModel::PrepareTaskAdapter(SeedCache& c, int64_t T) {
  const SeedConfig& cfg = config_;
  if (!cfg.task_adapter.enabled || c.adapter_ready_) return Status::Ok();
  const int64_t H = cfg.hidden_size;
  const std::vector<float>& x = fwd_scratch_.x;
  if (c.length_ != 0)
    return InvalidArgument("TaskAdapter: the first call of a request must start at position 0");
  std::vector<float> task(H, 0.0f);
  if (task_source_ == TaskSource::kFirstToken) {
    std::copy_n(x.data(), H, task.data());
  } else {
    for (int64_t cc = 0; cc < H; ++cc) {
      double s = 0;
      for (int64_t t = 0; t < T; ++t) s += x[t * H + cc];
      task[cc] = static_cast<float>(s / static_cast<double>(T));
    }
  }
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    ASSIGN_OR_RETURN(c.adapter_out_[l], TaskAdapterOut(*pool_, adapter_, task.data(), l));
  }
  c.adapter_ready_ = true;
  return Status::Ok();
}

void SeedModel::TakeSlots(SeedCache& c, int64_t T) {
  std::vector<int32_t>& new_slots = fwd_scratch_.new_slots;
  new_slots.clear();
  for (int32_t s = 0; s < c.slots() && static_cast<int64_t>(new_slots.size()) < T; ++s) {
    if (c.slot_pos_[s] < 0) new_slots.push_back(s);
  }
  for (int64_t t = 0; t < T; ++t) {
    c.slot_pos_[new_slots[t]] = c.length_ + t;
    c.live_.push_back(new_slots[t]);
  }
}

void SeedModel::CountLayerOps(int64_t l) {
  prof_ = runtime_.profile_ops ? &op_counts_[l] : nullptr;  // S-014
  if (prof_ == nullptr) return;
  const SeedLayerPlan& p = plans_[l];
  ++prof_->calls;
  prof_->top_level += 2;  // the attention and MLP sub-blocks
  if (p.block == BlockKind::kPreNorm) ++prof_->norm, ++prof_->top_level;
  if (p.block == BlockKind::kPreNorm || p.ced_mlp_norm) ++prof_->norm, ++prof_->top_level;
  prof_->matmul += 4;  // q, k, v, o
  ++prof_->attention;
  if (p.csa) ++prof_->matmul;                 // importance projection
  if (p.csa_layernorm_fusion) ++prof_->norm;  // S-021's LayerNorm (inside attention)
}

void SeedModel::ProjectQkv(int64_t l, int64_t T, SeedCache& c) {
  const SeedConfig& cfg = config_;
  const Layer& y = layers_[l];
  FwdScratch& fs = fwd_scratch_;
  const int64_t H = cfg.hidden_size, nh = cfg.num_attention_heads, d = cfg.head_dim(),
                nkv = cfg.num_key_value_heads, KV = cfg.kv_dim(), pos0 = c.length_;
  // Attention input: RMSNorm (pre-norm) or x itself (CED, no norm).
  NormOrCopyRows(plans_[l].block == BlockKind::kPreNorm, y.attn_norm, fs.x.data(), T, H,
                 cfg.rms_norm_eps, fs.h.data());
  ops::MatMul(*pool_, fs.q.data(), fs.h.data(), y.wq, T);
  ops::MatMul(*pool_, fs.k.data(), fs.h.data(), y.wk, T);
  ops::MatMul(*pool_, fs.v.data(), fs.h.data(), y.wv, T);
  ApplyRope(fs.q.data(), T, nh, d, pos0, c.rope_, y.segment_shift);
  ApplyRope(fs.k.data(), T, nkv, d, pos0, c.rope_, nullptr);
  for (int64_t t = 0; t < T; ++t) {
    std::copy_n(fs.k.data() + t * KV, KV, c.k_[l].data() + fs.new_slots[t] * KV);
    std::copy_n(fs.v.data() + t * KV, KV, c.v_[l].data() + fs.new_slots[t] * KV);
  }
  if (plans_[l].csa) {  // S-019 / S-035: importance = mean over features of
                        // hca_gate_proj(attention input)
    std::vector<float>& g = fs.g;
    ops::MatMul(*pool_, g.data(), fs.h.data(), y.hca_gate_proj, T);
    for (int64_t t = 0; t < T; ++t) {
      double s = 0;
      for (int64_t cc = 0; cc < H; ++cc) s += g[t * H + cc];
      c.importance_[l][fs.new_slots[t]] = static_cast<float>(s / static_cast<double>(H));
    }
  }
}

void SeedModel::AttentionBlock(int64_t l, int64_t T, SeedCache& c) {
  const SeedConfig& cfg = config_;
  const Layer& y = layers_[l];
  const SeedLayerPlan& p = plans_[l];
  FwdScratch& fs = fwd_scratch_;
  const int64_t H = cfg.hidden_size, nh = cfg.num_attention_heads, d = cfg.head_dim(),
                pos0 = c.length_;
  ProjectQkv(l, T, c);
  KvView kv{c.k_[l].data(), c.v_[l].data(), p.csa ? c.importance_[l].data() : nullptr,
            c.slot_pos_.data(), c.live_};
  std::vector<int32_t>& seed_sel = fs.seed_sel;
  seed_sel.clear();
  if (p.csa_global == CsaGlobal::kSeed) {
    SelectByImportance(c.live_, c.importance_[l].data(), c.slot_pos_.data(), cfg.csa.global_topk,
                       seed_sel);
  }
  const AttnShape shape{nh, cfg.num_key_value_heads, d};
  const double ones[3] = {1.0, 1.0, 1.0};
  for (int64_t t = 0; t < T; ++t) {
    const int32_t slot = fs.new_slots[t];
    const bool qsel = std::find(seed_sel.begin(), seed_sel.end(), slot) != seed_sel.end();
    float* o = fs.att.data() + t * nh * d;
    Attend(shape, c.rope_, y.segment_shift, p.csa ? &cfg.csa : nullptr, p.csa_global,
           p.csa_layernorm_fusion ? ones : nullptr, kv, fs.q.data() + t * nh * d, pos0 + t,
           seed_sel, qsel, o, attn_scratch_);
    if (p.csa_layernorm_fusion) ResidualLayerNorm(o, fs.h.data() + t * H, H, cfg.rms_norm_eps);
  }
  ops::MatMul(*pool_, fs.a.data(), fs.att.data(), y.wo, T);
  const float scale = p.block == BlockKind::kCed ? y.ced_scale : 1.0f;  // S-013
  for (int64_t i = 0; i < T * H; ++i) fs.x[i] += scale * fs.a[i];
}

Status SeedModel::FfnBlock(int64_t l, int64_t T, SeedCache& c) {
  const SeedConfig& cfg = config_;
  const SeedLayerPlan& p = plans_[l];
  FwdScratch& fs = fwd_scratch_;
  const int64_t H = cfg.hidden_size;
  NormOrCopyRows(p.block == BlockKind::kPreNorm || p.ced_mlp_norm, layers_[l].ffn_norm, fs.x.data(),
                 T, H, cfg.rms_norm_eps, fs.fin.data());
  Status st;
  Ffn(l, fs.fin.data(), fs.x.data(), T, c, fs.ffn.data(), stats_, st);
  if (!st.ok()) return st;
  for (int64_t i = 0; i < T * H; ++i) fs.x[i] += fs.ffn[i];
  return Status::Ok();
}

void SeedModel::WriteLogits(int64_t T, std::span<float> logits, bool all_logits) {
  const SeedConfig& cfg = config_;
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size;
  const int64_t first = all_logits ? 0 : T - 1;
  std::vector<float>& normed = fwd_scratch_.normed;
  normed.resize(H);
  for (int64_t t = first; t < T; ++t) {
    ops::ref::RmsNorm(normed.data(), fwd_scratch_.x.data() + t * H, final_norm_.data(), H,
                      static_cast<float>(cfg.rms_norm_eps));
    ops::MatMul(*pool_, logits.data() + (t - first) * V, normed.data(), lm_head_, 1);
  }
}

void SeedModel::PruneKv(SeedCache& c, int64_t T) {
  if (!(has_pruner_ && runtime_.pruner && c.pruner_)) return;
  FwdScratch& fs = fwd_scratch_;
  stats_.pruner_scores.resize(T);
  PrunerScores(*pool_, pruner_, fs.x.data(), T, config_.hidden_size, stats_.pruner_scores.data(),
               pruner_scratch_);
  for (int64_t t = 0; t < T; ++t) c.prune_score_[fs.new_slots[t]] = stats_.pruner_scores[t];
  fs.pos.clear();
  fs.score.clear();
  for (int32_t s : c.live_) {
    fs.pos.push_back(c.slot_pos_[s]);
    fs.score.push_back(c.prune_score_[s]);
  }
  c.pruner_->Step(fs.pos, fs.score, c.length_, stats_.pruner);
  for (int64_t e : stats_.pruner.evict) c.Evict(e);
}

// The forward pass: embed, each layer's attention and FFN blocks, the logits,
// then the KV pruner (write-then-evict, S-065).
Status SeedModel::Forward(std::span<const int32_t> tokens, SequenceCache& cache_base,
                          std::span<float> logits, bool all_logits) {
  auto* cp = dynamic_cast<SeedCache*>(&cache_base);
  CHECK(cp != nullptr, "SeedModel::Forward needs a cache from SeedModel::NewCache");
  SeedCache& c = *cp;
  RETURN_IF_ERROR(CheckForward(tokens, c, logits, all_logits));
  const int64_t T = static_cast<int64_t>(tokens.size()), H = config_.hidden_size;
  const int64_t pos0 = c.length_;
  BeginStep(c, T);
  for (int64_t t = 0; t < T; ++t) {
    DequantizeRow(embed_.dtype, embed_[tokens[t]].data, H, fwd_scratch_.x.data() + t * H);
  }
  // TaskAdapter: the task vector once per request, at its first call (S-058).
  RETURN_IF_ERROR(PrepareTaskAdapter(c, T));
  // Slots for the new tokens (lowest free first; S-065: freed slots are reused).
  TakeSlots(c, T);
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    CountLayerOps(l);
    AttentionBlock(l, T, c);
    if (Status st = FfnBlock(l, T, c); !st.ok()) {
      prof_ = nullptr;
      c.Truncate(pos0);  // frees this call's slots and HCA rows
      return st;
    }
  }
  prof_ = nullptr;
  c.length_ = pos0 + T;
  c.peak_live_ = std::max(c.peak_live_, c.live_tokens());
  // Logits before the pruner acts (S-065: this step is unaffected by its own decision).
  WriteLogits(T, logits, all_logits);
  // SemanticKVPruner: score the new tokens, then write-then-evict.
  PruneKv(c, T);
  stats_.live_tokens = c.live_tokens();
  return Status::Ok();
}

std::map<std::string, int64_t> CountParametersByComponent(const CheckpointReader& reader) {
  std::map<std::string, int64_t> out;
  auto has = [](const std::string& n, std::string_view part) {
    return n.find(part) != std::string::npos;
  };
  for (const TensorInfo& t : reader.tensors()) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    const std::string& n = t.name;
    std::string c = "other";
    if (has(n, "embed_tokens")) {
      c = "embedding";
    } else if (has(n, "lm_head")) {
      c = "lm_head";
    } else if (has(n, "model.task_adapter.") || has(n, "mlp.task_gate_weight")) {
      c = "task_adapter";
    } else if (has(n, "model.kv_pruner.")) {
      c = "kv_pruner";
    } else if (has(n, "norm.weight")) {
      c = "norm";
    } else if (has(n, "self_attn.") || has(n, "rotary_emb.")) {
      c = "attention";
    } else if (has(n, "mlp.experts.")) {
      c = "experts";
    } else if (has(n, "mlp.gate.weight")) {
      c = "router";
    } else if (has(n, "mlp.hca_")) {
      c = "hca";
    } else if (has(n, "mlp.ced_") || has(n, "ced_scale_factor")) {
      c = "ced";
    } else if (has(n, "mlp.gate_proj") || has(n, "mlp.up_proj") || has(n, "mlp.down_proj")) {
      c = "dense_mlp";
    }
    out[c] += numel;
    out["total"] += numel;
  }
  return out;
}

}  // namespace dsv4::seed

namespace dsv4 {

Result<std::unique_ptr<Model>> LoadSeedModel(const std::string& dir, int threads) {
  const std::string config_path = (std::filesystem::path(dir) / "config.json").string();
  ASSIGN_OR_RETURN(seed::SeedConfig config, seed::SeedConfig::FromFile(config_path));
  ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader, OpenCheckpointDir(dir));
  std::shared_ptr<const CheckpointReader> shared(std::move(reader));
  seed::SeedLoadOptions o;
  o.threads = threads;
  ASSIGN_OR_RETURN(std::unique_ptr<seed::SeedModel> m, seed::SeedModel::Load(shared, config, o));
  return std::unique_ptr<Model>(std::move(m));
}

}  // namespace dsv4
