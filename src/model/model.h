// Model: what the engine sees of every model family (Llama baseline,
// DeepSeek-V4, the seed-article family). A model owns its weights (views into
// mapped files) and scratch buffers; per-sequence state lives in a
// SequenceCache it creates.
#ifndef DSV4_MODEL_MODEL_H_
#define DSV4_MODEL_MODEL_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "base/status.h"

namespace dsv4 {

struct ModelInfo {
  std::string architecture;  // "llama", "deepseek_v4", ...
  int64_t vocab_size = 0;    // rows of the LM head
  int64_t max_context = 0;   // positions the model supports
  int64_t n_params = 0;      // total parameter count
  // Bytes of weights one decoded token reads (as stored: dense layers, the
  // classifier, shared experts and top-k routed experts for MoE; embedding
  // lookups count one row). 0 when the model does not report it.
  int64_t weight_bytes_per_token = 0;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
};

// Per-sequence state (KV cache and the like). Tokens are appended in order.
class SequenceCache {
 public:
  virtual ~SequenceCache() = default;
  // Tokens already in the cache (the next token's position).
  virtual int64_t length() const = 0;
  // Forgets everything after the first n tokens (n <= length()). Truncate(0)
  // leaves the cache as NewCache made it, per-sequence state included (the
  // serving engine reuses its slots' caches across requests this way).
  virtual void Truncate(int64_t n) = 0;
};

// One sequence's share of a batched step (Model::ForwardBatch): its new
// tokens, its cache (distinct per entry) and where its logits go — [T, V] when
// all_logits, else the last token's [V].
struct BatchEntry {
  std::span<const int32_t> tokens;
  SequenceCache* cache = nullptr;
  std::span<float> logits;
  bool all_logits = false;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;
  // A cache for one sequence of at most max_tokens tokens (<= info().max_context).
  virtual std::unique_ptr<SequenceCache> NewCache(int64_t max_tokens) const = 0;
  // Runs `tokens` at positions [cache.length(), cache.length() + T), appending
  // them to `cache`. Writes the logits of every token ([T, V], when all_logits)
  // or of the last one ([V]) into `logits`. Errors: context full, bad token id.
  virtual Status Forward(std::span<const int32_t> tokens, SequenceCache& cache,
                         std::span<float> logits, bool all_logits) = 0;
  // Forward for several sequences in one step: the same results as calling
  // Forward on each entry in order, but a model may run the entries' tokens
  // through each weight together (one weight read per step instead of one per
  // sequence). This default loops over Forward and stops at the first error,
  // so entries before it have run; callers that need to retry entries one by
  // one can Truncate the caches back to their lengths before the call.
  virtual Status ForwardBatch(std::span<const BatchEntry> entries) {
    for (const BatchEntry& e : entries) {
      RETURN_IF_ERROR(Forward(e.tokens, *e.cache, e.logits, e.all_logits));
    }
    return Status::Ok();
  }
  // Threads used by the kernels.
  virtual void SetThreads(int n_threads) = 0;
};

}  // namespace dsv4

#endif  // DSV4_MODEL_MODEL_H_
