// `dsv4 bench`: prefill and decode speed against the memory roofline (weight
// bytes read per decoded token, the machine's measured read bandwidth, decode
// efficiency = achieved weight bytes/s ÷ bandwidth), peak RSS, and with
// --speculative K the greedy decode speed with MTP self-speculation
// (acceptance rate, speed-up). Each figure is the median of --repeat runs,
// after an untimed warm-up prefill; the prefill runs go first, back to back,
// then the decode runs (each after an untimed prefill); the bandwidth probe
// runs after each decode run, and decode efficiency is the
// median of each run against the probe after it (so a shared host whose memory
// speed changes from second to second compares each run with its own moment;
// the runs and probes are listed when the probes differ by over 15%). The
// last line is machine-readable:
//   prefill_tps=… decode_tps=… weight_bytes_per_token=… bandwidth_gbs=…
//   decode_efficiency=… peak_rss_mb=… prefill_gflops=… peak_gflops=… prefill_efficiency=…
//   peak_fp32_gflops=… peak_bf16dot_gflops=… bf16dot_mac_share=… decode_major_faults=…
// (prefill FLOPs are 2 × the weight multiply-adds per token × tokens, for
// DeepSeek-V4 checkpoints. The peak is that of the dtype mix the kernels run:
// the measured roofs of fp32 FMA and of bf16 dot products, weighted by the
// share of multiply-adds each takes (bf16dot_mac_share: FP8/FP4 weights with
// FP8-quantised inputs, on CPUs with AVX512-BF16), i.e. the time the mix would
// take at both roofs; 0 when skipped with --probe-mib 0; decode_major_faults:
// the page faults of all decode runs that read from disk, each a stall of
// milliseconds that --mlock avoids),
// followed, for models whose caches can evict entries (the seed family's
// SemanticKVPruner), by the KV cache after the last run, kept vs unpruned:
//   kv_entries=… kv_entries_unpruned=… kv_bytes=… kv_bytes_unpruned=… kv_peak_entries=…
// (--kv-pruner on|off|auto and --kv-budget N set the pruner as `dsv4 run` does).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "base/timer.h"
#include "cli/commands.h"
#include "engine/bench.h"
#include "engine/engine_options.h"
#include "engine/generate.h"
#include "engine/speculative.h"
#include "ops/matmul.h"
#include "ops/vec_ops.h"

namespace dsv4::cli {
namespace {

struct BenchArgs {
  LoadOptions load;
  int64_t prompt_len = 128;
  int64_t gen = 64;
  int repeat = 3;
  int64_t speculative = 0;   // MTP drafts per round (DeepSeek-V4); 0 = off
  int64_t probe_mib = 1024;  // bandwidth probe buffer; 0 = skip the probe
  std::string kv_pruner = "auto";
  int64_t kv_budget = -1;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Run(const BenchArgs& a) {
  auto loaded = LoadModel(a.load);
  if (!loaded.ok()) return ReportError(loaded.status());
  Model& model = *loaded->model;
  const ModelInfo& info = model.info();
  EngineRuntimeOptions runtime;
  {
    auto policy = ParsePrunerPolicy(a.kv_pruner);
    if (!policy.ok()) return ReportError(policy.status());
    runtime.kv_pruner = *policy;
    runtime.kv_budget = a.kv_budget;
  }
  auto binding = ApplyEngineOptions(model, runtime);
  if (!binding.ok()) return ReportError(binding.status());
  if (a.prompt_len < 1 || a.prompt_len + a.gen > info.max_context) {
    return ReportError(
        InvalidArgument("--prompt-len + --gen = " + std::to_string(a.prompt_len + a.gen) +
                            " does not fit the context of " + std::to_string(info.max_context),
                        "use smaller values"));
  }
  // A fixed pseudo-random prompt (the content does not change the cost).
  std::vector<int32_t> prompt(a.prompt_len);
  uint64_t s = 42;
  for (auto& t : prompt) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(info.vocab_size));
  }
  prompt[0] = info.bos_id >= 0 ? info.bos_id : prompt[0];
  auto cache = model.NewCache(info.max_context);
  std::vector<float> logits(info.vocab_size);
  std::vector<double> prefill_tps, decode_tps;
  std::vector<ReadBandwidth> probes;  // one after each decode run
  const int threads = a.load.threads > 0 ? a.load.threads : 0;
  double peak_rss_mb = 0.0;   // of the model runs, without the probe's buffer
  int64_t decode_faults = 0;  // major page faults in the decode loops, all runs
  // A warm-up prefill, not timed (llama-bench's warm-up run): it faults in
  // the weights' pages and the cache's. Then the prefill runs back to back,
  // then the decode runs, each after an untimed prefill and followed by its
  // bandwidth probe: on a small VM the first products after a probe run
  // markedly slower, so no timed prefill follows one.
  auto prefill = [&]() -> Status {
    cache->Truncate(0);
    return model.Forward(prompt, *cache, logits, false);
  };
  if (Status st = prefill(); !st.ok()) return ReportError(st);
  for (int r = 0; r < a.repeat; ++r) {
    Timer t;
    if (Status st = prefill(); !st.ok()) return ReportError(st);
    prefill_tps.push_back(static_cast<double>(a.prompt_len) / t.Seconds());
  }
  for (int r = 0; r < a.repeat; ++r) {
    if (r > 0) {
      if (Status st = prefill(); !st.ok()) return ReportError(st);
    }
    Timer t;
    const int64_t faults_before = MajorPageFaults();
    int32_t next = prompt.back();
    for (int64_t i = 0; i < a.gen; ++i) {
      const int32_t one[1] = {next};
      if (Status st = model.Forward(one, *cache, logits, false); !st.ok()) return ReportError(st);
      next = static_cast<int32_t>(ops::Argmax(logits.data(), static_cast<int64_t>(logits.size())));
    }
    decode_tps.push_back(static_cast<double>(a.gen) / t.Seconds());
    decode_faults += MajorPageFaults() - faults_before;
    if (a.probe_mib > 0) {
      // The probe right after each decode run: a machine whose memory
      // bandwidth changes from one second to the next (a shared host) is
      // then compared with itself at about the same time.
      if (r == 0) peak_rss_mb = PeakRssMiB();  // before the probe's buffer adds to it
      probes.push_back(MeasureReadBandwidth(threads, a.probe_mib << 20));
    }
  }
  if (a.probe_mib == 0) peak_rss_mb = PeakRssMiB();
  const double p = Median(prefill_tps), d = Median(decode_tps);
  if (ops::StreamOnlyBuild()) {
    std::printf(
        "stream-only build (DSV4_STREAM_ONLY): one-token products computed nothing; decode "
        "speed is the weight streams' alone, outputs are junk\n");
  }
  std::printf("model: %s (%s, %lld params)\n", loaded->path.c_str(), info.architecture.c_str(),
              static_cast<long long>(info.n_params));
  std::printf("prefill: %lld tokens, %.1f tokens/s (median of %d)\n",
              static_cast<long long>(a.prompt_len), p, a.repeat);
  std::printf("decode:  %lld tokens, %.1f tokens/s (median of %d)\n", static_cast<long long>(a.gen),
              d, a.repeat);
  if (a.repeat > 1) {
    // Every run, in order (a shared machine's speed changes between runs).
    std::printf("runs (prefill / decode tokens/s):");
    for (size_t i = 0; i < prefill_tps.size(); ++i) {
      std::printf(" %.1f/%.1f", prefill_tps[i], decode_tps[i]);
    }
    std::printf("\n");
  }
  if (decode_faults > 0) {
    // Each one waited for a disk read (milliseconds): decode speed then says
    // as much about the page cache as about the engine.
    std::printf(
        "note: %lld major page faults while decoding: parts of the model were read from disk "
        "(not in RAM, or evicted since); --mlock keeps the weights in RAM\n",
        static_cast<long long>(decode_faults));
  }
  // The memory roofline: weight bytes per token and the measured bandwidth.
  auto weight_bytes = WeightBytesPerToken(*loaded);
  const int64_t wbpt = weight_bytes.ok() ? *weight_bytes : 0;
  if (weight_bytes.ok()) {
    std::printf("weights read per decoded token: %.2f MB (%lld bytes)\n", wbpt / 1e6,
                static_cast<long long>(wbpt));
  } else {
    std::printf("weights read per decoded token: unknown (%s)\n",
                weight_bytes.status().message().c_str());
  }
  if (a.speculative > 0) {
    // Greedy decoding of the same prompt with MTP self-speculation.
    SpeculativeOptions so;
    so.draft_tokens = a.speculative;
    so.max_tokens = a.gen;
    so.stop_at_eos = false;  // the same number of tokens as above
    std::vector<double> spec_tps;
    SpeculativeStats last;
    for (int r = 0; r < a.repeat; ++r) {
      auto st = GenerateSpeculative(*loaded, prompt, so, [](int32_t, std::string_view) {});
      if (!st.ok()) return ReportError(st.status());
      spec_tps.push_back(static_cast<double>(st->generated_tokens) / st->decode_seconds);
      last = *st;
    }
    const double sd = Median(spec_tps);
    std::printf(
        "speculative (MTP, %lld drafts per round): %.1f tokens/s (median of %d), "
        "acceptance %.1f%% (%lld of %lld drafts), %.2f tokens per verify forward, "
        "speed-up %.2fx over plain decode\n",
        static_cast<long long>(a.speculative), sd, a.repeat, 100.0 * last.acceptance_rate(),
        static_cast<long long>(last.accepted), static_cast<long long>(last.drafted),
        last.rounds > 0 ? static_cast<double>(last.generated_tokens) / last.rounds : 0.0, sd / d);
    std::printf("spec_decode_tps=%.2f acceptance=%.4f speedup=%.3f\n", sd, last.acceptance_rate(),
                sd / d);
  }
  // The bandwidth: the median of the probes; the efficiency: the median of
  // each decode run against the probe right after it.
  double bandwidth = 0.0, efficiency = 0.0;
  if (!probes.empty()) {
    std::vector<double> bws, effs;
    for (size_t r = 0; r < probes.size(); ++r) {
      bws.push_back(probes[r].gb_per_s);
      if (wbpt > 0 && probes[r].gb_per_s > 0) {
        effs.push_back(decode_tps[r] * wbpt / 1e9 / probes[r].gb_per_s);
      }
    }
    bandwidth = Median(bws);
    if (!effs.empty()) efficiency = Median(effs);
    // The plain and prefetched figures of the median probe.
    const ReadBandwidth& mid =
        *std::find_if(probes.begin(), probes.end(),
                      [&](const ReadBandwidth& b) { return b.gb_per_s == bandwidth; });
    std::printf(
        "memory read bandwidth: %.2f GB/s (median of %zu probes, one after each decode run; each "
        "a STREAM-style sum of %lld MiB, median of %d: plain loads %.2f, behind a software "
        "prefetch %.2f)\n",
        bandwidth, probes.size(), static_cast<long long>(a.probe_mib), mid.repeats,
        mid.plain_gb_per_s, mid.ahead_gb_per_s);
    const auto [lo, hi] = std::minmax_element(bws.begin(), bws.end());
    if (*hi > 1.15 * *lo) {
      std::printf(
          "note: the bandwidth changed between runs (%.2f to %.2f GB/s); each decode run is "
          "compared with the probe after it:",
          *lo, *hi);
      for (size_t r = 0; r < probes.size(); ++r) {
        std::printf(" %.1f tok/s at %.2f GB/s;", decode_tps[r], bws[r]);
      }
      std::printf("\n");
    }
  }
  // The compute roof: prefill FLOP/s of the weight math against the peak of
  // its dtype mix (fp32 FMA and, for FP8/FP4 weights with bf16-exact inputs,
  // bf16 dot products).
  const auto macs = WeightMacsPerToken(*loaded);
  const auto dot_macs = Bf16DotMacsPerToken(*loaded);
  const double prefill_gflops = macs.ok() ? 2.0 * static_cast<double>(*macs) * p / 1e9 : 0.0;
  const double dot_share =
      macs.ok() && dot_macs.ok() && *macs > 0 ? static_cast<double>(*dot_macs) / *macs : 0.0;
  double peak_gflops = 0.0, peak_fp32 = 0.0, peak_dot = 0.0;
  if (a.probe_mib > 0) {
    const auto report = [](const char* what, const char* chains, const PeakFlops& r) {
      std::printf("peak %s: %.1f GFLOP/s (register-only %s chains on every thread, median of %d)\n",
                  what, r.gflops, chains, r.repeats);
      return r.gflops;
    };
    peak_fp32 = report("fp32 FMA", "FMA", MeasurePeakFlops(threads));
    if (dot_share > 0) peak_dot = report("bf16 dot", "vdpbf16ps", MeasurePeakBf16DotFlops(threads));
    // The mix's roof: the time its multiply-adds take at their kernels' roofs.
    peak_gflops = dot_share > 0 && peak_dot > 0
                      ? 1.0 / ((1.0 - dot_share) / peak_fp32 + dot_share / peak_dot)
                      : peak_fp32;
  }
  const double prefill_efficiency = peak_gflops > 0 ? prefill_gflops / peak_gflops : 0.0;
  if (macs.ok()) {
    std::printf("prefill compute: %.2f GFLOP per token of weight math", 2e-9 * *macs);
    if (dot_share > 0) std::printf(" (%.1f%% on bf16 dot products)", 100.0 * dot_share);
    std::printf(", %.1f GFLOP/s", prefill_gflops);
    if (prefill_efficiency > 0) {
      std::printf(" = %.1f%% of the mix's peak (%.1f GFLOP/s)", 100.0 * prefill_efficiency,
                  peak_gflops);
    }
    std::printf("\n");
  }
  if (efficiency > 0) {
    std::printf("decode efficiency: %.1f%% of the bandwidth (%.2f GB/s of weights)\n",
                100.0 * efficiency, d * wbpt / 1e9);
  }
  std::printf("peak RSS: %.1f MiB (before the bandwidth probe)\n", peak_rss_mb);
  // KV entries kept vs without pruning, after the last run (prompt + decode).
  const auto kv = KvCacheUsage(model, *cache);
  if (kv.ok()) {
    std::printf(
        "kv cache: %lld of %lld entries kept (%.1f%%), %.3f of %.3f MB, peak %lld entries, "
        "%lld evicted; pruner %s\n",
        static_cast<long long>(kv->entries), static_cast<long long>(kv->entries_unpruned),
        kv->entries_unpruned > 0 ? 100.0 * kv->entries / kv->entries_unpruned : 100.0,
        kv->bytes() / 1e6, kv->bytes_unpruned() / 1e6, static_cast<long long>(kv->peak_entries),
        static_cast<long long>(kv->evicted), kv->pruner_on ? "on" : "off");
  }
  std::printf(
      "prefill_tps=%.2f decode_tps=%.2f weight_bytes_per_token=%lld bandwidth_gbs=%.2f "
      "decode_efficiency=%.4f peak_rss_mb=%.1f prefill_gflops=%.2f peak_gflops=%.2f "
      "prefill_efficiency=%.4f peak_fp32_gflops=%.2f peak_bf16dot_gflops=%.2f "
      "bf16dot_mac_share=%.4f decode_major_faults=%lld",
      p, d, static_cast<long long>(wbpt), bandwidth, efficiency, peak_rss_mb, prefill_gflops,
      peak_gflops, prefill_efficiency, peak_fp32, peak_dot, dot_share,
      static_cast<long long>(decode_faults));
  if (kv.ok()) {
    std::printf(
        " kv_entries=%lld kv_entries_unpruned=%lld kv_bytes=%lld kv_bytes_unpruned=%lld "
        "kv_peak_entries=%lld",
        static_cast<long long>(kv->entries), static_cast<long long>(kv->entries_unpruned),
        static_cast<long long>(kv->bytes()), static_cast<long long>(kv->bytes_unpruned()),
        static_cast<long long>(kv->peak_entries));
  }
  std::printf("\n");
  return 0;
}

}  // namespace

void RegisterBench(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* sub = app.add_subcommand("bench", "measure prefill and decode tokens/s");
  AddModelOptions(*sub, args->load);
  sub->add_option("--prompt-len", args->prompt_len, "prompt tokens (default 128)");
  sub->add_option("--gen", args->gen, "decoded tokens (default 64)");
  sub->add_option("--repeat", args->repeat, "runs; the median is reported (default 3)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--speculative", args->speculative,
                  "also decode greedily with K MTP drafts per round (DeepSeek-V4 with MTP "
                  "weights) and report the acceptance rate and speed-up (default 0 = off)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--probe-mib", args->probe_mib,
                  "memory bandwidth probe buffer in MiB, several times the last-level cache "
                  "(default 1024; 0 skips it and the FLOP/s probe)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--kv-pruner", args->kv_pruner,
                  "SemanticKVPruner (seed models): on, off or auto (the model's config; default)");
  sub->add_option("--kv-budget", args->kv_budget,
                  "KV tokens the pruner keeps (default: the model's config)")
      ->check(CLI::NonNegativeNumber);
  sub->callback([args, &exit_code] { exit_code = Run(*args); });
}

}  // namespace dsv4::cli
