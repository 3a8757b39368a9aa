// The `dsv4` subcommands. Each Register* adds one CLI11 subcommand to `app`
// whose callback stores the process exit code in `exit_code`
// (0 ok, 2 a user or file error, printed as one line on stderr).
#ifndef DSV4_CLI_COMMANDS_H_
#define DSV4_CLI_COMMANDS_H_

#include <CLI/CLI.hpp>

#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/engine_options.h"
#include "engine/loader.h"

namespace dsv4::cli {

void RegisterRun(CLI::App& app, int& exit_code);
void RegisterPerplexity(CLI::App& app, int& exit_code);
void RegisterBench(CLI::App& app, int& exit_code);
void RegisterTokenize(CLI::App& app, int& exit_code);
void RegisterChatTemplate(CLI::App& app, int& exit_code);
void RegisterLogits(CLI::App& app, int& exit_code);
void RegisterInspect(CLI::App& app, int& exit_code);        // DeepSeek-V4 model report
void RegisterServe(CLI::App& app, int& exit_code);          // HTTP server (src/server)
void RegisterLsp(CLI::App& app, int& exit_code);            // Language Server (src/lsp)
void RegisterSynthModel(CLI::App& app, int& exit_code);     // random DeepSeek-V4 checkpoint
void RegisterConvertLayout(CLI::App& app, int& exit_code);  // seed: SwiGLU <-> CED (S-143)

// Adds --model, --tokenizer and --threads to a subcommand.
void AddModelOptions(CLI::App& sub, LoadOptions& options);
// The runtime policies of engine/engine_options.h (router, KV pruner, CED
// dispatch) as the command line spells them, shared by `run` and `serve`.
struct EngineRuntimeFlags {
  EngineRuntimeOptions options;  // the numeric and boolean flags land here directly
  std::string expert_mask, force_experts, freeze_router, kv_pruner = "auto", ced_dispatch;
};
// Adds --router-capacity, --expert-mask, --force-experts, --freeze-router,
// --reweight-router, --kv-pruner, --kv-budget, --ced-dispatch, --ced-min-batch.
void AddEngineRuntimeFlags(CLI::App& sub, EngineRuntimeFlags& flags);
// Parses the text-valued flags into flags.options (errors name the flag).
Status ParseEngineRuntimeFlags(EngineRuntimeFlags& flags);
// Parses whitespace-separated token ids ("0 17 42"); `source` names the text
// in errors (a flag or a file).
Result<std::vector<int32_t>> ParseIds(std::string_view text, const std::string& source);
// The prompt as ids: --prompt-ids when given, else the tokenized --prompt with
// BOS. Errors when the model has no tokenizer and no ids are given.
Result<std::vector<int32_t>> PromptIds(const LoadedModel& m, const std::string& prompt,
                                       const std::string& prompt_ids);

// --speculative K|auto, as `run` and `serve` take it (engine/speculative.h ParseSpeculative).
inline constexpr const char* kSpeculativeHelp =
    "speculative decoding with K draft tokens per round, or auto (the length that gives the "
    "most tokens/s, measured as it runs) (DeepSeek-V4 with its MTP layer or DSpark module, V4.1 "
    "with its DSpark stages; "
    "greedy or sampled, no penalties); the output follows the same distribution as without "
    "(V4.1: with --v41-index-keys owner)";

// Prints "dsv4: error: ..." (and the hint) to stderr; returns exit code 2.
int ReportError(const Status& status);

}  // namespace dsv4::cli

#endif  // DSV4_CLI_COMMANDS_H_
