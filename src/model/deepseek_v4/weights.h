// DeepSeek-V4 weights: every tensor declared once (ForEachWeight: official
// name, logical shape, dtype policy), bound through a CheckpointReader in any
// of the three spellings of tensor_names.h, and counted by the same visitor
// (inspect.h). Big matrices stay views into the mmap'd checkpoint in their
// stored format — bf16, FP8 e4m3 with 128×128 block scales, FP4 e2m1 with
// per-32 scales (spec §7.3–7.4); only small vectors (norm weights, mHC
// parameters, sinks, biases, tid2eid) are copied to f32 / int32 at load.
//
// Binding reports every missing tensor in one error, and names the tensor,
// the expected and the found shape/dtype for every mismatch.
//
// Dimensions: V vocab, D hidden, C hc_mult, M = (2+C)·C, H heads, A head_dim,
// Q q_lora_rank, G o_groups, O o_lora_rank, E routed experts, k experts per
// token, F moe_intermediate_size, r compress ratio, c = 2 if r == 4 else 1,
// IH / ID indexer heads / head dim, Wd a compressor's entry width (A or ID).
#ifndef DSV4_MODEL_DEEPSEEK_V4_WEIGHTS_H_
#define DSV4_MODEL_DEEPSEEK_V4_WEIGHTS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "io/checkpoint.h"
#include "model/deepseek_v4/config.h"
#include "model/deepseek_v4/plan.h"
#include "model/deepseek_v4/tensor_names.h"
#include "tensor/tensor.h"

namespace dsv4::deepseek_v4 {

// ---------------------------------------------------------------------------
// Declarations
// ---------------------------------------------------------------------------

// The dtype policy of a declared tensor.
enum class WeightKind {
  kLinear,        // f32/bf16/f16, or FP8 e4m3 + `.scale` [ceil(N/128), ceil(K/128)] (e8m0|f32)
  kExpertLinear,  // kLinear, or FP4 e2m1 (packed, stored as I8 [N, K/2]) + `.scale` [N, K/32] e8m0
  kMatrix,        // unquantized f32/bf16/f16 matrix (embed, head, router, compressor, ...)
  kVector,        // f32/bf16/f16, copied to f32 at load (norm weights)
  kF32Param,      // stored f32 (bf16/f16, GGUF ggml quants accepted), copied to f32 (mHC,
                  // sinks, biases, ape)
  kIndexTable,    // i64 or i32 token → expert table, copied to int32 and range-checked
  kEngramTable,   // FP8 e4m3 [rows, Dh] + `.scale` [rows, Dh/32] e8m0 (or f32/bf16/f16), a view
};

struct WeightDecl {
  std::string name;            // official name, e.g. "layers.3.attn.wq_a.weight"
  std::vector<int64_t> shape;  // logical shape, outermost first ([N, K] for linears)
  WeightKind kind = WeightKind::kMatrix;
  int64_t layer = -1;     // -1 for top-level tensors
  bool mtp = false;       // part of an MTP layer (not run by the main forward)
  int64_t expert = -1;    // routed expert index, -1 otherwise
  bool per_token = true;  // read for every token (false: routed experts, the
                          // embedding table — only k/E resp. one row are)
};

// Visits every tensor a checkpoint of `config` holds (MTP layers included),
// in checkpoint order. FP8/FP4 scales are implied by kLinear/kExpertLinear.
void ForEachWeight(const DeepSeekV4Config& config, const std::vector<LayerPlan>& plans,
                   const std::function<void(const WeightDecl&)>& fn);

// The dtype a tensor of `kind` is expected to have in a release checkpoint of
// `config` (used when only config.json is present): FP8 dense weights when
// quantization_config is present, FP4 experts when expert_dtype is fp4.
DType PredictedDType(const DeepSeekV4Config& config, WeightKind kind);
// The predicted scale dtype of an FP8/FP4 weight (e8m0 unless scale_fmt is absent).
DType PredictedScaleDType(const DeepSeekV4Config& config, WeightKind kind);

// ---------------------------------------------------------------------------
// Bound weights
// ---------------------------------------------------------------------------

enum class LinearFormat { kDense, kFp8Block, kFp4Block };

// A linear layer's weight W [N, K] (out = x · Wᵀ) in its stored format.
struct LinearWeight {
  TensorView weight;  // [N, K]; f32/bf16/f16, fp8_e4m3, or fp4_e2m1 (logical elements)
  TensorView scale;   // FP8: [ceil(N/b), ceil(K/b)]; FP4: [N, K/32]; empty when dense
  LinearFormat format = LinearFormat::kDense;
  // FP8: b, the weight tile one scale covers (b × b): 128 (DeepSeek-V4) or 32
  // (V4.1-Flash), as the binding reads it off the scale's shape.
  int64_t fp8_block = 128;

  int64_t rows() const { return weight.sizes[0]; }  // N
  int64_t cols() const { return weight.sizes[1]; }  // K
  // Whether the reference quantises this linear's input to FP8 (spec §7.4,
  // §9.2): the FP8/FP4 formats, and the GGUF quant types — a deepseek4 GGUF
  // file's stand-ins for the FP8 and FP4 weights (§14: Q8_0 and MXFP4 as
  // converted, any other type after llama-quantize).
  bool takes_fp8_input() const {
    return format != LinearFormat::kDense || IsGgmlQuant(weight.dtype);
  }
};

// out[t, n − row_begin] (row stride out_stride) = x[t, :] · W[n, :] for n in
// [row_begin, row_end), fp32 accumulation; x is [T, K] contiguous. Dispatches
// once on the format (dense: ops/ref MatMul, FP8/FP4: ops/ref quant matmuls)
// and splits the rows across `pool`.
void LinearRows(ThreadPool& pool, float* out, int64_t out_stride, const float* x,
                const LinearWeight& w, int64_t n_tokens, int64_t row_begin, int64_t row_end);
// out[T, N] = x[T, K] · Wᵀ.
inline void Linear(ThreadPool& pool, float* out, const float* x, const LinearWeight& w,
                   int64_t n_tokens) {
  LinearRows(pool, out, w.rows(), x, w, n_tokens, 0, w.rows());
}

// Several independent products run as one split of their rows over the pool
// (one fork-join instead of one per product; a decoded token's routed experts
// are a dozen small matrices). Each job: out[T, N] = x[T, K] · Wᵀ.
struct LinearJob {
  const LinearWeight* w = nullptr;
  const float* x = nullptr;  // [T, K]
  float* out = nullptr;      // [T, out_stride]: rows [row_begin, row_end) of w · x
  int64_t n_tokens = 0;
  int64_t row_begin = 0;
  int64_t row_end = -1;    // −1: all of w's rows
  int64_t out_stride = 0;  // 0: row_end − row_begin
};
// row_offsets: scratch the caller keeps (no allocation once its capacity
// exceeds the job count).
void LinearMany(ThreadPool& pool, std::span<const LinearJob> jobs,
                std::vector<int64_t>& row_offsets);

struct HyperConnectionWeights {
  TensorView fn;             // [M, C·D] f32 (M = C for the head)
  std::vector<float> base;   // [M]
  std::vector<float> scale;  // [3] for a layer site, [1] for the head
};

// A KV compressor (spec §4.4): the main one of a CSA/HCA layer, or the indexer's.
struct CompressorWeights {
  TensorView wkv;           // [c·Wd, D] (unquantized, used in fp32)
  TensorView wgate;         // [c·Wd, D]
  std::vector<float> ape;   // [r, c·Wd] added to the gate logits by slot p mod r
  std::vector<float> norm;  // [Wd] RMSNorm of each new entry
};

// The lightning indexer of a CSA layer (spec §4.5), or of a DeepSeek-V4.1
// index source, whose keys come from its kv source's compressed latent.
struct IndexerWeights {
  LinearWeight wq_b;             // [IH·ID, Q]
  TensorView weights_proj;       // [IH, D] per-head score weights (unquantized)
  CompressorWeights compressor;  // V4: index keys: wkv/wgate [2·ID, D], ape [r, 2·ID], norm [ID]
  TensorView wk;                 // V4.1 key owners: [ID, A] latent → index key (unquantized)
  std::vector<float> k_norm;     // V4.1 key owners: [ID]
};

// DeepSeek-V4.1 Engram of one layer (engram.h): the n-gram hash table and the
// projection of the looked-up rows into one key per stream plus a shared value.
struct EngramWeights {
  TensorView embed;        // embed.weight [rows, Dh] fp8 e4m3 (or float), a few rows per token
  TensorView embed_scale;  // embed.scale [rows, Dh/32] e8m0; empty for a float table
  LinearWeight wkv;        // [(C + 1)·D, n_cols·Dh], n_cols = (max_ngram − 1)·heads
  std::vector<float> qk;   // [C·D] q_weight · k_weight (the reference uses only the product)
};

struct AttentionWeights {
  LinearWeight wq_a;             // [Q, D]
  std::vector<float> q_norm;     // [Q]
  LinearWeight wq_b;             // [H·A, Q]
  LinearWeight wkv;              // [A, D]
  std::vector<float> kv_norm;    // [A]
  LinearWeight wo_a;             // [G·O, (H/G)·A]
  LinearWeight wo_b;             // [D, G·O]
  std::vector<float> attn_sink;  // [H]
  CompressorWeights compressor;  // ratio > 0 only (wkv/wgate [c·A, D], ape [r, c·A], norm [A])
  IndexerWeights indexer;        // CSA (ratio 4) only
};

struct ExpertWeights {
  LinearWeight w1;  // gate [F, D]
  LinearWeight w3;  // up   [F, D]
  LinearWeight w2;  // down [D, F]
};

struct MoeWeights {
  TensorView gate;                     // [E, D] router, used in fp32
  std::vector<float> bias;             // [E] selection bias (scored layers); empty for hash
  std::vector<int32_t> tid2eid;        // [V, k] expert ids (hash layers); empty for scored
  std::vector<ExpertWeights> experts;  // [E]
  ExpertWeights shared;
};

struct LayerWeights {
  std::vector<float> attn_norm;    // [D]
  std::vector<float> ffn_norm;     // [D]
  HyperConnectionWeights hc_attn;  // fn [M, C·D], base [M], scale [3]
  HyperConnectionWeights hc_ffn;
  AttentionWeights attn;
  MoeWeights moe;
  EngramWeights engram;  // DeepSeek-V4.1 Engram layers only
};

// A multi-token-prediction layer (spec §6.3): its own projections, norms and
// head collapse around a full block; embedding and LM head are the main model's.
struct MtpWeights {
  LinearWeight e_proj;             // [D, D] on enorm(embedding of the next token)
  LinearWeight h_proj;             // [D, D] on hnorm(main residual), per stream
  std::vector<float> enorm;        // [D]
  std::vector<float> hnorm;        // [D]
  std::vector<float> norm;         // [D] final norm before the shared head
  HyperConnectionWeights hc_head;  // fn [C, C·D], base [C], scale [1]
  LayerWeights block;              // window attention + scored MoE
};

// The DSpark draft module (spec §13.3): S window-only stages; stage 0 also
// projects the target features, the last stage carries the heads. Embedding
// and LM head are the main model's. V4.1 (the reference's DSparkBlock): no
// hc_head (the last stage's lagged mix collapses), the Markov head's
// markov_head.embed / markov_head.head as markov_w1 / markov_w2, the stages'
// MoE with dspark_n_routed_experts.
struct DSparkWeights {
  LinearWeight main_proj;            // [D, nT·D] on the concatenated target features
  std::vector<float> main_norm;      // [D]
  std::vector<LayerWeights> stages;  // [S] window attention + scored MoE
  std::vector<float> norm;           // [D] final norm before the shared head
  HyperConnectionWeights hc_head;    // fn [C, C·D], base [C], scale [1] (V4 only)
  TensorView markov_w1;              // [V, r] the previous token's Markov embedding
  TensorView markov_w2;              // [V, r] Markov bias = W2 · e
  std::vector<float> confidence;     // [D + r] confidence logit = w · [y ; e] (no bias)
};

struct ModelWeights {
  TensorView embed;                     // [V, D]
  TensorView head;                      // [V, D]
  std::vector<float> norm;              // [D]
  HyperConnectionWeights hc_head;       // fn [C, C·D], base [C], scale [1]
  std::vector<LayerWeights> layers;     // the L main layers
  std::vector<MtpWeights> mtp;          // the NextN MTP layers, when the checkpoint has them
  std::optional<DSparkWeights> dspark;  // the DSpark module, when config and checkpoint have it
  // The tensor spelling the checkpoint uses (NameSchemeName), decided per
  // tensor: the first of kSafetensorsSchemes that spells every bound tensor as
  // found, else "mixed (<the spellings found>)".
  std::string naming;
};

// Binds the weights of the main layers, and of each MTP layer whose
// `mtp.{k}.e_proj.weight` is present (MTP is optional: speculative decoding
// only). All missing tensors are reported in one error; wrong shapes/dtypes
// name the tensor, what was expected and found.
Result<ModelWeights> BindWeights(const CheckpointReader& reader, const DeepSeekV4Config& config,
                                 const std::vector<LayerPlan>& plans);

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_WEIGHTS_H_
