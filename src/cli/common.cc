#include <cstdio>

#include "cli/commands.h"

namespace dsv4::cli {

void AddModelOptions(CLI::App& sub, LoadOptions& options) {
  sub.add_option("-m,--model", options.model_path,
                 "model: llama2.c .bin, .gguf (default: the embedded stories260K)");
  sub.add_option("--tokenizer", options.tokenizer_path,
                 "tokenizer file (default: found beside or inside the model)");
  sub.add_option("-t,--threads", options.threads, "threads (default: all cores)")
      ->check(CLI::NonNegativeNumber);
}

int ReportError(const Status& status) {
  std::fprintf(stderr, "dsv4: error: %s\n", status.message().c_str());
  if (!status.hint().empty()) std::fprintf(stderr, "dsv4: hint: %s\n", status.hint().c_str());
  return 2;
}

}  // namespace dsv4::cli
