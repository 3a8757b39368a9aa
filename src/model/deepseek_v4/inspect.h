// The `dsv4 inspect` report of a DeepSeek-V4 model directory: the config, the
// layer plan, parameter counts (total and active per token), bytes by dtype
// and the KV-cache bytes per token and per sequence by layer kind. Works from config.json alone
// when no weights are present (then the dtypes are the ones the config predicts for a release
// checkpoint), so the real V4-Flash / V4-Pro configs can be inspected without 160+ GB of weights.
//
// Counting convention (matches the published 284B/13B and 1.6T/49B): the main
// model only (MTP layers reported apart); "active" counts every tensor read
// for a token except the embedding table (one row is gathered, not multiplied)
// and k/E of the routed experts.
#ifndef DSV4_MODEL_DEEPSEEK_V4_INSPECT_H_
#define DSV4_MODEL_DEEPSEEK_V4_INSPECT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/checkpoint.h"
#include "io/gguf.h"
#include "model/deepseek_v4/cache.h"
#include "model/deepseek_v4/config.h"

namespace dsv4::deepseek_v4 {

struct ParameterCounts {
  int64_t total = 0;          // main model parameters (logical elements)
  int64_t active = 0;         // per token (see the header comment)
  int64_t mtp = 0;            // draft layers (NextN MTP or DSpark), not in total
  int64_t experts = 0;        // of total: the routed experts
  int64_t engram = 0;         // of total: the Engram tables (DeepSeek-V4.1)
  int64_t engram_active = 0;  // of active: the Engram rows one token reads
  int64_t draft_bytes = 0;    // measured: the checkpoint's mtp.* tensors
  int64_t n_tensors = 0;      // declared tensors incl. MTP (scales not counted)
  // Bytes by stored dtype name ("bf16", "fp8_e4m3", "e8m0", ...), scales
  // included: measured from the checkpoint when `reader` is given, else predicted.
  std::map<std::string, int64_t> bytes_by_dtype;
  bool measured = false;
};

// Counts parameters from the declarations (weights.h); bytes from `reader`
// when non-null (every tensor it holds), else predicted from the config.
ParameterCounts CountParameters(const DeepSeekV4Config& config, const CheckpointReader* reader);

// KV-cache bytes of one sequence of n tokens, from the layers' CacheSpecs
// (plan.h), grouped by layer kind: "window", "csa", "hca r=128", ... and "mtp".
struct KvCacheKind {
  std::string name;
  int64_t layers = 0;
  double bytes_per_token = 0.0;  // growth: compressed entries + index keys
  CacheBytes bytes;              // of all `layers` at n tokens
};
struct KvCacheSummary {
  int64_t n_tokens = 0;
  std::vector<KvCacheKind> kinds;  // main kinds in plan order, then "mtp"
  CacheBytes main;                 // main layers (what spec §4.9 totals)
};
// reference: the layout of spec §4.9 (bf16 values, fp32 compressor state);
// else this engine's (fp32, rollback horizon and checkpoints of `rollback`).
KvCacheSummary SummarizeKvCache(const DeepSeekV4Config& config, int64_t n_tokens, bool reference,
                                const RollbackOptions& rollback = {});
// The "KV cache" section of the report for each context length.
std::string KvCacheReport(const DeepSeekV4Config& config, const std::vector<int64_t>& contexts,
                          const RollbackOptions& rollback = {});
inline const std::vector<int64_t> kDefaultInspectContexts = {4096, 131072, 1048576};

// The report text (config, plan, parameters, bytes). `source` names the
// directory or file.
std::string InspectReport(const DeepSeekV4Config& config, const CheckpointReader* reader,
                          const std::string& source);

// The report for a deepseek4 GGUF (one file, or a gguf-split set's parts in
// order): the config from its metadata, the plan, parameters, bytes by GGUF
// tensor type as stored (nothing is read or repacked), then the KV-cache
// section. Errors: a context < 1, metadata FromGguf rejects.
// `draft`: the draft module's GGUF (NextN MTP or DSpark dflash), or null: its
// blocks join the plan and its tensors the bytes.
Result<std::string> InspectGguf(const std::vector<const GgufFile*>& parts,
                                const std::vector<int64_t>& contexts = kDefaultInspectContexts,
                                const GgufFile* draft = nullptr);

// Reads DIR/config.json (or a config file path) and, when safetensors weights
// are present and readable, opens them; returns the report followed by the
// KV-cache section for each of `contexts` tokens. Errors: a context < 1.
Result<std::string> InspectPath(const std::string& path,
                                const std::vector<int64_t>& contexts = kDefaultInspectContexts);

// "284.33B", "1.57T", "13.3M" — counts in short scale.
std::string HumanCount(int64_t n);
// Which release a config describes: V4-Flash / V4-Pro (by size) and its
// draft module (NextN MTP: the preview; DSpark: -DSpark, 0731, 0813).
std::string DescribeRelease(const DeepSeekV4Config& config);

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_INSPECT_H_
