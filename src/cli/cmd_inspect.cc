// `dsv4 inspect --model DIR [--context N] [--routing-stats FILE]`: prints a DeepSeek-V4 model's
// config, layer plan, parameter counts (total and active per token), bytes by
// dtype and KV-cache bytes per token and per sequence by layer kind. Reads
// config.json alone when no weights are present, so the released V4-Flash /
// V4-Pro configs can be inspected without downloading the weights. With
// --routing-stats it runs a text through the model instead and prints what its
// routers and indexers chose.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "engine/inspect.h"

namespace dsv4::cli {

void RegisterInspect(CLI::App& app, int& exit_code) {
  auto path = std::make_shared<std::string>();
  auto contexts = std::make_shared<std::vector<int64_t>>();
  auto draft = std::make_shared<std::string>();
  auto routing = std::make_shared<std::string>();
  auto load = std::make_shared<LoadOptions>();
  CLI::App* sub = app.add_subcommand(
      "inspect", "print a model's config, layer plan, parameter counts and bytes by dtype");
  sub->add_option("-m,--model", *path,
                  "DeepSeek-V4 model directory (config.json, optional safetensors) or a "
                  "config.json file")
      ->required();
  sub->add_option("--model-draft", *draft,
                  "a deepseek4 GGUF's draft module file (NextN MTP or DSpark), whose blocks join "
                  "the plan");
  sub->add_option("--context", *contexts,
                  "sequence length(s) for the KV-cache bytes per layer kind (repeatable; "
                  "default 4096 131072 1048576)");
  sub->add_option("--routing-stats", *routing,
                  "run the documents of this text file (split on <|endoftext|>, as `dsv4 "
                  "perplexity`) and print each MoE layer's expert-use histogram and each CSA "
                  "layer's indexer picks by age (DeepSeek-V4 checkpoints)");
  sub->add_option("--tokenizer", load->tokenizer_path,
                  "with --routing-stats: the tokenizer (default: found beside the model)");
  sub->add_option("-t,--threads", load->threads, "with --routing-stats: threads (default: all)");
  sub->callback([path, contexts, draft, routing, load, &exit_code] {
    Result<std::string> report = NotFound("");
    if (!routing->empty()) {
      load->model_path = *path;
      report = RoutingStatsReport(*load, *routing);
    } else {
      report = InspectModel(*path, *contexts, *draft);
    }
    if (!report.ok()) {
      exit_code = ReportError(report.status());
      return;
    }
    std::fputs(report->c_str(), stdout);
    exit_code = 0;
  });
}

}  // namespace dsv4::cli
