// The Llama-family dense baseline (llama2.c models such as stories260K, GGUF
// arch `llama`): pre-norm blocks of RMSNorm → grouped-query attention with
// interleaved-pair RoPE → residual, RMSNorm → SwiGLU MLP → residual; final
// RMSNorm and the classifier (tied to the embedding when `output.weight` is
// absent). It is the real-weights oracle for the engine (llama2.c run.c).
//
// ForwardBatch runs several sequences in one pass: their tokens are
// concatenated into one [T, D] activation matrix, so every linear layer (and
// the classifier) reads its weights once per step for all of them; RoPE, the
// cache writes and causal attention run per sequence on its own cache.
//
// Dimensions: T tokens in a call (all sequences of a batch), S cached
// positions, D d_model, F d_ff, H n_heads, G n_kv_heads, E head_dim (D / H),
// V vocab_size.
#ifndef DSV4_MODEL_LLAMA_LLAMA_MODEL_H_
#define DSV4_MODEL_LLAMA_LLAMA_MODEL_H_

#include <memory>
#include <vector>

#include "base/aligned_vector.h"
#include "base/thread_pool.h"
#include "io/checkpoint.h"
#include "io/llama2c.h"
#include "model/model.h"
#include "tensor/dtype.h"

namespace dsv4 {

struct LlamaConfig {
  int64_t d_model = 0;  // D
  int64_t d_ff = 0;     // F
  int64_t n_layers = 0;
  int64_t n_heads = 0;      // H
  int64_t n_kv_heads = 0;   // G
  int64_t vocab_size = 0;   // V
  int64_t max_context = 0;  // positions
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;
  int32_t bos_id = 1;
  int32_t eos_id = 2;
  // The KV cache's element types, f32 (exact) or f16 (llama.cpp's default,
  // half the bytes): keys and values rounded to f16 as they are written.
  // Heads narrower than 32 (kept transposed) keep f32 whatever these say.
  DType cache_k = DType::kF32;
  DType cache_v = DType::kF32;

  int64_t head_dim() const { return d_model / n_heads; }  // E
  int64_t kv_dim() const { return n_kv_heads * head_dim(); }
  // Rejects zero/negative sizes and heads that do not divide, naming the field.
  Status Validate() const;
};

// The config a llama2.c checkpoint's header describes (defaults for the rest).
LlamaConfig LlamaConfigFromLlama2c(const Llama2cConfig& h);

class LlamaModel final : public Model {
 public:
  // Binds every weight from `reader` (GGUF llama tensor names), reporting all
  // missing or mis-shaped tensors at once.
  static Result<std::unique_ptr<LlamaModel>> Load(std::shared_ptr<const CheckpointReader> reader,
                                                  const LlamaConfig& config);

  const ModelInfo& info() const override { return info_; }
  const LlamaConfig& config() const { return config_; }
  std::unique_ptr<SequenceCache> NewCache(int64_t max_tokens) const override;
  Status Forward(std::span<const int32_t> tokens, SequenceCache& cache, std::span<float> logits,
                 bool all_logits) override;
  // Every entry is validated first (distinct caches, room, ids, logits size),
  // so an error leaves every cache as it was.
  Status ForwardBatch(std::span<const BatchEntry> entries) override;
  void SetThreads(int n_threads) override;

 private:
  // One sequence's rows [row0, row0 + tokens.size()) of a pass.
  struct Segment {
    std::span<const int32_t> tokens;
    SequenceCache* cache = nullptr;
    int64_t pos0 = 0;  // cache length before the pass
    int64_t row0 = 0;
    std::span<float> logits;
    bool all_logits = false;
  };

  struct Layer {
    std::vector<float> attn_norm;  // [D]
    TensorView wq;                 // [H*E, D]
    TensorView wk;                 // [G*E, D]
    TensorView wv;                 // [G*E, D]
    TensorView wo;                 // [D, H*E]
    std::vector<float> ffn_norm;   // [D]
    TensorView w_gate;             // [F, D]  (llama2.c w1)
    TensorView w_up;               // [F, D]  (w3)
    TensorView w_down;             // [D, F]  (w2)
  };

  LlamaModel() = default;
  void EnsureScratch(int64_t n_tokens);
  // Errors a Forward of these arguments would return (context full, bad ids, ...).
  Status CheckCall(std::span<const int32_t> tokens, const SequenceCache& cache,
                   std::span<const float> logits, bool all_logits) const;
  // The forward pass over validated segments, rows concatenated in order.
  void Run(std::span<const Segment> segments);
  // Run's attention of layer l for a prefill with keys as rows: in blocks of rows.
  void AttendBlocks(int64_t l, std::span<const Segment> segments, int64_t heads_per_group,
                    float inv_sqrt_e);

  LlamaConfig config_;
  ModelInfo info_;
  std::shared_ptr<const CheckpointReader> reader_;  // keeps the mapping alive
  TensorView token_embd_;                           // [V, D]
  std::vector<Layer> layers_;
  std::vector<float> output_norm_;  // [D]
  TensorView output_;               // [V, D] (== token_embd_ when tied)
  std::unique_ptr<ThreadPool> pool_;

  // Scratch for a call of up to scratch_tokens_ tokens, sized once and grown
  // only when a longer prefill chunk arrives.
  int64_t scratch_tokens_ = 0;
  // scores_ is [threads, H/G, max_context]: attention rows per pool thread.
  // On 64-byte boundaries, as the products' vector loads want their rows.
  AlignedVector<float> x_, xb_, q_, k_, v_, att_out_, hb_, hb2_, scores_;
  // attn_rows_ is [threads, 2, max(head_dim, max_context)]: a thread's key
  // and value row pointers for the register-blocked attention products.
  std::vector<const float*> attn_rows_;
  // [threads, max_context]: a thread's f16 value row pointers (f16 cache).
  std::vector<const uint16_t*> attn_rows16_;
  // Prefill attention in blocks of rows (AttendBlocks): per thread a block's
  // queries of one head, [kAttendRows, head_dim]; the blocks of a call.
  static constexpr int64_t kAttendRows = 8;
  struct AttendBlock {
    const Segment* segment;
    int64_t row0, n_rows;
  };
  std::vector<float> attn_q_;
  std::vector<AttendBlock> blocks_;
  // Batches only (grown, never shrunk): the segments and the classifier's
  // [rows needing logits, V] output before it is scattered to the entries.
  std::vector<Segment> batch_;
  std::vector<float> batch_logits_;
};

}  // namespace dsv4

#endif  // DSV4_MODEL_LLAMA_LLAMA_MODEL_H_
