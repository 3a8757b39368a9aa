// `dsv4 bench`'s measurements (the CLI only parses flags and prints):
// RunBench times prefill, decode and MTP-speculative decode and gathers the
// figures below into a BenchReport; and the helpers it uses, which tests call
// on their own: the machine's memory read bandwidth (a STREAM-style probe, ops/bandwidth.h)
// and the bytes of weights a model reads per decoded token — together the
// memory roofline decode speed is measured against — and the KV entries a
// pruning cache keeps against what it would hold without pruning.
#ifndef DSV4_ENGINE_BENCH_H_
#define DSV4_ENGINE_BENCH_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/loader.h"
#include "engine/speculative.h"

namespace dsv4 {

struct ReadBandwidth {
  double gb_per_s = 0.0;        // the larger of the two below; 1 GB = 1e9 bytes
  double plain_gb_per_s = 0.0;  // median over the repeats: plain loads
  double ahead_gb_per_s = 0.0;  // median over the repeats: loads behind a prefetch
  int64_t bytes = 0;            // bytes read per repeat
  int repeats = 0;
};

// Sums a `bytes`-long buffer (several times the last-level cache; 1 GiB by
// default) `repeats` times on `threads` threads (0: all hardware threads),
// after one warm-up pass, in two read patterns (ops/bandwidth.h), and reports
// the median read bandwidth of each and the faster.
ReadBandwidth MeasureReadBandwidth(int threads, int64_t bytes = int64_t{1} << 30, int repeats = 5);

struct PeakFlops {
  double gflops = 0.0;  // median over the repeats; an FMA is 2 FLOPs
  int repeats = 0;
};

// The compute roofs for prefill, on `threads` threads (0: all), register-only:
// fp32 FMA of the widest SIMD target (ops::MeasurePeakFlops), which the fp32
// matmul kernels execute, and bf16 dot products (vdpbf16ps;
// ops::MeasurePeakBf16DotFlops), which the FP8/FP4 kernels execute for
// bf16-exact inputs (0 GFLOP/s where the CPU lacks them).
PeakFlops MeasurePeakFlops(int threads, int repeats = 5);
PeakFlops MeasurePeakBf16DotFlops(int threads, int repeats = 5);

// Multiply-adds of weight matrices per token (prefill FLOPs = 2 × this ×
// tokens, attention over the context not included): every 2-D weight a token
// is multiplied by once, the classifier included, top-k of the routed experts
// (k / E of each MoE layer's), MTP layers and embedding lookups excluded; FP4
// packed two per byte counts both. Models that count it (Model::
// weight_work_per_token: DeepSeek-V4) only
// (NotFound for others).
Result<int64_t> WeightMacsPerToken(const LoadedModel& model);

// The part of WeightMacsPerToken that runs on the bf16 dot-product kernels:
// FP8/FP4 weights whose inputs are FP8-quantised (act_quant on; every such
// weight but wo_a) with K % 128 == 0; 0 when act_quant is off or the CPU lacks
// the kernels. Models that count it only (NotFound for others).
Result<int64_t> Bf16DotMacsPerToken(const LoadedModel& model);

// Bytes of weights one decoded token reads, as stored: every dense matrix,
// norm and the classifier once, one embedding row, shared experts, and
// top-k of the routed experts (k / E of each MoE layer's expert bytes; MTP
// layers are not counted). ModelInfo::weight_bytes_per_token when the model
// fills it; for a DeepSeek-V4 checkpoint directory it is computed here from
// the tensor list and config.json. NotFound when it cannot be known.
Result<int64_t> WeightBytesPerToken(const LoadedModel& model);

// The DeepSeek-V4 rule above applied to a checkpoint directory `dir`
// (config.json + safetensors).
Result<int64_t> DeepSeekV4WeightBytesPerToken(const std::string& dir);

// KvUsage (model/model.h): the KV-cache entries a sequence holds vs what it
// would hold without pruning.

// The KV usage of `cache` (made by `model`) for models whose caches can evict
// entries (the seed family's SemanticKVPruner). NotFound for others.
Result<KvUsage> KvCacheUsage(const Model& model, const SequenceCache& cache);

// What RunBench measures (`dsv4 bench`'s flags).
struct BenchOptions {
  int64_t prompt_len = 128;  // prompt tokens, a fixed pseudo-random prompt
  // A prompt of its own (ids from BOS, prompt_len of them; `--prompt TEXT`):
  // a real text, where a draft head's acceptance means something. Empty: the
  // pseudo-random prompt.
  std::vector<int32_t> prompt;
  int64_t gen = 64;  // decoded tokens per run
  int repeat = 3;    // runs of each kind; the medians are reported
  // Speculative decoding through the model's draft head (NextN MTP or
  // DSpark): drafts per round, the most with speculative_auto (the adaptive
  // length); 0 = off. `--speculative K|auto` (ParseSpeculative).
  int64_t speculative = 0;
  bool speculative_auto = false;
  int64_t probe_mib = 1024;  // bandwidth probe buffer; 0 = skip it and the FLOP/s probes
  int threads = 0;           // probe threads (0: all hardware threads)
};

// What one round with k drafts costs: the draft head's Draft call and the
// main model's verification, a forward of k + 1 tokens at the end of the prompt.
struct VerifyCost {
  int64_t k = 0;
  double verify_seconds = 0.0;  // median over the repeats
  double draft_seconds = 0.0;   // median over the repeats (0 for k = 0)
  // Weights the verification read as stored: every dense weight once and the
  // routed experts it ran (WeightWork::routed_expert_bytes each); 0: unknown.
  int64_t weight_bytes = 0;
  double routed_experts = 0.0;  // routed experts it ran, summed over the MoE layers (median)
};

// Decode speed projected from the measured costs for a draft head whose
// draft j is accepted with probability α once drafts < j were: a round of k
// drafts yields E(k) = Σ_{j=0..k} α^j tokens (the acceptance length, the
// verification's own token included) in draft(k) + verify(k) seconds.
struct SpeculativeProjection {
  double acceptance = 0.0;        // α
  int64_t best_k = 0;             // the k with the most tokens/s
  double tokens_per_round = 1.0;  // E(best_k)
  double tps = 0.0;               // E(best_k) / (draft + verify)
  double speedup = 0.0;           // over k = 0 (plain decoding, one verification of 1 token)
};

// The α values of the projection table.
inline constexpr double kProjectionAcceptances[] = {0.0, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0};

std::vector<SpeculativeProjection> ProjectSpeculative(const std::vector<VerifyCost>& costs);

// Greedy decoding of the same prompt with speculation, and its costs.
struct SpeculativeBench {
  std::string draft_kind;         // "mtp", "dspark"
  int64_t max_k = 0;              // the most drafts per round (capped by a DSpark block)
  double tps = 0.0;               // median over the runs
  SpeculativeStats last;          // of the last run
  std::vector<VerifyCost> costs;  // k = 0 .. max_k
  std::vector<SpeculativeProjection> projection;  // one per kProjectionAcceptances
};

// The costs above for k = 0 .. max_k, each measured `repeats` times with the
// lengths interleaved (a shared machine's speed drifts), from one prefill of
// `prompt`; each round keeps one token, so the context grows by
// repeats × (max_k + 1) tokens. Errors: a model without a draft head, a
// context too small, a failing forward.
Result<std::vector<VerifyCost>> MeasureVerifyCosts(LoadedModel& model,
                                                   std::span<const int32_t> prompt, int64_t max_k,
                                                   int repeats);

// Everything `dsv4 bench` reports; 0 (or empty) where a figure was not measured.
// Routed experts streamed under --ram-budget (model/deepseek_v4/
// expert_cache.h), over the decode runs, and the checkpoint's own disk.
struct ExpertStreamReport {
  int64_t slots = 0;
  int64_t slot_bytes = 0;
  bool direct_io = false;
  double hit_rate = 0.0;              // expert acquisitions that found it in a slot
  double ahead_per_token = 0.0;       // experts read ahead per decoded token
  double ahead_used = 0.0;            // the share of those their layer asked for
  double read_bytes_per_token = 0.0;  // bytes read from the checkpoint per decoded token
  double read_share = 0.0;            // share of decode time spent waiting for reads
  double read_gbs = 0.0;              // bytes read / time from their start to their end
  double disk_seq_gbs = 0.0;          // the file's sequential direct reads (4 MiB)
  double disk_rand_gbs = 0.0;         // random direct reads of one expert's size, 4 in flight
};

// GB/s of reads of `block` bytes from `path` (direct I/O where the file
// system takes it), sequential from the start or at random aligned offsets,
// `in_flight` at once, `total` bytes in all.
double MeasureDiskRead(const std::string& path, int64_t block, int64_t total, int in_flight,
                       bool random);

// Under mpirun (engine/distributed.h): what one rank sent per token, over
// the timed prefills (per prompt token) and the decode runs (per decoded token).
struct RankTrafficReport {
  double prefill_bytes = 0.0;
  double prefill_messages = 0.0;
  double decode_bytes = 0.0;
  double decode_messages = 0.0;
};

struct BenchReport {
  bool stream_only = false;         // a DSV4_STREAM_ONLY build: decode outputs are junk
  std::vector<double> prefill_tps;  // tokens/s of each run, in order
  std::vector<double> decode_tps;   // tokens/s of each run, in order
  double prefill_tps_median = 0.0;
  double decode_tps_median = 0.0;
  int64_t decode_major_faults = 0;  // page faults read from disk, all decode runs
  // Hash-table rows and bytes read per decoded token (DeepSeek-V4.1's Engram);
  // −1 when the model has no such tables.
  double table_rows_per_token = -1.0;
  double table_bytes_per_token = -1.0;
  double peak_rss_mb = 0.0;  // of the model runs, before the probe's buffer
  int64_t weight_bytes_per_token = 0;
  std::string weight_bytes_unknown;  // why weight_bytes_per_token is 0
  std::optional<SpeculativeBench> speculative;
  std::vector<ReadBandwidth> probes;  // one after each decode run
  double bandwidth_gbs = 0.0;         // median of the probes
  size_t median_probe = 0;            // index of the probe with that median
  double decode_efficiency = 0.0;     // median of each decode run against the probe after it
  std::optional<int64_t> weight_macs_per_token;
  double prefill_gflops = 0.0;  // 2 × weight multiply-adds × prefill tokens/s
  double bf16dot_mac_share = 0.0;
  std::optional<PeakFlops> peak_fp32;  // measured when probe_mib > 0
  std::optional<PeakFlops> peak_dot;   // and the mix has bf16 dot products
  double peak_gflops = 0.0;            // the roof of the mix
  double prefill_efficiency = 0.0;
  std::optional<KvUsage> kv;                  // after the last decode run, for pruning caches
  std::optional<ExpertStreamReport> experts;  // when the model streams its experts
  std::vector<RankTrafficReport> traffic;     // one per rank under mpirun; empty in one process
};

// One untimed warm-up prefill; `repeat` timed prefills back to back; then
// `repeat` decode runs, each after an untimed prefill (the first reuses the
// last timed one) and followed by its bandwidth probe, so a shared host whose
// memory speed changes from second to second compares each run with its own
// moment (on a small VM the first products after a probe run slower, so no
// timed prefill follows one); then the speculative runs, the FLOP/s probes and
// the KV usage. Errors: prompt_len + gen outside the context, repeat < 1, a
// failing forward or speculative run.
Result<BenchReport> RunBench(LoadedModel& model, const BenchOptions& options);

}  // namespace dsv4

#endif  // DSV4_ENGINE_BENCH_H_
