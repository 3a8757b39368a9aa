// DeepSeek-V4 cache behaviour on models with all three attention kinds
// (window, CSA + indexer, HCA) and MTP: exact rollback (Truncate to every
// earlier length, within the horizon in place, beyond it through checkpoints
// and replay, then re-Forward = never having gone past n), and the cache
// invariances of oracles/README.md (max |Δlogit| ≤ 1e-4 and the same argmax):
// chunked prefill with the chunk boundary at every offset, token-by-token
// decode = prefill, two interleaved sequences = two single runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <ostream>
#include <random>

#include "deepseek_v4_test_util.h"
#include "io/safetensors.h"
#include "model/deepseek_v4/model.h"

namespace dsv4::deepseek_v4 {
namespace {

using testing::ArgmaxRow;
using testing::DataDir;
using testing::FillRandomCheckpoint;
using testing::MemoryCheckpoint;
using testing::ReadIds;
using testing::SynthFormat;
using testing::TinyMixedConfig;

constexpr float kTol = 1e-4f;  // oracles/README.md "cache invariance"

RollbackOptions Rb(int64_t horizon, int64_t checkpoint_interval) {
  RollbackOptions rb;
  rb.horizon = horizon;
  rb.checkpoint_interval = checkpoint_interval;
  return rb;
}
LoadOptions WithRollback(const RollbackOptions& rb) {
  LoadOptions o;
  o.rollback = rb;
  return o;
}

std::unique_ptr<DeepSeekV4Model> LoadSynthetic(const DeepSeekV4Config& c, uint32_t seed,
                                               const LoadOptions& o = {}) {
  auto ckpt = std::make_shared<MemoryCheckpoint>("synthetic_mixed.safetensors");
  FillRandomCheckpoint(c, seed, SynthFormat::kBf16, *ckpt, /*mtp=*/true);
  auto m = DeepSeekV4Model::Load(ckpt, c, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

// An official-code golden model: mixed_mtp_bf16 (window, CSA ratio 4, HCA
// ratio 8 layers) or long_hca128_bf16 (CSA, HCA 128, HCA 16; 544 tokens).
std::unique_ptr<DeepSeekV4Model> LoadMixedGolden(const LoadOptions& o,
                                                 const std::string& name = "mixed_mtp_bf16") {
  const std::string dir = DataDir() + "/" + name;
  auto config = DeepSeekV4Config::FromFile(dir + "/config.json");
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  auto reader = OpenCheckpointDir(dir);
  EXPECT_TRUE(reader.ok()) << reader.status().ToString();
  if (!config.ok() || !reader.ok()) return nullptr;
  std::shared_ptr<const CheckpointReader> shared(std::move(reader).value());
  auto m = DeepSeekV4Model::Load(shared, *config, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

std::vector<int32_t> RandomIds(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(2, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids(n);
  for (int32_t& t : ids) t = id(rng);
  ids[0] = 0;  // BOS
  return ids;
}

// Logits [n, V] of ids[begin, end) appended to `cache`.
std::vector<float> RunIds(Model& m, SequenceCache& cache, std::span<const int32_t> ids) {
  std::vector<float> logits(ids.size() * m.info().vocab_size);
  const Status s = m.Forward(ids, cache, logits, /*all_logits=*/true);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return logits;
}

struct Diff {
  float max_abs = 0.0f;
  int64_t argmax_mismatches = 0;
};
// Compares rows of `got` with rows [row0, row0 + n) of `want`.
Diff Compare(const std::vector<float>& got, const std::vector<float>& want, int64_t row0,
             int64_t vocab) {
  Diff d;
  const int64_t n = static_cast<int64_t>(got.size()) / vocab;
  for (int64_t t = 0; t < n; ++t) {
    const float* g = got.data() + t * vocab;
    const float* w = want.data() + (row0 + t) * vocab;
    d.argmax_mismatches += ArgmaxRow(g, vocab) != ArgmaxRow(w, vocab);
    for (int64_t v = 0; v < vocab; ++v) d.max_abs = std::max(d.max_abs, std::fabs(g[v] - w[v]));
  }
  return d;
}

// ---- exact rollback ----

struct RollbackCase {
  const char* name;
  int64_t horizon;
  int64_t checkpoint_interval;
};

void PrintTo(const RollbackCase& c, std::ostream* os) { *os << c.name; }

class DeepSeekV4Rollback : public ::testing::TestWithParam<RollbackCase> {};

// For every n and several overshoots d: run n true tokens, d different ones,
// Truncate(n), continue with the true tokens: the logits equal the one-shot
// prefill. Within the horizon nothing is replayed; past it exactly the tokens
// since the last checkpoint are.
TEST_P(DeepSeekV4Rollback, TruncateThenForwardEqualsNeverGoingPast) {
  const RollbackCase& rc = GetParam();
  const DeepSeekV4Config c = TinyMixedConfig();  // window 4, CSA 4, HCA 8
  LoadOptions o;
  o.rollback = Rb(rc.horizon, rc.checkpoint_interval);
  auto m = LoadSynthetic(c, 11, o);
  ASSERT_NE(m, nullptr);
  const int64_t T = 44, V = c.vocab_size, W = c.sliding_window;
  const std::vector<int32_t> ids = RandomIds(T, V, 5);
  const std::vector<int32_t> junk = RandomIds(T, V, 6);
  auto ref_cache = m->NewCache(T);
  const std::vector<float> want = RunIds(*m, *ref_cache, ids);

  float worst = 0.0f;
  int64_t cases = 0;
  for (int64_t n = 0; n < T; ++n) {
    for (int64_t d : {1, 2, 3, 7, 16, 17, 29}) {
      if (n + d > T + 8) continue;
      auto cache = m->NewCache(2 * T);
      if (n > 0) RunIds(*m, *cache, std::span<const int32_t>(ids).first(n));
      RunIds(*m, *cache, std::span<const int32_t>(junk).subspan(n % 8, d));
      const int64_t replayed_before = m->GetCacheStats(*cache).replayed_tokens;
      cache->Truncate(n);
      ASSERT_EQ(cache->length(), n);
      const int64_t end = std::min(T, n + 9);
      const std::vector<float> got =
          RunIds(*m, *cache, std::span<const int32_t>(ids).subspan(n, end - n));
      const Diff diff = Compare(got, want, n, V);
      EXPECT_LE(diff.max_abs, kTol) << "n " << n << " overshoot " << d;
      EXPECT_EQ(diff.argmax_mismatches, 0) << "n " << n << " overshoot " << d;
      worst = std::max(worst, diff.max_abs);
      ++cases;

      const int64_t replayed = m->GetCacheStats(*cache).replayed_tokens - replayed_before;
      const int64_t P = rc.checkpoint_interval;
      if (rc.horizon == RollbackOptions::kAll || d <= rc.horizon) {
        EXPECT_EQ(replayed, 0) << "n " << n << " overshoot " << d << ": in place expected";
      } else if (n > W) {
        // The ring no longer holds [n − W, n): restored from the last checkpoint.
        const int64_t from = P > 0 ? n / P * P : 0;
        EXPECT_EQ(replayed, n - from) << "n " << n << " overshoot " << d;
      }
    }
  }
  std::printf("[%s] %lld truncations, max|dlogit| %.3g\n", rc.name, static_cast<long long>(cases),
              worst);
}

INSTANTIATE_TEST_SUITE_P(Policies, DeepSeekV4Rollback,
                         ::testing::Values(RollbackCase{"horizon16_checkpoints4096", 16, 4096},
                                           RollbackCase{"horizon0_checkpoints8", 0, 8},
                                           RollbackCase{"horizon3_checkpoints5", 3, 5},
                                           RollbackCase{"horizon2_no_checkpoints", 2, 0},
                                           RollbackCase{"keep_all", RollbackOptions::kAll, 0}),
                         [](const auto& info) { return std::string(info.param.name); });

// Several truncations in a row, one inside a pending replay, one back to 0,
// and truncations to the current length, before any Forward.
TEST(DeepSeekV4RollbackMore, RepeatedTruncationsAndPendingReplays) {
  const DeepSeekV4Config c = TinyMixedConfig();
  LoadOptions o;
  o.rollback = Rb(2, 6);
  auto m = LoadSynthetic(c, 12, o);
  ASSERT_NE(m, nullptr);
  const int64_t T = 40, V = c.vocab_size;
  const std::vector<int32_t> ids = RandomIds(T, V, 8);
  auto ref = m->NewCache(T);
  const std::vector<float> want = RunIds(*m, *ref, ids);
  auto cache = m->NewCache(T);
  RunIds(*m, *cache, std::span<const int32_t>(ids).first(35));
  cache->Truncate(35);  // no-op
  cache->Truncate(27);  // past the horizon: checkpoint 24, replay 24..26 pending
  cache->Truncate(25);  // inside the pending replay
  EXPECT_EQ(cache->length(), 25);
  std::vector<float> got = RunIds(*m, *cache, std::span<const int32_t>(ids).subspan(25, 5));
  EXPECT_LE(Compare(got, want, 25, V).max_abs, kTol);
  EXPECT_EQ(m->GetCacheStats(*cache).replayed_tokens, 1);  // position 24
  cache->Truncate(29);                                     // within the horizon of 30
  cache->Truncate(28);
  got = RunIds(*m, *cache, std::span<const int32_t>(ids).subspan(28, 12));
  EXPECT_LE(Compare(got, want, 28, V).max_abs, kTol);
  EXPECT_EQ(m->GetCacheStats(*cache).replayed_tokens, 1);
  cache->Truncate(0);
  got = RunIds(*m, *cache, std::span<const int32_t>(ids).first(T));
  EXPECT_LE(Compare(got, want, 0, V).max_abs, kTol);
  EXPECT_EQ(Compare(got, want, 0, V).argmax_mismatches, 0);
}

// The official-code golden model (mixed_mtp_bf16: window 8, CSA 4, HCA 8):
// every truncation point of its prompt, after running other tokens up to its
// length.
TEST(DeepSeekV4RollbackMore, GoldenMixedModelEveryTruncationPoint) {
  for (const RollbackOptions rb : {Rb(16, 4096), Rb(1, 10)}) {
    LoadOptions o;
    o.rollback = rb;
    auto m = LoadMixedGolden(o);
    ASSERT_NE(m, nullptr);
    const std::vector<int32_t> ids = ReadIds(DataDir() + "/mixed_mtp_bf16/input_ids.txt");
    const int64_t T = static_cast<int64_t>(ids.size()), V = m->info().vocab_size;
    const std::vector<int32_t> other(ids.rbegin(), ids.rend());
    auto ref = m->NewCache(T);
    const std::vector<float> want = RunIds(*m, *ref, ids);
    auto cache = m->NewCache(T);
    float worst = 0.0f;
    for (int64_t n = T - 1; n >= 0; --n) {
      cache->Truncate(0);
      if (n > 0) RunIds(*m, *cache, std::span<const int32_t>(ids).first(n));
      RunIds(*m, *cache, std::span<const int32_t>(other).first(T - n));
      cache->Truncate(n);
      const std::vector<float> got = RunIds(*m, *cache, std::span<const int32_t>(ids).subspan(n));
      const Diff d = Compare(got, want, n, V);
      EXPECT_LE(d.max_abs, kTol) << "n " << n;
      EXPECT_EQ(d.argmax_mismatches, 0) << "n " << n;
      worst = std::max(worst, d.max_abs);
    }
    std::printf("[golden mixed, horizon %lld] max|dlogit| %.3g\n",
                static_cast<long long>(rb.horizon), worst);
  }
}

// The 544-token golden with the real HCA ratio 128: truncation points around
// its pool boundaries (and the CSA / HCA-16 ones they share), after running
// other tokens to the end; compared with the official logits themselves.
TEST(DeepSeekV4RollbackMore, GoldenLongModelAroundRatio128Pools) {
  for (const RollbackOptions rb : {Rb(16, 16384), Rb(4, 200)}) {
    auto m = LoadMixedGolden(WithRollback(rb), "long_hca128_bf16");
    ASSERT_NE(m, nullptr);
    const std::string dir = DataDir() + "/long_hca128_bf16";
    const std::vector<int32_t> ids = ReadIds(dir + "/input_ids.txt");
    const std::vector<float> golden = testing::ReadF32File(dir + "/logits.f32");
    const int64_t T = static_cast<int64_t>(ids.size()), V = m->info().vocab_size;
    ASSERT_EQ(T, 544);
    const std::vector<int32_t> other(ids.rbegin(), ids.rend());
    auto cache = m->NewCache(T);
    float worst = 0.0f;
    for (int64_t n : {0, 1, 127, 128, 129, 255, 256, 300, 383, 384, 511, 512, 513, 543}) {
      cache->Truncate(0);
      if (n > 0) RunIds(*m, *cache, std::span<const int32_t>(ids).first(n));
      RunIds(*m, *cache, std::span<const int32_t>(other).first(T - n));
      cache->Truncate(n);
      const std::vector<float> got = RunIds(*m, *cache, std::span<const int32_t>(ids).subspan(n));
      const Diff d = Compare(got, golden, n, V);
      EXPECT_LE(d.max_abs, 1e-3f) << "n " << n;  // vs the official fp32 logits
      EXPECT_EQ(d.argmax_mismatches, 0) << "n " << n;
      worst = std::max(worst, d.max_abs);
    }
    std::printf("[golden long, horizon %lld, checkpoints %lld] max|dlogit| vs official %.3g\n",
                static_cast<long long>(rb.horizon), static_cast<long long>(rb.checkpoint_interval),
                worst);
  }
}

// The MTP cache keeps every row: truncating it anywhere and re-running equals
// running once (drafts after a rejected speculation).
TEST(DeepSeekV4RollbackMore, MtpCacheTruncatesAnywhere) {
  const DeepSeekV4Config c = TinyMixedConfig();
  auto m = LoadSynthetic(c, 13);
  ASSERT_NE(m, nullptr);
  ASSERT_TRUE(m->has_mtp());
  const int64_t T = 30, V = c.vocab_size, row = c.hc_mult * c.hidden_size;
  const std::vector<int32_t> ids = RandomIds(T + 1, V, 9);
  auto main = m->NewCache(T);
  RunIds(*m, *main, std::span<const int32_t>(ids).first(T));
  const std::vector<float> hidden(m->last_hidden().begin(), m->last_hidden().end());
  const std::span<const int32_t> next = std::span<const int32_t>(ids).subspan(1, T);
  std::vector<float> want(T * V);
  auto mtp = m->NewMtpCache(T);
  ASSERT_TRUE(m->ForwardMtp(next, hidden, *mtp, want, true).ok());
  std::vector<float> junk_hidden(hidden.rbegin(), hidden.rend());
  for (int64_t n : {0, 1, 5, 9, 17, 29}) {
    auto cache = m->NewMtpCache(T + 8);
    std::vector<float> scratch(T * V);
    if (n > 0) {
      ASSERT_TRUE(m->ForwardMtp(next.first(n), std::span<const float>(hidden).first(n * row),
                                *cache, scratch, true)
                      .ok());
    }
    ASSERT_TRUE(m->ForwardMtp(next.first(8), std::span<const float>(junk_hidden).first(8 * row),
                              *cache, scratch, true)
                    .ok());
    cache->Truncate(n);
    std::vector<float> got((T - n) * V);
    ASSERT_TRUE(m->ForwardMtp(next.subspan(n), std::span<const float>(hidden).subspan(n * row),
                              *cache, got, true)
                    .ok());
    const Diff d = Compare(got, want, n, V);
    EXPECT_LE(d.max_abs, kTol) << "n " << n;
    EXPECT_EQ(d.argmax_mismatches, 0) << "n " << n;
  }
}

// ---- invariances ----

// Chunked prefill, every chunk size 1..17 (so boundaries fall at every offset
// modulo the ratios 4 and 8, and across several HCA pools), and two chunks
// split at every position, equal one-shot prefill.
TEST(DeepSeekV4Invariance, ChunkBoundaryAtEveryOffsetEqualsOneShot) {
  const DeepSeekV4Config c = TinyMixedConfig();
  auto m = LoadSynthetic(c, 21);
  ASSERT_NE(m, nullptr);
  const int64_t T = 50, V = c.vocab_size;
  const std::vector<int32_t> ids = RandomIds(T, V, 22);
  auto ref = m->NewCache(T);
  const std::vector<float> want = RunIds(*m, *ref, ids);
  float worst = 0.0f;
  for (int64_t chunk = 1; chunk <= 17; ++chunk) {
    auto cache = m->NewCache(T);
    for (int64_t t = 0; t < T; t += chunk) {
      const int64_t n = std::min(chunk, T - t);
      const Diff d =
          Compare(RunIds(*m, *cache, std::span<const int32_t>(ids).subspan(t, n)), want, t, V);
      EXPECT_LE(d.max_abs, kTol) << "chunk " << chunk << " at " << t;
      EXPECT_EQ(d.argmax_mismatches, 0) << "chunk " << chunk << " at " << t;
      worst = std::max(worst, d.max_abs);
    }
  }
  for (int64_t split = 1; split < T; ++split) {
    auto cache = m->NewCache(T);
    RunIds(*m, *cache, std::span<const int32_t>(ids).first(split));
    const Diff d =
        Compare(RunIds(*m, *cache, std::span<const int32_t>(ids).subspan(split)), want, split, V);
    EXPECT_LE(d.max_abs, kTol) << "split " << split;
    EXPECT_EQ(d.argmax_mismatches, 0) << "split " << split;
    worst = std::max(worst, d.max_abs);
  }
  std::printf("[chunked prefill] max|dlogit| %.3g\n", worst);
}

// Two sequences advanced alternately (in uneven chunks, one of them also
// truncated and redone on the way) equal each run alone.
TEST(DeepSeekV4Invariance, InterleavedSequencesEqualSingleRuns) {
  const DeepSeekV4Config c = TinyMixedConfig();
  auto m = LoadSynthetic(c, 31);
  ASSERT_NE(m, nullptr);
  const int64_t V = c.vocab_size;
  const std::vector<int32_t> a = RandomIds(41, V, 32), b = RandomIds(37, V, 33);
  auto ca = m->NewCache(64), cb = m->NewCache(64);
  const std::vector<float> want_a = RunIds(*m, *ca, a), want_b = RunIds(*m, *cb, b);
  ca->Truncate(0);
  cb->Truncate(0);
  std::vector<float> got_a, got_b;
  size_t ia = 0, ib = 0;
  int step = 0;
  while (ia < a.size() || ib < b.size()) {
    const size_t na = std::min<size_t>(a.size() - ia, 1 + step % 3);
    const size_t nb = std::min<size_t>(b.size() - ib, 1 + step % 5);
    if (na > 0) {
      std::vector<float> l = RunIds(*m, *ca, std::span<const int32_t>(a).subspan(ia, na));
      got_a.insert(got_a.end(), l.begin(), l.end());
      ia += na;
    }
    if (nb > 0) {
      if (step == 4) {  // a speculative detour on b: two wrong tokens, rolled back
        RunIds(*m, *cb, std::vector<int32_t>{3, 4});
        cb->Truncate(static_cast<int64_t>(ib));
      }
      std::vector<float> l = RunIds(*m, *cb, std::span<const int32_t>(b).subspan(ib, nb));
      got_b.insert(got_b.end(), l.begin(), l.end());
      ib += nb;
    }
    ++step;
  }
  const Diff da = Compare(got_a, want_a, 0, V), db = Compare(got_b, want_b, 0, V);
  std::printf("[interleaved] max|dlogit| %.3g, %.3g\n", da.max_abs, db.max_abs);
  EXPECT_LE(da.max_abs, kTol);
  EXPECT_LE(db.max_abs, kTol);
  EXPECT_EQ(da.argmax_mismatches + db.argmax_mismatches, 0);
}

// Checkpoint segments split a long prefill; the logits do not change.
TEST(DeepSeekV4Invariance, CheckpointSegmentsDoNotChangeLogits) {
  const DeepSeekV4Config c = TinyMixedConfig();
  auto plain = LoadSynthetic(c, 41, WithRollback(Rb(RollbackOptions::kAll, 0)));
  auto split = LoadSynthetic(c, 41, WithRollback(Rb(0, 7)));
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(split, nullptr);
  const std::vector<int32_t> ids = RandomIds(45, c.vocab_size, 42);
  auto c1 = plain->NewCache(0), c2 = split->NewCache(0);
  const Diff d = Compare(RunIds(*split, *c2, ids), RunIds(*plain, *c1, ids), 0, c.vocab_size);
  EXPECT_LE(d.max_abs, kTol);
  EXPECT_EQ(d.argmax_mismatches, 0);
  EXPECT_EQ(split->GetCacheStats(*c2).checkpoints, 45 / 7);
  EXPECT_EQ(plain->GetCacheStats(*c1).checkpoints, 0);
}

// The cache is sized from the layers' CacheSpecs: after N tokens it holds
// exactly what EngineCacheBytes predicts (plus the token ids), checkpoints
// included, and nothing grew past its reservation.
TEST(DeepSeekV4CacheSpecs, AllocationsEqualThePrediction) {
  const DeepSeekV4Config c = TinyMixedConfig();
  for (const RollbackOptions rb : {Rb(3, 8), Rb(16, 0), Rb(RollbackOptions::kAll, 0)}) {
    auto m = LoadSynthetic(c, 51, WithRollback(rb));
    ASSERT_NE(m, nullptr);
    const int64_t N = 61;
    auto cache = m->NewCache(N);
    const std::vector<int32_t> ids = RandomIds(N, c.vocab_size, 52);
    RunIds(*m, *cache, std::span<const int32_t>(ids).first(20));
    RunIds(*m, *cache, std::span<const int32_t>(ids).subspan(20));
    int64_t want = N * static_cast<int64_t>(sizeof(int32_t));
    for (const LayerPlan& p : m->plans()) {
      if (p.role == LayerRole::kMain) want += EngineCacheBytes(p.cache, N, rb).total();
    }
    EXPECT_EQ(m->GetCacheStats(*cache).allocated_bytes, want) << "horizon " << rb.horizon;
    // An MTP cache keeps every row: A floats per token (here the last call's 41).
    const int64_t M = N - 20;
    auto mtp = m->NewMtpCache(M);
    std::vector<float> logits(c.vocab_size);
    ASSERT_TRUE(m->ForwardMtp(std::span<const int32_t>(ids).subspan(20), m->last_hidden(), *mtp,
                              logits, false)
                    .ok());
    EXPECT_EQ(
        m->GetCacheStats(*mtp).allocated_bytes,
        M * static_cast<int64_t>(sizeof(int32_t)) +
            EngineCacheBytes(m->plans().back().cache, M, Rb(RollbackOptions::kAll, 0)).total());
  }
}

TEST(DeepSeekV4RollbackBad, NegativeOptionsAreRefused) {
  const DeepSeekV4Config c = TinyMixedConfig();
  auto ckpt = std::make_shared<MemoryCheckpoint>();
  FillRandomCheckpoint(c, 1, SynthFormat::kBf16, *ckpt);
  auto h = DeepSeekV4Model::Load(ckpt, c, WithRollback(Rb(-5, 16384)));
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("rollback horizon -5"), std::string::npos);
  auto p = DeepSeekV4Model::Load(ckpt, c, WithRollback(Rb(16, -1)));
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("checkpoint interval -1"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::deepseek_v4
