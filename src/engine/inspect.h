// InspectModel: a human-readable report of a model's config, layer plan,
// parameter counts (total and active per token) and bytes by dtype, for
// `dsv4 inspect`. Front ends reach model internals only through engine/.
#ifndef DSV4_ENGINE_INSPECT_H_
#define DSV4_ENGINE_INSPECT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/loader.h"

namespace dsv4 {

// `path`: a DeepSeek-V4 or seed-family model directory (config.json, optional
// safetensors) or its config.json (needs no weights), a GGUF file, or a
// llama2.c .bin. `contexts`: sequence lengths for
// the KV-cache bytes section (empty: 4096, 131072 and 1048576). `draft`: a
// deepseek4 GGUF's draft module file (--model-draft), or empty.
Result<std::string> InspectModel(const std::string& path, const std::vector<int64_t>& contexts = {},
                                 const std::string& draft = "");

// `dsv4 inspect --routing-stats FILE`: runs the documents of the text file
// `file` (split on <|endoftext|>, each from BOS, as `dsv4 perplexity` does)
// through the model of `load` and reports what its routers and indexers chose:
// per MoE layer the share of picks each expert took, the busiest expert's load
// over the mean and the effective number of experts (e^entropy); per CSA layer
// the indexer's picks by age against what a uniform choice would give.
// Errors: the model's or the file's, a model that does not count its choices.
Result<std::string> RoutingStatsReport(const LoadOptions& load, const std::string& file);

}  // namespace dsv4

#endif  // DSV4_ENGINE_INSPECT_H_
