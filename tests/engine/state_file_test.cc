// Sequence states kept on disk (engine/state_file.h): a saved state loaded
// into a fresh cache continues bit for bit as the cache that was saved (on
// DeepSeek-V4 models with every layer kind, at and beside the compressed
// blocks' boundaries, and on stories260K); state files refuse truncation,
// corruption and other models; writes are atomic; the store finds the
// longest saved prefix, survives a restart, drops corrupt files, leaves other
// models' files alone, removes interrupted writes and keeps under its cap; the
// engine and `Generate` reuse saved prompts with the cold run's output.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "base/hash.h"
#include "engine/echo_model.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/loader.h"
#include "engine/state_file.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const std::string kStories = std::string(DSV4_SOURCE_DIR) + "/models/stories260K/stories260K.bin";

LoadedModel Load(const std::string& path, bool swa_full = false) {
  LoadOptions o;
  o.model_path = path;
  o.threads = 1;
  o.swa_full = swa_full;
  auto r = LoadModel(o);
  CHECK(r.ok(), "%s", r.status().ToString().c_str());
  return std::move(r).value();
}
std::string V4(const std::string& name) {
  return std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v4/" + name;
}

std::vector<int32_t> RandomTokens(const Model& m, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  const int32_t vocab = static_cast<int32_t>(m.info().vocab_size);
  std::vector<int32_t> t(n);
  for (int32_t& id : t) id = 2 + static_cast<int32_t>(rng() % (vocab - 2));
  return t;
}

// Runs tokens [from, to) in chunks of 5 and returns every row's logits.
std::vector<float> RunTokens(Model& m, SequenceCache& cache, std::span<const int32_t> tokens,
                             size_t from, size_t to) {
  const int64_t V = m.info().vocab_size;
  std::vector<float> all, logits;
  for (size_t b = from; b < to; b += 5) {
    const size_t e = std::min(to, b + 5);
    logits.assign((e - b) * V, 0.0f);
    const Status st = m.Forward(tokens.subspan(b, e - b), cache, logits, true);
    EXPECT_TRUE(st.ok()) << st.ToString();
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

fs::path TempDir(const std::string& name) {
  fs::path d =
      fs::temp_directory_path() / ("dsv4_state_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

std::vector<uint8_t> ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}
void WriteAll(const fs::path& p, std::span<const uint8_t> bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

TEST(Hash64, DependsOnEveryByteSeedAndPieceBoundary) {
  std::vector<uint8_t> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7);
  const uint64_t h = Hash64(data.data(), data.size());
  EXPECT_EQ(h, Hash64(data.data(), data.size()));
  EXPECT_NE(h, Hash64(data.data(), data.size(), 1));
  EXPECT_NE(h, Hash64(data.data(), data.size() - 1));
  for (size_t i : {size_t{0}, size_t{5}, size_t{31}, size_t{32}, size_t{500}, size_t{999}}) {
    data[i] ^= 1;
    EXPECT_NE(h, Hash64(data.data(), data.size())) << "byte " << i;
    data[i] ^= 1;
  }
  EXPECT_NE(Hasher().Update("ab").Update("c").digest(), Hasher().Update("a").Update("bc").digest());
}

TEST(StateFile, RoundTripAndEveryTruncationOrFlipIsRefused) {
  const std::vector<int32_t> tokens = {1, 2, 3, 400, 5};
  std::vector<uint8_t> state(77);
  for (size_t i = 0; i < state.size(); ++i) state[i] = static_cast<uint8_t>(i * 13 + 1);
  const std::vector<uint8_t> file = EncodeStateFile(42, tokens, state);
  auto ok = DecodeStateFile(file, 42, "f");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->tokens, tokens);
  EXPECT_EQ(ok->state, state);
  for (size_t n = 0; n < file.size(); ++n) {
    auto r = DecodeStateFile(std::span(file).first(n), 42, "f");
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << n;
  }
  for (size_t i = 0; i < file.size(); ++i) {
    std::vector<uint8_t> bad = file;
    bad[i] ^= 0x10;
    auto r = DecodeStateFile(bad, 42, "f");
    ASSERT_FALSE(r.ok()) << "byte " << i;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << "byte " << i;
  }
  auto foreign = DecodeStateFile(file, 43, "f");
  ASSERT_FALSE(foreign.ok());
  EXPECT_EQ(foreign.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(foreign.status().message().find("another model"), std::string::npos);
}

TEST(StateFile, AtomicWriteReplacesAndLeavesNoTemporary) {
  const fs::path dir = TempDir("atomic");
  fs::create_directories(dir);
  const std::string path = (dir / "a.dsv4kv").string();
  const std::vector<uint8_t> one(100, 1), two(50, 2);
  ASSERT_TRUE(WriteFileAtomic(path, one).ok());
  ASSERT_TRUE(WriteFileAtomic(path, two).ok());
  EXPECT_EQ(ReadAll(path), two);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  const Status st = WriteFileAtomic((dir / "missing" / "b").string(), one);
  EXPECT_EQ(st.code(), StatusCode::kIo);
  fs::remove_all(dir);
}

// A saved state continues exactly as the cache that was saved, also after a
// Truncate within the last tokens (the rollback horizon is saved too).
class CacheState : public ::testing::TestWithParam<std::string> {};

TEST_P(CacheState, LoadedStateContinuesBitForBit) {
  // "+swa_full": every window and compressor row kept (unbounded stores).
  const std::string name = GetParam().substr(0, GetParam().find('+'));
  LoadedModel m =
      Load(name == "stories260K" ? kStories : V4(name), GetParam().ends_with("+swa_full"));
  Model& model = *m.model;
  const std::vector<int32_t> tokens = RandomTokens(model, 160, 3);
  for (size_t s : {1, 3, 4, 5, 8, 9, 16, 17, 31, 64, 127, 128, 129, 140}) {
    auto cold = model.NewCache(200);
    RunTokens(model, *cold, tokens, 0, s);
    std::vector<uint8_t> state;
    ASSERT_TRUE(cold->SaveState(state).ok());
    const std::vector<float> want = RunTokens(model, *cold, tokens, s, s + 12);

    auto warm = model.NewCache(200);
    RunTokens(model, *warm, tokens, 0, 7);  // whatever it held is replaced
    const Status st = warm->LoadState(state);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(warm->length(), static_cast<int64_t>(s));
    EXPECT_EQ(RunTokens(model, *warm, tokens, s, s + 12), want) << GetParam() << " prefix " << s;

    // Back 3 tokens (within the horizon) from a loaded state.
    if (s > 3) {
      auto cut = model.NewCache(200);
      ASSERT_TRUE(cut->LoadState(state).ok());
      ASSERT_EQ(cut->KeepablePrefix(s - 3), static_cast<int64_t>(s - 3));
      cut->Truncate(s - 3);
      // Against the saved cache cut the same way (a model whose rows depend
      // on how tokens were batched is compared like for like).
      auto again = model.NewCache(200);
      RunTokens(model, *again, tokens, 0, s);
      again->Truncate(s - 3);
      EXPECT_EQ(RunTokens(model, *cut, tokens, s - 3, s + 12),
                RunTokens(model, *again, tokens, s - 3, s + 12))
          << GetParam() << " prefix " << s << " cut by 3";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CacheState,
                         ::testing::Values("mixed_mtp_bf16", "long_hca128_bf16", "swa_fp8",
                                           "mixed_mtp_bf16+swa_full", "stories260K"));

TEST(CacheState, RefusesOtherLayoutsTruncationAndOverflow) {
  LoadedModel v4 = Load(V4("mixed_mtp_bf16"));
  LoadedModel swa = Load(V4("swa_fp8"));
  LoadedModel llama = Load(kStories);
  std::vector<uint8_t> v4_state, llama_state;
  const std::vector<int32_t> tokens = RandomTokens(*v4.model, 40, 5);
  auto c = v4.model->NewCache(64);
  RunTokens(*v4.model, *c, tokens, 0, 40);
  ASSERT_TRUE(c->SaveState(v4_state).ok());
  auto lc = llama.model->NewCache(64);
  RunTokens(*llama.model, *lc, RandomTokens(*llama.model, 40, 5), 0, 40);
  ASSERT_TRUE(lc->SaveState(llama_state).ok());

  struct Case {
    std::string what;
    SequenceCache* cache;
    std::vector<uint8_t> bytes;
    StatusCode code;
  };
  auto v4_small = v4.model->NewCache(20);
  auto v4_fresh = v4.model->NewCache(64);
  auto swa_cache = swa.model->NewCache(64);
  auto llama_fresh = llama.model->NewCache(64);
  auto llama_small = llama.model->NewCache(20);
  std::vector<Case> cases = {
      {"v4 state, llama cache", llama_fresh.get(), v4_state, StatusCode::kInvalidArgument},
      {"llama state, v4 cache", v4_fresh.get(), llama_state, StatusCode::kInvalidArgument},
      {"v4 state, another v4's cache", swa_cache.get(), v4_state, StatusCode::kInvalidArgument},
      {"v4 state, smaller cache", v4_small.get(), v4_state, StatusCode::kOutOfRange},
      {"llama state, smaller cache", llama_small.get(), llama_state, StatusCode::kOutOfRange},
      {"v4 state truncated", v4_fresh.get(),
       std::vector<uint8_t>(v4_state.begin(), v4_state.end() - 5), StatusCode::kDataLoss},
      {"llama state truncated", llama_fresh.get(),
       std::vector<uint8_t>(llama_state.begin(), llama_state.end() - 5), StatusCode::kDataLoss},
      {"v4 state with trailing bytes", v4_fresh.get(),
       [&] {
         auto b = v4_state;
         b.push_back(0);
         return b;
       }(),
       StatusCode::kDataLoss},
  };
  for (Case& k : cases) {
    const Status st = k.cache->LoadState(k.bytes);
    EXPECT_EQ(st.code(), k.code) << k.what << ": " << st.ToString();
    EXPECT_EQ(k.cache->length(), 0) << k.what;
  }
  // Truncated at every length: refused, never a crash.
  for (size_t n = 0; n < v4_state.size(); n += 97) {
    EXPECT_FALSE(v4_fresh->LoadState(std::span(v4_state).first(n)).ok()) << n;
  }
  // The same bytes load after the failures.
  EXPECT_TRUE(v4_fresh->LoadState(v4_state).ok());
  EXPECT_EQ(v4_fresh->length(), 40);
}

TEST(CacheState, ModelsWithoutStatesSayWhich) {
  auto echo =
      LoadEchoModel(std::string(DSV4_TEST_DATA_DIR) + "/tokenizer/deepseek_v4_tokenizer.json.gz");
  ASSERT_TRUE(echo.ok());
  std::vector<uint8_t> out;
  EXPECT_EQ(echo->model->NewCache(8)->SaveState(out).code(), StatusCode::kUnimplemented);
  EngineOptions o;
  o.kv_cache_dir = TempDir("echo").string();
  auto engine = Engine::Start(*echo, o);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(engine.status().message().find("--kv-cache-dir"), std::string::npos);
  fs::remove_all(o.kv_cache_dir);
}

// ---- The store ----

TEST(PromptStateStore, FindsTheLongestPrefixAcrossARestart) {
  LoadedModel m = Load(kStories);
  Model& model = *m.model;
  const fs::path dir = TempDir("restart");
  const std::vector<int32_t> tokens = RandomTokens(model, 100, 9);
  {
    auto store = PromptStateStore::Open({.dir = dir.string(), .fingerprint = 7});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (size_t n : {10, 30, 60}) {
      auto c = model.NewCache(128);
      RunTokens(model, *c, tokens, 0, n);
      (*store)->Save(std::span(tokens).first(n), *c);
      (*store)->Save(std::span(tokens).first(n), *c);  // saved once
    }
    (*store)->Flush();
    EXPECT_EQ((*store)->stats().writes, 3);
    EXPECT_EQ((*store)->stats().files, 3);
  }
  auto store = PromptStateStore::Open({.dir = dir.string(), .fingerprint = 7});
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->stats().files, 3);
  EXPECT_EQ((*store)->Longest(tokens), 60);
  EXPECT_EQ((*store)->Longest(std::span(tokens).first(45)), 30);
  std::vector<int32_t> other = tokens;
  other[5] ^= 1;
  EXPECT_EQ((*store)->Longest(other), 0);

  auto cache = model.NewCache(128);
  ASSERT_EQ((*store)->Load(std::span(tokens).first(80), *cache), 60);
  auto cold = model.NewCache(128);
  RunTokens(model, *cold, tokens, 0, 60);
  EXPECT_EQ(RunTokens(model, *cache, tokens, 60, 80), RunTokens(model, *cold, tokens, 60, 80));
  EXPECT_EQ((*store)->stats().hits, 1);
  EXPECT_EQ((*store)->stats().hit_tokens, 60);
  EXPECT_GT((*store)->stats().read_bytes, 0);
  // Another model's store in the same directory sees none of them.
  auto foreign = PromptStateStore::Open({.dir = dir.string(), .fingerprint = 8});
  ASSERT_TRUE(foreign.ok());
  EXPECT_EQ((*foreign)->stats().files, 0);
  EXPECT_EQ((*foreign)->Longest(tokens), 0);
  foreign->reset();
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 3);
  fs::remove_all(dir);
}

TEST(PromptStateStore, CorruptTruncatedAndInterruptedFilesNeverLoad) {
  LoadedModel m = Load(kStories);
  Model& model = *m.model;
  const fs::path dir = TempDir("corrupt");
  const std::vector<int32_t> tokens = RandomTokens(model, 50, 11);
  {
    auto store = PromptStateStore::Open({.dir = dir.string(), .fingerprint = 7});
    ASSERT_TRUE(store.ok());
    for (size_t n : {20, 40}) {
      auto c = model.NewCache(64);
      RunTokens(model, *c, tokens, 0, n);
      (*store)->Save(std::span(tokens).first(n), *c);
    }
  }
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 2u);
  std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) {
    return fs::file_size(a) > fs::file_size(b);
  });
  // The 40-token state: a flipped bit in its state (the head still reads).
  std::vector<uint8_t> bytes = ReadAll(files[0]);
  bytes[bytes.size() / 2] ^= 4;
  WriteAll(files[0], bytes);
  // A crash between write and rename leaves a temporary file; a truncated
  // file and a file that is not a state at all are there too.
  const std::vector<uint8_t> good = ReadAll(files[1]);
  // (pid 2^22 + 1 is above Linux's pid_max: its writer is gone.)
  const std::string tmp = std::string("x") + kStateFileExtension + ".tmp.4194305.0";
  WriteAll(dir / tmp, good);
  // A live writer's temporary file (this process's pid) stays.
  const std::string live =
      std::string("y") + kStateFileExtension + ".tmp." + std::to_string(::getpid()) + ".0";
  WriteAll(dir / live, good);
  WriteAll(dir / (std::string("truncated") + kStateFileExtension),
           std::span(good).first(good.size() - 9));
  WriteAll(dir / (std::string("junk") + kStateFileExtension), std::vector<uint8_t>(30, 'j'));
  auto store = PromptStateStore::Open({.dir = dir.string(), .fingerprint = 7});
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->stats().files, 2);  // the interrupted, truncated and junk files are gone
  EXPECT_FALSE(fs::exists(dir / tmp));
  EXPECT_TRUE(fs::exists(dir / live));
  EXPECT_FALSE(fs::exists(dir / (std::string("truncated") + kStateFileExtension)));
  EXPECT_FALSE(fs::exists(dir / (std::string("junk") + kStateFileExtension)));
  // The corrupt 40-token state is refused and removed; the 20-token one loads.
  auto cache = model.NewCache(64);
  EXPECT_EQ((*store)->Load(tokens, *cache), 0);
  EXPECT_EQ(cache->length(), 0);
  EXPECT_EQ((*store)->stats().rejected, 1);
  EXPECT_FALSE(fs::exists(files[0]));
  EXPECT_EQ((*store)->Load(tokens, *cache), 20);
  auto cold = model.NewCache(64);
  RunTokens(model, *cold, tokens, 0, 20);
  EXPECT_EQ(RunTokens(model, *cache, tokens, 20, 50), RunTokens(model, *cold, tokens, 20, 50));
  fs::remove_all(dir);
}

TEST(PromptStateStore, StaysUnderItsCapLeastRecentlyUsedFirst) {
  LoadedModel m = Load(kStories);
  Model& model = *m.model;
  const fs::path dir = TempDir("cap");
  const std::vector<int32_t> tokens = RandomTokens(model, 64, 13);
  auto c = model.NewCache(64);
  RunTokens(model, *c, tokens, 0, 32);
  std::vector<uint8_t> state;
  ASSERT_TRUE(c->SaveState(state).ok());
  const int64_t one =
      static_cast<int64_t>(EncodeStateFile(0, std::span(tokens).first(32), state).size());
  auto store =
      PromptStateStore::Open({.dir = dir.string(), .fingerprint = 7, .max_bytes = one * 5 / 2});
  ASSERT_TRUE(store.ok());
  // Four 32-token states (different tokens, same size).
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p(tokens.begin(), tokens.begin() + 32);
    p[0] = 2 + i;
    auto ci = model.NewCache(64);
    RunTokens(model, *ci, p, 0, 32);
    (*store)->Save(p, *ci);
    (*store)->Flush();
    prompts.push_back(p);
    if (i == 1) {  // the first one is used again: the second is now the oldest
      auto probe = model.NewCache(64);
      ASSERT_EQ((*store)->Load(prompts[0], *probe), 32);
    }
  }
  const PromptStoreStats st = (*store)->stats();
  EXPECT_EQ(st.files, 2);
  EXPECT_LE(st.bytes, one * 5 / 2);
  EXPECT_EQ(st.evictions, 2);
  EXPECT_EQ((*store)->Longest(prompts[1]), 0);  // the least recently used went first
  EXPECT_EQ((*store)->Longest(prompts[0]), 0);
  EXPECT_EQ((*store)->Longest(prompts[3]), 32);
  EXPECT_EQ((*store)->Longest(prompts[2]), 32);
  int64_t on_disk = 0;
  for (const auto& e : fs::directory_iterator(dir)) on_disk += static_cast<int64_t>(e.file_size());
  EXPECT_EQ(on_disk, st.bytes);
  // A state larger than the cap on its own is not written.
  auto tiny = PromptStateStore::Open(
      {.dir = TempDir("tiny").string(), .fingerprint = 7, .max_bytes = one / 2});
  ASSERT_TRUE(tiny.ok());
  (*tiny)->Save(prompts[0], *c);
  (*tiny)->Flush();
  EXPECT_EQ((*tiny)->stats().writes, 0);
  EXPECT_EQ((*tiny)->stats().files, 0);
  fs::remove_all(dir);
  fs::remove_all(TempDir("tiny"));
}

// ---- Engine and Generate ----

std::vector<int32_t> Greedy(Engine& engine, const std::vector<int32_t>& prompt, int64_t n,
                            int64_t* cached) {
  SequenceRequest r;
  r.prompt = prompt;
  r.max_tokens = n;
  r.sampling.temperature = 0.0f;
  r.top_logprobs = 5;
  r.stop_at_eos = false;
  auto h = engine.Submit({r});
  EXPECT_TRUE(h.ok());
  std::vector<int32_t> out;
  SequenceEvent ev;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (h.ok() && std::chrono::steady_clock::now() < deadline) {
    if (!(*h)->Next(&ev, 100ms)) continue;
    out.insert(out.end(), ev.tokens.begin(), ev.tokens.end());
    if (ev.finish != FinishReason::kNone) {
      EXPECT_NE(ev.finish, FinishReason::kError) << ev.error.ToString();
      if (cached) *cached = ev.cached_prompt_tokens;
      return out;
    }
  }
  ADD_FAILURE() << "timed out";
  return out;
}

TEST(EngineKvCacheDir, ARestartedEngineReusesSavedPromptsExactly) {
  for (const std::string& path : {V4("mixed_mtp_bf16"), kStories}) {
    LoadedModel m = Load(path);
    const fs::path dir = TempDir("engine");
    EngineOptions o;
    o.max_sequences = 1;
    o.ctx_size = 200;
    o.prefill_chunk = 7;
    o.kv_cache_dir = dir.string();
    o.state_fingerprint = ModelFingerprint(m);
    EngineOptions cold_options = o;
    cold_options.kv_cache_dir.clear();
    cold_options.reuse_prefix = false;
    const std::vector<int32_t> tokens = RandomTokens(*m.model, 120, 17);
    const std::vector<int32_t> first(tokens.begin(), tokens.begin() + 61);
    {
      auto e = Engine::Start(m, o);
      ASSERT_TRUE(e.ok()) << e.status().ToString();
      int64_t cached = -1;
      Greedy(**e, first, 3, &cached);
      EXPECT_EQ(cached, 0);
      (*e)->FlushStates();
      EXPECT_EQ((*e)->Metrics().disk_state_writes_total, 1);
    }
    auto e = Engine::Start(m, o);  // a new process, as far as the engine knows
    auto cold = Engine::Start(m, cold_options);
    ASSERT_TRUE(e.ok() && cold.ok());
    int64_t cached = -1;
    EXPECT_EQ(Greedy(**e, tokens, 5, &cached), Greedy(**cold, tokens, 5, nullptr)) << path;
    EXPECT_EQ(cached, 61) << path;
    // The same prompt again: the saved state is cut back one token.
    cached = -1;
    auto e2 = Engine::Start(m, o);
    ASSERT_TRUE(e2.ok());
    EXPECT_EQ(Greedy(**e2, first, 4, &cached), Greedy(**cold, first, 4, nullptr)) << path;
    EXPECT_EQ(cached, 60) << path;
    const EngineMetrics mt = (*e2)->Metrics();
    EXPECT_EQ(mt.disk_state_hits_total, 1);
    EXPECT_EQ(mt.disk_state_tokens_total, 61);
    EXPECT_EQ(mt.prefix_hits_total, 1);
    EXPECT_GT(mt.disk_state_read_bytes_total, 0);
    // Another fingerprint (other runtime options) finds nothing.
    EngineOptions other = o;
    other.state_fingerprint = ModelFingerprint(m) + 1;
    auto e3 = Engine::Start(m, other);
    ASSERT_TRUE(e3.ok());
    Greedy(**e3, tokens, 1, &cached);
    EXPECT_EQ(cached, 0) << path;
    for (auto* engine : {&e, &e2, &e3}) (*engine)->reset();  // their writes end first
    fs::remove_all(dir);
  }
}

TEST(EngineKvCacheDir, NeedsPrefixReuseAndAPositiveCap) {
  LoadedModel m = Load(kStories);
  EngineOptions o;
  o.kv_cache_dir = TempDir("flags").string();
  o.reuse_prefix = false;
  auto a = Engine::Start(m, o);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("prefix reuse"), std::string::npos);
  o.reuse_prefix = true;
  o.kv_cache_max_bytes = 0;
  auto b = Engine::Start(m, o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  fs::remove_all(o.kv_cache_dir);
}

TEST(GeneratePromptCache, ReusesTheFileAndGivesTheColdOutput) {
  LoadedModel m = Load(kStories);
  const fs::path dir = TempDir("generate");
  fs::create_directories(dir);
  const std::vector<int32_t> tokens = RandomTokens(*m.model, 60, 19);
  auto generate = [&](size_t n, const std::string& cache, int64_t* cached) {
    GenerateOptions g;
    g.max_tokens = 8;
    g.sampling.temperature = 0.0f;
    g.stop_at_eos = false;
    g.prompt_cache = cache;
    g.state_fingerprint = ModelFingerprint(m);
    std::vector<int32_t> out;
    auto st = Generate(m, std::span(tokens).first(n), g,
                       [&](int32_t id, std::string_view) { out.push_back(id); });
    EXPECT_TRUE(st.ok());
    if (cached) *cached = st->cached_prompt_tokens;
    return out;
  };
  const std::string file = (dir / "prompt.dsv4kv").string();
  int64_t cached = -1;
  EXPECT_EQ(generate(40, file, &cached), generate(40, "", nullptr));
  EXPECT_EQ(cached, 0);
  EXPECT_EQ(generate(40, file, &cached), generate(40, "", nullptr));
  EXPECT_EQ(cached, 39);
  EXPECT_EQ(generate(60, file, &cached), generate(60, "", nullptr));
  EXPECT_EQ(cached, 40);
  // Another fingerprint: not used, and the output is still the cold one.
  GenerateOptions g;
  g.max_tokens = 8;
  g.sampling.temperature = 0.0f;
  g.stop_at_eos = false;
  g.prompt_cache = file;
  g.prompt_cache_ro = true;
  g.state_fingerprint = ModelFingerprint(m) ^ 1;
  auto st = Generate(m, tokens, g, [](int32_t, std::string_view) {});
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->cached_prompt_tokens, 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dsv4
