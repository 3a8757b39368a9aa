// seed_perf_bench: timing of a seed-family checkpoint directory for the "Seed
// family" section of docs/benchmarks.md (not a test; built on demand:
// `cmake --build build/seed --target seed_perf_bench`). Checkpoints come from
// tools/reference/seed_bench_checkpoints.py.
//
//   seed_perf_bench DIR [threads=1] [repeat=5]
//
// Prints, per CED dispatch path (fused, baseline; "-" for models without CED
// layers): prefill tokens/s (128 tokens, one call) and decode tokens/s (64
// single-token calls), then µs per token of one Forward of T tokens for
// T = 1…64 (the S-015 batch sweep), and the S-014 dispatch counts of block 0.
// Every figure is the median of `repeat` runs.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/timer.h"
#include "model/seed/model.h"

namespace dsv4::seed {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<int32_t> Tokens(int64_t n, int64_t vocab) {
  std::vector<int32_t> t(n);
  uint64_t s = 42;
  for (auto& x : t) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(vocab));
  }
  return t;
}

int Main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: seed_perf_bench DIR [threads=1] [repeat=5]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int threads = argc > 2 ? std::atoi(argv[2]) : 1;
  const int repeat = argc > 3 ? std::max(1, std::atoi(argv[3])) : 5;
  auto loaded = LoadSeedModel(dir, threads);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", loaded.status().ToString().c_str());
    return 1;
  }
  auto& m = dynamic_cast<SeedModel&>(**loaded);
  const int64_t V = m.info().vocab_size;
  bool ced = false;
  for (const SeedLayerPlan& p : m.plans()) ced = ced || p.ffn == FfnKind::kCedFused;
  std::vector<float> logits(V);
  const std::vector<int32_t> prompt = Tokens(128, V);
  std::printf("model=%s params=%lld threads=%d repeat=%d\n", dir.c_str(),
              static_cast<long long>(m.info().n_params), threads, repeat);
  std::vector<CedDispatch> modes = {CedDispatch::kFused, CedDispatch::kBaseline};
  if (!ced) modes = {CedDispatch::kAuto};
  for (CedDispatch mode : modes) {
    SeedRuntimeOptions o = m.runtime_options();
    o.ced_dispatch = mode;
    m.SetRuntimeOptions(o);
    const std::string name = ced ? std::string(CedDispatchName(mode)) : "-";
    std::vector<double> prefill, decode;
    for (int r = 0; r < repeat + 1; ++r) {  // the first run warms up
      auto cache = m.NewCache(256);
      Timer t;
      if (!m.Forward(prompt, *cache, logits, false).ok()) return 1;
      const double tp = t.Seconds();
      t.Reset();
      int32_t next = prompt.back();
      for (int i = 0; i < 64; ++i) {
        const int32_t one[1] = {next};
        if (!m.Forward(one, *cache, logits, false).ok()) return 1;
        next =
            static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      }
      if (r == 0) continue;
      prefill.push_back(128.0 / tp);
      decode.push_back(64.0 / t.Seconds());
    }
    std::printf("dispatch=%s prefill_tps=%.1f decode_tps=%.1f\n", name.c_str(), Median(prefill),
                Median(decode));
    for (int64_t T : {1, 2, 4, 8, 16, 32, 64}) {
      std::vector<double> us;
      const std::vector<int32_t> ids(prompt.begin(), prompt.begin() + T);
      for (int r = 0; r < repeat + 1; ++r) {
        auto cache = m.NewCache(256);
        Timer t;
        if (!m.Forward(ids, *cache, logits, false).ok()) return 1;
        if (r > 0) us.push_back(t.Seconds() * 1e6 / static_cast<double>(T));
      }
      std::printf("sweep dispatch=%s T=%lld us_per_token=%.1f\n", name.c_str(),
                  static_cast<long long>(T), Median(us));
    }
  }
  SeedRuntimeOptions o = m.runtime_options();
  o.ced_dispatch = CedDispatch::kAuto;
  o.profile_ops = true;
  m.SetRuntimeOptions(o);
  m.ResetCounters();
  auto cache = m.NewCache(256);
  if (!m.Forward(prompt, *cache, logits, false).ok()) return 1;
  const BlockOpCounts& b = m.op_counts()[0];
  std::printf("block0 norm=%lld matmul=%lld attention=%lld top_level=%lld\n",
              static_cast<long long>(b.norm), static_cast<long long>(b.matmul),
              static_cast<long long>(b.attention), static_cast<long long>(b.top_level));
  return 0;
}

}  // namespace
}  // namespace dsv4::seed

int main(int argc, char** argv) { return dsv4::seed::Main(argc, argv); }
