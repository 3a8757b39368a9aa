// Engine: the serving loop (engine.h).
#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "base/log.h"
#include "base/timer.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "?";
}

bool RequestHandle::Next(SequenceEvent* event, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
  *event = std::move(events_.front());
  events_.pop_front();
  return true;
}

void RequestHandle::Push(SequenceEvent event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(event));
  }
  cv_.notify_all();
}

std::vector<int64_t> PlanStep(const std::vector<int64_t>& remaining, int64_t prefill_budget) {
  std::vector<int64_t> plan(remaining.size(), 0);
  for (size_t i = 0; i < remaining.size(); ++i) {
    if (remaining[i] == 0) {
      plan[i] = 1;
    } else {
      plan[i] = std::min(remaining[i], std::max<int64_t>(prefill_budget, 0));
      prefill_budget -= plan[i];
    }
  }
  return plan;
}

void SequenceConstraint::Mask(std::span<float> logits) const {
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!Allows(static_cast<int32_t>(i))) logits[i] = -std::numeric_limits<float>::infinity();
  }
}

std::string StopMatcher::Push(std::string_view text) {
  if (matched()) return "";
  held_.append(text);
  if (stops_.empty()) return std::exchange(held_, {});
  // The earliest match wins.
  size_t best = std::string::npos;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const size_t at = held_.find(stops_[i]);
    if (at != std::string::npos && at < best) {
      best = at;
      matched_ = static_cast<int>(i);
    }
  }
  if (matched()) {
    std::string out = held_.substr(0, best);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is a prefix of some stop string.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::Flush() {
  if (matched()) return "";
  return std::exchange(held_, {});
}

// A KV-cache slot: created once, reused by one sequence at a time.
struct Engine::Slot {
  std::unique_ptr<SequenceCache> cache;
  std::vector<float> logits;  // [V] the last Forward's logits
  bool busy = false;
};

struct Engine::Sequence {
  SequenceRequest request;
  // Weak, so that dropping the last handle outside cancels the request.
  std::weak_ptr<RequestHandle> handle;
  bool cancelled() const {
    auto h = handle.lock();
    return h == nullptr || h->cancelled();
  }
  void Push(SequenceEvent ev) const {
    if (auto h = handle.lock()) h->Push(std::move(ev));
  }
  int index = 0;
  Slot* slot = nullptr;
  int64_t prefilled = 0;  // prompt tokens in the cache
  int64_t generated = 0;
  int32_t last = -1;  // the last sampled token, to run next step
  std::optional<Sampler> sampler;
  std::optional<StreamDecoder> decoder;
  std::optional<StopMatcher> stop;
  std::unique_ptr<SequenceConstraint> constraint;
  std::vector<float> constraint_logits;  // [V] the logits before a refused draw
  bool done = false;
};

Engine::Engine(LoadedModel& model, const EngineOptions& options)
    : model_(model), options_(options) {}

Result<std::unique_ptr<Engine>> Engine::Start(LoadedModel& model, const EngineOptions& options) {
  CHECK(model.model != nullptr);
  const ModelInfo& info = model.model->info();
  EngineOptions o = options;
  if (o.ctx_size == 0) o.ctx_size = std::min<int64_t>(info.max_context, 4096);
  if (o.ctx_size < 2 || o.ctx_size > info.max_context) {
    return InvalidArgument(
        "context size " + std::to_string(o.ctx_size) + " is out of range for this model",
        "pass --ctx-size between 2 and " + std::to_string(info.max_context));
  }
  if (o.max_sequences < 1 || o.max_sequences > 4096) {
    return InvalidArgument("max sequences " + std::to_string(o.max_sequences) + " is out of range",
                           "pass --max-sequences between 1 and 4096");
  }
  if (o.max_queue < 0 || o.max_queue > 1'000'000) {
    return InvalidArgument("max queue " + std::to_string(o.max_queue) + " is out of range",
                           "pass --max-queue between 0 and 1000000");
  }
  if (o.prefill_chunk < 1) {
    return InvalidArgument("prefill chunk must be at least 1", "pass --prefill-chunk 256");
  }
  std::unique_ptr<Engine> engine(new Engine(model, o));
  engine->vocab_size_ = info.vocab_size;
  for (int i = 0; i < o.max_sequences; ++i) {
    auto slot = std::make_unique<Slot>();
    slot->cache = model.model->NewCache(o.ctx_size);
    if (!slot->cache) {
      return ResourceExhausted("could not create KV cache slot " + std::to_string(i),
                               "lower --max-sequences or --ctx-size");
    }
    slot->logits.assign(info.vocab_size, 0.0f);
    engine->slots_.push_back(std::move(slot));
  }
  engine->thread_ = std::thread([e = engine.get()] { e->Loop(); });
  return engine;
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (auto& seq : running_) Finish(*seq, FinishReason::kCancelled);
  for (auto& seq : waiting_) Finish(*seq, FinishReason::kCancelled);
}

Result<std::shared_ptr<RequestHandle>> Engine::Submit(std::vector<SequenceRequest> sequences) {
  if (sequences.empty()) return InvalidArgument("a request needs at least one sequence");
  const int64_t ctx = options_.ctx_size;
  for (const SequenceRequest& r : sequences) {
    if (r.prompt.empty()) {
      return InvalidArgument("the prompt is empty", "give at least one token (e.g. BOS)");
    }
    if (static_cast<int64_t>(r.prompt.size()) >= ctx) {
      return InvalidArgument("the prompt has " + std::to_string(r.prompt.size()) +
                                 " tokens; the context holds " + std::to_string(ctx),
                             "shorten the prompt or start the server with a larger --ctx-size");
    }
    for (int32_t id : r.prompt) {
      if (id < 0 || id >= vocab_size_) {
        return InvalidArgument("token id " + std::to_string(id) +
                               " is outside the vocabulary [0, " + std::to_string(vocab_size_) +
                               ")");
      }
    }
    if (r.max_tokens < 0) return InvalidArgument("max_tokens must not be negative");
    RETURN_IF_ERROR(ValidateSamplingParams(r.sampling));
    if (r.top_logprobs < -1 || r.top_logprobs > options_.max_top_logprobs) {
      return InvalidArgument("top_logprobs " + std::to_string(r.top_logprobs) + " is out of range",
                             "use 0.." + std::to_string(options_.max_top_logprobs));
    }
  }
  auto handle = std::make_shared<RequestHandle>(static_cast<int>(sequences.size()));
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t total = running_count_ + static_cast<int64_t>(waiting_.size()) +
                          static_cast<int64_t>(sequences.size());
    if (total > options_.max_sequences + options_.max_queue) {
      return ResourceExhausted("the server is busy: " + std::to_string(running_count_.load()) +
                                   " sequences running, " + std::to_string(waiting_.size()) +
                                   " waiting",
                               "retry later");
    }
    for (size_t i = 0; i < sequences.size(); ++i) {
      auto seq = std::make_unique<Sequence>();
      seq->request = std::move(sequences[i]);
      seq->handle = handle;
      seq->index = static_cast<int>(i);
      waiting_.push_back(std::move(seq));
    }
  }
  cv_.notify_all();
  return handle;
}

EngineMetrics Engine::Metrics() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineMetrics m;
  m.running = running_count_;
  m.waiting = static_cast<int64_t>(waiting_.size());
  m.slots = options_.max_sequences;
  m.kv_tokens_used = kv_used_;
  m.kv_tokens_capacity = options_.max_sequences * options_.ctx_size;
  m.prompt_tokens_total = prompt_tokens_total_;
  m.generated_tokens_total = generated_tokens_total_;
  m.sequences_finished_total = finished_total_;
  m.sequences_cancelled_total = cancelled_total_;
  m.steps_total = steps_total_;
  // Tokens of the steps in the last kRateWindowSeconds, over the time from the
  // window's first step to now: the rate decays to 0 once the engine idles.
  const double now = RateClockSeconds();
  int64_t n = 0;
  double first = -1;
  for (const auto& [t, tokens] : rate_window_) {
    if (now - t > kRateWindowSeconds) continue;
    if (first < 0) {
      first = t;  // the first step marks the window's start; its tokens came before it
      continue;
    }
    n += tokens;
  }
  if (first >= 0 && now > first) m.tokens_per_second = static_cast<double>(n) / (now - first);
  return m;
}

double Engine::RateClockSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Engine::Loop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !waiting_.empty() || !running_.empty(); });
      if (stop_) return;
    }
    Admit();
    const int64_t before = generated_tokens_total_.load();
    const bool worked = Step();
    if (worked && options_.test_step_delay_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(options_.test_step_delay_ms));
    }
    // Publish the counters the metrics read.
    std::lock_guard<std::mutex> lock(mu_);
    running_count_ = static_cast<int64_t>(running_.size());
    int64_t used = 0;
    for (const auto& s : slots_) {
      if (s->busy) used += s->cache->length();
    }
    kv_used_ = used;
    if (worked) {
      ++steps_total_;
      const double now = RateClockSeconds();
      rate_window_.emplace_back(now, generated_tokens_total_ - before);
      while (rate_window_.size() > 2 && now - rate_window_.front().first > kRateWindowSeconds) {
        rate_window_.pop_front();
      }
    }
  }
}

void Engine::Admit() {
  // Cancelled sequences leave (and free their slot) first.
  for (auto& seq : running_) {
    if (seq->cancelled()) Finish(*seq, FinishReason::kCancelled);
  }
  std::erase_if(running_, [](const auto& s) { return s->done; });
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if ((*it)->cancelled()) {
      Finish(**it, FinishReason::kCancelled);
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
  while (!waiting_.empty()) {
    Slot* free_slot = nullptr;
    for (auto& s : slots_) {
      if (!s->busy) {
        free_slot = s.get();
        break;
      }
    }
    if (free_slot == nullptr) break;
    std::unique_ptr<Sequence> seq = std::move(waiting_.front());
    waiting_.pop_front();
    free_slot->busy = true;
    free_slot->cache->Truncate(0);  // as new: nothing of the previous request remains
    seq->slot = free_slot;
    seq->sampler.emplace(seq->request.sampling);
    if (model_.tokenizer) seq->decoder.emplace(*model_.tokenizer, seq->request.prompt.back());
    seq->stop.emplace(seq->request.stop);
    if (seq->request.constraint) {
      seq->constraint = seq->request.constraint();
      if (seq->constraint) seq->constraint_logits.resize(vocab_size_);
    }
    const int64_t room = options_.ctx_size - static_cast<int64_t>(seq->request.prompt.size());
    seq->request.max_tokens = std::min(seq->request.max_tokens, room);
    prompt_tokens_total_ += static_cast<int64_t>(seq->request.prompt.size());
    running_.push_back(std::move(seq));
  }
  running_count_ = static_cast<int64_t>(running_.size());
}

bool Engine::Step() {
  if (running_.empty()) return false;
  std::vector<int64_t> remaining(running_.size());
  for (size_t i = 0; i < running_.size(); ++i) {
    const Sequence& s = *running_[i];
    remaining[i] = static_cast<int64_t>(s.request.prompt.size()) - s.prefilled;
  }
  const std::vector<int64_t> plan = PlanStep(remaining, options_.prefill_chunk);
  Model& model = *model_.model;
  // One ForwardBatch for every sequence's work of this step (decode tokens and
  // prefill chunks), so a batching model reads each weight once per step.
  std::vector<int32_t> last(running_.size());  // decode inputs; not resized below
  std::vector<BatchEntry> entries;
  std::vector<Sequence*> seqs;
  std::vector<int64_t> lengths;  // cache lengths before the step
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence& s = *running_[i];
    if (plan[i] == 0 || s.done) continue;
    if (s.request.max_tokens == 0 && remaining[i] > 0) {
      // Nothing to generate: report the prompt only.
      Finish(s, FinishReason::kLength);
      continue;
    }
    std::span<const int32_t> tokens;
    if (remaining[i] > 0) {
      tokens = std::span<const int32_t>(s.request.prompt.data() + s.prefilled, plan[i]);
    } else {
      last[i] = s.last;
      tokens = std::span<const int32_t>(&last[i], 1);
    }
    entries.push_back(BatchEntry{.tokens = tokens,
                                 .cache = s.slot->cache.get(),
                                 .logits = s.slot->logits,
                                 .all_logits = false});
    seqs.push_back(&s);
    lengths.push_back(s.slot->cache->length());
  }
  if (!entries.empty()) {
    const Status st = model.ForwardBatch(entries);
    std::vector<Status> results(entries.size(), st);
    if (!st.ok() && entries.size() > 1) {
      // Find the sequence(s) at fault: roll every cache back to where the
      // step began and run them one by one, so the others go on.
      LOG_WARNING("engine: batched forward failed ({}); retrying its {} sequences one by one",
                  st.ToString(), entries.size());
      for (size_t k = 0; k < entries.size(); ++k) {
        SequenceCache& cache = *entries[k].cache;
        if (cache.length() > lengths[k]) cache.Truncate(lengths[k]);
        results[k] = model.Forward(entries[k].tokens, cache, entries[k].logits, false);
      }
    }
    for (size_t k = 0; k < entries.size(); ++k) {
      Sequence& s = *seqs[k];
      const bool prefill = s.prefilled < static_cast<int64_t>(s.request.prompt.size());
      if (prefill) s.prefilled += static_cast<int64_t>(entries[k].tokens.size());
      if (!results[k].ok()) {
        LOG_ERROR("engine: forward failed: {}", results[k].ToString());
        Finish(s, FinishReason::kError, results[k]);
        continue;
      }
      if (s.prefilled < static_cast<int64_t>(s.request.prompt.size())) continue;
      SampleAndEmit(s);
    }
  }
  std::erase_if(running_, [](const auto& s) { return s->done; });
  return true;
}

void Engine::SampleAndEmit(Sequence& s) {
  std::span<float> logits = s.slot->logits;
  SequenceEvent ev;
  ev.index = s.index;
  TokenLogprobs lp;
  float log_z = 0.0f;
  if (s.request.top_logprobs >= 0) {
    // log softmax of the raw logits, before penalties change them.
    float mx = -std::numeric_limits<float>::infinity();
    for (float v : logits) mx = std::max(mx, v);
    double sum = 0.0;
    for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
    log_z = mx + static_cast<float>(std::log(sum));
    const int k = std::min<int>(s.request.top_logprobs, static_cast<int>(logits.size()));
    if (k > 0) {
      std::vector<TokenLogprob> all(logits.size());
      for (size_t i = 0; i < logits.size(); ++i) {
        all[i] = {static_cast<int32_t>(i), logits[i] - log_z};
      }
      std::partial_sort(all.begin(), all.begin() + k, all.end(), [](const auto& a, const auto& b) {
        return a.logprob > b.logprob || (a.logprob == b.logprob && a.id < b.id);
      });
      lp.top.assign(all.begin(), all.begin() + k);
    }
  }
  const std::vector<float> raw = s.request.top_logprobs >= 0
                                     ? std::vector<float>(logits.begin(), logits.end())
                                     : std::vector<float>();
  int32_t next = -1;
  if (s.constraint) {
    s.constraint->Prepare(std::max<int64_t>(s.request.max_tokens - s.generated, 1));
    std::copy(logits.begin(), logits.end(), s.constraint_logits.begin());
    next = s.sampler->Sample(logits);
    if (!s.constraint->Allows(next)) {
      std::copy(s.constraint_logits.begin(), s.constraint_logits.end(), logits.begin());
      s.constraint->Mask(logits);
      next = s.sampler->Sample(logits);
      if (!s.constraint->Allows(next)) {  // nothing is allowed: end, closing what is open
        Finish(s, FinishReason::kStop);
        return;
      }
    }
  } else {
    next = s.sampler->Sample(logits);
  }
  if (s.request.stop_at_eos && model_.IsStop(next)) {
    Finish(s, FinishReason::kStop);
    return;
  }
  s.sampler->Accept(next);
  if (s.constraint) s.constraint->Accept(next);
  s.last = next;
  ++s.generated;
  ++generated_tokens_total_;
  ev.tokens.push_back(next);
  if (s.request.top_logprobs >= 0) {
    lp.chosen = {next, raw[next] - log_z};
    ev.logprobs.push_back(std::move(lp));
  }
  if (s.decoder) {
    if (s.constraint && !s.constraint->stop_strings_apply()) {
      ev.text = s.stop->Flush() + s.decoder->Push(next);  // markup is never cut
    } else {
      ev.text = s.stop->Push(s.decoder->Push(next));
    }
  }
  const bool stopped = s.stop->matched();
  const bool full =
      s.generated >= s.request.max_tokens || s.slot->cache->length() + 1 >= options_.ctx_size;
  if (!ev.text.empty() || !stopped) s.Push(std::move(ev));
  if (s.constraint && s.constraint->done() && !stopped) {
    Finish(s, FinishReason::kStop);
  } else if (stopped) {
    Finish(s, FinishReason::kStop);
  } else if (full) {
    Finish(s, FinishReason::kLength);
  }
}

void Engine::Finish(Sequence& s, FinishReason reason, Status error) {
  if (s.done) return;
  s.done = true;
  SequenceEvent ev;
  ev.index = s.index;
  ev.finish = reason;
  if (s.stop && s.stop->matched()) ev.stop_string = s.stop->matched_string();
  const bool ended = reason != FinishReason::kCancelled && reason != FinishReason::kError;
  if (ended && s.decoder && !s.stop->matched()) {
    if (s.constraint && !s.constraint->stop_strings_apply()) {
      ev.text = s.stop->Flush() + s.decoder->Flush();
    } else {
      ev.text = s.stop->Push(s.decoder->Flush());
      if (s.stop->matched()) {
        ev.finish = FinishReason::kStop;
        ev.stop_string = s.stop->matched_string();
      } else {
        ev.text += s.stop->Flush();
      }
    }
  }
  // A constrained sequence ends well-formed (e.g. an open tool call closed).
  if (ended && s.constraint) ev.text += s.constraint->Close();
  ev.prompt_tokens = static_cast<int64_t>(s.request.prompt.size());
  ev.completion_tokens = s.generated;
  ev.error = std::move(error);
  if (s.slot != nullptr) {
    kv_used_ -= s.slot->cache->length();
    --running_count_;
    s.slot->busy = false;
    s.slot = nullptr;
  }
  ++finished_total_;
  if (reason == FinishReason::kCancelled) ++cancelled_total_;
  s.Push(std::move(ev));
}

}  // namespace dsv4
