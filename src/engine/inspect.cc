#include "engine/inspect.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "engine/generate.h"
#include "io/gguf.h"
#include "io/llama2c.h"
#include "io/safetensors.h"
#include "model/deepseek_v4/inspect.h"
#include "model/seed/config.h"

namespace dsv4 {
namespace fs = std::filesystem;
namespace {

// Tensor count, parameters and bytes by dtype of any checkpoint.
std::string WeightsSummary(const CheckpointReader& reader) {
  int64_t params = 0;
  std::map<std::string, int64_t> bytes;
  for (const TensorInfo& t : reader.tensors()) {
    int64_t n = 1;
    for (int64_t s : t.shape) n *= s;
    params += n;
    bytes[std::string(DTypeName(t.dtype))] += t.nbytes;
  }
  std::string out =
      fmt::format("weights: {} tensors, {} parameters\n", reader.tensors().size(), params);
  for (const auto& [dtype, b] : bytes) out += fmt::format("  {:<10} {:>14} bytes\n", dtype, b);
  return out;
}

Result<std::string> InspectSeed(const fs::path& dir, const fs::path& config_path) {
  ASSIGN_OR_RETURN(seed::SeedConfig c, seed::SeedConfig::FromFile(config_path.string()));
  std::string out = fmt::format("seed-family model ({}): {}\n", seed::kSeedModelType, dir.string());
  out += fmt::format(
      "profile {}: vocab {}, hidden {}, layers {}, heads {} (kv {}), head_dim {}, "
      "intermediate {}, context {}\n",
      seed::ProfileName(c.profile), c.vocab_size, c.hidden_size, c.num_hidden_layers,
      c.num_attention_heads, c.num_key_value_heads, c.head_dim(), c.intermediate_size,
      c.max_context());
  // Each enabled extension (and rope_scaling) with every field, from the
  // config's field table: "extensions.moe: num_experts 16 num_experts_per_tok 2 ...".
  std::string section;
  VisitSeedFields(c, [&](const seed::SeedField& f, const auto& value) {
    if (*f.section == '\0' || !seed::SeedSectionEnabled(c, f.section)) return;
    if (section != f.section) {
      if (!section.empty()) out += "\n";
      section = f.section;
      const std::string prefix = seed::SeedFieldPrefix(section);  // "extensions.moe."
      out += prefix.substr(0, prefix.size() - 1) + ":";
    }
    out += fmt::format(" {} {}", f.key, value);
  });
  if (!section.empty()) out += "\n";
  if (fs::is_directory(dir)) {
    auto reader = OpenCheckpointDir(dir.string());
    if (reader.ok()) out += WeightsSummary(**reader);
  }
  return out;
}

}  // namespace

Result<std::string> InspectModel(const std::string& model, const std::vector<int64_t>& contexts,
                                 const std::string& draft) {
  std::error_code ec;
  // A bundled model's name (loader.h BundledModelPath) stands for its path.
  const std::string bundled = fs::exists(model, ec) ? "" : BundledModelPath(model);
  const std::string path = bundled.empty() ? model : bundled;
  const fs::path p(path);
  if (!draft.empty() && p.extension() != ".gguf") {
    return InvalidArgument(path + ": --model-draft applies to deepseek4 GGUF models",
                           "a checkpoint directory carries its draft layers (mtp.*) itself");
  }
  fs::path config = fs::is_directory(p, ec) ? p / "config.json" : p;
  if (p.extension() == ".gguf") {
    // Any part of a gguf-split set opens the whole set.
    ASSIGN_OR_RETURN(std::vector<std::unique_ptr<GgufFile>> parts, OpenGgufSplit(path));
    auto arch = parts.front()->GetString("general.architecture");
    if (arch.ok() && *arch == "deepseek4") {
      std::vector<const GgufFile*> views;
      for (const auto& part : parts) views.push_back(part.get());
      std::unique_ptr<GgufFile> draft_file;
      if (!draft.empty()) {
        ASSIGN_OR_RETURN(draft_file, OpenGguf(draft));
      }
      return deepseek_v4::InspectGguf(
          views, contexts.empty() ? deepseek_v4::kDefaultInspectContexts : contexts,
          draft_file.get());
    }
    if (!draft.empty()) {
      return InvalidArgument(path + ": --model-draft applies to deepseek4 GGUF models",
                             "drop --model-draft");
    }
    const GgufFile* file = parts.front().get();
    return fmt::format("GGUF v{} model: {}\narchitecture: {}\nmetadata: {} keys\n", file->version(),
                       path, arch.ok() ? *arch : "?", file->metadata().size()) +
           WeightsSummary(*file);
  }
  if (p.extension() == ".bin") {
    ASSIGN_OR_RETURN(auto file, OpenLlama2c(path));
    const Llama2cConfig& c = file->config();
    return fmt::format(
               "llama2.c model: {}\ndim {}, hidden {}, layers {}, heads {} (kv {}), vocab {}, "
               "context {}, {} classifier\n",
               path, c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size,
               c.seq_len, c.shared_classifier ? "shared" : "separate") +
           WeightsSummary(*file);
  }
  if (fs::exists(config, ec)) {
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(config.string()));
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_object() && j.contains("model_type") && j["model_type"] == seed::kSeedModelType) {
      return InspectSeed(fs::is_directory(p, ec) ? p : p.parent_path(), config);
    }
  }
  return deepseek_v4::InspectPath(
      path, contexts.empty() ? deepseek_v4::kDefaultInspectContexts : contexts);
}

Result<std::string> RoutingStatsReport(const LoadOptions& load, const std::string& file) {
  ASSIGN_OR_RETURN(LoadedModel m, LoadModel(load));
  if (!m.tokenizer) {
    return InvalidArgument(
        m.path + ": this model has no tokenizer, so " + file + " cannot be encoded",
        "pass --tokenizer PATH");
  }
  ASSIGN_OR_RETURN(std::string text, ReadTextFile(file));
  std::vector<std::vector<int32_t>> docs;
  for (const std::string& d : SplitDocuments(text, "<|endoftext|>")) {
    docs.push_back(m.tokenizer->Encode(d, /*add_bos=*/true));
  }
  if (docs.empty()) {
    return InvalidArgument(file + ": no text to run", "give a file with at least one document");
  }
  RETURN_IF_ERROR(m.model->EnableUsageStats(true));
  Result<PerplexityResult> ppl = Perplexity(m, docs);
  if (!ppl.ok()) return ppl.status().WithContext(file);
  const std::optional<UsageStats> usage = m.model->usage_stats();
  RETURN_IF_ERROR(m.model->EnableUsageStats(false));
  if (!usage) {
    return Status(StatusCode::kInternal, m.path + ": the model kept no usage statistics");
  }

  std::string out =
      fmt::format("routing statistics of {} on {}: {} documents, {} tokens scored (nll {:.4f})\n",
                  m.path, file, docs.size(), ppl->tokens, ppl->nll);
  out +=
      "\nexperts: share of the (token, pick) pairs each expert took, %; max/mean: the busiest\n"
      "expert's load over the mean; eff: e^entropy of the shares (all E when balanced)\n";
  for (const LayerUsage& l : usage->layers) {
    int64_t picks = 0;
    for (int64_t v : l.expert_picks) picks += v;
    if (picks == 0) continue;
    const double E = static_cast<double>(l.expert_picks.size());
    double entropy = 0, top = 0;
    std::string shares;
    for (int64_t v : l.expert_picks) {
      const double p = static_cast<double>(v) / static_cast<double>(picks);
      if (p > 0) entropy -= p * std::log(p);
      top = std::max(top, p);
      if (l.expert_picks.size() <= 32) shares += fmt::format(" {:5.1f}", 100 * p);
    }
    out += fmt::format("layer {:>2} {:<6} {:>7} picks  max/mean {:5.2f}  eff {:6.2f} of {:.0f}{}\n",
                       l.layer,
                       l.draft         ? "draft"
                       : l.hash_routed ? "hash"
                                       : "scored",
                       picks, top * E, std::exp(entropy), E, shares.empty() ? "" : "  |" + shares);
  }
  bool header = false;
  for (const LayerUsage& l : usage->layers) {
    const int64_t picks = l.index_picks();
    if (picks == 0) continue;
    if (!header) {
      out +=
          "\nindexer: picks of the queries that saw more compressed entries than top-k;\n"
          "newest: share among the query's newest top-k entries (uniform: what picks spread\n"
          "evenly over the entries would give); age: entries back from the newest, % of picks\n";
      header = true;
    }
    const double n = static_cast<double>(picks);
    std::string ages;
    for (size_t b = 0; b < l.index_age.size(); ++b) {
      if (l.index_age[b] == 0) continue;
      const std::string range =
          b == 0   ? std::string("0")
          : b == 1 ? std::string("1")
                   : fmt::format("{}-{}", int64_t{1} << (b - 1), (int64_t{1} << b) - 1);
      ages += fmt::format(" {}:{:.1f}", range, 100 * static_cast<double>(l.index_age[b]) / n);
    }
    out += fmt::format(
        "layer {:>2} {} queries, {:.1f} entries seen on average  newest {:.1f}% (uniform "
        "{:.1f}%)  mean relative age {:.2f} (uniform 0.50)\n  age %:{}\n",
        l.layer, l.index_queries,
        static_cast<double>(l.index_visible) / static_cast<double>(l.index_queries),
        100 * static_cast<double>(l.index_recent) / n, 100 * l.index_recent_uniform / n,
        l.index_relative_age / n, ages);
  }
  return out;
}

}  // namespace dsv4
