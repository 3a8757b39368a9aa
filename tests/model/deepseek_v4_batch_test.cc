// DeepSeek-V4 batched forward (DeepSeekV4Model::ForwardBatch, the engine's
// continuous-batching step): several sequences in one call give the logits of
// separate Forward calls (oracles/README.md cache invariance: max |Δlogit| ≤
// 1e-4, same argmax) — prefill chunks mixed with single decode tokens, all
// three layer kinds (window, CSA + indexer, HCA), bf16 and FP8/FP4 weights
// with the QAT simulations, rollbacks in place and past the horizon (replay
// from checkpoints inside the batch). Each entry's new rows of the final
// hidden state and the DSpark target features (last_hidden(i),
// last_features(i): the draft head's input) equal those of its Forward. Bad
// batches are refused before any cache changes. Also Model::ForwardBatch's default (a loop over
// Forward).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
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
using testing::SynthFormat;
using testing::TinyMixedConfig;
using testing::TinyQuantConfig;

constexpr float kTol = 1e-4f;  // oracles/README.md "cache invariance"

std::unique_ptr<DeepSeekV4Model> LoadSynthetic(const DeepSeekV4Config& c, uint32_t seed,
                                               SynthFormat format, const LoadOptions& o = {}) {
  auto ckpt = std::make_shared<MemoryCheckpoint>("synthetic_batch.safetensors");
  FillRandomCheckpoint(c, seed, format, *ckpt, /*mtp=*/false);
  auto m = DeepSeekV4Model::Load(ckpt, c, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

std::unique_ptr<DeepSeekV4Model> LoadGolden(const std::string& name) {
  const std::string dir = DataDir() + "/" + name;
  auto config = DeepSeekV4Config::FromFile(dir + "/config.json");
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  auto reader = OpenCheckpointDir(dir);
  EXPECT_TRUE(reader.ok()) << reader.status().ToString();
  if (!config.ok() || !reader.ok()) return nullptr;
  std::shared_ptr<const CheckpointReader> shared(std::move(reader).value());
  auto m = DeepSeekV4Model::Load(shared, *config, {});
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

struct Diff {
  float max_abs = 0.0f;
  int64_t argmax_mismatches = 0;
  int64_t rows = 0;
  float captured_max_abs = 0.0f;  // last_hidden(i) and last_features(i) vs Forward's
  int64_t captured_floats = 0;
  int64_t captured_size_mismatches = 0;
};

// The rows ForwardBatch kept for entry `entry` against those Forward kept.
void AccumulateCaptured(Diff& d, std::span<const float> got, const std::vector<float>& want) {
  if (got.size() != want.size()) {
    ++d.captured_size_mismatches;
    return;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    d.captured_max_abs = std::max(d.captured_max_abs, std::fabs(got[i] - want[i]));
  }
  d.captured_floats += static_cast<int64_t>(got.size());
}
void Accumulate(Diff& d, const std::vector<float>& got, const std::vector<float>& want,
                int64_t vocab) {
  ASSERT_EQ(got.size(), want.size());
  const int64_t n = static_cast<int64_t>(got.size()) / vocab;
  for (int64_t t = 0; t < n; ++t) {
    const float* g = got.data() + t * vocab;
    const float* w = want.data() + t * vocab;
    d.argmax_mismatches += ArgmaxRow(g, vocab) != ArgmaxRow(w, vocab);
    for (int64_t v = 0; v < vocab; ++v) d.max_abs = std::max(d.max_abs, std::fabs(g[v] - w[v]));
    ++d.rows;
  }
}

// Runs `n_seq` random sequences for `steps` steps, each step one ForwardBatch
// over the sequences with work (a prefill chunk of 1..9 tokens or a single
// token; some sit a step out; all_logits at random), against Forward on a
// second set of caches. Every few steps a sequence rolls back by 1..12 tokens
// in both. Returns the differences over every logits row.
Diff RunScenario(DeepSeekV4Model& m, int n_seq, int steps, uint32_t seed) {
  const int64_t V = m.info().vocab_size;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(1, static_cast<int32_t>(V - 1));
  std::vector<std::unique_ptr<SequenceCache>> batch, single;
  for (int i = 0; i < n_seq; ++i) {
    batch.push_back(m.NewCache(256));
    single.push_back(m.NewCache(256));
  }
  Diff d;
  for (int step = 0; step < steps; ++step) {
    // Rollbacks (a rejected speculative draft, a regenerated tail).
    if (step > 0 && step % 4 == 0) {
      const int i = static_cast<int>(rng() % n_seq);
      const int64_t len = batch[i]->length();
      const int64_t n = std::max<int64_t>(0, len - 1 - static_cast<int64_t>(rng() % 12));
      batch[i]->Truncate(n);
      single[i]->Truncate(n);
    }
    std::vector<std::vector<int32_t>> tokens(n_seq);
    std::vector<std::vector<float>> got(n_seq), want(n_seq), hidden(n_seq), features(n_seq);
    std::vector<int> entry_of(n_seq, -1);
    std::vector<BatchEntry> entries;
    for (int i = 0; i < n_seq; ++i) {
      if (step > 0 && rng() % 5 == 0) continue;  // sits this step out
      const int64_t room = 256 - batch[i]->length();
      const int64_t n = std::min<int64_t>(room, rng() % 2 == 0 ? 1 : 1 + rng() % 9);
      if (n <= 0) continue;
      for (int64_t t = 0; t < n; ++t) tokens[i].push_back(id(rng));
      const bool all = rng() % 3 == 0;
      got[i].assign((all ? n : 1) * V, NAN);
      want[i].assign(got[i].size(), 0.0f);
      entry_of[i] = static_cast<int>(entries.size());
      entries.push_back(BatchEntry{
          .tokens = tokens[i], .cache = batch[i].get(), .logits = got[i], .all_logits = all});
      const Status s = m.Forward(tokens[i], *single[i], want[i], all);
      EXPECT_TRUE(s.ok()) << s.ToString();
      hidden[i].assign(m.last_hidden().begin(), m.last_hidden().end());
      features[i].assign(m.last_features().begin(), m.last_features().end());
    }
    if (entries.empty()) continue;
    const Status s = m.ForwardBatch(entries);
    EXPECT_TRUE(s.ok()) << s.ToString();
    for (int i = 0; i < n_seq; ++i) {
      EXPECT_EQ(batch[i]->length(), single[i]->length()) << "sequence " << i;
      if (!got[i].empty()) Accumulate(d, got[i], want[i], V);
      if (entry_of[i] < 0) continue;
      AccumulateCaptured(d, m.last_hidden(entry_of[i]), hidden[i]);
      AccumulateCaptured(d, m.last_features(entry_of[i]), features[i]);
    }
  }
  return d;
}

void ExpectCapturedRows(const Diff& d) {
  std::printf("  captured rows: %lld floats, max|d| %.3g\n",
              static_cast<long long>(d.captured_floats), d.captured_max_abs);
  EXPECT_GT(d.captured_floats, 0);
  EXPECT_EQ(d.captured_size_mismatches, 0);
  EXPECT_LE(d.captured_max_abs, kTol);
}

TEST(DeepSeekV4Batch, MixedLayerKindsEqualSeparateForwards) {
  const DeepSeekV4Config c = TinyMixedConfig();  // window, CSA ratio 4, HCA ratio 8
  auto m = LoadSynthetic(c, 51, SynthFormat::kBf16);
  ASSERT_NE(m, nullptr);
  for (int n_seq : {2, 3, 4}) {
    const Diff d = RunScenario(*m, n_seq, 24, 100 + n_seq);
    std::printf("[batch %d] rows %lld max|dlogit| %.3g\n", n_seq, static_cast<long long>(d.rows),
                d.max_abs);
    EXPECT_GT(d.rows, 40);
    EXPECT_LE(d.max_abs, kTol);
    EXPECT_EQ(d.argmax_mismatches, 0);
    ExpectCapturedRows(d);
  }
}

// A short rollback horizon with checkpoints: truncations past it make the
// batch replay a sequence from a checkpoint, in segments, next to the others.
TEST(DeepSeekV4Batch, ReplaysPastTheHorizonInsideTheBatch) {
  const DeepSeekV4Config c = TinyMixedConfig();
  LoadOptions o;
  o.rollback.horizon = 0;
  o.rollback.checkpoint_interval = 5;
  auto m = LoadSynthetic(c, 52, SynthFormat::kBf16, o);
  ASSERT_NE(m, nullptr);
  const Diff d = RunScenario(*m, 3, 28, 7);
  std::printf("[batch replay] rows %lld max|dlogit| %.3g\n", static_cast<long long>(d.rows),
              d.max_abs);
  EXPECT_LE(d.max_abs, kTol);
  EXPECT_EQ(d.argmax_mismatches, 0);
  ExpectCapturedRows(d);
}

// FP8 dense + FP4 experts with every QAT simulation on (activation quant of
// each linear input is per row, so batching must not change it).
TEST(DeepSeekV4Batch, QuantizedWeightsAndQatEqualSeparateForwards) {
  const DeepSeekV4Config c = TinyQuantConfig();
  LoadOptions o;
  o.numerics = NumericsOptions{.act_quant = true, .kv_quant = true, .index_quant = true};
  auto m = LoadSynthetic(c, 53, SynthFormat::kFp8Fp4, o);
  ASSERT_NE(m, nullptr);
  const Diff d = RunScenario(*m, 4, 16, 9);
  std::printf("[batch fp8/fp4] rows %lld max|dlogit| %.3g\n", static_cast<long long>(d.rows),
              d.max_abs);
  EXPECT_LE(d.max_abs, kTol);
  EXPECT_EQ(d.argmax_mismatches, 0);
}

// The official-code golden model with all three kinds (real weights).
TEST(DeepSeekV4Batch, GoldenMixedModelEqualsSeparateForwards) {
  auto m = LoadGolden("mixed_mtp_bf16");
  ASSERT_NE(m, nullptr);
  const Diff d = RunScenario(*m, 3, 20, 11);
  std::printf("[batch golden] rows %lld max|dlogit| %.3g\n", static_cast<long long>(d.rows),
              d.max_abs);
  EXPECT_LE(d.max_abs, kTol);
  EXPECT_EQ(d.argmax_mismatches, 0);
  ExpectCapturedRows(d);
}

// The golden DSpark model: its target features too.
TEST(DeepSeekV4Batch, GoldenDSparkModelKeepsEveryEntrysFeatures) {
  auto m = LoadGolden("dspark_mixed_bf16");
  ASSERT_NE(m, nullptr);
  ASSERT_TRUE(m->has_dspark());
  const Diff d = RunScenario(*m, 3, 20, 13);
  std::printf("[batch dspark] rows %lld max|dlogit| %.3g\n", static_cast<long long>(d.rows),
              d.max_abs);
  EXPECT_LE(d.max_abs, kTol);
  EXPECT_EQ(d.argmax_mismatches, 0);
  ExpectCapturedRows(d);
  EXPECT_TRUE(m->last_features(99).empty());
  EXPECT_TRUE(m->last_hidden(-1).empty());
}

// ---- bad batches: refused with nothing changed ----

class DeepSeekV4BatchBad : public ::testing::Test {
 protected:
  void SetUp() override {
    m_ = LoadSynthetic(TinyMixedConfig(), 54, SynthFormat::kBf16);
    ASSERT_NE(m_, nullptr);
    V_ = m_->info().vocab_size;
    a_ = m_->NewCache(16);
    b_ = m_->NewCache(16);
    std::vector<float> l(V_);
    ASSERT_TRUE(m_->Forward(std::vector<int32_t>{0, 5, 6}, *a_, l, false).ok());
    la_.assign(V_, 0.0f);
    lb_.assign(V_, 0.0f);
  }
  // The batch fails with `code` and neither cache moved.
  void ExpectRefused(std::span<const BatchEntry> entries, StatusCode code, const char* what) {
    const Status s = m_->ForwardBatch(entries);
    EXPECT_EQ(s.code(), code) << s.ToString();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.ToString();
    EXPECT_EQ(a_->length(), 3);
    EXPECT_EQ(b_->length(), 0);
  }
  std::unique_ptr<DeepSeekV4Model> m_;
  int64_t V_ = 0;
  std::unique_ptr<SequenceCache> a_, b_;
  std::vector<float> la_, lb_;
  const std::vector<int32_t> one_{7};
};

TEST_F(DeepSeekV4BatchBad, SameCacheTwice) {
  const BatchEntry e[] = {{one_, a_.get(), la_, false}, {one_, a_.get(), lb_, false}};
  ExpectRefused(e, StatusCode::kInvalidArgument, "also used by an earlier entry");
}

TEST_F(DeepSeekV4BatchBad, TokenOutsideTheVocabularyInALaterEntry) {
  const std::vector<int32_t> bad{1, static_cast<int32_t>(V_)};
  const BatchEntry e[] = {{one_, a_.get(), la_, false}, {bad, b_.get(), lb_, false}};
  ExpectRefused(e, StatusCode::kInvalidArgument, "outside the vocabulary");
}

TEST_F(DeepSeekV4BatchBad, NoCache) {
  const BatchEntry e[] = {{one_, a_.get(), la_, false}, {one_, nullptr, lb_, false}};
  ExpectRefused(e, StatusCode::kInvalidArgument, "entry 1");
}

TEST_F(DeepSeekV4BatchBad, LogitsTooSmallForAllLogits) {
  const std::vector<int32_t> two{1, 2};
  const BatchEntry e[] = {{one_, a_.get(), la_, false}, {two, b_.get(), lb_, true}};
  ExpectRefused(e, StatusCode::kInvalidArgument, "logits buffer");
}

TEST_F(DeepSeekV4BatchBad, NoTokens) {
  const BatchEntry e[] = {{one_, a_.get(), la_, false}, {{}, b_.get(), lb_, false}};
  ExpectRefused(e, StatusCode::kInvalidArgument, "no tokens");
}

TEST_F(DeepSeekV4BatchBad, ContextFull) {
  const std::vector<int32_t> many(14, 3);  // 3 + 14 > 16
  const BatchEntry e[] = {{many, a_.get(), la_, false}, {one_, b_.get(), lb_, false}};
  ExpectRefused(e, StatusCode::kResourceExhausted, "context full");
}

TEST_F(DeepSeekV4BatchBad, CacheOfAnotherModel) {
  auto other = LoadSynthetic(TinyMixedConfig(), 54, SynthFormat::kBf16);
  ASSERT_NE(other, nullptr);
  auto foreign = other->NewCache(16);
  const BatchEntry e[] = {{one_, a_.get(), la_, false}, {one_, foreign.get(), lb_, false}};
  ExpectRefused(e, StatusCode::kInvalidArgument, "not made by");
  EXPECT_EQ(foreign->length(), 0);
}

// ---- Model::ForwardBatch default: Forward on each entry, in order ----

class CountingCache final : public SequenceCache {
 public:
  int64_t length() const override { return n_; }
  void Truncate(int64_t n) override { n_ = n; }
  int64_t n_ = 0;
};

// logits[v] = 100·call + position of the last token + v; token 99 is an error.
class CountingModel final : public Model {
 public:
  const ModelInfo& info() const override { return info_; }
  std::unique_ptr<SequenceCache> NewCache(int64_t) const override {
    return std::make_unique<CountingCache>();
  }
  Status Forward(std::span<const int32_t> tokens, SequenceCache& cache, std::span<float> logits,
                 bool) override {
    for (int32_t t : tokens) {
      if (t == 99) return InvalidArgument("token 99");
    }
    auto& c = static_cast<CountingCache&>(cache);
    c.n_ += static_cast<int64_t>(tokens.size());
    for (int64_t v = 0; v < info_.vocab_size; ++v) {
      logits[v] = static_cast<float>(100 * calls_ + c.n_ - 1 + v);
    }
    ++calls_;
    return Status::Ok();
  }
  void SetThreads(int) override {}
  ModelInfo info_{.architecture = "fake", .vocab_size = 2};
  int calls_ = 0;
};

TEST(ModelForwardBatchDefault, LoopsOverForwardAndStopsAtTheFirstError) {
  CountingModel m;
  auto a = m.NewCache(0), b = m.NewCache(0), c = m.NewCache(0);
  std::vector<float> la(2), lb(2), lc(2);
  const std::vector<int32_t> three{1, 2, 3}, one{4}, bad{99};
  const BatchEntry ok[] = {{three, a.get(), la, false}, {one, b.get(), lb, false}};
  ASSERT_TRUE(m.ForwardBatch(ok).ok());
  EXPECT_EQ(la, (std::vector<float>{2, 3}));      // call 0, last position 2
  EXPECT_EQ(lb, (std::vector<float>{100, 101}));  // call 1, position 0
  const BatchEntry with_bad[] = {
      {one, a.get(), la, false}, {bad, b.get(), lb, false}, {one, c.get(), lc, false}};
  const Status s = m.ForwardBatch(with_bad);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a->length(), 4);  // ran before the error
  EXPECT_EQ(b->length(), 1);
  EXPECT_EQ(c->length(), 0);  // never reached
}

}  // namespace
}  // namespace dsv4::deepseek_v4
