// `dsv4 inspect --model DIR [--context N]`: prints a DeepSeek-V4 model's
// config, layer plan, parameter counts (total and active per token), bytes by
// dtype and KV-cache bytes per token and per sequence by layer kind. Reads
// config.json alone when no weights are present, so the released V4-Flash /
// V4-Pro configs can be inspected without downloading the weights.
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
  sub->callback([path, contexts, draft, &exit_code] {
    auto report = InspectModel(*path, *contexts, *draft);
    if (!report.ok()) {
      exit_code = ReportError(report.status());
      return;
    }
    std::fputs(report->c_str(), stdout);
    exit_code = 0;
  });
}

}  // namespace dsv4::cli
