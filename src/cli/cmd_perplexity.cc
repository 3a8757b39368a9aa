// `dsv4 perplexity`: mean negative log-likelihood of a text file.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "engine/generate.h"

namespace dsv4::cli {
namespace {

struct PerplexityArgs {
  LoadOptions load;
  std::string file;
  std::string ids_file;
  std::string separator = "<|endoftext|>";
};

int Run(const PerplexityArgs& a) {
  auto loaded = LoadModel(a.load);
  if (!loaded.ok()) return ReportError(loaded.status());
  if (a.file.empty() == a.ids_file.empty()) {
    return ReportError(InvalidArgument("give exactly one of --file and --ids"));
  }
  const std::string& source = a.file.empty() ? a.ids_file : a.file;
  auto text = ReadTextFile(source);
  if (!text.ok()) return ReportError(text.status());
  std::vector<std::vector<int32_t>> docs;
  if (!a.ids_file.empty()) {
    // One document: the ids as given (include BOS yourself).
    auto ids = ParseIds(*text, a.ids_file);
    if (!ids.ok()) return ReportError(ids.status());
    docs.push_back(std::move(*ids));
  } else {
    if (!loaded->tokenizer) {
      return ReportError(InvalidArgument(loaded->path + ": this model has no tokenizer",
                                         "score token ids with --ids FILE"));
    }
    for (const std::string& d : SplitDocuments(*text, a.separator)) {
      docs.push_back(loaded->tokenizer->Encode(d, /*add_bos=*/true));
    }
  }
  auto r = Perplexity(*loaded, docs);
  if (!r.ok()) return ReportError(r.status().WithContext(source));
  std::printf("nll=%.6f ppl=%.4f tokens=%lld\n", r->nll, r->ppl, static_cast<long long>(r->tokens));
  return 0;
}

}  // namespace

void RegisterPerplexity(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<PerplexityArgs>();
  CLI::App* sub = app.add_subcommand(
      "perplexity", "score a text file: documents split on <|endoftext|>, each from BOS");
  AddModelOptions(*sub, args->load);
  sub->add_option("-f,--file", args->file, "text file");
  sub->add_option("--ids", args->ids_file,
                  "file of whitespace-separated token ids, scored as one document");
  sub->add_option("--separator", args->separator, "document separator (default <|endoftext|>)");
  sub->callback([args, &exit_code] { exit_code = Run(*args); });
}

}  // namespace dsv4::cli
