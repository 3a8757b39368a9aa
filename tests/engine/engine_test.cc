// The serving engine (engine/engine.h): step planning, stop strings, and the
// engine loop on stories260K — one request gives exactly what Generate gives,
// concurrent requests (continuous batching, chunked prefill) each give what
// they give alone, a reused slot carries nothing from its previous request
// (every model family), seeds reproduce, cancellation frees the slot, a full queue
// refuses, logprobs are consistent; and the test-only echo model.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "engine/echo_model.h"
#include "engine/engine_options.h"
#include "engine/generate.h"
#include "tokenizer/chat_dsv4.h"

namespace dsv4 {
namespace {

using namespace std::chrono_literals;

const std::string kModel = std::string(DSV4_SOURCE_DIR) + "/models/stories260K/stories260K.bin";
const std::string kV4Tokenizer =
    std::string(DSV4_TEST_DATA_DIR) + "/tokenizer/deepseek_v4_tokenizer.json.gz";

LoadedModel Load() {
  LoadOptions options;
  options.model_path = kModel;
  options.threads = 1;
  auto r = LoadModel(options);
  CHECK(r.ok(), "%s", r.status().ToString().c_str());
  return std::move(r).value();
}

struct Outcome {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  std::string stop_string;
  std::vector<TokenLogprobs> logprobs;
  int64_t completion_tokens = 0;
};

// Collects the events of sequence `index` until it finishes (at most 60 s).
std::vector<Outcome> Collect(RequestHandle& h) {
  std::vector<Outcome> out(h.n_sequences());
  int done = 0;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  SequenceEvent ev;
  while (done < h.n_sequences() && std::chrono::steady_clock::now() < deadline) {
    if (!h.Next(&ev, 100ms)) continue;
    Outcome& o = out[ev.index];
    o.tokens.insert(o.tokens.end(), ev.tokens.begin(), ev.tokens.end());
    o.text += ev.text;
    for (auto& lp : ev.logprobs) o.logprobs.push_back(lp);
    if (ev.finish != FinishReason::kNone) {
      o.finish = ev.finish;
      o.stop_string = ev.stop_string;
      o.completion_tokens = ev.completion_tokens;
      ++done;
    }
  }
  EXPECT_EQ(done, h.n_sequences()) << "timed out";
  return out;
}

SequenceRequest Greedy(const LoadedModel& m, const std::string& prompt, int64_t max_tokens) {
  SequenceRequest r;
  r.prompt = m.tokenizer->Encode(prompt, true);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.0f;
  return r;
}

TEST(PlanStep, DecodesGetOneTokenPrefillsShareTheBudget) {
  EXPECT_EQ(PlanStep({0, 100, 0, 30}, 64), (std::vector<int64_t>{1, 64, 1, 0}));
  EXPECT_EQ(PlanStep({10, 100}, 64), (std::vector<int64_t>{10, 54}));
  EXPECT_EQ(PlanStep({}, 64), (std::vector<int64_t>{}));
  EXPECT_EQ(PlanStep({0, 0}, 0), (std::vector<int64_t>{1, 1}));
}

TEST(StopMatcher, NoStopsPassesThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.Push("abc"), "abc");
  EXPECT_FALSE(m.matched());
}

TEST(StopMatcher, HoldsBackAPossiblePrefix) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.Push("abcE"), "abc");
  EXPECT_EQ(m.Push("N"), "");
  EXPECT_EQ(m.Push("x"), "ENx");
  EXPECT_FALSE(m.matched());
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcher, MatchAcrossPushes) {
  StopMatcher m({"END", "xy"});
  EXPECT_EQ(m.Push("12E"), "12");
  EXPECT_EQ(m.Push("ND and more"), "");
  EXPECT_TRUE(m.matched());
  EXPECT_EQ(m.matched_string(), "END");
  EXPECT_EQ(m.Push("later"), "");
}

TEST(StopMatcher, EarliestMatchWins) {
  StopMatcher m({"bc", "ab"});
  EXPECT_EQ(m.Push("zabc"), "z");
  EXPECT_EQ(m.matched_string(), "ab");
}

TEST(StopMatcher, FlushReleasesHeldText) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.Push("aEN"), "a");
  EXPECT_EQ(m.Flush(), "EN");
}

TEST(Engine, SingleRequestMatchesGenerate) {
  LoadedModel m = Load();
  SequenceRequest req = Greedy(m, "Once upon a time", 40);
  GenerateOptions g;
  g.max_tokens = 40;
  g.sampling.temperature = 0.0f;
  std::vector<int32_t> expected;
  auto stats = Generate(m, req.prompt, g, [&](int32_t id, std::string_view) {
    if (id >= 0) expected.push_back(id);
  });
  ASSERT_TRUE(stats.ok());
  ASSERT_FALSE(expected.empty());

  auto engine = Engine::Start(m, {.max_sequences = 2});
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  auto h = (*engine)->Submit({req});
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  std::vector<Outcome> out = Collect(**h);
  EXPECT_EQ(out[0].tokens, expected);
  EXPECT_EQ(out[0].text, DecodeTokens(*m.tokenizer, expected, req.prompt.back()));
  EXPECT_EQ(out[0].completion_tokens, static_cast<int64_t>(expected.size()));
  EXPECT_EQ(out[0].finish,
            stats->stop_reason == "length" ? FinishReason::kLength : FinishReason::kStop);
}

TEST(Engine, ConcurrentRequestsEachGetTheirSoloResult) {
  LoadedModel m = Load();
  const std::vector<std::string> prompts = {"Once upon a time",
                                            "Lily and Ben",
                                            "The cat",
                                            "One day, a little bird flew over the big tree and",
                                            "Tom had a red ball",
                                            "She was"};
  std::vector<Outcome> solo;
  {
    auto engine = Engine::Start(m, {.max_sequences = 1});
    ASSERT_TRUE(engine.ok());
    for (const auto& p : prompts) {
      auto h = (*engine)->Submit({Greedy(m, p, 30)});
      ASSERT_TRUE(h.ok());
      solo.push_back(Collect(**h)[0]);
    }
  }
  // Three slots for six requests, and prefill chunks of 3 tokens: requests
  // queue, join between steps, and prefill while others decode.
  auto engine = Engine::Start(m, {.max_sequences = 3, .prefill_chunk = 3});
  ASSERT_TRUE(engine.ok());
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const auto& p : prompts) {
    auto h = (*engine)->Submit({Greedy(m, p, 30)});
    ASSERT_TRUE(h.ok());
    handles.push_back(*h);
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    Outcome o = Collect(*handles[i])[0];
    EXPECT_EQ(o.tokens, solo[i].tokens) << prompts[i];
    EXPECT_EQ(o.text, solo[i].text) << prompts[i];
  }
  const EngineMetrics metrics = (*engine)->Metrics();
  EXPECT_EQ(metrics.sequences_finished_total, static_cast<int64_t>(prompts.size()));
  EXPECT_EQ(metrics.running, 0);
  EXPECT_EQ(metrics.waiting, 0);
}

TEST(Engine, SeedsReproduceAndDiffer) {
  LoadedModel m = Load();
  auto engine = Engine::Start(m, {.max_sequences = 4});
  ASSERT_TRUE(engine.ok());
  auto run = [&](uint64_t seed) {
    SequenceRequest r = Greedy(m, "Once upon a time", 40);
    r.sampling.temperature = 1.0f;
    r.sampling.top_k = 0;
    r.sampling.top_p = 1.0f;
    r.sampling.min_p = 0.0f;
    r.sampling.seed = seed;
    r.stop_at_eos = false;
    auto h = (*engine)->Submit({r, r});
    CHECK(h.ok());
    return Collect(**h);
  };
  std::vector<Outcome> a = run(7), b = run(7), c = run(8);
  EXPECT_EQ(a[0].tokens, b[0].tokens);
  EXPECT_EQ(a[0].tokens, a[1].tokens);  // same seed within a request too
  EXPECT_NE(a[0].tokens, c[0].tokens);
}

TEST(Engine, StopStringsCutTheText) {
  LoadedModel m = Load();
  auto engine = Engine::Start(m, {});
  ASSERT_TRUE(engine.ok());
  auto h = (*engine)->Submit({Greedy(m, "Once upon a time", 60)});
  ASSERT_TRUE(h.ok());
  const Outcome full = Collect(**h)[0];
  const size_t cut = full.text.find(' ', 10);
  ASSERT_NE(cut, std::string::npos);
  const std::string stop = full.text.substr(cut, 4);
  SequenceRequest r = Greedy(m, "Once upon a time", 60);
  r.stop = {stop};
  auto h2 = (*engine)->Submit({r});
  ASSERT_TRUE(h2.ok());
  const Outcome o = Collect(**h2)[0];
  EXPECT_EQ(o.finish, FinishReason::kStop);
  EXPECT_EQ(o.stop_string, stop);
  EXPECT_EQ(o.text, full.text.substr(0, full.text.find(stop)));
}

TEST(Engine, LogprobsAreConsistent) {
  LoadedModel m = Load();
  auto engine = Engine::Start(m, {});
  ASSERT_TRUE(engine.ok());
  SequenceRequest r = Greedy(m, "Once upon a time", 10);
  r.top_logprobs = 3;
  auto h = (*engine)->Submit({r});
  ASSERT_TRUE(h.ok());
  const Outcome o = Collect(**h)[0];
  ASSERT_EQ(o.logprobs.size(), o.tokens.size());
  for (size_t i = 0; i < o.tokens.size(); ++i) {
    const TokenLogprobs& lp = o.logprobs[i];
    EXPECT_EQ(lp.chosen.id, o.tokens[i]);
    EXPECT_LE(lp.chosen.logprob, 0.0f);
    ASSERT_EQ(lp.top.size(), 3u);
    EXPECT_EQ(lp.top[0].id, lp.chosen.id);  // greedy picks the most likely
    EXPECT_FLOAT_EQ(lp.top[0].logprob, lp.chosen.logprob);
    EXPECT_GE(lp.top[0].logprob, lp.top[1].logprob);
    EXPECT_GE(lp.top[1].logprob, lp.top[2].logprob);
  }
}

TEST(Engine, RejectsBadSequences) {
  LoadedModel m = Load();
  auto engine = Engine::Start(m, {.ctx_size = 64});
  ASSERT_TRUE(engine.ok());
  SequenceRequest empty;
  EXPECT_EQ((*engine)->Submit({empty}).status().code(), StatusCode::kInvalidArgument);
  SequenceRequest bad_id = Greedy(m, "hi", 5);
  bad_id.prompt.push_back(100000);
  EXPECT_EQ((*engine)->Submit({bad_id}).status().code(), StatusCode::kInvalidArgument);
  SequenceRequest too_long = Greedy(m, "hi", 5);
  too_long.prompt.assign(64, 1);
  EXPECT_EQ((*engine)->Submit({too_long}).status().code(), StatusCode::kInvalidArgument);
  SequenceRequest bad_bias = Greedy(m, "hi", 5);
  bad_bias.sampling.logit_bias = {{100000, 1.0f}};
  const auto refused = (*engine)->Submit({bad_bias});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("logit_bias"), std::string::npos);
  SequenceRequest bad_sampling = Greedy(m, "hi", 5);
  bad_sampling.sampling.top_p = 2.0f;
  EXPECT_EQ((*engine)->Submit({bad_sampling}).status().code(), StatusCode::kInvalidArgument);
  SequenceRequest bad_logprobs = Greedy(m, "hi", 5);
  bad_logprobs.top_logprobs = 21;
  EXPECT_EQ((*engine)->Submit({bad_logprobs}).status().code(), StatusCode::kInvalidArgument);
}

TEST(Engine, ClampsToTheContext) {
  LoadedModel m = Load();
  auto engine = Engine::Start(m, {.ctx_size = 16});
  ASSERT_TRUE(engine.ok());
  SequenceRequest r = Greedy(m, "Once upon a time", 1000);
  r.stop_at_eos = false;
  auto h = (*engine)->Submit({r});
  ASSERT_TRUE(h.ok());
  const Outcome o = Collect(**h)[0];
  EXPECT_EQ(o.finish, FinishReason::kLength);
  EXPECT_EQ(static_cast<int64_t>(r.prompt.size() + o.tokens.size()), 16);
}

TEST(Engine, FullQueueRefusesAndCancelFreesTheSlot) {
  LoadedModel m = Load();
  auto engine = Engine::Start(m, {.max_sequences = 1, .max_queue = 1, .test_step_delay_ms = 20});
  ASSERT_TRUE(engine.ok());
  SequenceRequest r = Greedy(m, "Once upon a time", 400);
  r.stop_at_eos = false;
  auto running = (*engine)->Submit({r});
  ASSERT_TRUE(running.ok());
  auto queued = (*engine)->Submit({r});
  ASSERT_TRUE(queued.ok());
  auto refused = (*engine)->Submit({r});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);

  // Wait for the first token of the running request, then cancel it.
  SequenceEvent ev;
  ASSERT_TRUE((*running)->Next(&ev, 10s));
  (*running)->Cancel();
  // The queued request takes the slot; the cancelled one reports kCancelled.
  FinishReason finish = FinishReason::kNone;
  for (int i = 0; i < 1000 && finish == FinishReason::kNone; ++i) {
    if ((*running)->Next(&ev, 10ms)) finish = ev.finish;
  }
  EXPECT_EQ(finish, FinishReason::kCancelled);
  ASSERT_TRUE((*queued)->Next(&ev, 10s));
  EXPECT_EQ(ev.finish, FinishReason::kNone);
  EngineMetrics metrics = (*engine)->Metrics();
  EXPECT_EQ(metrics.sequences_cancelled_total, 1);
  EXPECT_EQ(metrics.running, 1);
  // Dropping the handle cancels too.
  queued->reset();
  running->reset();
  for (int i = 0; i < 500 && (*engine)->Metrics().running != 0; ++i)
    std::this_thread::sleep_for(10ms);
  metrics = (*engine)->Metrics();
  EXPECT_EQ(metrics.running, 0);
  EXPECT_EQ(metrics.sequences_cancelled_total, 2);
  EXPECT_EQ(metrics.kv_tokens_used, 0);
}

// Wraps a model to watch how the engine calls it: a step is one ForwardBatch
// (Model's default loop runs the entries' Forward inside it); a prompt
// holding `poison` makes Forward fail.
class WatchedModel final : public Model {
 public:
  explicit WatchedModel(std::unique_ptr<Model> inner) : inner_(std::move(inner)) {}
  const ModelInfo& info() const override { return inner_->info(); }
  std::unique_ptr<SequenceCache> NewCache(int64_t n) const override { return inner_->NewCache(n); }
  Status Forward(std::span<const int32_t> tokens, SequenceCache& cache, std::span<float> logits,
                 bool all_logits) override {
    if (!in_batch_) ++direct_calls;
    for (int32_t t : tokens) {
      if (t == poison) return InvalidArgument("poisoned token");
    }
    return inner_->Forward(tokens, cache, logits, all_logits);
  }
  Status ForwardBatch(std::span<const BatchEntry> entries) override {
    ++batch_calls;
    max_entries = std::max<int64_t>(max_entries.load(), static_cast<int64_t>(entries.size()));
    in_batch_ = true;
    const Status st = Model::ForwardBatch(entries);
    in_batch_ = false;
    return st;
  }
  void SetThreads(int n) override { inner_->SetThreads(n); }

  int32_t poison = -1;
  std::atomic<int64_t> batch_calls{0}, max_entries{0}, direct_calls{0};

 private:
  std::unique_ptr<Model> inner_;
  bool in_batch_ = false;
};

TEST(Engine, OneForwardBatchPerStepForAllSequences) {
  LoadedModel m = Load();
  auto* watched = new WatchedModel(std::move(m.model));
  m.model.reset(watched);
  const std::vector<std::string> prompts = {"Once upon a time", "Lily and Ben", "The cat",
                                            "Tom had a red ball"};
  int64_t steps = 0;
  {
    auto engine = Engine::Start(m, {.max_sequences = 4, .prefill_chunk = 4});
    ASSERT_TRUE(engine.ok());
    std::vector<SequenceRequest> reqs;
    for (const auto& p : prompts) reqs.push_back(Greedy(m, p, 20));
    auto h = (*engine)->Submit(std::move(reqs));  // one request, four sequences
    ASSERT_TRUE(h.ok());
    for (const Outcome& o : Collect(**h)) EXPECT_NE(o.finish, FinishReason::kError);
    // The step that sent the last event publishes its count just after.
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while ((*engine)->Metrics().steps_total != watched->batch_calls &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
    }
    steps = (*engine)->Metrics().steps_total;
  }
  EXPECT_EQ(watched->direct_calls, 0);     // every Forward ran inside a batch
  EXPECT_EQ(watched->batch_calls, steps);  // one ForwardBatch per step
  EXPECT_EQ(watched->max_entries, 4);      // all four sequences in one step
}

TEST(Engine, AFailingSequenceInABatchEndsAloneTheOthersGoOn) {
  LoadedModel m = Load();
  const SequenceRequest good = Greedy(m, "Lily and Ben", 20);
  std::vector<Outcome> solo;
  {
    auto engine = Engine::Start(m, {.max_sequences = 1});
    ASSERT_TRUE(engine.ok());
    auto h = (*engine)->Submit({good});
    ASSERT_TRUE(h.ok());
    solo = Collect(**h);
  }
  auto* watched = new WatchedModel(std::move(m.model));
  m.model.reset(watched);
  SequenceRequest bad = Greedy(m, "The cat", 20);
  watched->poison = bad.prompt.back();
  ASSERT_EQ(std::count(good.prompt.begin(), good.prompt.end(), watched->poison), 0);
  auto engine = Engine::Start(m, {.max_sequences = 2});
  ASSERT_TRUE(engine.ok());
  auto h = (*engine)->Submit({bad, good});
  ASSERT_TRUE(h.ok());
  const std::vector<Outcome> out = Collect(**h);
  EXPECT_EQ(out[0].finish, FinishReason::kError);
  EXPECT_EQ(out[1].tokens, solo[0].tokens);
  EXPECT_EQ(out[1].text, solo[0].text);
}

TEST(EchoModel, Replies) {
  const std::string a(dsv4_tokens::kAssistant), u(dsv4_tokens::kUser);
  EXPECT_EQ(EchoModelReply(u + "hello" + a + "</think>"), "Echo: hello");
  EXPECT_EQ(EchoModelReply(u + "hello" + a + "<think>"), "Thinking about it.</think>Echo: hello");
  EXPECT_EQ(EchoModelReply(u + "<tool_result>1</tool_result>\n\n<tool_result>2</tool_result>" + a +
                           "</think>"),
            "Tool results: 1; 2");
  EXPECT_EQ(EchoModelReply(u + "CALL f {\"x\": \"a\", \"n\": 2}" + a + "</think>"),
            "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
            "<｜DSML｜parameter name=\"x\" string=\"true\">a</｜DSML｜parameter>\n"
            "<｜DSML｜parameter name=\"n\" string=\"false\">2</｜DSML｜parameter>\n"
            "</｜DSML｜invoke>\n</｜DSML｜tool_calls>");
}

TEST(EchoModel, GeneratesTheReplyThroughTheEngine) {
  auto m = LoadEchoModel(kV4Tokenizer);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto engine = Engine::Start(*m, {.max_sequences = 2});
  ASSERT_TRUE(engine.ok());
  auto prompt = EncodeChatDsv4Json(R"([{"role": "user", "content": "héllo wörld"}])",
                                   {.thinking_mode = Dsv4ThinkingMode::kChat});
  ASSERT_TRUE(prompt.ok());
  SequenceRequest r;
  r.prompt = m->tokenizer->Encode(*prompt, false);
  r.sampling.temperature = 1.0f;  // the script wins under sampling too
  r.max_tokens = 100;
  auto h = (*engine)->Submit({r});
  ASSERT_TRUE(h.ok());
  const Outcome o = Collect(**h)[0];
  EXPECT_EQ(o.text, "Echo: héllo wörld");
  EXPECT_EQ(o.finish, FinishReason::kStop);
}

TEST(EchoModel, NeedsAV4Tokenizer) {
  EXPECT_FALSE(LoadEchoModel("").ok());
  auto r = LoadEchoModel(std::string(DSV4_SOURCE_DIR) + "/models/stories260K/tok512.bin");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

// A constraint for the engine tests: only tokens with an even id, EOS refused,
// done after `n` tokens; Close says how many it saw.
class EvenTokens final : public SequenceConstraint {
 public:
  explicit EvenTokens(int n, int32_t eos) : n_(n), eos_(eos) {}
  bool Allows(int32_t token) const override { return token != eos_ && token % 2 == 0; }
  void Accept(int32_t token) override {
    EXPECT_TRUE(Allows(token));
    ++seen_;
  }
  bool done() const override { return seen_ >= n_; }
  bool stop_strings_apply() const override { return seen_ < 2; }
  std::string Close() override { return "<closed after " + std::to_string(seen_) + ">"; }

 private:
  int n_, seen_ = 0;
  int32_t eos_;
};

TEST(Engine, ConstraintRestrictsTokensEndsAndCloses) {
  LoadedModel m = Load();
  auto engine = Engine::Start(m, EngineOptions{});
  ASSERT_TRUE(engine.ok());
  const int32_t eos = m.model->info().eos_id;
  for (float temperature : {0.0f, 1.0f}) {
    SequenceRequest r = Greedy(m, "Once upon a time", 100);
    r.sampling.temperature = temperature;
    r.sampling.seed = 7;
    r.constraint = [eos] { return std::make_unique<EvenTokens>(12, eos); };
    auto h = (*engine)->Submit({r, r});  // each sequence gets its own state
    ASSERT_TRUE(h.ok());
    for (const Outcome& o : Collect(**h)) {
      EXPECT_EQ(o.finish, FinishReason::kStop);
      ASSERT_EQ(o.tokens.size(), 12u);
      for (int32_t t : o.tokens) EXPECT_EQ(t % 2, 0) << t;
      EXPECT_TRUE(o.text.ends_with("<closed after 12>")) << o.text;
    }
  }
  // Cut by max_tokens: still closed, reported as kLength.
  SequenceRequest r = Greedy(m, "Once upon a time", 5);
  r.constraint = [eos] { return std::make_unique<EvenTokens>(12, eos); };
  auto h = (*engine)->Submit({r});
  ASSERT_TRUE(h.ok());
  const Outcome o = Collect(**h)[0];
  EXPECT_EQ(o.finish, FinishReason::kLength);
  EXPECT_EQ(o.tokens.size(), 5u);
  EXPECT_TRUE(o.text.ends_with("<closed after 5>")) << o.text;
}

TEST(Engine, ConstraintThatAllowsNothingEndsTheSequence) {
  class Nothing final : public SequenceConstraint {
   public:
    bool Allows(int32_t) const override { return false; }
    void Accept(int32_t) override { ADD_FAILURE() << "nothing may be accepted"; }
    bool done() const override { return false; }
    std::string Close() override { return "[closed]"; }
  };
  LoadedModel m = Load();
  auto engine = Engine::Start(m, EngineOptions{});
  ASSERT_TRUE(engine.ok());
  SequenceRequest r = Greedy(m, "Once upon a time", 50);
  r.constraint = [] { return std::make_unique<Nothing>(); };
  auto h = (*engine)->Submit({r});
  ASSERT_TRUE(h.ok());
  const Outcome o = Collect(**h)[0];
  EXPECT_EQ(o.finish, FinishReason::kStop);
  EXPECT_TRUE(o.tokens.empty());
  EXPECT_EQ(o.text, "[closed]");
}

// A slot's cache is reused across requests (Truncate(0) in Admit): request B
// must give exactly what it gives on a fresh engine, whatever ran in the slot
// before it — the same tokens and the same logprobs (log softmax of the raw
// logits, the top 20 of every step), bit for bit. Checked for every model
// family through the serving path `dsv4 serve` uses: the seed profiles (P-V4-7B
// has the SemanticKVPruner, whose efficiency factor adapts over a long request;
// P-V4 also with --reweight-router, whose selection bias adapts), DeepSeek-V4
// (sliding window and compressed caches) and Llama (stories260K).
struct ReuseCase {
  std::string name;
  std::string path;  // model file or directory
  int64_t ctx = 0;   // slot size
  int64_t a_prompt = 0, a_gen = 0, b_prompt = 0, b_gen = 0;
  EngineRuntimeOptions runtime;
  int n_b = 3, rounds = 3;  // B requests, and A-then-B rounds for each
};
void PrintTo(const ReuseCase& c, std::ostream* os) { *os << c.name; }

std::vector<int32_t> RandomIds(std::mt19937& rng, int64_t n, int32_t vocab) {
  std::uniform_int_distribution<int32_t> d(3, vocab - 1);  // no BOS/EOS specials
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) id = d(rng);
  return ids;
}

SequenceRequest IdsRequest(std::vector<int32_t> prompt, int64_t gen) {
  SequenceRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = gen;
  r.sampling.temperature = 0.0f;
  r.stop_at_eos = false;
  r.top_logprobs = 20;
  return r;
}

void ExpectSameOutcome(const Outcome& got, const Outcome& want, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(got.finish, want.finish);
  ASSERT_EQ(got.tokens, want.tokens);
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
  for (size_t i = 0; i < got.logprobs.size(); ++i) {
    ASSERT_EQ(got.logprobs[i].top.size(), want.logprobs[i].top.size());
    EXPECT_EQ(got.logprobs[i].chosen.logprob, want.logprobs[i].chosen.logprob) << "token " << i;
    for (size_t j = 0; j < got.logprobs[i].top.size(); ++j) {
      EXPECT_EQ(got.logprobs[i].top[j].id, want.logprobs[i].top[j].id) << "token " << i;
      EXPECT_EQ(got.logprobs[i].top[j].logprob, want.logprobs[i].top[j].logprob)
          << "token " << i << " rank " << j;
    }
  }
}

class EngineReuse : public ::testing::TestWithParam<ReuseCase> {};

TEST_P(EngineReuse, ARequestAfterOthersGivesItsSoloResult) {
  const ReuseCase& c = GetParam();
  LoadOptions lo;
  lo.model_path = c.path;
  lo.threads = 1;
  auto loaded = LoadModel(lo);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  LoadedModel& m = *loaded;
  Status binding = ApplyEngineOptions(*m.model, c.runtime);
  ASSERT_TRUE(binding.ok()) << binding.ToString();
  const int32_t vocab = static_cast<int32_t>(m.model->info().vocab_size);
  std::mt19937 rng(20240917);
  std::vector<SequenceRequest> bs;
  for (int i = 0; i < c.n_b; ++i)
    bs.push_back(IdsRequest(RandomIds(rng, c.b_prompt, vocab), c.b_gen));
  std::vector<Outcome> solo;
  for (const SequenceRequest& b : bs) {
    auto engine = Engine::Start(m, {.max_sequences = 1, .ctx_size = c.ctx});
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    auto h = (*engine)->Submit({b});
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    solo.push_back(Collect(**h)[0]);
    ASSERT_EQ(solo.back().tokens.size(), static_cast<size_t>(c.b_gen));
  }
  // One slot: every request reuses the previous one's cache. Different A's
  // (long random prompts, then generation) before each B.
  auto engine = Engine::Start(m, {.max_sequences = 1, .ctx_size = c.ctx});
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  for (int round = 0; round < c.rounds; ++round) {
    for (size_t i = 0; i < bs.size(); ++i) {
      const int64_t a_len = c.a_prompt - (3 * round) % 10;
      auto ha = (*engine)->Submit({IdsRequest(RandomIds(rng, a_len, vocab), c.a_gen)});
      ASSERT_TRUE(ha.ok()) << ha.status().ToString();
      Collect(**ha);
      auto hb = (*engine)->Submit({bs[i]});
      ASSERT_TRUE(hb.ok()) << hb.status().ToString();
      ExpectSameOutcome(
          Collect(**hb)[0], solo[i],
          c.name + ": B" + std::to_string(i) + " after A of round " + std::to_string(round));
    }
  }
}

std::vector<ReuseCase> ReuseCases() {
  const std::string seed = std::string(DSV4_TEST_DATA_DIR) + "/seed/";
  const std::string v4 = std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v4/";
  EngineRuntimeOptions reweight;
  reweight.reweight_router = true;
  return {
      {"P_V4", seed + "P-V4", 64, 40, 20, 12, 16, {}},
      {"P_V4_reweight", seed + "P-V4", 64, 40, 20, 12, 16, reweight},
      {"P_CED", seed + "P-CED", 64, 40, 20, 12, 16, {}},
      {"P_V4_7B", seed + "P-V4-7B", 64, 40, 20, 12, 24, {}, 30, 6},
      {"DeepSeekV4_hca128", v4 + "long_hca128_bf16", 512, 300, 20, 140, 10, {}},
      {"DeepSeekV4_mixed", v4 + "mixed_mtp_bf16", 256, 60, 20, 20, 10, {}},
      {"Llama_stories260K", kModel, 256, 100, 50, 20, 30, {}},
  };
}

INSTANTIATE_TEST_SUITE_P(AllFamilies, EngineReuse, ::testing::ValuesIn(ReuseCases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace dsv4
