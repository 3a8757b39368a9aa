// What the sublayers of one layer read and do not change during a call: the
// thread pool, the config, the layer's plan and RoPE frequencies, the numerics
// and the tracer; and which rows of a call a sequence's tokens occupy. The
// sublayer functions (attention.h, compressor.h, indexer.h, moe.h) take these
// two instead of a long list of positional parameters.
#ifndef DSV4_MODEL_DEEPSEEK_V4_LAYER_CONTEXT_H_
#define DSV4_MODEL_DEEPSEEK_V4_LAYER_CONTEXT_H_

#include <cstdint>

#include "base/thread_pool.h"
#include "model/deepseek_v4/config.h"
#include "model/deepseek_v4/numerics.h"
#include "model/deepseek_v4/plan.h"
#include "model/deepseek_v4/rope.h"
#include "model/model.h"

namespace dsv4::deepseek_v4 {

struct ScoredRouterOptions;  // moe.h
struct MoeWeights;           // weights.h
class ExpertCache;           // expert_cache.h

struct LayerContext {
  ThreadPool& pool;
  const DeepSeekV4Config& config;
  const LayerPlan& plan;  // plan.layer: the index traces and errors name
  const RopeFrequencies& rope;
  const NumericsOptions& numerics;
  const Tracer& trace;
  // The operator's scored-router options (moe.h; DeepSeekV4Model::
  // ApplyRuntimeOptions), or null: the checkpoint's routing. Set for main
  // layers only; hash-routed layers ignore them.
  const ScoredRouterOptions* router_options = nullptr;
  // Routed experts streamed under a RAM budget (expert_cache.h), or null: the
  // mapped weights. Main layers only.
  ExpertCache* expert_cache = nullptr;
  // With an expert cache: the next main layer's plan and MoE, whose likely
  // experts (its router applied to this layer's FFN input) are read ahead
  // while this layer computes; null: nothing is read ahead.
  const LayerPlan* next_plan = nullptr;
  const MoeWeights* next_moe = nullptr;
  // Expert parallel (model/model.h ExpertShard): this process runs its share
  // of the routed experts and gathers the others'; null: all of them here.
  // Main layers only.
  const ExpertShard* expert_shard = nullptr;
};

// One sequence's T tokens at positions pos0 .. pos0+T−1, held in rows
// row0 .. row0+T−1 of a call's activations (a batched step concatenates
// several sequences' tokens).
struct TokenRun {
  int64_t row0 = 0;
  int64_t n_tokens = 0;
  int64_t pos0 = 0;
};

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_LAYER_CONTEXT_H_
