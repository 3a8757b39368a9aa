// Engine-level bench helpers: the bandwidth probe and weight bytes per token.
#include "engine/bench.h"

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "base/thread_pool.h"
#include "io/safetensors.h"
#include "model/deepseek_v4/work_counts.h"
#include "ops/bandwidth.h"

namespace dsv4 {
ReadBandwidth MeasureReadBandwidth(int threads, int64_t bytes, int repeats) {
  ThreadPool pool(threads > 0 ? threads : ThreadPool::DefaultThreads());
  const ops::BandwidthResult r = ops::MeasureReadBandwidth(pool, bytes, repeats);
  return ReadBandwidth{.gb_per_s = r.gb_per_s,
                       .plain_gb_per_s = r.plain_gb_per_s,
                       .ahead_gb_per_s = r.ahead_gb_per_s,
                       .bytes = r.bytes,
                       .repeats = r.repeats};
}

PeakFlops MeasurePeakFlops(int threads, int repeats) {
  ThreadPool pool(threads > 0 ? threads : ThreadPool::DefaultThreads());
  const ops::FlopsResult r = ops::MeasurePeakFlops(pool, int64_t{1} << 31, repeats);
  return PeakFlops{.gflops = r.gflops, .repeats = r.repeats};
}

PeakFlops MeasurePeakBf16DotFlops(int threads, int repeats) {
  ThreadPool pool(threads > 0 ? threads : ThreadPool::DefaultThreads());
  const ops::FlopsResult r = ops::MeasurePeakBf16DotFlops(pool, int64_t{1} << 32, repeats);
  return PeakFlops{.gflops = r.gflops, .repeats = r.repeats};
}

Result<int64_t> DeepSeekV4WeightBytesPerToken(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string config_path = (fs::path(dir) / "config.json").string();
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(config_path));
  const auto config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return InvalidArgument(config_path + ": not a JSON object", "is this a model directory?");
  }
  auto get_int = [&](const char* key) -> Result<int64_t> {
    const auto it = config.find(key);
    if (it == config.end() || !it->is_number_integer() || it->get<int64_t>() <= 0) {
      return InvalidArgument(config_path + ": '" + key + "' is missing or not a positive integer",
                             "a DeepSeek-V4 config.json names it");
    }
    return it->get<int64_t>();
  };
  ASSIGN_OR_RETURN(const int64_t n_experts, get_int("n_routed_experts"));
  ASSIGN_OR_RETURN(const int64_t top_k, get_int("num_experts_per_tok"));
  ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader, OpenCheckpointDir(dir));
  return deepseek_v4::WeightBytesPerToken(reader->tensors(), n_experts, top_k);
}

Result<int64_t> WeightMacsPerToken(const LoadedModel& model) {
  const std::optional<WeightWork> w = model.model->weight_work_per_token();
  if (!w) {
    return NotFound("weight multiply-adds per token of a '" + model.model->info().architecture +
                        "' model are not computed",
                    "only DeepSeek-V4 checkpoint directories");
  }
  return w->macs;
}

Result<int64_t> Bf16DotMacsPerToken(const LoadedModel& model) {
  const std::optional<WeightWork> w = model.model->weight_work_per_token();
  if (!w) {
    return NotFound("bf16 dot-product multiply-adds of a '" + model.model->info().architecture +
                        "' model are not computed",
                    "only DeepSeek-V4 checkpoint directories");
  }
  return w->bf16_dot_macs;
}

Result<int64_t> WeightBytesPerToken(const LoadedModel& model) {
  const ModelInfo& info = model.model->info();
  if (info.weight_bytes_per_token > 0) return info.weight_bytes_per_token;
  if (const std::optional<WeightWork> w = model.model->weight_work_per_token()) return w->bytes;
  return NotFound("weight bytes per token of a '" + info.architecture + "' model are not known",
                  "the model does not report ModelInfo::weight_bytes_per_token");
}

Result<KvUsage> KvCacheUsage(const Model& model, const SequenceCache& cache) {
  std::optional<KvUsage> u = model.kv_usage(cache);
  if (!u) {
    return NotFound("KV usage of a '" + model.info().architecture + "' cache is not reported",
                    "only caches that can evict entries (seed-family SemanticKVPruner) report it");
  }
  return *u;
}

}  // namespace dsv4
