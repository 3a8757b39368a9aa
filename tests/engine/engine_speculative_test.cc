// Speculative decoding inside the serving engine (EngineOptions::speculative):
// on the tiny DeepSeek-V4 checkpoints with a DSpark module and with a NextN
// MTP layer, and DeepSeek-V4.1's with its DSpark stages, greedy outputs of concurrent sequences
// (different prompts, joining at different steps, prefilling while others decode) are token for
// token those of the engine without speculation — with the real drafts and
// with drafts edited to be right, partly right and wrong; sampling
// reproduces from its seed and follows the plain sampling distribution;
// sequences that cannot speculate (constraint, penalties, logprobs) keep
// their output in a speculating batch; a failing batch still ends only its
// failing sequence; and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>

#include "../model/deepseek_v4_test_util.h"
#include "engine/engine.h"
#include "two_token_distribution.h"

namespace dsv4 {
namespace {

using namespace std::chrono_literals;
namespace dt = deepseek_v4::testing;

struct Outcome {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
  std::vector<TokenLogprobs> logprobs;
};

std::vector<Outcome> Collect(RequestHandle& h) {
  std::vector<Outcome> out(h.n_sequences());
  int done = 0;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  SequenceEvent ev;
  while (done < h.n_sequences() && std::chrono::steady_clock::now() < deadline) {
    if (!h.Next(&ev, 100ms)) continue;
    Outcome& o = out[ev.index];
    o.tokens.insert(o.tokens.end(), ev.tokens.begin(), ev.tokens.end());
    for (auto& lp : ev.logprobs) o.logprobs.push_back(lp);
    if (ev.finish != FinishReason::kNone) {
      EXPECT_TRUE(ev.error.ok()) << ev.error.ToString();
      o.finish = ev.finish;
      ++done;
    }
  }
  EXPECT_EQ(done, h.n_sequences()) << "timed out";
  return out;
}

// `name`: a checkpoint directory under tests/data/deepseek_v4, or a path
// relative to it (V4.1's, loaded with the owner's index keys: there a
// multi-token verification equals its single-token steps).
LoadedModel LoadV4(const std::string& name) {
  LoadOptions o;
  o.model_path = dt::DataDir() + "/" + name;
  o.threads = 1;
  o.v41_owner_index_keys = name.find("deepseek_v41") != std::string::npos;
  auto r = LoadModel(o);
  CHECK(r.ok(), "%s", r.status().ToString().c_str());
  return std::move(r).value();
}

SequenceRequest GreedyIds(std::vector<int32_t> prompt, int64_t max_tokens) {
  SequenceRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.0f;
  r.stop_at_eos = false;
  return r;
}

// Prompts of different lengths (random ids past the specials).
std::vector<std::vector<int32_t>> Prompts(int32_t vocab, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(2, std::min(vocab, 250) - 1);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p = {0};
    for (int j = 0; j < 3 + 4 * i; ++j) p.push_back(id(rng));
    out.push_back(std::move(p));
  }
  return out;
}

// Runs the requests on an engine with `options`: two slots, so later requests
// wait and join when a slot frees, and small prefill chunks, so prompts
// prefill over several steps while other sequences decode.
std::vector<Outcome> RunAll(LoadedModel& m, const std::vector<SequenceRequest>& requests,
                            EngineOptions options, EngineMetrics* metrics = nullptr) {
  options.max_sequences = 2;
  options.prefill_chunk = 5;
  options.ctx_size = std::min<int64_t>(256, m.model->info().max_context);
  auto engine = Engine::Start(m, options);
  CHECK(engine.ok(), "%s", engine.status().ToString().c_str());
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const SequenceRequest& r : requests) {
    auto h = (*engine)->Submit({r});
    CHECK(h.ok(), "%s", h.status().ToString().c_str());
    handles.push_back(*h);
  }
  std::vector<Outcome> out;
  for (auto& h : handles) out.push_back(Collect(*h)[0]);
  if (metrics != nullptr) *metrics = (*engine)->Metrics();
  return out;
}

struct GreedyCase {
  std::string name;  // checkpoint directory (LoadV4)
  std::string kind;  // its draft head
};
void PrintTo(const GreedyCase& c, std::ostream* os) { *os << c.name; }

class EngineSpeculativeGreedy : public ::testing::TestWithParam<GreedyCase> {};

// With the real drafts, fixed and adaptive lengths: the same tokens as
// without speculation, and drafts were verified.
TEST_P(EngineSpeculativeGreedy, RealDraftsGiveThePlainOutput) {
  LoadedModel m = LoadV4(GetParam().name);
  ASSERT_NE(m.model->draft_model(), nullptr);
  EXPECT_EQ(m.model->draft_model()->draft_kind(), GetParam().kind);
  std::vector<SequenceRequest> requests;
  for (auto& p : Prompts(static_cast<int32_t>(m.model->info().vocab_size), 5, 11)) {
    requests.push_back(GreedyIds(std::move(p), 24));
  }
  const std::vector<Outcome> plain = RunAll(m, requests, {});
  for (const char* spec : {"1", "3", "auto"}) {
    EngineOptions o;
    o.speculative = *ParseSpeculative(spec);
    EngineMetrics metrics;
    const std::vector<Outcome> got = RunAll(m, requests, o, &metrics);
    for (size_t i = 0; i < requests.size(); ++i) {
      EXPECT_EQ(got[i].tokens, plain[i].tokens) << "--speculative " << spec << " request " << i;
      EXPECT_EQ(got[i].finish, plain[i].finish);
    }
    EXPECT_GT(metrics.speculative_drafted_total, 0) << spec;
    EXPECT_LE(metrics.speculative_accepted_total, metrics.speculative_drafted_total);
    EXPECT_EQ(metrics.generated_tokens_total, 5 * 24);
    std::printf("[%s --speculative %s] drafted %lld, accepted %lld, %lld steps\n",
                GetParam().name.c_str(), spec,
                static_cast<long long>(metrics.speculative_drafted_total),
                static_cast<long long>(metrics.speculative_accepted_total),
                static_cast<long long>(metrics.steps_total));
  }
}

// Drafts edited (EngineOptions::test_edit_drafts) to the plain continuation,
// with a wrong one planted every few steps: whole runs accepted, runs cut
// short, and the output unchanged; fewer steps than tokens.
TEST_P(EngineSpeculativeGreedy, AcceptedAndRejectedDraftsGiveThePlainOutput) {
  LoadedModel m = LoadV4(GetParam().name);
  const int32_t V = static_cast<int32_t>(m.model->info().vocab_size);
  std::vector<SequenceRequest> requests;
  for (auto& p : Prompts(V, 5, 23)) requests.push_back(GreedyIds(std::move(p), 30));
  EngineMetrics plain_metrics;
  const std::vector<Outcome> plain = RunAll(m, requests, {}, &plain_metrics);
  std::map<std::vector<int32_t>, std::vector<int32_t>> continuation;
  for (size_t i = 0; i < requests.size(); ++i) {
    continuation[requests[i].prompt] = plain[i].tokens;
  }
  for (int wrong_every : {0, 3}) {
    EngineOptions o;
    o.speculative = *ParseSpeculative("3");
    int64_t rounds = 0;
    o.test_edit_drafts = [&](std::span<const int32_t> prompt, int64_t position,
                             std::span<int32_t> drafts) {
      const std::vector<int32_t>& want =
          continuation.at(std::vector<int32_t>(prompt.begin(), prompt.end()));
      for (size_t i = 0; i < drafts.size(); ++i) {
        const int64_t g = position + static_cast<int64_t>(i) - static_cast<int64_t>(prompt.size());
        if (g >= 0 && g < static_cast<int64_t>(want.size())) drafts[i] = want[g];
      }
      if (wrong_every > 0 && rounds % wrong_every == 0) {
        int32_t& d = drafts[(rounds / wrong_every) % drafts.size()];
        d = (d + 1) % V;
      }
      ++rounds;
    };
    EngineMetrics metrics;
    const std::vector<Outcome> got = RunAll(m, requests, o, &metrics);
    for (size_t i = 0; i < requests.size(); ++i) {
      EXPECT_EQ(got[i].tokens, plain[i].tokens)
          << "wrong every " << wrong_every << " request " << i;
    }
    EXPECT_GT(metrics.speculative_accepted_total, 0);
    if (wrong_every == 0) {
      EXPECT_EQ(metrics.speculative_accepted_total, metrics.speculative_drafted_total);
    } else {
      EXPECT_LT(metrics.speculative_accepted_total, metrics.speculative_drafted_total);
    }
    EXPECT_LT(metrics.steps_total, plain_metrics.steps_total) << "wrong every " << wrong_every;
  }
}

// Each sequence's draft session observes its own entry of the batch: the
// drafts of every round are those the sequence gets when it runs alone (one
// slot: every step a lone Forward), prefill chunks and decode steps alike.
TEST_P(EngineSpeculativeGreedy, BatchedDraftsEqualSoloDrafts) {
  LoadedModel m = LoadV4(GetParam().name);
  std::vector<SequenceRequest> requests;
  for (auto& p : Prompts(static_cast<int32_t>(m.model->info().vocab_size), 5, 29)) {
    requests.push_back(GreedyIds(std::move(p), 20));
  }
  using Key = std::pair<std::vector<int32_t>, int64_t>;  // (prompt, position)
  const auto drafts_of = [&](int max_sequences) {
    std::map<Key, std::vector<int32_t>> seen;
    EngineOptions o;
    o.speculative = *ParseSpeculative("3");
    o.test_edit_drafts = [&](std::span<const int32_t> prompt, int64_t position,
                             std::span<int32_t> drafts) {
      seen[{std::vector<int32_t>(prompt.begin(), prompt.end()), position}] =
          std::vector<int32_t>(drafts.begin(), drafts.end());
    };
    if (max_sequences == 1) {
      o.max_sequences = 1;
      o.ctx_size = std::min<int64_t>(256, m.model->info().max_context);
      auto engine = Engine::Start(m, o);
      CHECK(engine.ok(), "%s", engine.status().ToString().c_str());
      for (const SequenceRequest& r : requests) Collect(**(*engine)->Submit({r}));
    } else {
      RunAll(m, requests, o);
    }
    return seen;
  };
  const auto solo = drafts_of(1), batched = drafts_of(2);
  EXPECT_GE(solo.size(), requests.size() * 5);
  EXPECT_EQ(batched, solo);
}

INSTANTIATE_TEST_SUITE_P(DraftHeads, EngineSpeculativeGreedy,
                         ::testing::Values(GreedyCase{"dspark_mixed_bf16", "dspark"},
                                           GreedyCase{"mixed_mtp_bf16", "mtp"},
                                           GreedyCase{"../deepseek_v41/dspark_bf16", "dspark"}),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           if (n.rfind("../", 0) == 0) n = n.substr(n.rfind('/') + 1) + "_v41";
                           return n;
                         });

// A constraint for the mixed batch: only even ids, done after `n` tokens.
class EvenTokens final : public SequenceConstraint {
 public:
  explicit EvenTokens(int n) : n_(n) {}
  bool Allows(int32_t token) const override { return token % 2 == 0 && token != 1; }
  void Accept(int32_t) override { ++seen_; }
  bool done() const override { return seen_ >= n_; }
  std::string Close() override { return ""; }

 private:
  int n_, seen_ = 0;
};

// Sequences that cannot speculate (a constraint, penalties, logprobs) run in
// the same batches as speculating ones and give what they give without
// speculation; the speculating ones too.
TEST(EngineSpeculative, NonSpeculatingSequencesInASpeculatingBatchKeepTheirOutput) {
  LoadedModel m = LoadV4("dspark_mixed_bf16");
  const auto prompts = Prompts(static_cast<int32_t>(m.model->info().vocab_size), 5, 37);
  std::vector<SequenceRequest> requests;
  SequenceRequest constrained = GreedyIds(prompts[0], 12);
  constrained.constraint = [] { return std::make_unique<EvenTokens>(10); };
  SequenceRequest penalised = GreedyIds(prompts[1], 20);
  penalised.sampling.repeat_penalty = 1.3f;
  SequenceRequest logprobs = GreedyIds(prompts[2], 20);
  logprobs.top_logprobs = 3;
  SequenceRequest sampled_penalised = GreedyIds(prompts[3], 20);
  sampled_penalised.sampling = {.temperature = 0.9f, .frequency_penalty = 0.5f, .seed = 5};
  requests = {GreedyIds(prompts[4], 20), constrained, penalised, logprobs, sampled_penalised,
              GreedyIds(prompts[0], 20)};
  const std::vector<Outcome> plain = RunAll(m, requests, {});
  EngineOptions o;
  o.speculative = *ParseSpeculative("2");
  EngineMetrics metrics;
  const std::vector<Outcome> got = RunAll(m, requests, o, &metrics);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(got[i].tokens, plain[i].tokens) << "request " << i;
    EXPECT_EQ(got[i].finish, plain[i].finish) << "request " << i;
  }
  ASSERT_EQ(got[1].tokens.size(), 10u);
  for (int32_t t : got[1].tokens) EXPECT_EQ(t % 2, 0);
  ASSERT_EQ(got[3].logprobs.size(), plain[3].logprobs.size());
  for (size_t i = 0; i < got[3].logprobs.size(); ++i) {
    EXPECT_EQ(got[3].logprobs[i].chosen.logprob, plain[3].logprobs[i].chosen.logprob);
  }
  EXPECT_GT(metrics.speculative_drafted_total, 0);
}

// Sampling with speculation: a seed reproduces its tokens, other seeds differ.
TEST(EngineSpeculative, SampledSequencesReproduceFromTheirSeed) {
  LoadedModel m = LoadV4("dspark_mixed_bf16");
  const auto prompts = Prompts(static_cast<int32_t>(m.model->info().vocab_size), 4, 41);
  const auto run = [&](uint64_t seed) {
    std::vector<SequenceRequest> requests;
    for (size_t i = 0; i < prompts.size(); ++i) {
      SequenceRequest r = GreedyIds(prompts[i], 25);
      r.sampling = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f};
      r.sampling.seed = seed + i;
      requests.push_back(r);
    }
    EngineOptions o;
    o.speculative = *ParseSpeculative("3");
    EngineMetrics metrics;
    std::vector<Outcome> out = RunAll(m, requests, o, &metrics);
    EXPECT_GT(metrics.speculative_drafted_total, 0);
    return out;
  };
  const std::vector<Outcome> a = run(100), b = run(100), c = run(200);
  int differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << i;
    EXPECT_EQ(a[i].tokens.size(), 25u);
    differ += a[i].tokens != c[i].tokens;
  }
  EXPECT_GT(differ, 0);
}

// Sampling through the engine with DSpark drafts is lossless: the first two
// tokens after a prompt follow the distribution plain sampling draws from
// (computed exactly from the main model's logits), by a chi-square test.
TEST(EngineSpeculative, SamplingFollowsThePlainSamplingDistribution) {
  LoadedModel m = LoadV4("dspark_swa_bf16");
  Model& model = *m.model;
  const std::vector<int32_t> prompt = {0, 11, 42, 7, 99};
  const SamplingParams sp{.temperature = 1.3f, .top_k = 3, .top_p = 1.0f, .min_p = 0.0f};
  // Exact: P(t0, t1) = π(t0 | prompt) · π(t1 | prompt, t0) under the sampler chain.
  const std::map<std::pair<int32_t, int32_t>, double> exact =
      testing::TwoTokenDistribution(model, prompt, sp);
  ASSERT_LE(exact.size(), 9u);
  EngineOptions o;
  o.max_sequences = 8;
  o.ctx_size = 64;
  o.speculative = *ParseSpeculative("2");
  auto engine = Engine::Start(m, o);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  std::map<std::pair<int32_t, int32_t>, int64_t> seen;
  const int n = 4000, per_request = 8;
  for (int i = 0; i < n; i += per_request) {
    std::vector<SequenceRequest> requests;
    for (int j = 0; j < per_request; ++j) {
      // Three tokens: the prefill's, the first round's verified draft (or
      // its residual draw) and the round's next token.
      SequenceRequest r = GreedyIds(prompt, 3);
      r.sampling = sp;
      r.sampling.seed = 1000 + i + j;
      requests.push_back(r);
    }
    auto h = (*engine)->Submit(std::move(requests));
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    for (const Outcome& out : Collect(**h)) {
      ASSERT_EQ(out.tokens.size(), 3u);
      ++seen[{out.tokens[0], out.tokens[1]}];
    }
  }
  double chi2 = 0.0;
  for (const auto& [cell, p] : exact) {
    const double expected = p * n, got = static_cast<double>(seen[cell]);
    chi2 += (got - expected) * (got - expected) / expected;
  }
  for (const auto& [cell, count] : seen) EXPECT_TRUE(exact.count(cell)) << cell.first;
  const EngineMetrics metrics = (*engine)->Metrics();
  std::printf(
      "[engine dspark sampling] chi2 %.2f over %zu cells, %d samples, %lld of %lld "
      "drafts accepted\n",
      chi2, exact.size(), n, static_cast<long long>(metrics.speculative_accepted_total),
      static_cast<long long>(metrics.speculative_drafted_total));
  // df ≤ 8: 30 is exceeded by chance with probability < 3e-4.
  EXPECT_LT(chi2, 30.0);
  EXPECT_EQ(metrics.speculative_drafted_total, n);  // one draft per sequence
}

// A model that refuses any batch or Forward with a run of 4 or more tokens
// holding `poison` (a prefill chunk, never a decode run of up to 3), and
// otherwise passes everything (ForwardBatch too, so that the draft head sees
// every entry's rows) to the real one.
class PoisonedModel final : public Model {
 public:
  explicit PoisonedModel(std::unique_ptr<Model> inner) : inner_(std::move(inner)) {}
  const ModelInfo& info() const override { return inner_->info(); }
  std::unique_ptr<SequenceCache> NewCache(int64_t n) const override { return inner_->NewCache(n); }
  Status Forward(std::span<const int32_t> tokens, SequenceCache& cache, std::span<float> logits,
                 bool all_logits) override {
    if (Poisoned(tokens)) return InvalidArgument("poisoned");
    return inner_->Forward(tokens, cache, logits, all_logits);
  }
  Status ForwardBatch(std::span<const BatchEntry> entries) override {
    for (const BatchEntry& e : entries) {
      if (Poisoned(e.tokens)) {
        ++failed_batches;
        return InvalidArgument("poisoned batch");
      }
    }
    return inner_->ForwardBatch(entries);
  }
  void SetThreads(int n) override { inner_->SetThreads(n); }
  DraftModel* draft_model() override { return inner_->draft_model(); }

  int32_t poison = -1;
  std::atomic<int64_t> failed_batches{0};

 private:
  bool Poisoned(std::span<const int32_t> tokens) const {
    return tokens.size() >= 4 && std::count(tokens.begin(), tokens.end(), poison) > 0;
  }
  std::unique_ptr<Model> inner_;
};

// A batch that fails while speculating sequences decode: every cache rolls
// back, the entries rerun one by one (each draft session observing its own
// Forward), only the poisoned sequence ends, the others keep their output.
TEST(EngineSpeculative, AFailingBatchEndsOnlyItsSequence) {
  LoadedModel m = LoadV4("mixed_mtp_bf16");
  const auto prompts = Prompts(static_cast<int32_t>(m.model->info().vocab_size), 3, 53);
  std::vector<SequenceRequest> requests = {GreedyIds(prompts[0], 30), GreedyIds(prompts[1], 30)};
  const std::vector<Outcome> plain = RunAll(m, requests, {});
  auto* poisoned = new PoisonedModel(std::move(m.model));
  m.model.reset(poisoned);
  // A long prompt with the poison in its middle: it prefills in chunks of 6
  // over several steps while the good sequences decode (at most 3 tokens a
  // step each), and the chunk with the poison fails.
  SequenceRequest bad = GreedyIds(prompts[2], 10);
  for (int i = 0; i < 4; ++i) {
    bad.prompt.insert(bad.prompt.end(), prompts[2].begin() + 1, prompts[2].end());
  }
  poisoned->poison = 255;  // outside the prompts' ids
  bad.prompt[bad.prompt.size() / 2] = poisoned->poison;
  EngineOptions o;
  o.max_sequences = 3;
  o.prefill_chunk = 6;
  o.ctx_size = 256;
  o.speculative = *ParseSpeculative("2");
  auto engine = Engine::Start(m, o);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  auto h = (*engine)->Submit({requests[0], requests[1], bad});
  ASSERT_TRUE(h.ok());
  std::vector<Outcome> out(3);
  int done = 0;
  SequenceEvent ev;
  Status bad_error;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (done < 3 && std::chrono::steady_clock::now() < deadline) {
    if (!(*h)->Next(&ev, 100ms)) continue;
    out[ev.index].tokens.insert(out[ev.index].tokens.end(), ev.tokens.begin(), ev.tokens.end());
    if (ev.finish != FinishReason::kNone) {
      out[ev.index].finish = ev.finish;
      if (ev.index == 2) bad_error = ev.error;
      ++done;
    }
  }
  ASSERT_EQ(done, 3);
  EXPECT_EQ(out[2].finish, FinishReason::kError);
  EXPECT_NE(bad_error.message().find("poisoned"), std::string::npos) << bad_error.ToString();
  EXPECT_GE(poisoned->failed_batches, 1);
  EXPECT_EQ(out[0].tokens, plain[0].tokens);
  EXPECT_EQ(out[1].tokens, plain[1].tokens);
  EXPECT_GT((*engine)->Metrics().speculative_drafted_total, 0);
}

TEST(EngineSpeculativeBad, NeedsADraftHead) {
  LoadOptions lo;
  lo.model_path = "stories260K";  // bundled, by name
  auto llama = LoadModel(lo);
  ASSERT_TRUE(llama.ok()) << llama.status().ToString();
  EngineOptions o;
  o.speculative = *ParseSpeculative("2");
  auto engine = Engine::Start(*llama, o);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(engine.status().message().find("needs a model with a draft head"), std::string::npos)
      << engine.status().ToString();
  EXPECT_EQ(engine.status().hint(), "run without --speculative");
  LoadedModel no_mtp = LoadV4("swa_bf16");
  engine = Engine::Start(no_mtp, o);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("swa_bf16: speculative decoding needs"),
            std::string::npos)
      << engine.status().ToString();
  // Off (the default, or 0) needs nothing.
  EXPECT_TRUE(Engine::Start(no_mtp, EngineOptions{}).ok());
  o.speculative = *ParseSpeculative("0");
  EXPECT_TRUE(Engine::Start(no_mtp, o).ok());
  o.speculative.draft_tokens = -1;
  engine = Engine::Start(no_mtp, o);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("draft length -1 is negative"), std::string::npos);
}

TEST(EngineSpeculativeBad, ParseSpeculativeRejectsOtherText) {
  for (const char* bad : {"x", "-1", "2x", "", "65", "Auto"}) {
    auto r = ParseSpeculative(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("is not a draft count or auto"), std::string::npos);
  }
  EXPECT_EQ(ParseSpeculative("auto")->adaptive, true);
  EXPECT_EQ(ParseSpeculative("4")->draft_tokens, 4);
}

}  // namespace
}  // namespace dsv4
