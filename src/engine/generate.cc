#include "engine/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "base/timer.h"
#include "engine/state_file.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {

Result<GenerateStats> Generate(LoadedModel& m, std::span<const int32_t> prompt,
                               const GenerateOptions& options, const TokenCallback& on_token) {
  if (prompt.empty()) return InvalidArgument("empty prompt", "start the prompt with BOS");
  Model& model = *m.model;
  const ModelInfo& info = model.info();
  const int64_t ctx = info.max_context;
  if (static_cast<int64_t>(prompt.size()) >= ctx) {
    return InvalidArgument("prompt has " + std::to_string(prompt.size()) +
                               " tokens; the model's context is " + std::to_string(ctx),
                           "shorten the prompt");
  }
  // Size the cache for this request, not the model's whole context (DeepSeek-V4
  // reserves per-token state for every position a cache may hold).
  auto cache = model.NewCache(
      std::min<int64_t>(ctx, static_cast<int64_t>(prompt.size()) + options.max_tokens));
  std::vector<float> logits(info.vocab_size);
  Sampler sampler(options.sampling);
  for (int32_t t : prompt) sampler.Accept(t);
  // Text is streamed when the model has a tokenizer; otherwise only ids.
  std::optional<StreamDecoder> decoder;
  if (m.tokenizer) decoder.emplace(*m.tokenizer, prompt.back());

  GenerateStats stats;
  stats.prompt_tokens = static_cast<int64_t>(prompt.size());
  Timer timer;
  if (!options.prompt_cache.empty()) {
    stats.cached_prompt_tokens =
        LoadPromptCache(options.prompt_cache, options.state_fingerprint, prompt, *cache);
  }
  for (size_t begin = stats.cached_prompt_tokens; begin < prompt.size();
       begin += options.prefill_chunk) {
    const size_t end = std::min(prompt.size(), begin + options.prefill_chunk);
    RETURN_IF_ERROR(model.Forward(prompt.subspan(begin, end - begin), *cache, logits, false));
  }
  if (!options.prompt_cache.empty() && !options.prompt_cache_ro) {
    RETURN_IF_ERROR(SavePromptCache(options.prompt_cache, options.state_fingerprint, prompt, *cache)
                        .WithContext("--prompt-cache"));
  }
  stats.prefill_seconds = timer.Seconds();
  timer.Reset();
  stats.stop_reason = "length";
  for (int64_t i = 0; i < options.max_tokens; ++i) {
    const int32_t next = sampler.Sample(logits);
    if (options.stop_at_eos && m.IsStop(next)) {
      stats.stop_reason = "eos";
      break;
    }
    sampler.Accept(next);
    ++stats.generated_tokens;
    on_token(next, decoder ? decoder->Push(next) : std::string());
    if (cache->length() >= ctx) {
      stats.stop_reason = "context";
      break;
    }
    if (i + 1 == options.max_tokens) break;  // no forward for a token never sampled
    const int32_t one[1] = {next};
    RETURN_IF_ERROR(model.Forward(one, *cache, logits, false));
  }
  const std::string tail = decoder ? decoder->Flush() : std::string();
  if (!tail.empty()) on_token(-1, tail);
  stats.decode_seconds = timer.Seconds();
  return stats;
}

Result<PerplexityResult> Perplexity(LoadedModel& m,
                                    const std::vector<std::vector<int32_t>>& documents) {
  Model& model = *m.model;
  const ModelInfo& info = model.info();
  const int64_t ctx = info.max_context;
  const int64_t V = info.vocab_size;
  size_t longest = 1;
  for (const auto& doc : documents) longest = std::max(longest, doc.size());
  auto cache = model.NewCache(std::min<int64_t>(ctx, static_cast<int64_t>(longest)));
  std::vector<float> logits;
  double total_nll = 0.0;
  int64_t total = 0;
  for (const std::vector<int32_t>& doc : documents) {
    if (doc.size() < 2) continue;
    // Windows: [doc[0], doc[1..ctx-1]], then [BOS, next ctx-1 tokens], ...
    size_t next = 1;
    while (next < doc.size()) {
      std::vector<int32_t> window;
      window.push_back(next == 1 ? doc[0] : info.bos_id);
      const size_t take = std::min<size_t>(doc.size() - next, static_cast<size_t>(ctx - 1));
      window.insert(window.end(), doc.begin() + next, doc.begin() + next + take);
      next += take;
      cache->Truncate(0);
      logits.resize(window.size() * V);
      RETURN_IF_ERROR(model.Forward(window, *cache, logits, true));
      for (size_t t = 0; t + 1 < window.size(); ++t) {
        const float* row = logits.data() + t * V;
        const float mx = *std::max_element(row, row + V);
        double sum = 0.0;
        for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v] - mx));
        const double logp = static_cast<double>(row[window[t + 1]] - mx) - std::log(sum);
        total_nll -= logp;
        ++total;
      }
    }
  }
  if (total == 0) return InvalidArgument("nothing to score", "the input has no tokens after BOS");
  PerplexityResult r;
  r.tokens = total;
  r.nll = total_nll / static_cast<double>(total);
  r.ppl = std::exp(r.nll);
  return r;
}

std::vector<std::string> SplitDocuments(std::string_view text, std::string_view separator) {
  std::vector<std::string> docs;
  auto add = [&](std::string_view d) {
    const char* ws = " \t\r\n";
    const size_t b = d.find_first_not_of(ws);
    if (b == std::string_view::npos) return;
    const size_t e = d.find_last_not_of(ws);
    docs.emplace_back(d.substr(b, e - b + 1));
  };
  size_t start = 0;
  while (true) {
    const size_t at = separator.empty() ? std::string_view::npos : text.find(separator, start);
    if (at == std::string_view::npos) {
      add(text.substr(start));
      break;
    }
    add(text.substr(start, at - start));
    start = at + separator.size();
  }
  return docs;
}

std::vector<int32_t> TopLogitIds(std::span<const float> logits, int64_t k) {
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  k = std::clamp<int64_t>(k, 0, static_cast<int64_t>(ids.size()));
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  ids.resize(static_cast<size_t>(k));
  return ids;
}

}  // namespace dsv4
