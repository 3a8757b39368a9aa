// WriteSyntheticDeepSeekV4: a checkpoint directory with the real DeepSeek-V4
// structure (spec §7: official tensor names, FP8 e4m3 dense linears with
// 128×128 e8m0 scales, FP4 e2m1 routed experts packed two per I8 byte with
// per-32 e8m0 scales, BF16 norms/embeddings/compressors, F32 mHC and sinks;
// all three attention kinds — sliding window, CSA (ratio 4, with the
// indexer) and HCA (ratio 128) — hash-routed and score-routed MoE layers)
// and random weights of realistic scale (dequantised std ≈ 1/√fan_in), of a
// chosen size, so big-model speed can be measured on any machine; optionally
// with a DSpark draft module (spec §13: S stages fed by the last S layers), so
// speculative decoding's costs can be measured too.
// `dsv4 synth-model` is its front end.
#ifndef DSV4_ENGINE_SYNTH_MODEL_H_
#define DSV4_ENGINE_SYNTH_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace dsv4 {

struct SynthModelOptions {
  std::string out_dir;       // created if absent
  double size_gb = 4.0;      // target size (1 GB = 1e9 bytes) when n_experts == 0
  int64_t d_model = 2048;    // hidden_size D
  int64_t n_layers = 8;      // num_hidden_layers (≥ 3 for all three kinds)
  int64_t n_experts = 0;     // n_routed_experts; 0: as many as reach size_gb
  int64_t top_k = 6;         // num_experts_per_tok
  int64_t moe_inter = 1024;  // moe_intermediate_size (multiple of 32)
  int64_t n_heads = 16;      // num_attention_heads
  int64_t head_dim = 512;    // head_dim (≥ 64)
  int64_t q_lora_rank = 1024;
  int64_t o_lora_rank = 1024;
  int64_t o_groups = 4;  // divides n_heads
  int64_t vocab = 32768;
  int64_t n_hash_layers = 1;  // the first layers route by token-id hash
  int64_t sliding_window = 128;
  int64_t index_n_heads = 16;
  int64_t index_head_dim = 128;  // power of two ≥ 64
  int64_t index_topk = 512;
  int64_t mtp_layers = 0;     // NextN MTP blocks (spec §13.1; the April release: 1)
  int64_t dspark_stages = 0;  // DSpark draft stages (spec §13; 0731: 3); 0 = none
  int64_t dspark_block = 5;   // dspark_block_size: tokens drafted per block
  int64_t dspark_markov_rank = 256;
  int64_t shard_bytes = 2'000'000'000;  // larger models are split into shards + index
  uint64_t seed = 1;
  // Scored routers' selection bias −router_skew · ln(1 + e) for expert e: 0
  // routes uniformly; larger values concentrate the picks on low ids, a
  // Zipf-like skew (expert streaming benchmarks). Hash layers stay uniform.
  double router_skew = 0.0;
  // "v4" or "v4.1": DeepSeek-V4.1's structure (CSA2 roles on ratios 2 and 1,
  // Engram, lagged mHC, FP8 in 32×32 blocks), the schedule of the release
  // scaled to `n_layers` (V41Schedule). V4.1 needs its tokenizer (the Engram
  // hash runs over its compressed token map): `tokenizer_path` (default the
  // DeepSeek-V4 tokenizer of the source tree), copied beside the weights.
  std::string arch = "v4";
  std::string tokenizer_path;
  int64_t engram_vocab = 20000;  // engram_vocab_size: rows per (n-gram, head) bucket
};

// DeepSeek-V4.1's layer roles for L layers, after the release's 40: two
// window layers, then ratio-2 layers (a kv + index source every 6) and
// ratio-1 layers (the first a kv, index and candidate source, then an index
// source every 4); Engram before layer 1 and the third ratio-2 source.
struct V41Schedule {
  std::vector<int64_t> compress_ratios, kv_sources, index_sources, engram_layers;
  int64_t candidate_source = -1;
};
V41Schedule MakeV41Schedule(int64_t n_layers);

struct SynthModelReport {
  int64_t total_bytes = 0;  // tensor data written
  int64_t n_tensors = 0;
  int64_t n_experts = 0;                 // chosen or given
  int n_shards = 0;                      // 1: model.safetensors
  std::vector<int64_t> compress_ratios;  // per layer: 0 window, 4 CSA, 128 HCA
  double seconds = 0.0;                  // wall time of the whole write
};

// Checks the options (naming the flag), plans the tensors, writes config.json
// and the safetensors file(s) into out_dir.
Result<SynthModelReport> WriteSyntheticDeepSeekV4(const SynthModelOptions& options);

}  // namespace dsv4

#endif  // DSV4_ENGINE_SYNTH_MODEL_H_
