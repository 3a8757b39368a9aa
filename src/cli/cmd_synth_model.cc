// `dsv4 synth-model`: writes a random-weight checkpoint with the real
// DeepSeek-V4 structure and storage formats (engine/synth_model.h), of a
// chosen size (default ≈ 4 GB), for measuring big-model speed.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "engine/synth_model.h"

namespace dsv4::cli {

void RegisterSynthModel(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<SynthModelOptions>();
  CLI::App* sub = app.add_subcommand(
      "synth-model",
      "write a DeepSeek-V4-structured checkpoint with random weights (FP8 dense, FP4 experts; "
      "window, CSA and HCA layers; hash and scored MoE; mHC) for benchmarks");
  sub->add_option("--out", o->out_dir, "output directory (created)")->required();
  sub->add_option("--size-gb", o->size_gb,
                  "target size in GB (1e9 bytes), reached by the expert count unless --experts "
                  "is given (default 4)");
  sub->add_option("--d-model", o->d_model, "hidden size (default 2048)");
  sub->add_option("--layers", o->n_layers, "layers (default 8: 2 window, then CSA/HCA)");
  sub->add_option("--experts", o->n_experts, "routed experts per layer (default: from --size-gb)");
  sub->add_option("--top-k", o->top_k, "experts per token (default 6)");
  sub->add_option("--moe-inter", o->moe_inter, "expert hidden size (default 1024)");
  sub->add_option("--heads", o->n_heads, "attention heads (default 16)");
  sub->add_option("--head-dim", o->head_dim, "head dim (default 512)");
  sub->add_option("--q-lora-rank", o->q_lora_rank, "query low rank (default 1024)");
  sub->add_option("--o-lora-rank", o->o_lora_rank, "output low rank (default 1024)");
  sub->add_option("--o-groups", o->o_groups, "output projection groups (default 4)");
  sub->add_option("--vocab", o->vocab, "vocabulary size (default 32768)");
  sub->add_option("--hash-layers", o->n_hash_layers, "hash-routed first layers (default 1)");
  sub->add_option("--window", o->sliding_window, "sliding window (default 128)");
  sub->add_option("--index-heads", o->index_n_heads, "indexer heads (default 16)");
  sub->add_option("--index-head-dim", o->index_head_dim, "indexer head dim (default 128)");
  sub->add_option("--index-topk", o->index_topk, "indexer top-k (default 512)");
  sub->add_option("--mtp-layers", o->mtp_layers,
                  "NextN MTP draft blocks, as the April release's 1 (default 0)");
  sub->add_option("--dspark-stages", o->dspark_stages,
                  "DSpark draft stages fed by the last layers, as V4-Flash-0731's and "
                  "V4.1-Flash's 3 (default 0: no draft module; v4.1: the stages' MoE has a "
                  "third of the experts, half the top-k)");
  sub->add_option("--dspark-block", o->dspark_block, "DSpark tokens drafted per block (default 5)");
  sub->add_option("--shard-bytes", o->shard_bytes,
                  "split into shards + model.safetensors.index.json above this (default 2e9)");
  sub->add_option("--seed", o->seed, "random seed (default 1)");
  sub->add_option("--router-skew", o->router_skew,
                  "scored routers favour low expert ids by a selection bias of −S·ln(1+e), a "
                  "Zipf-like skew for expert-streaming benchmarks (default 0: uniform)")
      ->check(CLI::Range(0.0, 100.0));
  sub->add_option("--arch", o->arch,
                  "v4 (default) or v4.1: DeepSeek-V4.1's structure (CSA2 roles on ratios 2 and "
                  "1, Engram tables, lagged mHC, FP8 in 32x32 blocks), the release's schedule "
                  "scaled to --layers; use --vocab 129280 with the default tokenizer")
      ->check(CLI::IsMember({"v4", "v4.1"}));
  sub->add_option("--tokenizer", o->tokenizer_path,
                  "v4.1: the tokenizer.json(.gz) copied beside the weights, whose compressed "
                  "token map the Engram hash uses (default: the DeepSeek-V4 tokenizer of the "
                  "source tree)");
  sub->add_option("--engram-vocab", o->engram_vocab,
                  "v4.1: engram_vocab_size, the rows of each of the 24 hash buckets per Engram "
                  "layer (default 20000; the release: 16000000)");
  sub->callback([o, &exit_code] {
    auto r = WriteSyntheticDeepSeekV4(*o);
    if (!r.ok()) {
      exit_code = ReportError(r.status());
      return;
    }
    std::string kinds;
    for (int64_t c : r->compress_ratios) kinds += (kinds.empty() ? "" : ",") + std::to_string(c);
    std::printf(
        "wrote %s: %.3f GB in %lld tensors, %d shard(s), %lld experts per layer, "
        "compress_ratios [%s], %.1f s\n",
        o->out_dir.c_str(), r->total_bytes / 1e9, static_cast<long long>(r->n_tensors), r->n_shards,
        static_cast<long long>(r->n_experts), kinds.c_str(), r->seconds);
    exit_code = 0;
  });
}

}  // namespace dsv4::cli
