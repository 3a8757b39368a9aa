// Engine: the serving loop. One engine thread owns the model and runs every
// sequence of every request; front ends (the HTTP server, later the LSP) call
// only Submit / Cancel / Metrics from their own threads. Continuous batching:
// requests join and leave between steps; a step decodes one token for every
// running sequence and prefills prompts in chunks from a per-step token budget,
// so long prompts never stall running decodes. Each sequence has its own
// sampler (own seed), stream decoder, stop-string matcher and, when its
// request asks for one, a SequenceConstraint (constrained decoding).
//
// Memory: all KV caches are created once at start (`max_sequences` slots of
// `ctx_size` tokens each) and reused, so a request can never make the process
// run out of memory: it waits in a bounded queue for a free slot or Submit
// refuses it (ResourceExhausted, which servers turn into 503 + Retry-After).
//
// A step is one Model::ForwardBatch over every running sequence's work (one
// decode token each, plus the prefill chunks), so a model that batches
// (DeepSeek-V4) reads each weight once per step, not once per sequence;
// others fall back to Model's default loop over Forward. If a batch fails,
// every cache is rolled back to the start of the step and the sequences
// rerun one by one, so only the failing one ends.
//
// Speculative decoding (EngineOptions::speculative, the model's draft head,
// model/draft.h): a sequence that can speculate losslessly (no penalties, no
// SequenceConstraint, no logprobs) gets a DraftSession in its slot. Each
// decode step it drafts up to k tokens after its last one, x, and its batch
// entry runs [x, d_1 .. d_k] with every row's logits; then it keeps the drafts
// the main model agrees with (greedy: its argmax; sampling: lossless
// rejection sampling from the sequence's own sampler and seed, as
// GenerateSpeculative), truncates its cache past the rest and emits the kept
// tokens plus the main model's next one, one by one. Every Forward on the
// slot's cache (prefill chunks too) is followed by the session's Observe of
// that entry. Other sequences decode one token per step without a session.
//
// Not here: HTTP, JSON, chat templates, output parsing (src/server).
#ifndef DSV4_ENGINE_ENGINE_H_
#define DSV4_ENGINE_ENGINE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "engine/loader.h"
#include "engine/speculative.h"
#include "engine/state_file.h"
#include "sampling/sampler.h"

namespace dsv4 {

struct EngineOptions {
  int max_sequences = 4;        // sequences running at once (KV-cache slots)
  int max_queue = 64;           // sequences waiting for a slot; beyond: Submit refuses
  int64_t ctx_size = 0;         // tokens per slot (prompt + output); 0: min(model, 4096)
  int64_t prefill_chunk = 256;  // prompt tokens prefilled per step, over all sequences
  // Prefix reuse (llama.cpp's cache_prompt): a free slot keeps the decoding
  // state of its last sequence (prompt and output); a new sequence takes the
  // free slot whose tokens share the longest prefix with its prompt (if long
  // enough, below; else the least recently used one) and prefills only the
  // rest. Bit-identical to a
  // cold run (SequenceCache::Truncate is exact); a speculating sequence's
  // draft session starts with what is prefilled.
  bool reuse_prefix = true;
  // The share of a prompt a free slot's tokens must begin with for the
  // sequence to take that slot rather than the least recently used one
  // (llama.cpp's --slot-prompt-similarity).
  double slot_prompt_similarity = 0.5;
  // Prompt states on disk (dsv4 serve --kv-cache-dir, engine/state_file.h);
  // empty: none. Each sequence's state is saved once its prompt is prefilled;
  // a new sequence whose prompt begins with a saved prompt longer than what a
  // slot can reuse loads that state into its slot (after a restart too).
  // Needs reuse_prefix. state_fingerprint guards the files
  // (StateFingerprint: the model and its runtime options).
  std::string kv_cache_dir = "";
  int64_t kv_cache_max_bytes = int64_t{8} << 30;
  uint64_t state_fingerprint = 0;
  int max_top_logprobs = 20;  // largest top_logprobs a sequence may ask for
  // Speculative decoding (dsv4 serve --speculative K|auto, ParseSpeculative):
  // draft_tokens drafts per round, at most the draft head's max_drafts()
  // (0: off, the default here); adaptive: one DraftLengthController for the
  // engine picks each step's length in [0, draft_tokens]. Only these two
  // fields are read: sampling and max_tokens are each sequence's own.
  SpeculativeOptions speculative = NoSpeculation();
  // Test-only: sleep this long after every step, so tests can observe running
  // sequences (cancellation, queueing) with a model that is otherwise too fast.
  int test_step_delay_ms = 0;
  // Test-only: called with a speculating sequence's drafts of each step (for
  // main positions `position` ..) before verification, and may change them,
  // so that tests with random-weight models can force drafts to be accepted.
  std::function<void(std::span<const int32_t> prompt, int64_t position, std::span<int32_t> drafts)>
      test_edit_drafts = nullptr;
};

// Constrained decoding for one sequence (e.g. a forced tool call, see
// server/tool_choice.h), owned and called by the engine thread only. Per token
// the engine samples from the model's distribution as usual and asks Allows;
// only when the token is refused does it restore the logits, Mask them and
// sample again (llama.cpp's grammar check-then-resample order), so a model
// that already follows the constraint costs one Allows call per token.
class SequenceConstraint {
 public:
  virtual ~SequenceConstraint() = default;
  // Called before each token is picked; `tokens_left` >= 1 is how many more
  // the sequence may generate (max_tokens or the slot's room).
  virtual void Prepare(int64_t tokens_left) { (void)tokens_left; }
  // Whether `token` (EOS included) may come next.
  virtual bool Allows(int32_t token) const = 0;
  // Sets the logit of every token Allows refuses to -inf. This default asks
  // Allows for every id.
  virtual void Mask(std::span<float> logits) const;
  // Records the token that was picked (never EOS: EOS ends the sequence).
  virtual void Accept(int32_t token) = 0;
  // The constraint is complete: the sequence ends (kStop) after the token
  // just accepted.
  virtual bool done() const = 0;
  // Whether stop strings apply to the text from now on (false inside markup
  // that must not be cut, such as a tool call).
  virtual bool stop_strings_apply() const { return true; }
  // Text that completes the output when the sequence ends now (EOS, a stop
  // string, max_tokens, a full context), e.g. the closing tags of an open tool
  // call; "" when nothing needs closing. Called once, at the end.
  virtual std::string Close() = 0;
};

// Makes one sequence's constraint when the engine admits it (engine thread).
using ConstraintFactory = std::function<std::unique_ptr<SequenceConstraint>()>;

// One sequence to generate: the prompt ids (BOS included by the caller) and how
// to sample. A request with n choices submits n of these.
struct SequenceRequest {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 256;       // generated tokens; clamped to what the slot holds
  SamplingParams sampling;        // validated by Submit
  std::vector<std::string> stop;  // stop strings; the text ends before the match
  int top_logprobs = -1;          // -1: no logprobs; 0..max: chosen token (+ this many)
  bool stop_at_eos = true;        // a stop id (LoadedModel::stop_ids) ends it (not emitted)
  ConstraintFactory constraint;   // null: unconstrained (no per-token cost)
};

struct TokenLogprob {
  int32_t id = -1;
  float logprob = 0.0f;  // log softmax of the model's raw logits
};

// The logprobs of one generated token: the chosen one and the most likely ones.
struct TokenLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // descending, top_logprobs entries
};

enum class FinishReason {
  kNone,       // still running
  kStop,       // EOS (or BOS for story models) or a stop string
  kLength,     // max_tokens or the slot's context filled up
  kCancelled,  // Cancel() or the handle was dropped
  kError,      // the model failed; see SequenceEvent::error
};

const char* FinishReasonName(FinishReason reason);

// What the engine reports about one sequence. A sequence sends zero or more
// token events, then exactly one final event (finish != kNone).
struct SequenceEvent {
  int index = 0;                        // which sequence of the request
  std::vector<int32_t> tokens;          // tokens generated since the previous event
  std::string text;                     // text that became final (UTF-8 complete, stop strings cut)
  std::vector<TokenLogprobs> logprobs;  // one per token, when asked for
  FinishReason finish = FinishReason::kNone;
  std::string stop_string;           // the stop string that matched (kStop)
  int64_t prompt_tokens = 0;         // final event only
  int64_t cached_prompt_tokens = 0;  // final event only: of prompt_tokens, reused from a slot
  int64_t completion_tokens = 0;
  Status error;  // kError only
};

// A submitted request: its sequences' events, in order, for the thread that
// submitted it. Dropping the handle cancels what is still running.
class RequestHandle {
 public:
  explicit RequestHandle(int n_sequences) : n_sequences_(n_sequences) {}
  ~RequestHandle() { Cancel(); }
  RequestHandle(const RequestHandle&) = delete;
  RequestHandle& operator=(const RequestHandle&) = delete;

  // Waits up to `timeout` for the next event; false on timeout.
  bool Next(SequenceEvent* event, std::chrono::milliseconds timeout);
  // Stops every sequence of the request; the engine frees their slots within a step.
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }
  int n_sequences() const { return n_sequences_; }

  // Engine side.
  void Push(SequenceEvent event);

 private:
  const int n_sequences_;
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<SequenceEvent> events_;
};

// A snapshot for /metrics.
struct EngineMetrics {
  int64_t running = 0;             // sequences holding a slot
  int64_t waiting = 0;             // sequences queued for a slot
  int64_t slots = 0;               // max_sequences
  int64_t kv_tokens_used = 0;      // tokens in all slots' caches
  int64_t kv_tokens_capacity = 0;  // slots * ctx_size
  int64_t prompt_tokens_total = 0;
  int64_t prompt_tokens_cached_total = 0;  // of prompt_tokens_total, reused (not prefilled)
  int64_t prefix_hits_total = 0;           // sequences that reused a prefix (slot or disk)
  // Prompt states on disk (EngineOptions::kv_cache_dir; all 0 without).
  int64_t disk_state_hits_total = 0;    // states loaded into a slot
  int64_t disk_state_tokens_total = 0;  // prompt tokens they gave
  int64_t disk_state_read_bytes_total = 0;
  int64_t disk_state_writes_total = 0;
  int64_t disk_state_write_bytes_total = 0;
  int64_t disk_state_files = 0;  // states of this model on disk now
  int64_t disk_state_bytes = 0;
  int64_t generated_tokens_total = 0;
  int64_t sequences_finished_total = 0;
  int64_t sequences_cancelled_total = 0;
  int64_t steps_total = 0;
  int64_t speculative_drafted_total = 0;   // draft tokens verified
  int64_t speculative_accepted_total = 0;  // of them accepted
  double tokens_per_second = 0.0;          // generated tokens/s over the last 5 s (0 when idle)
};

class Engine {
 public:
  // Starts the engine thread. `model` must outlive the engine. Errors: options
  // out of range, or the cache slots cannot be allocated.
  static Result<std::unique_ptr<Engine>> Start(LoadedModel& model, const EngineOptions& options);
  ~Engine();  // stops the thread; running sequences end as kCancelled

  // Queues the sequences of one request (thread-safe). InvalidArgument: empty
  // or too long prompt, token id outside the vocabulary, bad sampling params,
  // top_logprobs out of range; ResourceExhausted: the queue is full (retry later).
  Result<std::shared_ptr<RequestHandle>> Submit(std::vector<SequenceRequest> sequences);

  EngineMetrics Metrics() const;
  // Waits until every prompt state saved so far is on disk (tests, benchmarks).
  void FlushStates() {
    if (store_) store_->Flush();
  }
  const EngineOptions& options() const { return options_; }
  int64_t ctx_size() const { return options_.ctx_size; }
  const LoadedModel& model() const { return model_; }

 private:
  struct Sequence;
  struct Slot;
  Engine(LoadedModel& model, const EngineOptions& options);
  // The draft head and draft length of options_.speculative (Unimplemented
  // for a model without a draft head).
  Status StartSpeculation();
  void Loop();
  // Moves waiting sequences into free slots and drops cancelled waiting ones.
  void Admit();
  // One step over the running sequences; false when there were none.
  bool Step();
  // Samples the next token of `seq` from its slot's logits and reports it.
  void SampleAndEmit(Sequence& seq);
  // Reports `token` as the next of `seq` (the stop ids, stop strings,
  // max_tokens, detokenisation); `length` is the cache length plain decoding
  // would have when picking it. False when the sequence ended before or with it.
  bool EmitToken(Sequence& seq, int32_t token, TokenLogprobs* logprobs, int64_t length);
  // Whether `seq` may speculate: lossless for it (no penalties, constraint or logprobs).
  bool CanSpeculate(const Sequence& seq) const;
  // This step's decode tokens of `seq` into seq.run: [last], or with a draft
  // session [last, d_1 .. d_k], k ≤ k_step. False when drafting failed (the
  // sequence has ended).
  bool PrepareDecode(Sequence& seq, int64_t k_step);
  // After the step's Forward of seq's entry (`entry` of the ForwardBatch, 0
  // after a lone Forward) ended with `status`: the draft session's Observe,
  // then sampling, or verification, and the emission of the tokens.
  void CompleteEntry(Sequence& seq, const BatchEntry& entry_run, int64_t entry,
                     const Status& status);
  // Verifies the drafts of a speculative decode entry, rolls the cache and the
  // draft session back past the rejected ones and emits the accepted tokens
  // and the main model's next one.
  void VerifyAndEmit(Sequence& seq, int64_t entry);
  void Finish(Sequence& seq, FinishReason reason, Status error = {});

  LoadedModel& model_;
  EngineOptions options_;
  int64_t vocab_size_ = 0;

  mutable std::mutex mu_;  // guards waiting_, stop_ and rate_window_
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  bool stop_ = false;
  std::deque<std::pair<double, int64_t>> rate_window_;  // (time, tokens) per step
  // dsv4_tokens_per_second covers the steps of the last this many seconds.
  static constexpr double kRateWindowSeconds = 5.0;
  static double RateClockSeconds();  // steady clock, seconds
  // Written by the engine thread, read by Metrics().
  std::atomic<int64_t> running_count_{0};
  std::atomic<int64_t> kv_used_{0};
  std::atomic<int64_t> prompt_tokens_total_{0};
  std::atomic<int64_t> prompt_tokens_cached_total_{0};
  std::atomic<int64_t> prefix_hits_total_{0};
  uint64_t slot_clock_ = 0;  // Finish counts; a slot's last_used is the count at its last Finish
  std::atomic<int64_t> generated_tokens_total_{0};
  std::atomic<int64_t> finished_total_{0};
  std::atomic<int64_t> cancelled_total_{0};
  std::atomic<int64_t> steps_total_{0};
  std::atomic<int64_t> drafted_total_{0};
  std::atomic<int64_t> accepted_total_{0};

  std::unique_ptr<PromptStateStore> store_;  // kv_cache_dir; thread-safe

  // Engine thread only.
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<std::unique_ptr<Sequence>> running_;
  // Speculation: the draft head (null: off) and the most drafts per round.
  DraftModel* drafter_ = nullptr;
  int64_t max_drafts_ = 0;
  // Adaptive: one controller for the engine. A step's verification cost is
  // that of the whole batch, shared by its sequences, and what it learns
  // (costs, acceptance) carries over from request to request; each step runs
  // one length for every speculating sequence.
  std::unique_ptr<DraftLengthController> controller_;
  std::vector<std::pair<int64_t, int64_t>> step_rounds_;  // (drafts, accepted) this step
  std::vector<float> pi_, residual_;                      // sampling verification scratch
  std::thread thread_;
};

// Plans one step's work, in the order given: every decoding sequence gets one
// token; prefilling sequences get prompt chunks from `prefill_budget` in turn
// (a sequence whose chunk would be 0 waits for the next step). `remaining[i]`
// is the prompt tokens sequence i still has to prefill (0: decoding). Returns
// the tokens each sequence runs this step. Public for tests.
std::vector<int64_t> PlanStep(const std::vector<int64_t>& remaining, int64_t prefill_budget);

// Stop strings over streamed text: Push returns the text that can no longer
// become part of a match; once a stop string is found, `matched()` is set and
// the text before it has been returned. Flush returns what was held back.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  std::string Push(std::string_view text);
  std::string Flush();
  bool matched() const { return matched_ >= 0; }
  const std::string& matched_string() const { return stops_[matched_]; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  int matched_ = -1;
};

}  // namespace dsv4

#endif  // DSV4_ENGINE_ENGINE_H_
