// Engine: the serving loop (engine.h).
#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "base/log.h"
#include "base/timer.h"
#include "sampling/speculative_sampling.h"
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
  std::vector<float> logits;  // [K + 1, V] the last Forward's logits (K: most drafts)
  // The sequence's draft state, made when a speculating sequence takes the
  // slot; null otherwise.
  std::unique_ptr<DraftSession> draft;
  std::vector<float> q;  // [k, V] the distributions the drafts were drawn from (sampling)
  bool busy = false;
  // The tokens in `cache`, in order (tokens.size() == cache->length() between
  // steps), and whether a free slot's cache may be reused (its last sequence
  // did not fail) and when it was last freed (EngineOptions::reuse_prefix).
  std::vector<int32_t> tokens;
  bool reusable = false;
  uint64_t last_used = 0;
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
  int64_t cached = 0;     // of them, reused from the slot's previous sequence
  int64_t generated = 0;
  int32_t last = -1;         // the last sampled token, to run next step
  std::vector<int32_t> run;  // this step's decode tokens: [last] or [last, d_1 .. d_k]
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
  if (o.speculative.draft_tokens < 0) {
    return InvalidArgument(
        "speculative draft length " + std::to_string(o.speculative.draft_tokens) + " is negative",
        "use --speculative K with K ≥ 1 (0 = off) or auto");
  }
  if (!o.kv_cache_dir.empty() && !o.reuse_prefix) {
    return InvalidArgument("--kv-cache-dir needs prefix reuse", "drop --no-prefix-reuse");
  }
  if (o.kv_cache_max_bytes < 1) {
    return InvalidArgument("--kv-cache-size must be positive", "e.g. --kv-cache-size 8G");
  }
  std::unique_ptr<Engine> engine(new Engine(model, o));
  engine->vocab_size_ = info.vocab_size;
  if (!o.kv_cache_dir.empty()) {
    ASSIGN_OR_RETURN(engine->store_, PromptStateStore::Open({.dir = o.kv_cache_dir,
                                                             .fingerprint = o.state_fingerprint,
                                                             .max_bytes = o.kv_cache_max_bytes}));
  }
  if (o.speculative.draft_tokens > 0) RETURN_IF_ERROR(engine->StartSpeculation());
  for (int i = 0; i < o.max_sequences; ++i) {
    auto slot = std::make_unique<Slot>();
    slot->cache = model.model->NewCache(o.ctx_size);
    if (!slot->cache) {
      return ResourceExhausted("could not create KV cache slot " + std::to_string(i),
                               "lower --max-sequences or --ctx-size");
    }
    slot->logits.assign((engine->max_drafts_ + 1) * info.vocab_size, 0.0f);
    engine->slots_.push_back(std::move(slot));
  }
  if (engine->store_) {
    std::vector<uint8_t> probe;
    SequenceCache& cache = *engine->slots_.front()->cache;
    Status st = cache.ExactTruncate() ? cache.SaveState(probe)
                                      : Unimplemented("this model's cache is not reused");
    if (!st.ok()) {
      return Unimplemented("--kv-cache-dir: " + st.message() + " (model " + info.architecture + ")",
                           "drop --kv-cache-dir for this model");
    }
  }
  engine->thread_ = std::thread([e = engine.get()] { e->Loop(); });
  return engine;
}

Status Engine::StartSpeculation() {
  ASSIGN_OR_RETURN(drafter_, DraftHead(model_));
  const SpeculativeOptions& spec = options_.speculative;
  const int64_t cap = drafter_->max_drafts();  // DSpark: its block
  max_drafts_ = cap > 0 ? std::min(spec.draft_tokens, cap) : spec.draft_tokens;
  if (spec.adaptive) controller_ = std::make_unique<DraftLengthController>(max_drafts_);
  LOG_INFO("engine: speculative decoding with the {} draft head, {}{} drafts per step",
           drafter_->draft_kind(), spec.adaptive ? "adaptive, up to " : "", max_drafts_);
  return Status::Ok();
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
    for (const auto& [id, amount] : r.sampling.logit_bias) {
      if (id >= vocab_size_) {
        return InvalidArgument("logit_bias names token id " + std::to_string(id) +
                               ", outside the vocabulary [0, " + std::to_string(vocab_size_) + ")");
      }
    }
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
  m.prompt_tokens_cached_total = prompt_tokens_cached_total_;
  m.prefix_hits_total = prefix_hits_total_;
  if (store_) {
    const PromptStoreStats st = store_->stats();
    m.disk_state_hits_total = st.hits;
    m.disk_state_tokens_total = st.hit_tokens;
    m.disk_state_read_bytes_total = st.read_bytes;
    m.disk_state_writes_total = st.writes;
    m.disk_state_write_bytes_total = st.write_bytes;
    m.disk_state_files = st.files;
    m.disk_state_bytes = st.bytes;
  }
  m.generated_tokens_total = generated_tokens_total_;
  m.sequences_finished_total = finished_total_;
  m.sequences_cancelled_total = cancelled_total_;
  m.steps_total = steps_total_;
  m.speculative_drafted_total = drafted_total_;
  m.speculative_accepted_total = accepted_total_;
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
  std::unique_lock<std::mutex> lock(mu_);
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if ((*it)->cancelled()) {
      Finish(**it, FinishReason::kCancelled);
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
  while (!waiting_.empty()) {
    std::unique_ptr<Sequence>& next = waiting_.front();
    const std::vector<int32_t>& prompt = next->request.prompt;
    // The free slot sharing the longest prefix with the prompt when that is
    // at least options_.slot_prompt_similarity of it, else the one freed
    // longest ago (llama.cpp's slot choice). At least the prompt's last token
    // is run again (its logits pick the first output token).
    Slot* free_slot = nullptr;  // least recently used
    Slot* best_slot = nullptr;  // longest common prefix
    int64_t best = 0, lru_common = 0;
    for (auto& s : slots_) {
      if (s->busy) continue;
      int64_t common = 0;
      if (options_.reuse_prefix && s->reusable && s->cache->ExactTruncate()) {
        const size_t n = std::min(s->tokens.size(), prompt.empty() ? 0 : prompt.size() - 1);
        while (common < static_cast<int64_t>(n) && s->tokens[common] == prompt[common]) ++common;
      }
      if (free_slot == nullptr || s->last_used < free_slot->last_used) {
        free_slot = s.get();
        lru_common = common;
      }
      if (common > best) {
        best_slot = s.get();
        best = common;
      }
    }
    if (best_slot != nullptr &&
        best >= options_.slot_prompt_similarity * static_cast<double>(prompt.size())) {
      free_slot = best_slot;
    } else {
      best = lru_common;
    }
    if (free_slot == nullptr) break;
    std::unique_ptr<Sequence> seq = std::move(next);
    waiting_.pop_front();
    free_slot->busy = true;
    free_slot->reusable = false;
    seq->slot = free_slot;
    seq->sampler.emplace(seq->request.sampling);
    if (model_.tokenizer) seq->decoder.emplace(*model_.tokenizer, seq->request.prompt.back());
    seq->stop.emplace(seq->request.stop);
    if (seq->request.constraint) {
      seq->constraint = seq->request.constraint();
      if (seq->constraint) seq->constraint_logits.resize(vocab_size_);
    }
    // A fresh draft session for a speculating sequence (it tracks the
    // positions committed to this slot's cache, from 0).
    free_slot->draft = CanSpeculate(*seq) ? drafter_->NewDraftSession(options_.ctx_size) : nullptr;
    // A speculating sequence's new draft session sees only what is prefilled
    // now (the drafts of its first window may be accepted less; the output is
    // the same, verification decides it).
    int64_t reuse = free_slot->cache->KeepablePrefix(best);
    free_slot->cache->Truncate(reuse);  // nothing of the previous request after the prefix
    free_slot->tokens.resize(reuse);
    // A saved prompt state that gives more (its tokens begin the prompt; at
    // least the last prompt token runs again) replaces the slot's.
    const int64_t last = static_cast<int64_t>(prompt.size()) - 1;
    if (store_ && std::min(store_->Longest(prompt), last) > reuse) {
      SequenceCache& cache = *free_slot->cache;
      // The read runs without the queue's lock (Submit and Metrics go on);
      // the sequence and its slot are this thread's already.
      lock.unlock();
      const int64_t loaded = store_->Load(prompt, cache);
      lock.lock();
      reuse = cache.KeepablePrefix(std::min(loaded, last));
      cache.Truncate(reuse);
      free_slot->tokens.assign(prompt.begin(), prompt.begin() + reuse);
    }
    if (reuse > 0) ++prefix_hits_total_;
    seq->prefilled = seq->cached = reuse;
    prompt_tokens_cached_total_ += reuse;
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
  // This step's draft length, the same for every speculating sequence.
  const int64_t k_step = controller_ ? controller_->Choose() : max_drafts_;
  // One ForwardBatch for every sequence's work of this step (decode tokens and
  // prefill chunks), so a batching model reads each weight once per step.
  std::vector<BatchEntry> entries;
  std::vector<Sequence*> seqs;
  std::vector<int64_t> lengths;  // cache lengths before the step
  bool prefilling = false;
  Timer timer;
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
      prefilling = true;
    } else {
      if (!PrepareDecode(s, k_step)) continue;
      tokens = s.run;
    }
    entries.push_back(BatchEntry{.tokens = tokens,
                                 .cache = s.slot->cache.get(),
                                 .logits = s.slot->logits,
                                 .all_logits = remaining[i] == 0 && tokens.size() > 1});
    seqs.push_back(&s);
    lengths.push_back(s.slot->cache->length());
  }
  const double draft_seconds = timer.Seconds();
  step_rounds_.clear();
  if (!entries.empty()) {
    timer.Reset();
    const Status st = model.ForwardBatch(entries);
    const double verify_seconds = timer.Seconds();
    if (st.ok() || entries.size() == 1) {
      for (size_t k = 0; k < entries.size(); ++k) {
        CompleteEntry(*seqs[k], entries[k], static_cast<int64_t>(k), st);
      }
      // Decode-only steps time the verification of k_step + 1 tokens a sequence.
      if (controller_ && st.ok() && !prefilling) {
        for (const auto& [k, accepted] : step_rounds_) {
          if (k == k_step) controller_->Record(k, accepted, draft_seconds, verify_seconds);
        }
      }
    } else {
      // Find the sequence(s) at fault: roll every cache back to where the
      // step began and run them one by one, so the others go on. Each one's
      // draft session observes its Forward before the next runs.
      LOG_WARNING("engine: batched forward failed ({}); retrying its {} sequences one by one",
                  st.ToString(), entries.size());
      for (size_t k = 0; k < entries.size(); ++k) {
        SequenceCache& cache = *entries[k].cache;
        if (cache.length() > lengths[k]) cache.Truncate(lengths[k]);
      }
      for (size_t k = 0; k < entries.size(); ++k) {
        const BatchEntry& e = entries[k];
        CompleteEntry(*seqs[k], e, 0, model.Forward(e.tokens, *e.cache, e.logits, e.all_logits));
      }
    }
  }
  // The slots' token lists follow their caches: what this step fed, as far
  // as the cache kept it (speculative rejections truncate).
  for (size_t k = 0; k < entries.size(); ++k) {
    SequenceCache& cache = *entries[k].cache;
    Slot* slot = nullptr;
    for (auto& sl : slots_) {
      if (sl->cache.get() == &cache) slot = sl.get();
    }
    std::vector<int32_t>& t = slot->tokens;
    t.resize(lengths[k]);
    t.insert(t.end(), entries[k].tokens.begin(), entries[k].tokens.end());
    t.resize(std::min<size_t>(t.size(), cache.length()));
    if (static_cast<int64_t>(t.size()) != cache.length()) {
      t.clear();  // the cache holds what this list cannot say: never reused
      slot->reusable = false;
    }
  }
  std::erase_if(running_, [](const auto& s) { return s->done; });
  return true;
}

bool Engine::CanSpeculate(const Sequence& s) const {
  const SamplingParams& sp = s.request.sampling;
  const bool penalties = sp.repeat_penalty != 1.0f || sp.presence_penalty != 0.0f ||
                         sp.frequency_penalty != 0.0f || !sp.logit_bias.empty();
  // Penalties change a row's distribution with the tokens before it (a
  // logit bias is kept out too, for simplicity), a
  // constraint may refuse and resample, logprobs report every row: these
  // sequences decode one token a step and keep no draft session.
  return drafter_ != nullptr && !penalties && s.constraint == nullptr && s.request.top_logprobs < 0;
}

bool Engine::PrepareDecode(Sequence& s, int64_t k_step) {
  s.run.assign(1, s.last);
  Slot& slot = *s.slot;
  if (!slot.draft) return true;
  const int64_t V = vocab_size_, n = slot.cache->length();  // n: the position of `last`
  // Each round emits up to k + 1 tokens: no more than are left, and none
  // that plain decoding would not reach before the slot is full.
  const int64_t k = std::clamp<int64_t>(
      std::min({k_step, s.request.max_tokens - s.generated - 1, options_.ctx_size - n - 2}), 0,
      max_drafts_);
  s.run.resize(1 + k, s.last);
  DraftPick pick;
  if (s.request.sampling.temperature > 0.0f && k > 0) {
    // Each draft is drawn from the sequence's sampler chain over the draft
    // logits; q keeps those distributions for the verification.
    if (static_cast<int64_t>(slot.q.size()) < k * V) slot.q.resize(k * V);
    pick = [this, &s](std::span<float> row, int64_t j) {
      const std::span<float> qj = std::span<float>(s.slot->q).subspan(j * vocab_size_, vocab_size_);
      s.sampler->Probabilities(row, qj);
      return DrawFrom(qj, s.sampler->rng());
    };
  }
  const Result<int64_t> drafted =
      slot.draft->Draft(s.last, std::span<int32_t>(s.run).subspan(1), pick);
  if (!drafted.ok()) {
    LOG_ERROR("engine: drafting failed: {}", drafted.status().ToString());
    Finish(s, FinishReason::kError, drafted.status());
    return false;
  }
  s.run.resize(1 + *drafted);
  if (*drafted > 0 && options_.test_edit_drafts) {
    options_.test_edit_drafts(s.request.prompt, n + 1, std::span<int32_t>(s.run).subspan(1));
  }
  return true;
}

void Engine::CompleteEntry(Sequence& s, const BatchEntry& e, int64_t entry, const Status& st) {
  const bool prefill = s.prefilled < static_cast<int64_t>(s.request.prompt.size());
  if (prefill) s.prefilled += static_cast<int64_t>(e.tokens.size());
  Status status = st;
  if (status.ok() && prefill && s.slot->draft) {
    status = s.slot->draft->Observe(e.tokens, static_cast<int64_t>(e.tokens.size()), entry);
  }
  if (!status.ok()) {
    LOG_ERROR("engine: forward failed: {}", status.ToString());
    Finish(s, FinishReason::kError, status);
    return;
  }
  if (s.prefilled < static_cast<int64_t>(s.request.prompt.size())) return;
  // The prompt is in the cache: its state is saved for later requests.
  if (prefill && store_ && s.slot->cache->length() == s.prefilled) {
    store_->Save(s.request.prompt, *s.slot->cache);
  }
  if (!prefill && s.slot->draft) {
    VerifyAndEmit(s, entry);
  } else {
    SampleAndEmit(s);
  }
}

void Engine::VerifyAndEmit(Sequence& s, int64_t entry) {
  const std::vector<int32_t>& run = s.run;  // [x, d_1 .. d_k]
  const int64_t k = static_cast<int64_t>(run.size()) - 1, V = vocab_size_;
  SequenceCache& cache = *s.slot->cache;
  const int64_t n = cache.length() - 1 - k;  // x's position
  const std::span<float> logits = s.slot->logits;
  int64_t a = 0;
  int32_t next = -1;
  if (s.request.sampling.temperature > 0.0f) {
    if (static_cast<int64_t>(pi_.size()) < (k + 1) * V) pi_.resize((k + 1) * V);
    for (int64_t i = 0; i <= k; ++i) {
      s.sampler->Probabilities(logits.subspan(i * V, V), std::span<float>(pi_).subspan(i * V, V));
    }
    const Verified v = VerifyDraftsLossless(
        std::span<const int32_t>(run).subspan(1), std::span<const float>(s.slot->q).first(k * V),
        std::span<const float>(pi_).first((k + 1) * V), s.sampler->rng(), residual_);
    a = v.accepted;
    next = v.next;
  } else {
    // The sampler's greedy choice row by row (its tie rule: the lowest id).
    for (;; ++a) {
      next = s.sampler->Sample(logits.subspan(a * V, V));
      if (a == k || run[a + 1] != next) break;
    }
  }
  drafted_total_ += k;
  accepted_total_ += a;
  step_rounds_.emplace_back(k, a);
  if (a < k) cache.Truncate(n + 1 + a);
  if (Status st = s.slot->draft->Observe(run, a + 1, entry); !st.ok()) {
    LOG_ERROR("engine: draft observe failed: {}", st.ToString());
    Finish(s, FinishReason::kError, st);
    return;
  }
  // The i-th token of the round is emitted as plain decoding would, with x
  // and the i − 1 tokens before it in the cache (length n + i).
  for (int64_t i = 1; i <= a; ++i) {
    if (!EmitToken(s, run[i], nullptr, n + i)) return;
  }
  EmitToken(s, next, nullptr, n + a + 1);
}

void Engine::SampleAndEmit(Sequence& s) {
  std::span<float> logits = std::span<float>(s.slot->logits).first(vocab_size_);
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
  if (s.request.top_logprobs >= 0) lp.chosen = {next, raw[next] - log_z};
  EmitToken(s, next, s.request.top_logprobs >= 0 ? &lp : nullptr, s.slot->cache->length());
}

bool Engine::EmitToken(Sequence& s, int32_t next, TokenLogprobs* lp, int64_t length) {
  if (s.request.stop_at_eos && model_.IsStop(next)) {
    Finish(s, FinishReason::kStop);
    return false;
  }
  s.sampler->Accept(next);
  if (s.constraint) s.constraint->Accept(next);
  s.last = next;
  ++s.generated;
  ++generated_tokens_total_;
  SequenceEvent ev;
  ev.index = s.index;
  ev.tokens.push_back(next);
  if (lp != nullptr) ev.logprobs.push_back(std::move(*lp));
  if (s.decoder) {
    if (s.constraint && !s.constraint->stop_strings_apply()) {
      ev.text = s.stop->Flush() + s.decoder->Push(next);  // markup is never cut
    } else {
      ev.text = s.stop->Push(s.decoder->Push(next));
    }
  }
  const bool stopped = s.stop->matched();
  const bool full = s.generated >= s.request.max_tokens || length + 1 >= options_.ctx_size;
  if (!ev.text.empty() || !stopped) s.Push(std::move(ev));
  if ((s.constraint && s.constraint->done()) || stopped) {
    Finish(s, FinishReason::kStop);
  } else if (full) {
    Finish(s, FinishReason::kLength);
  }
  return !s.done;
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
  ev.cached_prompt_tokens = s.cached;
  if (s.slot != nullptr) {
    // A failed forward may leave the cache anywhere: only the others' is kept.
    s.slot->reusable = reason != FinishReason::kError;
    s.slot->last_used = ++slot_clock_;
    s.slot->draft.reset();  // its memory goes back while the slot is free
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
