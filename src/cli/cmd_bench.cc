// `dsv4 bench`: prefill and decode speed against the memory roofline (weight
// bytes read per decoded token, the machine's measured read bandwidth, decode
// efficiency = achieved weight bytes/s ÷ bandwidth), peak RSS, and with
// --speculative K|auto the greedy decode speed with speculation through the
// model's draft head (acceptance rate, chosen draft length, speed-up), the
// measured cost of a round with each draft length k (verification time and
// weights read, draft time) and the decode speed those costs give at each
// per-draft acceptance rate. Each figure is the median of --repeat runs,
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
// The measuring is engine/bench.h's RunBench; this file parses flags and prints.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "engine/bench.h"
#include "engine/engine_options.h"

namespace dsv4::cli {
namespace {

struct BenchArgs {
  LoadOptions load;
  BenchOptions bench;
  std::string kv_pruner = "auto";
  int64_t kv_budget = -1;
  std::string speculative = "0";  // draft tokens per round, or "auto"; "0" = off
  std::string prompt;             // --prompt: a text instead of the pseudo-random prompt
};

// The speed lines: the model, prefill and decode medians, every run, page faults.
void PrintSpeed(const LoadedModel& m, const BenchOptions& o, const BenchReport& r) {
  const ModelInfo& info = m.model->info();
  if (r.stream_only) {
    std::printf(
        "stream-only build (DSV4_STREAM_ONLY): one-token products computed nothing; decode "
        "speed is the weight streams' alone, outputs are junk\n");
  }
  std::printf("model: %s (%s, %lld params)\n", m.path.c_str(), info.architecture.c_str(),
              static_cast<long long>(info.n_params));
  std::printf("prefill: %lld tokens, %.1f tokens/s (median of %d)\n",
              static_cast<long long>(o.prompt_len), r.prefill_tps_median, o.repeat);
  std::printf("decode:  %lld tokens, %.1f tokens/s (median of %d)\n", static_cast<long long>(o.gen),
              r.decode_tps_median, o.repeat);
  if (o.repeat > 1) {
    // Every run, in order (a shared machine's speed changes between runs).
    std::printf("runs (prefill / decode tokens/s):");
    for (size_t i = 0; i < r.prefill_tps.size(); ++i) {
      std::printf(" %.1f/%.1f", r.prefill_tps[i], r.decode_tps[i]);
    }
    std::printf("\n");
  }
  if (r.table_rows_per_token >= 0) {
    std::printf(
        "Engram: %.1f table rows, %.0f bytes read per decoded token (the tables stay "
        "mapped: only those rows are paged in)\n",
        r.table_rows_per_token, r.table_bytes_per_token);
  }
  if (r.decode_major_faults > 0) {
    // Each one waited for a disk read (milliseconds): decode speed then says
    // as much about the page cache as about the engine.
    std::printf(
        "note: %lld major page faults while decoding: parts of the model were read from disk "
        "(not in RAM, or evicted since); --mlock keeps the weights in RAM\n",
        static_cast<long long>(r.decode_major_faults));
  }
}

// The speculative runs, each draft length's cost and the projection.
void PrintSpeculative(const BenchOptions& o, const SpeculativeBench& sb, double plain_tps) {
  const SpeculativeStats& last = sb.last;
  std::printf(
      "speculative (%s, %s%lld drafts per round): %.1f tokens/s (median of %d), acceptance "
      "%.1f%% (%lld of %lld drafts), %.2f tokens per verify forward, speed-up %.2fx over plain "
      "decode\n",
      sb.draft_kind.c_str(), o.speculative_auto ? "auto, up to " : "",
      static_cast<long long>(sb.max_k), sb.tps, o.repeat, 100.0 * last.acceptance_rate(),
      static_cast<long long>(last.accepted), static_cast<long long>(last.drafted),
      last.rounds > 0 ? static_cast<double>(last.generated_tokens) / last.rounds : 0.0,
      sb.tps / plain_tps);
  if (o.speculative_auto) {
    std::printf("adaptive draft length: chose k = %lld last; rounds by k:",
                static_cast<long long>(last.chosen_k));
    for (size_t k = 0; k < last.rounds_by_k.size(); ++k) {
      std::printf(" %zu:%lld", k, static_cast<long long>(last.rounds_by_k[k]));
    }
    std::printf("\n");
  }
  std::printf("round cost by draft length k (verify = one forward of k + 1 tokens; medians):\n");
  std::printf("  k  verify ms  weights read MB  routed experts  draft ms\n");
  for (const VerifyCost& c : sb.costs) {
    std::printf("%3lld  %9.2f  %15.1f  %14.0f  %8.2f\n", static_cast<long long>(c.k),
                1e3 * c.verify_seconds, c.weight_bytes / 1e6, c.routed_experts,
                1e3 * c.draft_seconds);
  }
  std::printf("projected decode by per-draft acceptance α (from the costs above):\n");
  std::printf("     α  best k  tokens/round  tokens/s  speed-up\n");
  for (const SpeculativeProjection& p : sb.projection) {
    std::printf("  %4.2f  %6lld  %12.2f  %8.1f  %7.2fx\n", p.acceptance,
                static_cast<long long>(p.best_k), p.tokens_per_round, p.tps, p.speedup);
  }
  std::printf("spec_decode_tps=%.2f acceptance=%.4f speedup=%.3f chosen_k=%lld\n", sb.tps,
              last.acceptance_rate(), sb.tps / plain_tps, static_cast<long long>(last.chosen_k));
}

// Weight bytes per token, the speculative runs and the memory bandwidth.
void PrintRoofline(const BenchOptions& o, const BenchReport& r) {
  const int64_t wbpt = r.weight_bytes_per_token;
  if (r.weight_bytes_unknown.empty()) {
    std::printf("weights read per decoded token: %.2f MB (%lld bytes)\n", wbpt / 1e6,
                static_cast<long long>(wbpt));
  } else {
    std::printf("weights read per decoded token: unknown (%s)\n", r.weight_bytes_unknown.c_str());
  }
  if (r.speculative) PrintSpeculative(o, *r.speculative, r.decode_tps_median);
  if (r.probes.empty()) return;
  // The plain and prefetched figures of the median probe.
  const ReadBandwidth& mid = r.probes[r.median_probe];
  std::printf(
      "memory read bandwidth: %.2f GB/s (median of %zu probes, one after each decode run; each "
      "a STREAM-style sum of %lld MiB, median of %d: plain loads %.2f, behind a software "
      "prefetch %.2f)\n",
      r.bandwidth_gbs, r.probes.size(), static_cast<long long>(o.probe_mib), mid.repeats,
      mid.plain_gb_per_s, mid.ahead_gb_per_s);
  const auto [lo, hi] = std::minmax_element(
      r.probes.begin(), r.probes.end(),
      [](const ReadBandwidth& a, const ReadBandwidth& b) { return a.gb_per_s < b.gb_per_s; });
  if (hi->gb_per_s > 1.15 * lo->gb_per_s) {
    std::printf(
        "note: the bandwidth changed between runs (%.2f to %.2f GB/s); each decode run is "
        "compared with the probe after it:",
        lo->gb_per_s, hi->gb_per_s);
    for (size_t i = 0; i < r.probes.size(); ++i) {
      std::printf(" %.1f tok/s at %.2f GB/s;", r.decode_tps[i], r.probes[i].gb_per_s);
    }
    std::printf("\n");
  }
}

// The compute roof, decode efficiency, peak RSS and the KV cache.
void PrintComputeAndMemory(const BenchReport& r) {
  const auto report = [](const char* what, const char* chains, const PeakFlops& p) {
    std::printf("peak %s: %.1f GFLOP/s (register-only %s chains on every thread, median of %d)\n",
                what, p.gflops, chains, p.repeats);
  };
  if (r.peak_fp32) report("fp32 FMA", "FMA", *r.peak_fp32);
  if (r.peak_dot) report("bf16 dot", "vdpbf16ps", *r.peak_dot);
  if (r.weight_macs_per_token) {
    std::printf("prefill compute: %.2f GFLOP per token of weight math",
                2e-9 * *r.weight_macs_per_token);
    if (r.bf16dot_mac_share > 0) {
      std::printf(" (%.1f%% on bf16 dot products)", 100.0 * r.bf16dot_mac_share);
    }
    std::printf(", %.1f GFLOP/s", r.prefill_gflops);
    if (r.prefill_efficiency > 0) {
      std::printf(" = %.1f%% of the mix's peak (%.1f GFLOP/s)", 100.0 * r.prefill_efficiency,
                  r.peak_gflops);
    }
    std::printf("\n");
  }
  if (r.decode_efficiency > 0) {
    std::printf("decode efficiency: %.1f%% of the bandwidth (%.2f GB/s of weights)\n",
                100.0 * r.decode_efficiency, r.decode_tps_median * r.weight_bytes_per_token / 1e9);
  }
  std::printf("peak RSS: %.1f MiB (before the bandwidth probe)\n", r.peak_rss_mb);
  if (const auto& e = r.experts) {
    std::printf(
        "expert streaming: %lld slots of %.1f MiB%s; decode: hit rate %.1f%% (read ahead: %.1f "
        "experts per token, %.1f%% of them used), %.1f MiB read per token, %.1f%% of the time "
        "waiting for reads at %.2f GB/s; the disk: %.2f GB/s sequential, %.2f GB/s random "
        "(expert-sized reads, 4 in flight)\n",
        static_cast<long long>(e->slots), e->slot_bytes / 1048576.0,
        e->direct_io ? ", direct I/O" : "", 100.0 * e->hit_rate, e->ahead_per_token,
        100.0 * e->ahead_used, e->read_bytes_per_token / 1048576.0, 100.0 * e->read_share,
        e->read_gbs, e->disk_seq_gbs, e->disk_rand_gbs);
  }
  if (const auto& kv = r.kv) {
    std::printf(
        "kv cache: %lld of %lld entries kept (%.1f%%), %.3f of %.3f MB, peak %lld entries, "
        "%lld evicted; pruner %s\n",
        static_cast<long long>(kv->entries), static_cast<long long>(kv->entries_unpruned),
        kv->entries_unpruned > 0 ? 100.0 * kv->entries / kv->entries_unpruned : 100.0,
        kv->bytes() / 1e6, kv->bytes_unpruned() / 1e6, static_cast<long long>(kv->peak_entries),
        static_cast<long long>(kv->evicted), kv->pruner_on ? "on" : "off");
  }
}

// Under mpirun: each rank's messages per token (engine/distributed.h).
void PrintTraffic(const BenchReport& r) {
  for (size_t k = 0; k < r.traffic.size(); ++k) {
    const RankTrafficReport& t = r.traffic[k];
    std::printf(
        "mpirun rank %zu sent per token: prefill %.0f bytes in %.3f messages, decode %.0f bytes "
        "in %.3f messages\n",
        k, t.prefill_bytes, t.prefill_messages, t.decode_bytes, t.decode_messages);
  }
}

// The machine-readable last line.
void PrintSummaryLine(const BenchReport& r) {
  std::printf(
      "prefill_tps=%.2f decode_tps=%.2f weight_bytes_per_token=%lld bandwidth_gbs=%.2f "
      "decode_efficiency=%.4f peak_rss_mb=%.1f prefill_gflops=%.2f peak_gflops=%.2f "
      "prefill_efficiency=%.4f peak_fp32_gflops=%.2f peak_bf16dot_gflops=%.2f "
      "bf16dot_mac_share=%.4f decode_major_faults=%lld",
      r.prefill_tps_median, r.decode_tps_median, static_cast<long long>(r.weight_bytes_per_token),
      r.bandwidth_gbs, r.decode_efficiency, r.peak_rss_mb, r.prefill_gflops, r.peak_gflops,
      r.prefill_efficiency, r.peak_fp32 ? r.peak_fp32->gflops : 0.0,
      r.peak_dot ? r.peak_dot->gflops : 0.0, r.bf16dot_mac_share,
      static_cast<long long>(r.decode_major_faults));
  if (const auto& e = r.experts) {
    std::printf(
        " expert_slots=%lld expert_hit_rate=%.4f expert_ahead_per_token=%.2f "
        "expert_ahead_used=%.4f expert_read_bytes_per_token=%.0f expert_read_share=%.4f "
        "expert_read_gbs=%.3f disk_seq_gbs=%.3f disk_rand_gbs=%.3f",
        static_cast<long long>(e->slots), e->hit_rate, e->ahead_per_token, e->ahead_used,
        e->read_bytes_per_token, e->read_share, e->read_gbs, e->disk_seq_gbs, e->disk_rand_gbs);
  }
  if (const auto& kv = r.kv) {
    std::printf(
        " kv_entries=%lld kv_entries_unpruned=%lld kv_bytes=%lld kv_bytes_unpruned=%lld "
        "kv_peak_entries=%lld",
        static_cast<long long>(kv->entries), static_cast<long long>(kv->entries_unpruned),
        static_cast<long long>(kv->bytes()), static_cast<long long>(kv->bytes_unpruned()),
        static_cast<long long>(kv->peak_entries));
  }
  if (!r.traffic.empty()) {
    // The busiest rank's figures (the one a link's bandwidth limits first).
    RankTrafficReport most;
    for (const RankTrafficReport& t : r.traffic) {
      most.prefill_bytes = std::max(most.prefill_bytes, t.prefill_bytes);
      most.prefill_messages = std::max(most.prefill_messages, t.prefill_messages);
      most.decode_bytes = std::max(most.decode_bytes, t.decode_bytes);
      most.decode_messages = std::max(most.decode_messages, t.decode_messages);
    }
    std::printf(
        " ranks=%zu rank_prefill_bytes_per_token=%.0f rank_prefill_messages_per_token=%.3f "
        "rank_decode_bytes_per_token=%.0f rank_decode_messages_per_token=%.3f",
        r.traffic.size(), most.prefill_bytes, most.prefill_messages, most.decode_bytes,
        most.decode_messages);
  }
  std::printf("\n");
}

int Run(BenchArgs& a) {
  auto loaded = LoadModel(a.load);
  if (!loaded.ok()) return ReportError(loaded.status());
  EngineRuntimeOptions runtime;
  auto policy = ParsePrunerPolicy(a.kv_pruner);
  if (!policy.ok()) return ReportError(policy.status());
  runtime.kv_pruner = *policy;
  runtime.kv_budget = a.kv_budget;
  if (Status st = ApplyEngineOptions(*loaded->model, runtime); !st.ok()) return ReportError(st);
  a.bench.threads = a.load.threads > 0 ? a.load.threads : 0;
  auto spec = ParseSpeculative(a.speculative);
  if (!spec.ok()) return ReportError(spec.status());
  a.bench.speculative = spec->draft_tokens;
  a.bench.speculative_auto = spec->adaptive;
  if (!a.prompt.empty()) {
    auto ids = PromptIds(*loaded, a.prompt, "");
    if (!ids.ok()) return ReportError(ids.status());
    a.bench.prompt = std::move(*ids);
    a.bench.prompt_len = static_cast<int64_t>(a.bench.prompt.size());
  }
  auto report = RunBench(*loaded, a.bench);
  if (!report.ok()) return ReportError(report.status());
  PrintSpeed(*loaded, a.bench, *report);
  PrintRoofline(a.bench, *report);
  PrintComputeAndMemory(*report);
  PrintTraffic(*report);
  PrintSummaryLine(*report);
  return 0;
}

}  // namespace

void RegisterBench(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<BenchArgs>();
  BenchOptions& b = args->bench;
  CLI::App* sub = app.add_subcommand("bench", "measure prefill and decode tokens/s");
  AddModelOptions(*sub, args->load);
  sub->add_option("--prompt-len", b.prompt_len,
                  "prompt tokens of a fixed pseudo-random prompt (default 128)");
  sub->add_option("-p,--prompt", args->prompt,
                  "a text prompt instead (BOS added; it sets the prompt length): a real text, "
                  "where --speculative's acceptance is the draft head's on real use");
  sub->add_option("--gen", b.gen, "decoded tokens (default 64)");
  sub->add_option("--repeat", b.repeat, "runs; the median is reported (default 3)")
      ->check(CLI::PositiveNumber);
  sub->add_option(
      "--speculative", args->speculative,
      "also decode greedily with K drafts per round from the draft head (DeepSeek-V4 "
      "with NextN MTP or DSpark weights, V4.1 with its DSpark stages), or auto (adaptive length); "
      "report the "
      "acceptance, each length's verify cost and the projected speed (default 0 = off)");
  sub->add_option("--probe-mib", b.probe_mib,
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
