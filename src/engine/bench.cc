// `dsv4 bench`'s measurements (RunBench) and the helpers it uses: the
// bandwidth and FLOP/s probes, weight bytes and multiply-adds per token, KV usage.
#include "engine/bench.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "base/thread_pool.h"
#include "base/timer.h"
#include "io/safetensors.h"
#include "model/deepseek_v4/work_counts.h"
#include "model/draft.h"
#include "ops/bandwidth.h"
#include "ops/matmul.h"
#include "ops/vec_ops.h"

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

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A fixed pseudo-random prompt (the content does not change the cost),
// starting with BOS when the model has one.
std::vector<int32_t> BenchPrompt(const ModelInfo& info, int64_t len) {
  std::vector<int32_t> prompt(len);
  uint64_t s = 42;
  for (auto& t : prompt) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(info.vocab_size));
  }
  prompt[0] = info.bos_id >= 0 ? info.bos_id : prompt[0];
  return prompt;
}

// The warm-up prefill (untimed, llama-bench's warm-up run: it faults in the
// weights' pages and the cache's), the timed prefills back to back, then the
// decode runs, each followed by its bandwidth probe. Leaves `cache` holding
// the last decode run.
Status MeasurePlainRuns(Model& model, std::span<const int32_t> prompt, SequenceCache& cache,
                        const BenchOptions& o, BenchReport& r) {
  std::vector<float> logits(model.info().vocab_size);
  auto prefill = [&]() -> Status {
    cache.Truncate(0);
    return model.Forward(prompt, cache, logits, false);
  };
  RETURN_IF_ERROR(prefill());
  // A model split over processes: each rank's traffic, per token (the
  // snapshots are outside the timed parts).
  std::vector<RankTraffic> sent = model.traffic();
  const auto add_traffic = [&](bool decode, double tokens) {
    const std::vector<RankTraffic> now = model.traffic();
    r.traffic.resize(now.size());
    for (size_t k = 0; k < now.size(); ++k) {
      const double bytes = static_cast<double>(now[k].bytes - sent[k].bytes) / tokens;
      const double messages = static_cast<double>(now[k].messages - sent[k].messages) / tokens;
      (decode ? r.traffic[k].decode_bytes : r.traffic[k].prefill_bytes) += bytes;
      (decode ? r.traffic[k].decode_messages : r.traffic[k].prefill_messages) += messages;
    }
    sent = now;
  };
  for (int i = 0; i < o.repeat; ++i) {
    Timer t;
    RETURN_IF_ERROR(prefill());
    r.prefill_tps.push_back(static_cast<double>(o.prompt_len) / t.Seconds());
  }
  if (!sent.empty()) add_traffic(false, static_cast<double>(o.prompt_len) * o.repeat);
  const bool streaming = model.expert_stream_stats().has_value();
  ExpertStreamStats streamed;  // summed over the decode runs
  TableReads table;            // likewise
  double decode_seconds = 0.0;
  for (int i = 0; i < o.repeat; ++i) {
    if (i > 0) RETURN_IF_ERROR(prefill());
    if (!sent.empty()) sent = model.traffic();
    const ExpertStreamStats before = model.expert_stream_stats().value_or(ExpertStreamStats{});
    const TableReads table_before = model.table_reads().value_or(TableReads{});
    Timer t;
    const int64_t faults_before = MajorPageFaults();
    int32_t next = prompt.back();
    for (int64_t k = 0; k < o.gen; ++k) {
      const int32_t one[1] = {next};
      RETURN_IF_ERROR(model.Forward(one, cache, logits, false));
      next = static_cast<int32_t>(ops::Argmax(logits.data(), static_cast<int64_t>(logits.size())));
    }
    const double seconds = t.Seconds();
    decode_seconds += seconds;
    r.decode_tps.push_back(static_cast<double>(o.gen) / seconds);
    if (const std::optional<TableReads> after = model.table_reads()) {
      table.rows += after->rows - table_before.rows;
      table.bytes += after->bytes - table_before.bytes;
    }
    if (!sent.empty() && o.gen > 0) add_traffic(true, static_cast<double>(o.gen) * o.repeat);
    if (streaming) {
      const ExpertStreamStats after = *model.expert_stream_stats();
      streamed.hits += after.hits - before.hits;
      streamed.misses += after.misses - before.misses;
      streamed.ahead_reads += after.ahead_reads - before.ahead_reads;
      streamed.ahead_used += after.ahead_used - before.ahead_used;
      streamed.read_bytes += after.read_bytes - before.read_bytes;
      streamed.read_seconds += after.read_seconds - before.read_seconds;
      streamed.read_span_seconds += after.read_span_seconds - before.read_span_seconds;
    }
    r.decode_major_faults += MajorPageFaults() - faults_before;
    if (o.probe_mib > 0) {
      if (i == 0) r.peak_rss_mb = PeakRssMiB();  // before the probe's buffer adds to it
      r.probes.push_back(MeasureReadBandwidth(o.threads, o.probe_mib << 20));
    }
  }
  if (o.probe_mib == 0) r.peak_rss_mb = PeakRssMiB();
  if (model.table_reads().has_value() && o.gen > 0 && o.repeat > 0) {
    const double tokens = static_cast<double>(o.gen) * o.repeat;
    r.table_rows_per_token = static_cast<double>(table.rows) / tokens;
    r.table_bytes_per_token = static_cast<double>(table.bytes) / tokens;
  }
  if (streaming) {
    const ExpertStreamStats st = *model.expert_stream_stats();
    ExpertStreamReport& e = r.experts.emplace();
    e.slots = st.slots;
    e.slot_bytes = st.slot_bytes;
    e.direct_io = st.direct_io;
    e.hit_rate = streamed.hit_rate();
    const double tokens = static_cast<double>(o.gen) * o.repeat;
    e.read_bytes_per_token = tokens > 0 ? static_cast<double>(streamed.read_bytes) / tokens : 0;
    e.read_share = decode_seconds > 0 ? streamed.read_seconds / decode_seconds : 0;
    e.ahead_per_token = tokens > 0 ? static_cast<double>(streamed.ahead_reads) / tokens : 0;
    e.ahead_used = streamed.ahead_reads > 0 ? static_cast<double>(streamed.ahead_used) /
                                                  static_cast<double>(streamed.ahead_reads)
                                            : 0;
    e.read_gbs = streamed.read_span_seconds > 0
                     ? static_cast<double>(streamed.read_bytes) / streamed.read_span_seconds / 1e9
                     : 0;
    // The disk in the same run: what streaming could reach on it.
    const std::string& file = st.files.front();
    e.disk_seq_gbs = MeasureDiskRead(file, int64_t{4} << 20, int64_t{1} << 30, 1, false);
    e.disk_rand_gbs = MeasureDiskRead(file, st.slot_bytes / 6, int64_t{512} << 20, 4, true);
  }
  r.prefill_tps_median = Median(r.prefill_tps);
  r.decode_tps_median = Median(r.decode_tps);
  return Status::Ok();
}

// Rounds of every draft length repeated enough for a median.
constexpr int kMinCostRepeats = 3;

// Greedy decoding of the same prompt, as many tokens, with speculation; then
// the cost of each draft length and the projection from them.
Result<SpeculativeBench> MeasureSpeculative(LoadedModel& model, std::span<const int32_t> prompt,
                                            const BenchOptions& o) {
  SpeculativeBench out;
  DraftModel* drafter = model.model->draft_model();
  out.draft_kind = std::string(drafter->draft_kind());
  out.max_k =
      drafter->max_drafts() > 0 ? std::min(o.speculative, drafter->max_drafts()) : o.speculative;
  SpeculativeOptions so;
  so.draft_tokens = o.speculative;
  so.adaptive = o.speculative_auto;
  so.max_tokens = o.gen;
  so.stop_at_eos = false;  // the same number of tokens as plain decode
  std::vector<double> tps;
  for (int i = 0; i < o.repeat; ++i) {
    ASSIGN_OR_RETURN(out.last,
                     GenerateSpeculative(model, prompt, so, [](int32_t, std::string_view) {}));
    tps.push_back(static_cast<double>(out.last.generated_tokens) / out.last.decode_seconds);
  }
  out.tps = Median(tps);
  ASSIGN_OR_RETURN(
      out.costs, MeasureVerifyCosts(model, prompt, out.max_k, std::max(o.repeat, kMinCostRepeats)));
  out.projection = ProjectSpeculative(out.costs);
  return out;
}

// The bandwidth: the median of the probes; the efficiency: the median of
// each decode run against the probe right after it.
void SummariseBandwidth(BenchReport& r) {
  if (r.probes.empty()) return;
  std::vector<double> bws, effs;
  const int64_t wbpt = r.weight_bytes_per_token;
  for (size_t i = 0; i < r.probes.size(); ++i) {
    bws.push_back(r.probes[i].gb_per_s);
    if (wbpt > 0 && r.probes[i].gb_per_s > 0) {
      effs.push_back(r.decode_tps[i] * wbpt / 1e9 / r.probes[i].gb_per_s);
    }
  }
  r.bandwidth_gbs = Median(bws);
  if (!effs.empty()) r.decode_efficiency = Median(effs);
  r.median_probe = static_cast<size_t>(
      std::find_if(r.probes.begin(), r.probes.end(),
                   [&](const ReadBandwidth& b) { return b.gb_per_s == r.bandwidth_gbs; }) -
      r.probes.begin());
}

// The compute roof: prefill FLOP/s of the weight math against the peak of
// its dtype mix (fp32 FMA and, for FP8/FP4 weights with bf16-exact inputs,
// bf16 dot products).
void MeasureCompute(const LoadedModel& model, const BenchOptions& o, BenchReport& r) {
  const auto macs = WeightMacsPerToken(model);
  const auto dot_macs = Bf16DotMacsPerToken(model);
  if (macs.ok()) {
    r.weight_macs_per_token = *macs;
    r.prefill_gflops = 2.0 * static_cast<double>(*macs) * r.prefill_tps_median / 1e9;
  }
  r.bf16dot_mac_share =
      macs.ok() && dot_macs.ok() && *macs > 0 ? static_cast<double>(*dot_macs) / *macs : 0.0;
  if (o.probe_mib > 0) {
    r.peak_fp32 = MeasurePeakFlops(o.threads);
    if (r.bf16dot_mac_share > 0) r.peak_dot = MeasurePeakBf16DotFlops(o.threads);
    // The mix's roof: the time its multiply-adds take at their kernels' roofs.
    const double fp32 = r.peak_fp32->gflops, dot = r.peak_dot ? r.peak_dot->gflops : 0.0;
    const double share = r.bf16dot_mac_share;
    r.peak_gflops = share > 0 && dot > 0 ? 1.0 / ((1.0 - share) / fp32 + share / dot) : fp32;
  }
  r.prefill_efficiency = r.peak_gflops > 0 ? r.prefill_gflops / r.peak_gflops : 0.0;
}

}  // namespace

Result<std::vector<VerifyCost>> MeasureVerifyCosts(LoadedModel& loaded,
                                                   std::span<const int32_t> prompt, int64_t max_k,
                                                   int repeats) {
  Model& model = *loaded.model;
  ASSIGN_OR_RETURN(DraftModel * drafter, DraftHead(loaded));
  const int64_t ctx = model.info().max_context, V = model.info().vocab_size;
  const int64_t grows = static_cast<int64_t>(repeats) * (max_k + 1);
  if (max_k < 0 || repeats < 1 || static_cast<int64_t>(prompt.size()) + grows + max_k >= ctx) {
    return InvalidArgument("measuring " + std::to_string(repeats) + " rounds of 0.." +
                               std::to_string(max_k) + " drafts after a " +
                               std::to_string(prompt.size()) + "-token prompt exceeds the " +
                               std::to_string(ctx) + "-token context",
                           "use a shorter --prompt-len or fewer drafts");
  }
  auto cache = model.NewCache(ctx);
  std::unique_ptr<DraftSession> session = drafter->NewDraftSession(ctx);
  std::vector<float> logits((max_k + 1) * V);
  RETURN_IF_ERROR(model.Forward(prompt, *cache, std::span<float>(logits).first(V), false));
  RETURN_IF_ERROR(session->Observe(prompt, static_cast<int64_t>(prompt.size())));
  int32_t x = static_cast<int32_t>(ops::Argmax(logits.data(), V));
  const std::optional<WeightWork> work = model.weight_work_per_token();

  std::vector<std::vector<double>> draft_s(max_k + 1), verify_s(max_k + 1), experts(max_k + 1);
  std::vector<int32_t> verify(max_k + 1);
  for (int r = 0; r < repeats; ++r) {
    for (int64_t k = 0; k <= max_k; ++k) {
      Timer t;
      verify[0] = x;
      ASSIGN_OR_RETURN(const int64_t n,
                       session->Draft(x, std::span<int32_t>(verify).subspan(1, k), DraftPick()));
      draft_s[k].push_back(t.Seconds());
      const std::span<const int32_t> tokens = std::span<const int32_t>(verify).first(1 + n);
      const int64_t at = cache->length(), before = model.routed_experts_run();
      t.Reset();
      RETURN_IF_ERROR(
          model.Forward(tokens, *cache, std::span<float>(logits).first((1 + n) * V), true));
      verify_s[k].push_back(t.Seconds());
      experts[k].push_back(static_cast<double>(model.routed_experts_run() - before));
      // Keep x only, as a round whose drafts were all rejected.
      cache->Truncate(at + 1);
      RETURN_IF_ERROR(session->Observe(tokens, 1));
      x = static_cast<int32_t>(ops::Argmax(logits.data(), V));
    }
  }
  std::vector<VerifyCost> costs;
  for (int64_t k = 0; k <= max_k; ++k) {
    VerifyCost c{.k = k,
                 .verify_seconds = Median(verify_s[k]),
                 .draft_seconds = k > 0 ? Median(draft_s[k]) : 0.0,
                 .routed_experts = Median(experts[k])};
    if (work && model.routed_experts_run() >= 0) {
      c.weight_bytes = work->bytes - work->routed_bytes +
                       static_cast<int64_t>(c.routed_experts) * work->routed_expert_bytes;
    }
    costs.push_back(c);
  }
  return costs;
}

std::vector<SpeculativeProjection> ProjectSpeculative(const std::vector<VerifyCost>& costs) {
  std::vector<SpeculativeProjection> out;
  if (costs.empty() || costs[0].verify_seconds <= 0.0) return out;
  const double plain_tps = 1.0 / costs[0].verify_seconds;
  for (const double a : kProjectionAcceptances) {
    SpeculativeProjection p{.acceptance = a};
    double e = 0.0, run = 1.0;
    for (const VerifyCost& c : costs) {
      e += run;  // E(k) = Σ_{j ≤ k} α^j
      run *= a;
      const double tps = e / (c.verify_seconds + c.draft_seconds);
      if (tps > p.tps) {
        p.best_k = c.k;
        p.tokens_per_round = e;
        p.tps = tps;
      }
    }
    p.speedup = p.tps / plain_tps;
    out.push_back(p);
  }
  return out;
}

double MeasureDiskRead(const std::string& path, int64_t block, int64_t total, int in_flight,
                       bool random) {
  constexpr int64_t kAlign = 4096;
  block = std::max<int64_t>(kAlign, (block + kAlign - 1) / kAlign * kAlign);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  const bool direct = fd >= 0;
  if (fd < 0) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0.0;
  const int64_t size = static_cast<int64_t>(std::filesystem::file_size(path));
  const int64_t blocks = std::max<int64_t>(1, (size - block) / kAlign);
  const int64_t n = std::max<int64_t>(1, std::min(total, size) / block);
  std::atomic<int64_t> next{0}, bytes{0};
  Timer t;
  std::vector<std::thread> threads;
  for (int w = 0; w < in_flight; ++w) {
    threads.emplace_back([&, w] {
      void* buf = std::aligned_alloc(kAlign, static_cast<size_t>(block));
      std::mt19937_64 rng(0x5eed + w);
      for (int64_t i = next++; i < n; i = next++) {
        const int64_t at = random ? static_cast<int64_t>(rng() % blocks) * kAlign : i * block;
        const ssize_t got = ::pread(fd, buf, static_cast<size_t>(block), static_cast<off_t>(at));
        if (got > 0) bytes += got;
        if (!direct) ::posix_fadvise(fd, at, block, POSIX_FADV_DONTNEED);
      }
      std::free(buf);
    });
  }
  for (std::thread& th : threads) th.join();
  const double seconds = t.Seconds();
  ::close(fd);
  return seconds > 0 ? static_cast<double>(bytes.load()) / seconds / 1e9 : 0.0;
}

Result<BenchReport> RunBench(LoadedModel& loaded, const BenchOptions& o) {
  Model& model = *loaded.model;
  const ModelInfo& info = model.info();
  if (o.gen < 0) {
    return InvalidArgument("--gen " + std::to_string(o.gen) + " is negative",
                           "give the tokens to decode, 0 or more");
  }
  if (o.prompt_len < 1 || o.prompt_len + o.gen > info.max_context) {
    return InvalidArgument("--prompt-len + --gen = " + std::to_string(o.prompt_len + o.gen) +
                               " does not fit the context of " + std::to_string(info.max_context),
                           "use smaller values");
  }
  if (o.repeat < 1) {
    return InvalidArgument("--repeat " + std::to_string(o.repeat) + " is not a positive number",
                           "run at least once");
  }
  if (!o.prompt.empty() && static_cast<int64_t>(o.prompt.size()) != o.prompt_len) {
    return InvalidArgument("the bench prompt has " + std::to_string(o.prompt.size()) +
                               " ids but prompt_len is " + std::to_string(o.prompt_len),
                           "set prompt_len to the prompt's length");
  }
  if (o.speculative > 0) RETURN_IF_ERROR(DraftHead(loaded).status());
  BenchReport r;
  r.stream_only = ops::StreamOnlyBuild();
  const std::vector<int32_t> prompt = o.prompt.empty() ? BenchPrompt(info, o.prompt_len) : o.prompt;
  auto cache = model.NewCache(info.max_context);
  RETURN_IF_ERROR(MeasurePlainRuns(model, prompt, *cache, o, r));
  // The memory roofline: weight bytes per token and the measured bandwidth.
  const auto weight_bytes = WeightBytesPerToken(loaded);
  if (weight_bytes.ok()) {
    r.weight_bytes_per_token = *weight_bytes;
  } else {
    r.weight_bytes_unknown = weight_bytes.status().message();
  }
  if (o.speculative > 0) {
    ASSIGN_OR_RETURN(r.speculative, MeasureSpeculative(loaded, prompt, o));
  }
  SummariseBandwidth(r);
  MeasureCompute(loaded, o, r);
  // KV entries kept vs without pruning, after the last run (prompt + decode).
  if (auto kv = KvCacheUsage(model, *cache); kv.ok()) r.kv = *kv;
  return r;
}

}  // namespace dsv4
