// `dsv4 tokenize`: text -> token ids with any supported tokenizer.
#include <cstdio>
#include <memory>

#include "cli/commands.h"

namespace dsv4::cli {
namespace {

struct TokenizeArgs {
  std::string tokenizer;
  std::string text;
  bool add_bos = false;
  bool show_pieces = false;
};

int Run(const TokenizeArgs& a) {
  auto tok = LoadTokenizer(a.tokenizer);
  if (!tok.ok()) return ReportError(tok.status());
  const std::vector<int32_t> ids = (*tok)->Encode(a.text, a.add_bos);
  if (a.show_pieces) {
    for (int32_t id : ids) std::printf("%d\t%s\n", id, (*tok)->Decode(id).c_str());
    return 0;
  }
  for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
  std::printf("\n");
  return 0;
}

}  // namespace

void RegisterTokenize(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* sub = app.add_subcommand("tokenize", "print the token ids of a text");
  sub->add_option("--tokenizer", args->tokenizer,
                  "tokenizer.json(.gz), .gguf, llama2.c tokenizer .bin, or a model directory")
      ->required();
  sub->add_option("text", args->text, "the text to encode")->required();
  sub->add_flag("--bos", args->add_bos, "prepend BOS");
  sub->add_flag("--show-pieces", args->show_pieces, "one line per token: id, TAB, its bytes");
  sub->callback([args, &exit_code] { exit_code = Run(*args); });
}

}  // namespace dsv4::cli
