// Engine-level bench helpers: the bandwidth probe and weight bytes per token.
#include "engine/bench.h"

#include <filesystem>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "base/thread_pool.h"
#include "io/safetensors.h"
#include "model/deepseek_v4/model.h"
#include "model/seed/model.h"
#include "ops/bandwidth.h"
#include "ops/simd/simd_kernels.h"

namespace dsv4 {
namespace {

// `layers.{i}.ffn.experts.` → i, else -1.
int64_t RoutedExpertLayer(const std::string& name) {
  static const std::string kPrefix = "layers.";
  if (name.rfind(kPrefix, 0) != 0) return -1;
  const size_t dot = name.find('.', kPrefix.size());
  if (dot == std::string::npos || name.compare(dot, 13, ".ffn.experts.") != 0) return -1;
  try {
    return std::stoll(name.substr(kPrefix.size(), dot - kPrefix.size()));
  } catch (...) {
    return -1;
  }
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

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

namespace {

// Σ over a DeepSeek-V4 checkpoint's tensors of per_tensor(t), routed experts
// scaled by top_k / n_experts: the shared walk of the bytes and the
// multiply-adds per token.
template <typename PerTensor>
int64_t DeepSeekV4PerToken(const std::vector<TensorInfo>& tensors, int64_t n_experts, int64_t top_k,
                           PerTensor per_tensor) {
  int64_t total = 0;
  std::map<int64_t, int64_t> expert_sum;  // layer -> the sum over all its routed experts
  for (const TensorInfo& t : tensors) {
    if (t.name.rfind("mtp.", 0) == 0) continue;  // MTP runs only when speculating
    const int64_t layer = RoutedExpertLayer(t.name);
    if (layer >= 0) {
      expert_sum[layer] += per_tensor(t);
    } else {
      total += per_tensor(t);
    }
  }
  for (const auto& [layer, sum] : expert_sum) total += sum / n_experts * top_k;
  return total;
}

// The same for a loaded model: the tensor list of the checkpoint its weights
// are mapped from (reading a large checkpoint's headers again took seconds).
template <typename PerTensor>
int64_t DeepSeekV4PerToken(const deepseek_v4::DeepSeekV4Model& model, PerTensor per_tensor) {
  const deepseek_v4::DeepSeekV4Config& c = model.config();
  return DeepSeekV4PerToken(model.checkpoint().tensors(), c.n_routed_experts, c.num_experts_per_tok,
                            per_tensor);
}

// Bytes as stored, one row of the embedding and of the hash table.
int64_t StoredBytesPerToken(const TensorInfo& t) {
  if (t.name == "embed.weight" || EndsWith(t.name, ".ffn.gate.tid2eid")) {
    return t.nbytes / std::max<int64_t>(1, t.shape.empty() ? 1 : t.shape[0]);  // one row
  }
  return t.nbytes;
}

// The loaded DeepSeek-V4 model of a checkpoint directory, or null.
const deepseek_v4::DeepSeekV4Model* V4FromDirectory(const LoadedModel& model) {
  if (model.format != "safetensors") return nullptr;
  return dynamic_cast<const deepseek_v4::DeepSeekV4Model*>(model.model.get());
}

}  // namespace

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
  return DeepSeekV4PerToken(reader->tensors(), n_experts, top_k, &StoredBytesPerToken);
}

Result<int64_t> WeightMacsPerToken(const LoadedModel& model) {
  const deepseek_v4::DeepSeekV4Model* v4 = V4FromDirectory(model);
  if (v4 == nullptr) {
    return NotFound("weight multiply-adds per token of a '" + model.model->info().architecture +
                        "' model are not computed",
                    "only DeepSeek-V4 checkpoint directories");
  }
  return DeepSeekV4PerToken(*v4, [](const TensorInfo& t) -> int64_t {
    // 2-D weights a token is multiplied by; not the embedding (a lookup),
    // block scales or the hash table.
    if (t.shape.size() != 2 || t.name == "embed.weight" || EndsWith(t.name, "scale") ||
        EndsWith(t.name, ".tid2eid")) {
      return 0;
    }
    const int64_t elements = t.shape[0] * t.shape[1];
    return t.dtype == DType::kI8 ? 2 * elements : elements;  // FP4: two per stored byte
  });
}

Result<int64_t> Bf16DotMacsPerToken(const LoadedModel& model) {
  const deepseek_v4::DeepSeekV4Model* v4 = V4FromDirectory(model);
  if (v4 == nullptr) {
    return NotFound("bf16 dot-product multiply-adds of a '" + model.model->info().architecture +
                        "' model are not computed",
                    "only DeepSeek-V4 checkpoint directories");
  }
  if (!v4->numerics().act_quant || ops::simd::Fp8Bf16DotKernel() == nullptr ||
      ops::simd::Fp4Bf16DotKernel() == nullptr) {
    return 0;
  }
  const bool wo_a_bf16 = v4->numerics().o_bf16;
  return DeepSeekV4PerToken(*v4, [wo_a_bf16](const TensorInfo& t) -> int64_t {
    // FP8 (F8_E4M3) and FP4 (packed in I8) weights whose input the reference
    // FP8-quantises, and wo_a when its input is rounded to bf16 (o_bf16; a
    // bf16 einsum in the reference), with K % 128 == 0.
    const bool fp8 = t.dtype == DType::kFp8E4m3, fp4 = t.dtype == DType::kI8;
    const bool wo_a = t.name.find(".attn.wo_a.") != std::string::npos;
    if (t.shape.size() != 2 || !(fp8 || fp4) || (wo_a && !wo_a_bf16)) return 0;
    const int64_t k = fp4 ? 2 * t.shape[1] : t.shape[1];
    return k % 128 == 0 ? t.shape[0] * k : 0;
  });
}

Result<int64_t> WeightBytesPerToken(const LoadedModel& model) {
  const ModelInfo& info = model.model->info();
  if (info.weight_bytes_per_token > 0) return info.weight_bytes_per_token;
  if (const deepseek_v4::DeepSeekV4Model* v4 = V4FromDirectory(model)) {
    return DeepSeekV4PerToken(*v4, &StoredBytesPerToken);
  }
  return NotFound("weight bytes per token of a '" + info.architecture + "' model are not known",
                  "the model does not report ModelInfo::weight_bytes_per_token");
}

Result<KvUsage> KvCacheUsage(const Model& model, const SequenceCache& cache) {
  const auto* seed_model = dynamic_cast<const seed::SeedModel*>(&model);
  const auto* seed_cache = dynamic_cast<const seed::SeedCache*>(&cache);
  if (seed_model == nullptr || seed_cache == nullptr) {
    return NotFound("KV usage of a '" + model.info().architecture + "' cache is not reported",
                    "only caches that can evict entries (seed-family SemanticKVPruner) report it");
  }
  KvUsage u;
  u.entries = seed_cache->live_tokens();
  u.entries_unpruned = seed_cache->length();
  u.peak_entries = seed_cache->peak_live();
  u.evicted = seed_cache->evicted_total();
  u.bytes_per_entry = seed_model->kv_bytes_per_token();
  u.pruner_on = seed_model->config().kv_pruner.enabled && seed_model->runtime_options().pruner;
  return u;
}

}  // namespace dsv4
