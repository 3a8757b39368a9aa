// Long-context benchmark of the DeepSeek-V4 forward (results in
// docs/benchmarks.md). Not a test: it prints numbers.
//
//   deepseek_v4_long_context_bench write DIR
//       a tiny random V4 checkpoint (config.json + model.safetensors): window,
//       CSA (ratio 4, indexer) and HCA (ratio 128) layers, vocab 32768
//   deepseek_v4_long_context_bench run DIR [--context N] [--chunk C] [--decode D]
//                                          [--threads T]
//       decode ms/token after a 1024-token prompt and after an N-token prompt
//       (default 65536, prefilled in chunks of C = 2048), and the peak RSS
//       (VmHWM) against what the CacheSpecs predict for the cache plus the
//       weights (the mmap'd safetensors), the model's scratch and the process
//       baseline (RSS before loading).
//
// Build: cmake --build <build dir> --target deepseek_v4_long_context_bench
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/timer.h"
#include "deepseek_v4_test_util.h"  // tests/model: random checkpoints
#include "model/deepseek_v4/cache.h"
#include "model/deepseek_v4/model.h"

namespace dsv4::deepseek_v4 {
namespace {

// The benchmark model: the V4 layer mix at a small width.
DeepSeekV4Config BenchConfig() {
  DeepSeekV4Config c;
  c.vocab_size = 32768;
  c.hidden_size = 384;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.q_lora_rank = 128;
  c.o_groups = 2;
  c.o_lora_rank = 64;
  c.sliding_window = 128;
  c.compress_ratios = {0, 4, 128, 4};  // window, CSA, HCA, CSA
  c.index_n_heads = 2;
  c.index_head_dim = 64;
  c.index_topk = 64;
  c.n_routed_experts = 8;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 256;
  c.num_hash_layers = 1;
  c.num_nextn_predict_layers = 0;
  return c;
}

nlohmann::json ConfigJson(const DeepSeekV4Config& c) {
  return {{"model_type", "deepseek_v4"},
          {"vocab_size", c.vocab_size},
          {"hidden_size", c.hidden_size},
          {"num_hidden_layers", c.num_hidden_layers},
          {"num_attention_heads", c.num_attention_heads},
          {"num_key_value_heads", 1},
          {"head_dim", c.head_dim},
          {"qk_rope_head_dim", c.qk_rope_head_dim},
          {"q_lora_rank", c.q_lora_rank},
          {"o_groups", c.o_groups},
          {"o_lora_rank", c.o_lora_rank},
          {"sliding_window", c.sliding_window},
          {"max_position_embeddings", c.max_position_embeddings},
          {"compress_ratios", c.compress_ratios},
          {"index_n_heads", c.index_n_heads},
          {"index_head_dim", c.index_head_dim},
          {"index_topk", c.index_topk},
          {"n_routed_experts", c.n_routed_experts},
          {"num_experts_per_tok", c.num_experts_per_tok},
          {"moe_intermediate_size", c.moe_intermediate_size},
          {"num_hash_layers", c.num_hash_layers},
          {"num_nextn_predict_layers", c.num_nextn_predict_layers},
          {"swiglu_limit", c.swiglu_limit}};
}

const char* SafetensorsDType(DType d) {
  switch (d) {
    case DType::kBF16:
      return "BF16";
    case DType::kF32:
      return "F32";
    case DType::kI64:
      return "I64";
    default:
      return nullptr;
  }
}

int Write(const std::string& dir) {
  const DeepSeekV4Config c = BenchConfig();
  testing::MemoryCheckpoint ckpt;
  testing::FillRandomCheckpoint(c, 20240601, testing::SynthFormat::kBf16, ckpt);
  nlohmann::json header = nlohmann::json::object();
  int64_t offset = 0;
  // Widest elements first (I64, F32, BF16), as the safetensors library does:
  // every tensor then starts aligned to its element size.
  std::vector<std::pair<std::string, const TensorInfo*>> by_name;
  for (const TensorInfo& t : ckpt.tensors()) by_name.emplace_back(t.name, &t);
  std::stable_sort(by_name.begin(), by_name.end(), [](const auto& a, const auto& b) {
    const int64_t ea = GetDTypeInfo(a.second->dtype).block_bytes;
    const int64_t eb = GetDTypeInfo(b.second->dtype).block_bytes;
    return ea != eb ? ea > eb : a.first < b.first;
  });
  for (const auto& [name, t] : by_name) {
    const char* dt = SafetensorsDType(t->dtype);
    if (dt == nullptr) {
      std::fprintf(stderr, "%s: unexpected dtype\n", name.c_str());
      return 1;
    }
    header[name] = {
        {"dtype", dt}, {"shape", t->shape}, {"data_offsets", {offset, offset + t->nbytes}}};
    offset += t->nbytes;
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h += ' ';
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    std::fprintf(stderr, "%s: cannot create the directory: %s\n", dir.c_str(),
                 ec.message().c_str());
    return 1;
  }
  std::ofstream f(dir + "/model.safetensors", std::ios::binary);
  const uint64_t n = h.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const auto& [name, t] : by_name) {
    f.write(static_cast<const char*>(t->data), static_cast<std::streamsize>(t->nbytes));
  }
  std::ofstream config(dir + "/config.json");
  config << ConfigJson(c).dump(2) << "\n";
  f.close();
  config.close();
  if (!f || !config) {
    std::fprintf(stderr, "%s: cannot write model.safetensors or config.json\n", dir.c_str());
    return 1;
  }
  std::printf("wrote %s: %lld tensors, %.1f MiB of weights\n", dir.c_str(),
              static_cast<long long>(by_name.size()), static_cast<double>(offset) / (1 << 20));
  return 0;
}

// VmRSS / VmHWM of this process, bytes.
int64_t ProcStatus(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key, 0) == 0) return std::atoll(line.c_str() + std::strlen(key)) * 1024;
  }
  return -1;
}

double MiB(int64_t b) { return static_cast<double>(b) / (1 << 20); }

struct DecodeResult {
  double prefill_seconds = 0.0;
  double ms_per_token = 0.0;
};

// Prefills `n` random tokens in chunks, then decodes `decode` tokens greedily.
DecodeResult PrefillAndDecode(DeepSeekV4Model& m, SequenceCache& cache, int64_t n, int64_t chunk,
                              int64_t decode, uint32_t seed) {
  const int64_t V = m.info().vocab_size;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(2, static_cast<int32_t>(V - 1));
  std::vector<int32_t> tokens(chunk);
  std::vector<float> logits(V);
  DecodeResult r;
  Timer timer;
  for (int64_t done = 0; done < n; done += chunk) {
    const int64_t c = std::min(chunk, n - done);
    for (int64_t i = 0; i < c; ++i) tokens[i] = done + i == 0 ? 0 : id(rng);
    const Status s = m.Forward(std::span<const int32_t>(tokens).first(c), cache, logits, false);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      std::exit(1);
    }
  }
  r.prefill_seconds = timer.Seconds();
  std::vector<double> per_token;
  for (int64_t i = 0; i < decode; ++i) {
    const int32_t next[1] = {
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin())};
    Timer t;
    const Status s = m.Forward(next, cache, logits, false);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      std::exit(1);
    }
    per_token.push_back(t.Seconds());
  }
  std::sort(per_token.begin(), per_token.end());
  r.ms_per_token = 1e3 * per_token[per_token.size() / 2];  // median
  return r;
}

int RunBench(const std::string& dir, int64_t context, int64_t chunk, int64_t decode, int threads) {
  const int64_t baseline = ProcStatus("VmRSS:");
  LoadOptions o;
  o.threads = threads;
  auto loaded = LoadDeepSeekV4(dir, o);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", loaded.status().ToString().c_str());
    return 1;
  }
  auto& m = static_cast<DeepSeekV4Model&>(**loaded);
  int64_t weight_bytes = 0;
  {
    std::ifstream f(dir + "/model.safetensors", std::ios::binary | std::ios::ate);
    weight_bytes = static_cast<int64_t>(f.tellg());
  }
  const int64_t short_ctx = 1024;
  DecodeResult at_short, at_long;
  {
    auto cache = m.NewCache(short_ctx + decode);
    at_short = PrefillAndDecode(m, *cache, short_ctx, chunk, decode, 1);
  }
  auto cache = m.NewCache(context + decode);
  at_long = PrefillAndDecode(m, *cache, context, chunk, decode, 2);
  const int64_t peak = ProcStatus("VmHWM:");

  // What the CacheSpecs predict for context + decode tokens, plus token ids.
  const int64_t n = context + decode;
  int64_t predicted_cache = n * static_cast<int64_t>(sizeof(int32_t));
  for (const LayerPlan& p : m.plans()) {
    if (p.role == LayerRole::kMain)
      predicted_cache += EngineCacheBytes(p.cache, n, m.rollback()).total();
  }
  const CacheStats st = m.GetCacheStats(*cache);
  const int64_t scratch = m.scratch_bytes();
  const int64_t predicted = baseline + weight_bytes + predicted_cache + scratch;

  std::printf("model: %s (%lld params), %d threads, prefill chunk %lld\n", dir.c_str(),
              static_cast<long long>(m.info().n_params), threads, static_cast<long long>(chunk));
  std::printf("prefill %lld tokens: %.1f s (%.0f tokens/s)\n", static_cast<long long>(context),
              at_long.prefill_seconds, static_cast<double>(context) / at_long.prefill_seconds);
  std::printf("decode at %lld: %.3f ms/token; at %lld: %.3f ms/token; ratio %.2f\n",
              static_cast<long long>(short_ctx), at_short.ms_per_token,
              static_cast<long long>(context), at_long.ms_per_token,
              at_long.ms_per_token / at_short.ms_per_token);
  std::printf("cache at %lld tokens: CacheSpecs predict %.2f MiB, allocated %.2f MiB\n",
              static_cast<long long>(n), MiB(predicted_cache), MiB(st.allocated_bytes));
  std::printf(
      "peak RSS %.1f MiB; predicted %.1f MiB = baseline %.1f + weights %.1f + cache %.1f + "
      "scratch %.1f; peak / predicted = %.3f\n",
      MiB(peak), MiB(predicted), MiB(baseline), MiB(weight_bytes), MiB(predicted_cache),
      MiB(scratch), static_cast<double>(peak) / static_cast<double>(predicted));
  std::printf(
      "decode_ms_short=%.4f decode_ms_long=%.4f ratio=%.3f peak_rss_mib=%.1f "
      "predicted_mib=%.1f peak_over_predicted=%.4f\n",
      at_short.ms_per_token, at_long.ms_per_token, at_long.ms_per_token / at_short.ms_per_token,
      MiB(peak), MiB(predicted), static_cast<double>(peak) / static_cast<double>(predicted));
  return 0;
}

}  // namespace
}  // namespace dsv4::deepseek_v4

int main(int argc, char** argv) {
  using namespace dsv4::deepseek_v4;
  if (argc >= 3 && std::string(argv[1]) == "write") return Write(argv[2]);
  if (argc >= 3 && std::string(argv[1]) == "run") {
    int64_t context = 65536, chunk = 2048, decode = 32;
    int threads = 2;
    for (int i = 3; i + 1 < argc; i += 2) {
      const std::string a = argv[i];
      const int64_t v = std::atoll(argv[i + 1]);
      if (a == "--context")
        context = v;
      else if (a == "--chunk")
        chunk = v;
      else if (a == "--decode")
        decode = v;
      else if (a == "--threads")
        threads = static_cast<int>(v);
      else {
        std::fprintf(stderr, "unknown option %s\n", a.c_str());
        return 2;
      }
    }
    if (context < 1024 || chunk < 1 || decode < 1 || threads < 1) {
      std::fprintf(stderr, "need --context ≥ 1024, --chunk, --decode, --threads ≥ 1\n");
      return 2;
    }
    return RunBench(argv[2], context, chunk, decode, threads);
  }
  std::fprintf(stderr,
               "usage: %s write DIR | run DIR [--context N] [--chunk C] [--decode D] "
               "[--threads T]\n",
               argv[0]);
  return 2;
}
