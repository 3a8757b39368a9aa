// `dsv4 run`: generate text from a prompt, streamed to stdout.
#include <cstdio>
#include <memory>
#include <random>

#include "cli/commands.h"
#include "engine/engine_options.h"
#include "engine/generate.h"
#include "engine/speculative.h"

namespace dsv4::cli {
namespace {

struct RunArgs {
  LoadOptions load;
  std::string prompt;
  std::string prompt_ids;
  bool print_ids = false;
  int64_t max_tokens = 256;
  int64_t seed = -1;
  SamplingParams sampling;
  std::string speculative = "0";  // draft tokens per round, or "auto"; "0" = off
  EngineRuntimeFlags engine;      // runtime policies (engine/engine_options.h)
  std::string prompt_cache;
  bool prompt_cache_ro = false;
};

int Run(RunArgs& a) {
  if (Status st = ValidateSamplingParams(a.sampling); !st.ok()) return ReportError(st);
  if (Status st = ParseEngineRuntimeFlags(a.engine); !st.ok()) return ReportError(st);
  auto loaded = LoadModel(a.load);
  if (!loaded.ok()) return ReportError(loaded.status());
  LoadedModel& m = *loaded;
  // The model keeps the options.
  if (Status st = ApplyEngineOptions(*m.model, a.engine.options); !st.ok()) return ReportError(st);
  GenerateOptions g;
  g.max_tokens = a.max_tokens;
  g.sampling = a.sampling;
  g.sampling.seed = a.seed >= 0 ? static_cast<uint64_t>(a.seed) : std::random_device{}();
  g.prompt_cache = a.prompt_cache;
  g.prompt_cache_ro = a.prompt_cache_ro;
  if (!a.prompt_cache.empty()) {
    g.state_fingerprint = StateFingerprint(ModelFingerprint(m), a.engine.options);
  }
  auto ids = PromptIds(m, a.prompt, a.prompt_ids);
  if (!ids.ok()) return ReportError(ids.status());
  const std::vector<int32_t>& prompt = *ids;
  const bool print_ids = a.print_ids || !m.tokenizer;
  if (!print_ids) {
    // Echo the prompt as the model sees it (llama.cpp does the same).
    StreamDecoder echo(*m.tokenizer);
    for (int32_t id : prompt) std::fputs(echo.Push(id).c_str(), stdout);
    std::fputs(echo.Flush().c_str(), stdout);
  }
  bool first = true;
  auto on_token = [&](int32_t id, std::string_view text) {
    if (print_ids) {
      if (id >= 0) std::printf(first ? "%d" : " %d", id);
      first = false;
    } else {
      std::fwrite(text.data(), 1, text.size(), stdout);
    }
    std::fflush(stdout);
  };
  auto spec = ParseSpeculative(a.speculative);
  if (!spec.ok()) return ReportError(spec.status());
  if (spec->draft_tokens > 0 && !a.prompt_cache.empty()) {
    return ReportError(
        Unimplemented("--prompt-cache does not combine with --speculative", "drop one of them"));
  }
  if (spec->draft_tokens > 0) {
    // Greedy or lossless speculative sampling (engine/speculative.h); no penalties.
    SpeculativeOptions so = *spec;
    so.max_tokens = a.max_tokens;
    so.sampling = g.sampling;
    auto stats = GenerateSpeculative(m, prompt, so, on_token);
    std::fputc('\n', stdout);
    if (!stats.ok()) return ReportError(stats.status());
    std::fprintf(stderr, "speculative: %lld tokens in %lld verify forwards, acceptance %.1f%%",
                 static_cast<long long>(stats->generated_tokens),
                 static_cast<long long>(stats->rounds), 100.0 * stats->acceptance_rate());
    if (so.adaptive) {
      std::fprintf(stderr, "; draft length %lld (rounds by length:",
                   static_cast<long long>(stats->chosen_k));
      for (int64_t n : stats->rounds_by_k) std::fprintf(stderr, " %lld", static_cast<long long>(n));
      std::fputc(')', stderr);
    }
    std::fputc('\n', stderr);
    return 0;
  }
  auto stats = Generate(m, prompt, g, on_token);
  std::fputc('\n', stdout);
  if (!stats.ok()) return ReportError(stats.status());
  if (!a.prompt_cache.empty()) {
    std::fprintf(stderr, "prompt cache %s: %lld of %lld prompt tokens reused\n",
                 a.prompt_cache.c_str(), static_cast<long long>(stats->cached_prompt_tokens),
                 static_cast<long long>(stats->prompt_tokens));
  }
  return 0;
}

}  // namespace

void RegisterRun(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* sub = app.add_subcommand("run", "generate text from a prompt");
  AddModelOptions(*sub, args->load);
  sub->add_option("-p,--prompt", args->prompt, "prompt text (default: empty, start from BOS)");
  sub->add_option("--prompt-ids", args->prompt_ids,
                  "prompt as token ids, e.g. \"0 17 42\" (no BOS is added)");
  sub->add_flag("--print-ids", args->print_ids,
                "print generated token ids instead of text (the default without a tokenizer)");
  sub->add_option("-n,--max-tokens", args->max_tokens, "tokens to generate (default 256)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--temperature,--temp", args->sampling.temperature,
                  "sampling temperature; 0 = greedy (default 0.8)");
  sub->add_option("--top-p", args->sampling.top_p, "nucleus sampling (default 0.95)");
  sub->add_option("--top-k", args->sampling.top_k, "top-k sampling, 0 = off (default 40)");
  sub->add_option("--min-p", args->sampling.min_p, "min-p sampling (default 0.05)");
  sub->add_option("--repeat-penalty", args->sampling.repeat_penalty, "(default 1.0 = off)");
  sub->add_option("--presence-penalty", args->sampling.presence_penalty, "(default 0)");
  sub->add_option("--frequency-penalty", args->sampling.frequency_penalty, "(default 0)");
  sub->add_option("-s,--seed", args->seed, "random seed (default: random)");
  sub->add_option("--speculative", args->speculative, kSpeculativeHelp);
  sub->add_option("--prompt-cache", args->prompt_cache,
                  "reuse the prompt state saved in FILE when its tokens begin this prompt, and "
                  "save this prompt's state there (as llama.cpp; checked by model fingerprint "
                  "and checksum)");
  sub->add_flag("--prompt-cache-ro", args->prompt_cache_ro,
                "use --prompt-cache's file but do not update it");
  AddEngineRuntimeFlags(*sub, args->engine);
  sub->callback([args, &exit_code] { exit_code = Run(*args); });
}

}  // namespace dsv4::cli
