// `dsv4 logits`: the top-K logits at every position of a prompt, one line per
// position: "<pos> <id>:<logit> <id>:<logit> ...". A debugging interface that
// works for every model family (ids in, no tokenizer needed).
#include <cstdio>
#include <memory>
#include <numeric>

#include "cli/commands.h"
#include "engine/generate.h"

namespace dsv4::cli {
namespace {

struct LogitsArgs {
  LoadOptions load;
  std::string prompt;
  std::string prompt_ids;
  int top_k = 5;
  std::string logits_out;  // raw little-endian f32 [T, V], for bit-for-bit comparisons
};

int Run(const LogitsArgs& a) {
  auto loaded = LoadModel(a.load);
  if (!loaded.ok()) return ReportError(loaded.status());
  auto ids = PromptIds(*loaded, a.prompt, a.prompt_ids);
  if (!ids.ok()) return ReportError(ids.status());
  Model& model = *loaded->model;
  const int64_t V = model.info().vocab_size;
  const int64_t T = static_cast<int64_t>(ids->size());
  auto cache = model.NewCache(T);
  std::vector<float> logits(T * V);
  if (Status st = model.Forward(*ids, *cache, logits, /*all_logits=*/true); !st.ok()) {
    return ReportError(st);
  }
  if (!a.logits_out.empty()) {
    std::FILE* f = std::fopen(a.logits_out.c_str(), "wb");
    const bool ok = f != nullptr &&
                    std::fwrite(logits.data(), sizeof(float), logits.size(), f) == logits.size();
    if (f != nullptr && std::fclose(f) != 0)
      return ReportError(IoError(a.logits_out + ": write failed"));
    if (!ok) {
      return ReportError(
          IoError(a.logits_out + ": cannot write the logits", "check the --logits-out path"));
    }
  }
  const int64_t k = std::min<int64_t>(a.top_k, V);
  for (int64_t t = 0; t < T; ++t) {
    const float* row = logits.data() + t * V;
    const std::vector<int32_t> top = TopLogitIds(std::span<const float>(row, V), k);
    std::printf("%lld", static_cast<long long>(t));
    for (int32_t id : top) std::printf(" %d:%.6f", id, row[id]);
    std::printf("\n");
  }
  return 0;
}

}  // namespace

void RegisterLogits(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<LogitsArgs>();
  CLI::App* sub = app.add_subcommand("logits", "print the top-K logits at every prompt position");
  AddModelOptions(*sub, args->load);
  sub->add_option("--prompt-ids", args->prompt_ids, "prompt as token ids, e.g. \"0 17 42\"");
  sub->add_option("-p,--prompt", args->prompt, "prompt text (tokenized with BOS)");
  sub->add_option("--top-k", args->top_k, "ids per position (default 5)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--logits-out", args->logits_out,
                  "also write every position's logits to this file: raw little-endian float32 "
                  "[T, vocab] (bit-for-bit comparisons)");
  sub->callback([args, &exit_code] { exit_code = Run(*args); });
}

}  // namespace dsv4::cli
