// `dsv4 convert-layout`: rewrites a seed-family checkpoint's dense MLPs between
// standard SwiGLU and CED storage (S-143; engine/convert_layout.h).
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "engine/convert_layout.h"

namespace dsv4::cli {
namespace {

struct ConvertArgs {
  std::string in, out, topology = "keep";
  ConvertLayoutOptions options;
};

int Convert(ConvertArgs& a) {
  if (a.topology != "keep" && a.topology != "ced") {
    return ReportError(InvalidArgument("--topology '" + a.topology + "' is not keep or ced"));
  }
  a.options.topology_ced = a.topology == "ced";
  auto r = ConvertCheckpointLayout(a.in, a.out, a.options);
  if (!r.ok()) return ReportError(r.status());
  std::printf("converted %zu layer(s) to %s:", r->converted.size(), a.options.to.c_str());
  for (int64_t l : r->converted) std::printf(" %lld", static_cast<long long>(l));
  std::printf("\n");
  for (const std::string& k : r->kept) std::printf("kept: %s\n", k.c_str());
  for (const std::string& w : r->warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  std::printf("wrote %s\n", a.out.c_str());
  return 0;
}

}  // namespace

void RegisterConvertLayout(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ConvertArgs>();
  CLI::App* sub = app.add_subcommand(
      "convert-layout", "rewrite a seed checkpoint's dense MLPs as CED storage or back (S-143)");
  sub->add_option("--in", args->in, "input checkpoint directory (config.json, model.safetensors)")
      ->required();
  sub->add_option("--out", args->out, "output directory (created)")->required();
  sub->add_option("--to", args->options.to, "ced | standard")->required();
  sub->add_option("--topology", args->topology,
                  "keep (default: layout only, same logits) | ced (norm-free CED blocks with "
                  "ced_scale_factor 0.873: needs retraining)");
  sub->callback([args, &exit_code] { exit_code = Convert(*args); });
}

}  // namespace dsv4::cli
