// dsv4: command-line entry point. Subcommands live in cmd_*.cc.
#include <cstdio>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"dsv4: inference engine for the DeepSeek-V4 model family (and Llama-family models)"};
  app.require_subcommand(1);
  int exit_code = 0;
  dsv4::cli::RegisterRun(app, exit_code);
  dsv4::cli::RegisterPerplexity(app, exit_code);
  dsv4::cli::RegisterBench(app, exit_code);
  dsv4::cli::RegisterTokenize(app, exit_code);
  dsv4::cli::RegisterChatTemplate(app, exit_code);
  dsv4::cli::RegisterLogits(app, exit_code);
  dsv4::cli::RegisterInspect(app, exit_code);
  dsv4::cli::RegisterServe(app, exit_code);
  dsv4::cli::RegisterLsp(app, exit_code);
  dsv4::cli::RegisterSynthModel(app, exit_code);
  dsv4::cli::RegisterConvertLayout(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return exit_code;
}
