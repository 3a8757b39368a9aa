#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cli/commands.h"

namespace dsv4::cli {

void AddModelOptions(CLI::App& sub, LoadOptions& options) {
  sub.add_option("-m,--model", options.model_path,
                 "model: a checkpoint directory, .gguf, llama2.c .bin, or a bundled model's "
                 "name: deepseek_v4_stories (the default, a trained DeepSeek-V4 student) or "
                 "stories260K (its llama2.c teacher)");
  sub.add_option("--model-draft", options.draft_model_path,
                 "deepseek4 GGUF models: the draft module's GGUF, as llama.cpp's converter "
                 "writes it: the NextN MTP block (--mtp: mtp-*.gguf) or the DSpark module "
                 "(architecture dflash); used by --speculative");
  sub.add_flag("--swa-full", options.swa_full,
               "DeepSeek-V4: keep every sliding-window and compressor row of a sequence, so "
               "that serve reuses any common prompt prefix of a slot (more memory per token; "
               "default: rows for a cut of 16 tokens and a checkpoint every 16384)");
  sub.add_option_function<std::string>(
         "--v41-index-keys",
         [&options](const std::string& v) { options.v41_owner_index_keys = v == "owner"; },
         "DeepSeek-V4.1: the index keys an index source scores: reference (default) as "
         "DeepSeek's code publishes them, refilled only when a compression group completes, "
         "so some decode steps score a later layer's keys; owner: its own kv source's keys "
         "(the architectural reading, a different model)")
      ->check(CLI::IsMember({"reference", "owner"}));
  sub.add_option_function<std::string>(
         "--ram-budget",
         [&options](const std::string& v) { options.ram_budget = ParseRamBudget(v).value(); },
         "RAM the model may take: a DeepSeek-V4 model whose weight files are larger streams "
         "its routed experts from disk through a cache sized to what the budget leaves after "
         "the other weights and a reserve of an eighth (direct reads, no page-cache copy; "
         "SIZE as 24G, 512M; auto: 90% of the available memory, the default; off: plain mmap)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            const Result<int64_t> r = ParseRamBudget(v);
            return r.ok() ? std::string() : r.status().message() + " (" + r.status().hint() + ")";
          },
          "SIZE|auto|off"));
  sub.add_flag("--expert-read-ahead", options.expert_read_ahead,
               "with --ram-budget streaming: read the experts the next layer will likely pick "
               "(its router applied to this layer's input) while a layer computes; pays where "
               "the guess is good and the disk has time to spare");
  sub.add_option("--parallel", options.parallel,
                 "under mpirun -n N: how the model is split over the N processes: pipeline "
                 "(each runs a range of the layers; docs/distributed.md), expert (each runs every "
                 "layer and a share of the routed experts) or pipeline,expert (stages of several "
                 "ranks, which split the stage's experts; --stages)")
      ->check(CLI::IsMember({"pipeline", "expert", "pipeline,expert"}));
  sub.add_option("--stages", options.stages,
                 "with --parallel pipeline,expert: pipeline stages (default 2); mpirun -n N "
                 "starts N / stages ranks per stage, consecutive ranks together")
      ->check(CLI::PositiveNumber);
  sub.add_option("--layers-split", options.layers_split,
                 "under mpirun -n N with --parallel pipeline: layers per rank (per stage with "
                 "pipeline,expert), e.g. 10,11,11,11 "
                 "(default auto: an even split, the remainder to the last ranks)");
  sub.add_option("--mpi-timeout", options.mpi_timeout_s,
                 "under mpirun -n N: seconds a rank waits for another inside a call (a stage's "
                 "streams, an all-gather, a command's data) before every rank ends with an error "
                 "naming the rank awaited (default 300; 0: wait forever). Waiting for the next "
                 "request never times out")
      ->check(CLI::NonNegativeNumber);
  sub.add_option_function<std::string>(
         "--pipeline-micro-batch",
         [&options](const std::string& v) {
           options.pipeline_micro_batch = v == "auto"  ? 0
                                          : v == "off" ? -1
                                                       : std::strtoll(v.c_str(), nullptr, 10);
         },
         "under mpirun -n N with --parallel pipeline: a prompt (one sequence) runs through the "
         "stages in micro-batches of this many tokens, so that the stages overlap (the "
         "logits stay bit-identical); auto (the default): ceil(T / N) tokens when that is at "
         "least 16, else one piece; off: one piece")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            if (v == "auto" || v == "off") return {};
            char* end = nullptr;
            const long long n = std::strtoll(v.c_str(), &end, 10);
            return !v.empty() && end == v.c_str() + v.size() && n >= 1
                       ? std::string()
                       : "'" + v + "' is not a token count (give TOKENS >= 1, auto or off)";
          },
          "TOKENS|auto|off"));
  sub.add_option("--tokenizer", options.tokenizer_path,
                 "tokenizer file (default: found beside or inside the model)");
  sub.add_option("-t,--threads", options.threads, "threads (default: all cores)")
      ->check(CLI::NonNegativeNumber);
  sub.add_flag("--mlock", options.mlock,
               "keep the model's weight files in RAM (mlock): read at load, never paged out; "
               "needs a locked-memory limit of the model's size (ulimit -l)");
  sub.add_option_function<std::string>(
         "--kquant-activations",
         [&options](const std::string& v) {
           options.kquant_activations =
               v == "f32" ? ops::KQuantActivations::kF32 : ops::KQuantActivations::kQ8K;
         },
         "GGUF quant weights (q8_0, k-quants, i-quants, mxfp4): q8_K multiplies them by "
         "activations quantised to 8 bits as llama.cpp's CPU backend pairs them (q8_K blocks "
         "of 256 for the k- and i-quants, q8_0/q8_1 blocks of 32 for the others), in "
         "integers (its logits; fast); f32 by the f32 activations (the exactly dequantised "
         "weights' logits; slower; a deepseek4 GGUF's MXFP4 experts are then repacked to "
         "FP4 at load). Default q8_K")
      ->check(CLI::IsMember({"q8_K", "f32"}));
  sub.add_option_function<std::string>(
         "--wo-a-input", [&options](const std::string& v) { options.wo_a_bf16 = v == "bf16"; },
         "DeepSeek-V4 checkpoints: wo_a's input, the attention output, as bf16 (as the "
         "released code holds it; bf16 dot products, faster) or f32 (the fp32 reference "
         "path). Default: bf16 for checkpoints with the release's numerics (qat_simulation), "
         "else f32; other models ignore it")
      ->check(CLI::IsMember({"bf16", "f32"}));
  // llama.cpp's --cache-type-k / --cache-type-v (its default is f16; ours is
  // f32, the reference's bits).
  const auto cache_type = [&sub](const char* name, DType* out, const char* what) {
    sub.add_option_function<std::string>(
           name, [out](const std::string& v) { *out = v == "f16" ? DType::kF16 : DType::kF32; },
           std::string("llama models: the KV cache's ") + what +
               ", f32 (default: exact) or f16 (half the bytes, as llama.cpp's default; "
               "heads narrower than 32 keep f32)")
        ->check(CLI::IsMember({"f32", "f16"}));
  };
  cache_type("--cache-type-k", &options.cache_type_k, "keys");
  cache_type("--cache-type-v", &options.cache_type_v, "values");
}

void AddEngineRuntimeFlags(CLI::App& sub, EngineRuntimeFlags& f) {
  // Seed-family models take all of them; DeepSeek-V4 takes --expert-mask and
  // --freeze-router on its scored layers; others refuse any (engine_options.h).
  sub.add_option("--router-capacity", f.options.router_capacity,
                 "MoE capacity factor: capacity = ceil(f·N·k/E) per forward, 0 = unlimited "
                 "(default: the model's config)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--expert-mask", f.expert_mask,
                 "experts the router may use, e.g. 0,2,3 (default: all; DeepSeek-V4: scored "
                 "layers, at least k)");
  sub.add_option("--force-experts", f.force_experts,
                 "experts every token must use, e.g. 3 (at most k)");
  sub.add_option("--freeze-router", f.freeze_router,
                 "debug: send every token to fixed experts with fixed weights, e.g. 0,1:0.7,0.3 "
                 "(DeepSeek-V4: exactly k experts, scored layers)");
  sub.add_flag("--reweight-router", f.options.reweight_router,
               "utilisation-variance reweighting of the router's selection bias (per sequence)");
  sub.add_option("--kv-pruner", f.kv_pruner,
                 "SemanticKVPruner: on, off or auto (the model's config; default)");
  sub.add_option("--kv-budget", f.options.kv_budget,
                 "KV tokens the pruner keeps, more than the tokens it protects (default: the "
                 "model's config)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--ced-dispatch", f.ced_dispatch,
                 "CED MLP path (seed CED layers): auto (calls under --ced-min-batch tokens take "
                 "the baseline unfused path; default), fused or baseline");
  sub.add_option("--ced-min-batch", f.options.ced_min_batch,
                 "tokens per forward call from which auto takes the CED fused path (default 8)")
      ->check(CLI::NonNegativeNumber);
}

Status ParseEngineRuntimeFlags(EngineRuntimeFlags& f) {
  if (!f.expert_mask.empty()) {
    ASSIGN_OR_RETURN(f.options.expert_allow, ParseIndexList(f.expert_mask, "--expert-mask"));
  }
  if (!f.force_experts.empty()) {
    ASSIGN_OR_RETURN(f.options.force_experts, ParseIndexList(f.force_experts, "--force-experts"));
  }
  if (!f.freeze_router.empty()) RETURN_IF_ERROR(ParseFreezeSpec(f.freeze_router, f.options));
  ASSIGN_OR_RETURN(f.options.kv_pruner, ParsePrunerPolicy(f.kv_pruner));
  if (!f.ced_dispatch.empty()) {
    ASSIGN_OR_RETURN(f.options.ced_dispatch, ParseCedDispatch(f.ced_dispatch));
  }
  return Status::Ok();
}

Result<std::vector<int32_t>> ParseIds(std::string_view text, const std::string& source) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (i == text.size()) break;
    size_t j = i;
    while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    const std::string word(text.substr(i, j - i));
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(word.c_str(), &end, 10);
    if (end != word.c_str() + word.size() || errno != 0 || v < 0 || v > INT32_MAX) {
      return InvalidArgument(
          source + ": '" + word + "' (at byte " + std::to_string(i) + ") is not a token id",
          "token ids are non-negative integers separated by spaces");
    }
    ids.push_back(static_cast<int32_t>(v));
    i = j;
  }
  if (ids.empty()) return InvalidArgument(source + ": no token ids", "give at least one id");
  return ids;
}

Result<std::vector<int32_t>> PromptIds(const LoadedModel& m, const std::string& prompt,
                                       const std::string& prompt_ids) {
  if (!prompt_ids.empty()) return ParseIds(prompt_ids, "--prompt-ids");
  if (!m.tokenizer) {
    return InvalidArgument(
        m.path + ": this model has no tokenizer, so a text prompt cannot be encoded",
        "pass --prompt-ids \"0 17 42 ...\" (or --tokenizer PATH)");
  }
  return m.tokenizer->Encode(prompt, /*add_bos=*/true);
}

int ReportError(const Status& status) {
  std::fprintf(stderr, "dsv4: error: %s\n", status.message().c_str());
  if (!status.hint().empty()) std::fprintf(stderr, "dsv4: hint: %s\n", status.hint().c_str());
  return 2;
}

}  // namespace dsv4::cli
