// MTP self-speculative decoding (engine/speculative.h): greedy output with
// speculation is identical to greedy output without it — with the real MTP
// drafts, with drafts edited so that whole rounds are accepted, partly
// accepted or rejected, with an end-of-sequence token inside an accepted
// run, and at the context limit — and the errors.
#include <gtest/gtest.h>

#include "../common/status_matchers.h"

#include <cstdio>
#include <map>

#include "../model/deepseek_v4_test_util.h"
#include "engine/generate.h"
#include "engine/speculative.h"
#include "model/deepseek_v4/model.h"
#include "two_token_distribution.h"

namespace dsv4 {
namespace {

using deepseek_v4::DeepSeekV4Config;
using deepseek_v4::DeepSeekV4Model;
namespace dt = deepseek_v4::testing;

struct Output {
  std::vector<int32_t> tokens;
  std::string stop_reason;
  SpeculativeStats spec;
};

Output Plain(LoadedModel& m, const std::vector<int32_t>& prompt, int64_t max_tokens,
             bool stop_at_eos = true) {
  GenerateOptions g;
  g.max_tokens = max_tokens;
  g.sampling.temperature = 0.0f;
  g.stop_at_eos = stop_at_eos;
  g.prefill_chunk = 7;
  Output r;
  auto st = Generate(m, prompt, g, [&](int32_t id, std::string_view) {
    if (id >= 0) r.tokens.push_back(id);
  });
  EXPECT_TRUE(st.ok()) << st.status().ToString();
  if (st.ok()) r.stop_reason = st->stop_reason;
  return r;
}

Output Speculative(LoadedModel& m, const std::vector<int32_t>& prompt, int64_t max_tokens,
                   int64_t k, const SpeculativeOptions& base = {}) {
  SpeculativeOptions o = base;
  o.draft_tokens = k;
  o.max_tokens = max_tokens;
  o.prefill_chunk = 5;
  Output r;
  auto st = GenerateSpeculative(m, prompt, o, [&](int32_t id, std::string_view) {
    if (id >= 0) r.tokens.push_back(id);
  });
  EXPECT_TRUE(st.ok()) << st.status().ToString();
  if (st.ok()) {
    r.stop_reason = st->stop_reason;
    r.spec = *st;
  }
  return r;
}

LoadOptions ModelAt(const std::string& name) {
  LoadOptions o;
  o.model_path = dt::DataDir() + "/" + name;
  o.threads = 1;
  return o;
}

LoadedModel Synthetic(const DeepSeekV4Config& c, uint32_t seed, int64_t max_context = 0) {
  auto ckpt = std::make_shared<dt::MemoryCheckpoint>("synthetic.safetensors");
  dt::FillRandomCheckpoint(c, seed, dt::SynthFormat::kBf16, *ckpt, /*mtp=*/true);
  deepseek_v4::LoadOptions o;
  o.max_context = max_context;
  auto m = DeepSeekV4Model::Load(ckpt, c, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  LoadedModel lm;
  if (m.ok()) lm.model = std::move(m).value();
  lm.path = "synthetic";
  lm.stop_ids = {static_cast<int32_t>(c.eos_token_id)};
  return lm;
}

// The official-code golden model (window, CSA, HCA layers + MTP), real MTP drafts.
TEST(Speculative, GreedyOutputIsIdenticalWithRealMtpDrafts) {
  auto loaded = LoadModel(ModelAt("mixed_mtp_bf16"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const std::vector<int32_t> ids = dt::ReadIds(dt::DataDir() + "/mixed_mtp_bf16/input_ids.txt");
  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 11);
  const Output plain = Plain(*loaded, prompt, 48, /*stop_at_eos=*/false);
  ASSERT_EQ(plain.tokens.size(), 48u);
  for (int64_t k : {1, 2, 3, 5}) {
    SpeculativeOptions o;
    o.stop_at_eos = false;
    const Output spec = Speculative(*loaded, prompt, 48, k, o);
    EXPECT_EQ(spec.tokens, plain.tokens) << "k " << k;
    EXPECT_EQ(spec.stop_reason, plain.stop_reason);
    EXPECT_EQ(spec.spec.generated_tokens, 48);
    // The first token comes from the prefill; every round adds its accepted
    // drafts and the main model's next token.
    EXPECT_EQ(1 + spec.spec.rounds + spec.spec.accepted, 48) << "k " << k;
    std::printf("[golden mixed] k %lld: %lld rounds, acceptance %.2f\n", static_cast<long long>(k),
                static_cast<long long>(spec.spec.rounds), spec.spec.acceptance_rate());
  }
}

// Each round's drafts equal those of an MTP layer run from scratch on the
// main model's hidden states of the whole sequence so far: the loop feeds
// the MTP the true hidden states and rolls its cache back exactly.
TEST(Speculative, DraftsEqualAnMtpRunFromScratch) {
  auto loaded = LoadModel(ModelAt("mixed_mtp_bf16"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  auto& model = static_cast<DeepSeekV4Model&>(*loaded->model);
  const std::vector<int32_t> ids = dt::ReadIds(dt::DataDir() + "/mixed_mtp_bf16/input_ids.txt");
  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 9);
  const Output plain = Plain(*loaded, prompt, 30, false);
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), plain.tokens.begin(), plain.tokens.end());
  const int64_t V = model.info().vocab_size;
  const int64_t row = model.config().hc_mult * model.config().hidden_size;
  int64_t checked = 0;
  SpeculativeOptions o;
  o.stop_at_eos = false;
  o.edit_drafts = [&](int64_t pos, std::span<int32_t> drafts) {
    // pos = n + 1: the main model holds seq[0, n), the token at n is seq[n].
    const int64_t n = pos - 1;
    auto main = model.NewCache(0);
    std::vector<float> logits(V);
    ASSERT_TRUE(model.Forward(std::span<const int32_t>(seq).first(n), *main, logits, false).ok());
    const std::vector<float> hidden(model.last_hidden().begin(), model.last_hidden().end());
    auto mtp = model.NewMtpCache(0);
    ASSERT_TRUE(
        model.ForwardMtp(std::span<const int32_t>(seq).subspan(1, n), hidden, *mtp, logits, false)
            .ok());
    std::vector<float> own;
    for (size_t i = 0; i < drafts.size(); ++i) {
      if (i > 0) {
        own.assign(model.last_mtp_hidden().end() - row, model.last_mtp_hidden().end());
        ASSERT_TRUE(
            model.ForwardMtp(std::span<const int32_t>(&drafts[i - 1], 1), own, *mtp, logits, false)
                .ok());
      }
      const int32_t want = static_cast<int32_t>(dt::ArgmaxRow(logits.data(), V));
      EXPECT_EQ(drafts[i], want) << "draft " << i << " of the round at " << n;
      ++checked;
    }
  };
  const Output spec = Speculative(*loaded, prompt, 30, 3, o);
  EXPECT_EQ(spec.tokens, plain.tokens);
  EXPECT_GE(checked, 30);
}

// Drafts replaced by the true greedy continuation with planted errors: rounds
// accepted in full, in part and not at all, all giving the same output.
TEST(Speculative, AcceptedPartialAndRejectedRoundsGiveTheSameOutput) {
  const DeepSeekV4Config c = dt::TinyMixedConfig();
  LoadedModel m = Synthetic(c, 61);
  ASSERT_NE(m.model, nullptr);
  const std::vector<int32_t> prompt = {0, 17, 33, 5, 42, 9, 60, 11, 23};
  const int64_t n0 = static_cast<int64_t>(prompt.size()), N = 60;
  const Output plain = Plain(m, prompt, N, false);
  ASSERT_EQ(static_cast<int64_t>(plain.tokens.size()), N);
  for (int64_t k : {1, 2, 4, 7}) {
    for (int wrong_every : {0, 3, 5}) {
      SpeculativeOptions o;
      o.stop_at_eos = false;
      int64_t planted = 0, round = 0;
      o.edit_drafts = [&](int64_t pos, std::span<int32_t> drafts) {
        for (size_t i = 0; i < drafts.size(); ++i) {
          const int64_t g = pos + static_cast<int64_t>(i) - n0;  // index into the output
          if (g >= 0 && g < N) drafts[i] = plain.tokens[g];
        }
        // Every wrong_every-th round one draft (first, second, ... in turn) is wrong.
        if (wrong_every > 0 && round % wrong_every == 0) {
          int32_t& d = drafts[(round / wrong_every) % drafts.size()];
          d = (d + 1) % static_cast<int32_t>(c.vocab_size);
          ++planted;
        }
        ++round;
      };
      const Output spec = Speculative(m, prompt, N, k, o);
      EXPECT_EQ(spec.tokens, plain.tokens) << "k " << k << " wrong every " << wrong_every;
      const SpeculativeStats& st = spec.spec;
      EXPECT_EQ(1 + st.rounds + st.accepted, N) << "k " << k;
      if (wrong_every == 0) {
        EXPECT_EQ(st.accepted, st.drafted) << "k " << k;  // every draft right
        EXPECT_LE(st.rounds, (N + k) / (k + 1) + 1) << "k " << k;
      } else {
        EXPECT_GT(planted, 0);
        EXPECT_LT(st.accepted, st.drafted) << "k " << k;
        EXPECT_GT(st.accepted, 0) << "k " << k;
      }
    }
  }
}

// An end-of-sequence token inside an accepted run stops at the same place.
TEST(Speculative, EosInsideAcceptedDraftsStopsLikePlainDecoding) {
  DeepSeekV4Config c = dt::TinyMixedConfig();
  const std::vector<int32_t> prompt = {0, 7, 8, 9, 10};
  std::vector<int32_t> reference;
  {
    LoadedModel m = Synthetic(c, 71);
    reference = Plain(m, prompt, 30, false).tokens;
  }
  ASSERT_EQ(reference.size(), 30u);
  // Make the 12th generated token the EOS id (unless it also occurs earlier).
  c.eos_token_id = reference[11];
  LoadedModel m = Synthetic(c, 71);
  const Output plain = Plain(m, prompt, 30);
  ASSERT_EQ(plain.stop_reason, "eos");
  ASSERT_LE(plain.tokens.size(), 11u);
  for (int64_t k : {2, 3, 6}) {
    SpeculativeOptions o;
    o.edit_drafts = [&](int64_t pos, std::span<int32_t> drafts) {
      for (size_t i = 0; i < drafts.size(); ++i) {
        const int64_t g = pos + static_cast<int64_t>(i) - static_cast<int64_t>(prompt.size());
        if (g >= 0 && g < 30) drafts[i] = reference[g];
      }
    };
    const Output spec = Speculative(m, prompt, 30, k, o);
    EXPECT_EQ(spec.tokens, plain.tokens) << "k " << k;
    EXPECT_EQ(spec.stop_reason, "eos") << "k " << k;
  }
}

// Drafts are cut at the context limit; both stop with "context".
TEST(Speculative, ContextLimitStopsLikePlainDecoding) {
  const DeepSeekV4Config c = dt::TinyMixedConfig();
  LoadedModel m = Synthetic(c, 81, /*max_context=*/24);
  const std::vector<int32_t> prompt = {0, 3, 4, 5, 6, 7};
  const Output plain = Plain(m, prompt, 100, false);
  EXPECT_EQ(plain.stop_reason, "context");
  for (int64_t k : {1, 4, 9}) {
    SpeculativeOptions o;
    o.stop_at_eos = false;
    o.edit_drafts = [&](int64_t pos, std::span<int32_t> drafts) {
      for (size_t i = 0; i < drafts.size(); ++i) {
        const int64_t g = pos + static_cast<int64_t>(i) - static_cast<int64_t>(prompt.size());
        if (g >= 0 && g < static_cast<int64_t>(plain.tokens.size())) drafts[i] = plain.tokens[g];
      }
    };
    const Output spec = Speculative(m, prompt, 100, k, o);
    EXPECT_EQ(spec.tokens, plain.tokens) << "k " << k;
    EXPECT_EQ(spec.stop_reason, "context") << "k " << k;
  }
}

TEST(SpeculativeBad, NeedsADeepSeekV4ModelWithMtp) {
  LoadOptions lo;
  lo.model_path = "stories260K";  // bundled, by name
  auto llama = LoadModel(lo);
  ASSERT_TRUE(llama.ok()) << llama.status().ToString();
  const std::vector<int32_t> prompt = {1};
  auto r =
      GenerateSpeculative(*llama, prompt, SpeculativeOptions{}, [](int32_t, std::string_view) {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  auto no_mtp = LoadModel(ModelAt("swa_bf16"));
  ASSERT_TRUE(no_mtp.ok()) << no_mtp.status().ToString();
  r = GenerateSpeculative(*no_mtp, std::vector<int32_t>{0}, SpeculativeOptions{},
                          [](int32_t, std::string_view) {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("MTP"), std::string::npos);
}

TEST(SpeculativeBad, NegativeDraftLengthAndEmptyPrompt) {
  LoadedModel m = Synthetic(dt::TinyMixedConfig(), 91);
  SpeculativeOptions o;
  o.draft_tokens = -1;
  auto r = GenerateSpeculative(m, std::vector<int32_t>{0}, o, [](int32_t, std::string_view) {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("draft length -1 is negative"), std::string::npos)
      << r.status().ToString();
  r = GenerateSpeculative(m, std::vector<int32_t>{}, SpeculativeOptions{},
                          [](int32_t, std::string_view) {});
  EXPECT_ERROR(r, StatusCode::kInvalidArgument, "empty prompt");
}

}  // namespace
}  // namespace dsv4

namespace dsv4 {
namespace {

// ---- DSpark (spec §13) through the same loop ----

// Greedy output with DSpark drafts equals plain greedy decoding for every block
// length, with the real drafts and with drafts edited to be right, wrong and
// partly right; the rounds add up.
TEST(SpeculativeDSpark, GreedyOutputIsIdenticalWithRealAndEditedDrafts) {
  for (const char* name : {"dspark_mixed_bf16", "dspark_swa_bf16"}) {
    auto loaded = LoadModel(ModelAt(name));
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    ASSERT_NE(loaded->model->draft_model(), nullptr);
    EXPECT_EQ(loaded->model->draft_model()->draft_kind(), "dspark");
    const std::vector<int32_t> prompt = dt::ReadIds(dt::DataDir() + "/" + name + "/input_ids.txt");
    const Output plain = Plain(*loaded, prompt, 40, /*stop_at_eos=*/false);
    ASSERT_EQ(plain.tokens.size(), 40u);
    const int64_t B = loaded->model->draft_model()->max_drafts();
    for (int64_t k = 1; k <= B; ++k) {
      for (int mode = 0; mode < 4; ++mode) {  // real, all right, all wrong, right then wrong
        SpeculativeOptions o;
        o.stop_at_eos = false;
        if (mode > 0) {
          o.edit_drafts = [&](int64_t pos, std::span<int32_t> drafts) {
            for (size_t i = 0; i < drafts.size(); ++i) {
              // generated index of position pos + i
              const int64_t g = pos + static_cast<int64_t>(i) - static_cast<int64_t>(prompt.size());
              const bool right = mode == 1 || (mode == 3 && i == 0);
              if (g >= 0 && g < 40) {
                drafts[i] = right ? plain.tokens[g] : (plain.tokens[g] + 1) % 7;
              }
            }
          };
        }
        const Output spec = Speculative(*loaded, prompt, 40, k, o);
        EXPECT_EQ(spec.tokens, plain.tokens) << name << " k " << k << " mode " << mode;
        EXPECT_EQ(1 + spec.spec.rounds + spec.spec.accepted, 40) << name << " k " << k;
        if (mode == 2) {
          EXPECT_EQ(spec.spec.accepted, 0) << name;
        }
        if (mode == 1) {
          EXPECT_GT(spec.spec.acceptance_rate(), 0.9) << name << " k " << k;
        }
      }
    }
  }
}

// Sampling with DSpark drafts is lossless: the first two tokens after a prompt
// follow the distribution plain sampling draws from (computed exactly from the
// main model's logits), by a chi-square test over the pairs.
TEST(SpeculativeDSpark, SamplingFollowsThePlainSamplingDistribution) {
  auto loaded = LoadModel(ModelAt("dspark_swa_bf16"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  Model& model = *loaded->model;
  const std::vector<int32_t> prompt = {0, 11, 42, 7, 99};
  SamplingParams sp{.temperature = 1.3f, .top_k = 3, .top_p = 1.0f, .min_p = 0.0f};
  // Exact: P(t0, t1) = π(t0 | prompt) · π(t1 | prompt, t0) under the sampler chain.
  const std::map<std::pair<int32_t, int32_t>, double> exact =
      testing::TwoTokenDistribution(model, prompt, sp);
  ASSERT_LE(exact.size(), 9u);
  std::map<std::pair<int32_t, int32_t>, int64_t> seen;
  const int n = 4000;
  int64_t drafted = 0, accepted = 0;
  for (int i = 0; i < n; ++i) {
    SpeculativeOptions o;
    o.stop_at_eos = false;
    o.sampling = sp;
    o.sampling.seed = 1000 + i;
    // Three tokens: the first comes from the prefill, the second from the
    // first round's verified draft (or its residual), the third from the
    // round's next token.
    const Output spec = Speculative(*loaded, prompt, 3, 2, o);
    ASSERT_EQ(spec.tokens.size(), 3u);
    ++seen[{spec.tokens[0], spec.tokens[1]}];
    drafted += spec.spec.drafted;
    accepted += spec.spec.accepted;
  }
  // Chi-square over the cells (df = cells − 1 ≤ 8); 30 is exceeded by chance
  // with probability < 3e-4 at df 8.
  double chi2 = 0.0;
  for (const auto& [cell, p] : exact) {
    const double expected = p * n;
    const double o = static_cast<double>(seen[cell]);
    chi2 += (o - expected) * (o - expected) / expected;
  }
  for (const auto& [cell, count] : seen) EXPECT_TRUE(exact.count(cell)) << cell.first;
  std::printf("[dspark sampling] chi2 %.2f over %zu cells, %d samples, acceptance %.2f\n", chi2,
              exact.size(), n, drafted > 0 ? static_cast<double>(accepted) / drafted : 0.0);
  EXPECT_LT(chi2, 30.0);
  EXPECT_GT(drafted, 0);
}

}  // namespace
}  // namespace dsv4

namespace dsv4 {
namespace {

// The adaptive draft length: every length is timed once, then the length with
// the most expected tokens per second wins — long blocks when drafts are
// accepted, none when they are not.
TEST(DraftLengthController, PicksTheLengthWithTheMostTokensPerSecond) {
  const auto run = [](double accept, int64_t rounds) {
    DraftLengthController c(5, /*explore_every=*/1000);
    uint64_t state = 42;
    for (int64_t r = 0; r < rounds; ++r) {
      const int64_t k = c.Choose();
      int64_t a = 0;
      while (a < k) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        if (static_cast<double>(state >> 11) / 9007199254740992.0 >= accept) break;
        ++a;
      }
      c.Record(k, a, /*draft_seconds=*/0.2, /*verify_seconds=*/1.0 + 0.25 * k);
    }
    return c;
  };
  DraftLengthController high = run(0.95, 200);
  EXPECT_EQ(high.Choose(), 5);
  EXPECT_NEAR(high.Acceptance(1), 0.95, 0.05);
  EXPECT_NEAR(high.VerifySeconds(3), 1.75, 1e-9);
  DraftLengthController low = run(0.05, 200);
  EXPECT_EQ(low.Choose(), 0);
  // Every length was tried once at the start.
  for (int64_t k = 0; k <= 5; ++k) EXPECT_GE(low.rounds_by_k()[k], 1) << k;
  // E(k) = 1 + Σ_j Π_{i≤j} α_i with the prior α = 1/2 before any draft.
  DraftLengthController fresh(3);
  EXPECT_DOUBLE_EQ(fresh.ExpectedTokens(3), 1.0 + 0.5 + 0.25 + 0.125);
  EXPECT_LT(fresh.VerifySeconds(2), 0.0);
}

// Adaptive speculation keeps the greedy output and reports its choices.
TEST(SpeculativeDSpark, AdaptiveLengthKeepsTheGreedyOutput) {
  auto loaded = LoadModel(ModelAt("dspark_mixed_bf16"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const std::vector<int32_t> prompt =
      dt::ReadIds(dt::DataDir() + "/dspark_mixed_bf16/input_ids.txt");
  const Output plain = Plain(*loaded, prompt, 60, /*stop_at_eos=*/false);
  SpeculativeOptions o;
  o.stop_at_eos = false;
  o.adaptive = true;
  const Output spec = Speculative(*loaded, prompt, 60, 8, o);  // 8 > the block: capped at 5
  EXPECT_EQ(spec.tokens, plain.tokens);
  ASSERT_EQ(spec.spec.rounds_by_k.size(), 6u);
  int64_t rounds = 0;
  for (int64_t n : spec.spec.rounds_by_k) rounds += n;
  EXPECT_LE(rounds, spec.spec.rounds);
  EXPECT_GE(rounds,
            spec.spec.rounds - 5);  // the last rounds, cut short by max_tokens, are not recorded
  for (double t : spec.spec.verify_seconds_by_k) EXPECT_GT(t, 0.0);
}

// DeepSeek-V4.1 with its DSpark stages (the reference's tiny checkpoint),
// through the engine: greedy speculation with real, all-right, all-wrong and
// right-then-wrong drafts emits plain greedy decoding's tokens — under the
// owner's index keys (--v41-index-keys owner), where a multi-token verify call
// scores the same keys as single-token steps (docs/specs/deepseek-v4.1.md).
TEST(SpeculativeDSparkV41, GreedyOutputIsIdenticalUnderTheOwnersIndexKeys) {
  LoadOptions lo;
  lo.model_path = std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v41/dspark_bf16";
  lo.threads = 1;
  lo.v41_owner_index_keys = true;
  auto loaded = LoadModel(lo);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_NE(loaded->model->draft_model(), nullptr);
  EXPECT_EQ(loaded->model->draft_model()->draft_kind(), "dspark");
  const int64_t B = loaded->model->draft_model()->max_drafts();
  EXPECT_EQ(B, 4);
  const std::vector<int32_t> prompt = dt::ReadIds(lo.model_path + "/input_ids.txt");
  const int64_t n = 30;
  const Output plain = Plain(*loaded, prompt, n, /*stop_at_eos=*/false);
  ASSERT_EQ(static_cast<int64_t>(plain.tokens.size()), n);
  for (int64_t k = 1; k <= B; ++k) {
    for (int mode = 0; mode < 4; ++mode) {  // real, all right, all wrong, right then wrong
      SpeculativeOptions o;
      o.stop_at_eos = false;
      if (mode > 0) {
        o.edit_drafts = [&](int64_t pos, std::span<int32_t> drafts) {
          for (size_t i = 0; i < drafts.size(); ++i) {
            const int64_t g = pos + static_cast<int64_t>(i) - static_cast<int64_t>(prompt.size());
            const bool right = mode == 1 || (mode == 3 && i == 0);
            if (g >= 0 && g < n) drafts[i] = right ? plain.tokens[g] : (plain.tokens[g] + 1) % 7;
          }
        };
      }
      const Output spec = Speculative(*loaded, prompt, n, k, o);
      EXPECT_EQ(spec.tokens, plain.tokens) << "k " << k << " mode " << mode;
      EXPECT_EQ(1 + spec.spec.rounds + spec.spec.accepted, n) << "k " << k;
      if (mode == 2) EXPECT_EQ(spec.spec.accepted, 0);
      if (mode == 1) EXPECT_GT(spec.spec.acceptance_rate(), 0.9) << "k " << k;
    }
  }
}

}  // namespace
}  // namespace dsv4
