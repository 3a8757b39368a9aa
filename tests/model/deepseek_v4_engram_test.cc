// Engram (model/deepseek_v4/engram.h) against DeepSeek's inference/engram.py
// and model.py's Engram module (tests/data/deepseek_v41/engram, made by
// tools/reference/make_engram_goldens.py): bucket layouts, hash multipliers,
// hash ids over prefill/decode splits and dead spans, and the block's output.
#include "model/deepseek_v4/engram.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/float_types.h"
#include "base/thread_pool.h"
#include "io/safetensors.h"
#include "tokenizer/bpe_tokenizer.h"  // ReadFileMaybeGzip, for the golden token map

namespace dsv4::deepseek_v4 {
namespace {

using Json = nlohmann::json;

const std::string kDir = std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v41/engram/";

const Json& Goldens() {
  static const Json g = [] {
    std::ifstream in(kDir + "engram_goldens.json");
    CHECK(in.good(), "engram_goldens.json missing");
    return Json::parse(in);
  }();
  return g;
}

EngramParams ParamsFrom(const Json& j) {
  EngramParams p;
  p.layer_ids = j["engram_layer_ids"].get<std::vector<int32_t>>();
  p.num_embeddings = j["engram_num_embeddings"].get<std::vector<int64_t>>();
  p.max_ngram_size = j["engram_max_ngram_size"].get<int32_t>();
  p.vocab_size = j["engram_vocab_size"].get<int64_t>();
  p.n_heads = j["engram_n_heads"].get<int32_t>();
  p.head_dim = j["engram_head_dim"].get<int32_t>();
  p.pad_id = j["engram_pad_id"].get<int32_t>();
  p.compressed_vocab_size = j["engram_compressed_vocab_size"].get<int64_t>();
  return p;
}

EngramParams Released() {
  for (const Json& c : Goldens()["layouts"]) {
    if (c["name"] == "released") return ParamsFrom(c["params"]);
  }
  CHECK(false, "no released layout in the goldens");
  return {};
}

// The golden token map (format: tests/data/deepseek_v41/engram/README.md).
std::vector<int32_t> GoldenTokenMap(int32_t* count) {
  auto raw = ReadFileMaybeGzip(kDir + "token_map.txt.gz");
  CHECK(raw.ok(), "%s", raw.status().ToString().c_str());
  std::vector<int32_t> map;
  int32_t fresh = 0;
  size_t pos = raw->find('\n') + 1;  // skip the header
  while (pos < raw->size()) {
    const size_t end = raw->find('\n', pos);
    const std::string line = raw->substr(pos, end - pos);
    map.push_back(line == "+" ? fresh++ : std::stoi(line));
    pos = end + 1;
  }
  *count = fresh;
  return map;
}

TEST(EngramPrimes, IsPrime64) {
  // Against trial division below 20000.
  for (uint64_t n = 0; n < 20000; ++n) {
    bool prime = n >= 2;
    for (uint64_t d = 2; d * d <= n && prime; ++d) prime = n % d != 0;
    ASSERT_EQ(IsPrime64(n), prime) << n;
  }
  EXPECT_TRUE(IsPrime64((uint64_t{1} << 61) - 1));
  EXPECT_TRUE(IsPrime64((uint64_t{1} << 62) - 57));           // the largest prime below 2^62
  EXPECT_TRUE(IsPrime64(18446744073709551557ull));            // the largest below 2^64
  EXPECT_FALSE(IsPrime64(561));                               // Carmichael
  EXPECT_FALSE(IsPrime64(3215031751ull));                     // strong pseudoprime to 2, 3, 5, 7
  EXPECT_FALSE(IsPrime64(3825123056546413051ull));            // strong pseudoprime to 2 .. 23
  EXPECT_FALSE(IsPrime64(uint64_t{4611686014132420609ull}));  // (2^31 − 1)^2
}

TEST(EngramLayout, MatchesReference) {
  ASSERT_EQ(Goldens()["layouts"].size(), 3u);
  for (const Json& c : Goldens()["layouts"]) {
    auto layout = MakeEngramLayout(ParamsFrom(c["params"]));
    ASSERT_TRUE(layout.ok()) << c["name"] << ": " << layout.status().ToString();
    std::vector<int64_t> primes, offsets;
    for (const Json& layer : c["primes"]) {
      for (const Json& per_ngram : layer) {
        for (const Json& p : per_ngram) primes.push_back(p.get<int64_t>());
      }
    }
    for (const Json& layer : c["offsets"]) {
      for (const Json& o : layer) offsets.push_back(o.get<int64_t>());
    }
    EXPECT_EQ(layout->primes, primes) << c["name"];
    EXPECT_EQ(layout->offsets, offsets) << c["name"];
  }
}

TEST(EngramLayout, ReleasedTablesAreExactlyTheBuckets) {
  auto layout = MakeEngramLayout(Released());
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_EQ(layout->n_cols(), 24);
  for (int32_t l = 0; l < 2; ++l) {
    const int64_t last = l * 24 + 23;
    EXPECT_EQ(layout->offsets[last] + layout->primes[last], layout->num_embeddings[l]);
  }
  EXPECT_EQ(layout->LayerIndex(14), 1);
  EXPECT_EQ(layout->LayerIndex(2), -1);
  EXPECT_EQ(layout->BytesPerTokenPerLayer(), 24 * (256 + 8));
}

TEST(EngramLayout, RejectsBadParams) {
  struct Case {
    const char* what;
    void (*edit)(EngramParams&);
    const char* needle;
  };
  const Case cases[] = {
      {"table too small", [](EngramParams& p) { p.num_embeddings[1] -= 1; },
       "engram_num_embeddings[1]"},
      {"no layers",
       [](EngramParams& p) {
         p.layer_ids.clear();
         p.num_embeddings.clear();
       },
       "engram_layer_ids"},
      {"duplicate layer", [](EngramParams& p) { p.layer_ids[1] = 1; }, "twice"},
      {"sizes", [](EngramParams& p) { p.num_embeddings.pop_back(); }, "engram_num_embeddings"},
      {"ngram", [](EngramParams& p) { p.max_ngram_size = 1; }, "engram_max_ngram_size"},
      {"heads", [](EngramParams& p) { p.n_heads = 0; }, "engram_n_heads"},
      {"head_dim", [](EngramParams& p) { p.head_dim = 48; }, "engram_head_dim"},
      {"vocab", [](EngramParams& p) { p.vocab_size = 0; }, "engram_vocab_size"},
      {"vocab huge", [](EngramParams& p) { p.vocab_size = int64_t{1} << 61; }, "engram_vocab_size"},
      {"compressed", [](EngramParams& p) { p.compressed_vocab_size = 0; },
       "engram_compressed_vocab_size"},
      {"pad", [](EngramParams& p) { p.pad_id = -1; }, "engram_pad_id"},
  };
  for (const Case& c : cases) {
    EngramParams p = Released();
    c.edit(p);
    auto r = MakeEngramLayout(p);
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(r.status().ToString().find(c.needle), std::string::npos)
        << c.what << ": " << r.status().ToString();
  }
}

TEST(EngramHashMultipliers, MatchReference) {
  ASSERT_GE(Goldens()["multipliers"].size(), 12u);
  for (const Json& c : Goldens()["multipliers"]) {
    const auto ids = c["layer_ids"].get<std::vector<int32_t>>();
    std::vector<int64_t> want;
    for (const Json& row : c["multipliers"]) {
      for (const Json& v : row) want.push_back(v.get<int64_t>());
    }
    EXPECT_EQ(EngramHashMultipliers(ids, c["max_ngram_size"].get<int32_t>(),
                                    c["compressed_vocab_size"].get<int64_t>()),
              want)
        << "vocab " << c["compressed_vocab_size"] << " n " << c["max_ngram_size"];
  }
}

struct HashCase {
  std::string name;
  EngramLayout layout;
  std::vector<int32_t> tokens;
  std::vector<int64_t> splits;
  std::vector<uint8_t> live;  // empty: all live
  std::vector<int64_t> want;  // [T][n_layers][n_cols]
};

std::vector<HashCase> HashCases(EngramHasher* released_hasher_out = nullptr) {
  std::vector<HashCase> out;
  for (const Json& c : Goldens()["hashes"]) {
    HashCase h;
    h.name = c["name"].get<std::string>();
    auto layout = MakeEngramLayout(ParamsFrom(c["params"]));
    CHECK(layout.ok(), "%s", layout.status().ToString().c_str());
    h.layout = *layout;
    h.tokens = c["tokens"].get<std::vector<int32_t>>();
    h.splits = c["split"].get<std::vector<int64_t>>();
    if (!c["dead_span"].is_null()) {
      h.live.assign(h.tokens.size(), 1);
      for (int64_t i = c["dead_span"][0].get<int64_t>(); i < c["dead_span"][1].get<int64_t>();
           ++i) {
        h.live[static_cast<size_t>(i)] = 0;
      }
    }
    for (const Json& pos : c["hash_ids"]) {
      for (const Json& layer : pos) {
        for (const Json& v : layer) h.want.push_back(v.get<int64_t>());
      }
    }
    out.push_back(std::move(h));
  }
  return out;
}

EngramHasher HasherFor(const HashCase& c) {
  std::vector<int32_t> map;
  int32_t count = 0;
  if (c.name.rfind("released", 0) == 0) {
    map = GoldenTokenMap(&count);
  } else {
    // The goldens' stub tokenizer: tokens 2k and 2k+1 normalize alike.
    for (int32_t i = 0; i < 40; ++i) map.push_back(i / 2);
    count = 20;
  }
  auto h = EngramHasher::Make(c.layout, std::move(map), count);
  CHECK(h.ok(), "%s", h.status().ToString().c_str());
  return std::move(h).value();
}

TEST(EngramHasher, MatchesReferenceInChunks) {
  const std::vector<HashCase> cases = HashCases();
  ASSERT_EQ(cases.size(), 4u);
  for (const HashCase& c : cases) {
    const EngramHasher hasher = HasherFor(c);
    const int64_t per_pos = int64_t{c.layout.n_layers()} * c.layout.n_cols();
    ASSERT_EQ(static_cast<int64_t>(c.want.size()), per_pos * static_cast<int64_t>(c.tokens.size()));
    // In one call, and in the reference's prefill/decode chunks.
    for (bool chunked : {false, true}) {
      EngramSequence seq(hasher);
      std::vector<int64_t> got(c.want.size());
      std::vector<int64_t> bounds = chunked ? c.splits : std::vector<int64_t>{};
      bounds.push_back(static_cast<int64_t>(c.tokens.size()));
      int64_t start = 0;
      for (int64_t end : bounds) {
        const std::span<const int32_t> toks(c.tokens.data() + start, end - start);
        const std::span<const uint8_t> live = c.live.empty()
                                                  ? std::span<const uint8_t>()
                                                  : std::span(c.live).subspan(start, end - start);
        seq.Append(toks, live, got.data() + start * per_pos);
        start = end;
      }
      EXPECT_EQ(got, c.want) << c.name << (chunked ? " chunked" : " whole");
    }
  }
}

TEST(EngramHasher, TruncateRestoresHistory) {
  for (const HashCase& c : HashCases()) {
    const EngramHasher hasher = HasherFor(c);
    const int64_t per_pos = int64_t{c.layout.n_layers()} * c.layout.n_cols();
    const int64_t n = static_cast<int64_t>(c.tokens.size());
    const std::span<const uint8_t> live_all(c.live);
    auto live = [&](int64_t b, int64_t e) {
      return c.live.empty() ? std::span<const uint8_t>() : live_all.subspan(b, e - b);
    };
    EngramSequence seq(hasher);
    std::vector<int64_t> got(c.want.size());
    seq.Append(c.tokens, live(0, n), got.data());
    // A rejected draft of junk tokens, then the real continuation.
    const int64_t cut = c.splits[0];
    seq.Truncate(cut);
    std::vector<int32_t> junk(5, 7);
    std::vector<int64_t> junk_out(5 * per_pos);
    seq.Append(junk, {}, junk_out.data());
    seq.Truncate(cut);
    std::fill(got.begin() + cut * per_pos, got.end(), -1);
    seq.Append(std::span(c.tokens).subspan(cut), live(cut, n), got.data() + cut * per_pos);
    EXPECT_EQ(got, c.want) << c.name;
    EXPECT_EQ(seq.size(), n);
  }
}

TEST(EngramHasher, StatelessHashWithExplicitContext) {
  const HashCase c = HashCases()[2];  // tiny, no dead span
  const EngramHasher hasher = HasherFor(c);
  const int64_t per_pos = int64_t{c.layout.n_layers()} * c.layout.n_cols();
  std::vector<int32_t> compressed;
  for (int32_t t : c.tokens) compressed.push_back(hasher.Compress(t));
  // The whole history as context, or only the last max_ngram − 1: same ids.
  const int64_t at = 20;
  std::vector<int64_t> a(per_pos * 5), b(per_pos * 5);
  const std::span<const int32_t> all(compressed);
  hasher.Hash(all.first(at), all.subspan(at, 5), a.data());
  hasher.Hash(all.subspan(at - (c.layout.max_ngram_size - 1), c.layout.max_ngram_size - 1),
              all.subspan(at, 5), b.data());
  EXPECT_EQ(a, b);
  EXPECT_TRUE(std::equal(a.begin(), a.end(), c.want.begin() + at * per_pos));
  // Buckets collide in the tiny config (primes from 5): the test data exercises it.
  std::vector<int64_t> col0;
  for (size_t t = 0; t < c.tokens.size(); ++t) col0.push_back(c.want[t * per_pos]);
  std::sort(col0.begin(), col0.end());
  EXPECT_NE(std::adjacent_find(col0.begin(), col0.end()), col0.end());
}

TEST(EngramHasher, RejectsMismatchedTokenMap) {
  auto layout = MakeEngramLayout(Released());
  ASSERT_TRUE(layout.ok());
  std::vector<int32_t> map(100);
  for (int32_t i = 0; i < 100; ++i) map[i] = i;
  auto r = EngramHasher::Make(*layout, map, 100);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("engram_compressed_vocab_size is 99092"), std::string::npos);
  EngramLayout small = *layout;
  small.compressed_vocab_size = 100;
  small.pad_id = 100;
  EXPECT_FALSE(EngramHasher::Make(small, map, 100).ok());  // pad_id not a token
  small.pad_id = 2;
  map[5] = 100;
  EXPECT_FALSE(EngramHasher::Make(small, map, 100).ok());  // an id outside the count
}

// ---------------------------------------------------------------------------
// The block
// ---------------------------------------------------------------------------

struct Block {
  std::unique_ptr<SafetensorsFile> file;
  EngramLayout layout;
  EngramWeights w;
  std::vector<float> wkv_f32;  // exact dequantization of the FP8 wkv (32×32 tiles)
  int64_t hc = 4, dim = 64, n_tokens = 0;
  std::vector<int64_t> ids;
  std::vector<float> x, y, y_masked;
  std::vector<uint8_t> live;
};

std::vector<float> F32(const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  DequantizeRow(t.dtype, t.data, t.numel(), out.data());
  return out;
}

Block LoadBlock() {
  Block b;
  auto f = OpenSafetensors(kDir + "engram_block.safetensors");
  CHECK(f.ok(), "%s", f.status().ToString().c_str());
  b.file = std::move(f).value();
  auto get = [&](const char* name) {
    const TensorInfo* info = b.file->Find(name);
    CHECK(info != nullptr, "missing %s", name);
    return info->view();
  };
  EngramParams p;
  p.layer_ids = {3, 5};
  p.num_embeddings = {1 << 20, 1 << 20};
  p.max_ngram_size = 3;
  p.vocab_size = 50;
  p.n_heads = 2;
  p.head_dim = 64;
  p.pad_id = 2;
  p.compressed_vocab_size = 32;
  auto sized = MakeEngramLayout(p);
  CHECK(sized.ok(), "layout");
  for (int l = 0; l < 2; ++l) {
    const int64_t last = (l + 1) * sized->n_cols() - 1;
    p.num_embeddings[l] = sized->offsets[last] + sized->primes[last];
  }
  auto layout = MakeEngramLayout(p);
  CHECK(layout.ok(), "layout");
  b.layout = *layout;
  b.w.embed = get("embed.weight");
  b.w.embed_scale = get("embed.scale");
  const TensorView wq = get("wkv.weight"), ws = get("wkv.scale");
  const int64_t n = wq.sizes[0], k = wq.sizes[1];
  b.wkv_f32.resize(static_cast<size_t>(n * k));
  const auto* q8 = static_cast<const uint8_t*>(wq.data);
  const auto* s8 = static_cast<const uint8_t*>(ws.data);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      b.wkv_f32[r * k + c] =
          Fp8E4m3ToF32(q8[r * k + c]) * E8m0ToF32(s8[(r / 32) * (k / 32) + c / 32]);
    }
  }
  b.w.wkv.weight = TensorView::Contiguous(b.wkv_f32.data(), DType::kF32, {n, k});
  b.w.wkv.format = LinearFormat::kDense;
  auto qk = EngramGateWeight(get("q_weight"), get("k_weight"), b.hc, b.dim);
  CHECK(qk.ok(), "%s", qk.status().ToString().c_str());
  b.w.qk = *qk;
  const TensorView ids = get("hash_ids");
  b.n_tokens = ids.sizes[0];
  CHECK(ids.dtype == DType::kI32, "hash_ids: int32");
  for (int64_t i = 0; i < ids.numel(); ++i)
    b.ids.push_back(static_cast<const int32_t*>(ids.data)[i]);
  b.x = F32(get("x"));
  b.y = F32(get("y"));
  b.y_masked = F32(get("y_masked"));
  const TensorView mask = get("token_mask");
  for (int64_t i = 0; i < mask.numel(); ++i) {
    b.live.push_back(static_cast<const int32_t*>(mask.data)[i] != 0 ? 1 : 0);
  }
  return b;
}

double MaxRelErr(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst =
        std::max(worst, std::fabs(double{got[i]} - want[i]) / (std::fabs(double{want[i]}) + 1e-3));
  }
  return worst;
}

TEST(EngramForward, MatchesReferenceBlock) {
  Block b = LoadBlock();
  ASSERT_TRUE(CheckEngramWeights(b.w, b.layout, 1, b.hc, b.dim, "layers.5.engram.").ok());
  ThreadPool pool(3);  // more threads than the split needs: chunks of 4 tokens
  EngramScratch scratch;
  EngramReadStats stats;
  const int64_t n_cols = b.layout.n_cols();
  std::vector<float> h = b.x;
  EngramForward(pool, h.data(), b.ids.data(), n_cols, nullptr, b.n_tokens, b.w, b.layout, b.hc,
                b.dim, 1e-20f, /*act_quant=*/true, scratch, &stats);
  EXPECT_LT(MaxRelErr(h, b.y), 2e-5);
  EXPECT_EQ(stats.rows, b.n_tokens * n_cols);
  EXPECT_EQ(stats.bytes, b.n_tokens * b.layout.BytesPerTokenPerLayer());

  // The rows are FP8 in 32-blocks already, so the act_quant simulation leaves
  // them as they are (only a block whose amax is under act_quant's 1e-4 floor
  // could change): bit-identical output without it.
  std::vector<float> h_noq = b.x;
  EngramForward(pool, h_noq.data(), b.ids.data(), n_cols, nullptr, b.n_tokens, b.w, b.layout, b.hc,
                b.dim, 1e-20f, /*act_quant=*/false, scratch, nullptr);
  EXPECT_EQ(h_noq, h);

  // The comparison sees the gate: q_weight alone instead of q · k fails it.
  EngramWeights q_only = b.w;
  auto q = EngramGateWeight(b.file->Find("q_weight")->view(), b.file->Find("q_weight")->view(),
                            b.hc, b.dim);
  ASSERT_TRUE(q.ok());
  for (size_t i = 0; i < q_only.qk.size(); ++i) q_only.qk[i] = std::sqrt((*q)[i]);
  std::vector<float> h_bad = b.x;
  EngramForward(pool, h_bad.data(), b.ids.data(), n_cols, nullptr, b.n_tokens, q_only, b.layout,
                b.hc, b.dim, 1e-20f, true, scratch, nullptr);
  EXPECT_GT(MaxRelErr(h_bad, b.y), 1e-3);

  // One decoded token alone: the same as its row of the batch.
  const int64_t per_tok = b.hc * b.dim;
  std::vector<float> one(b.x.begin() + 2 * per_tok, b.x.begin() + 3 * per_tok);
  EngramForward(pool, one.data(), b.ids.data() + 2 * n_cols, n_cols, nullptr, 1, b.w, b.layout,
                b.hc, b.dim, 1e-20f, true, scratch, nullptr);
  EXPECT_TRUE(std::equal(one.begin(), one.end(), h.begin() + 2 * per_tok));

  // A dead token passes through untouched.
  std::vector<float> hm = b.x;
  EngramForward(pool, hm.data(), b.ids.data(), n_cols, b.live.data(), b.n_tokens, b.w, b.layout,
                b.hc, b.dim, 1e-20f, true, scratch, nullptr);
  EXPECT_LT(MaxRelErr(hm, b.y_masked), 2e-5);
  const int64_t per_token = b.hc * b.dim;
  ASSERT_EQ(b.live[4], 0);
  EXPECT_TRUE(std::equal(hm.begin() + 4 * per_token, hm.begin() + 5 * per_token,
                         b.x.begin() + 4 * per_token));
}

TEST(EngramForward, CheckWeightsNamesTheBadTensor) {
  Block b = LoadBlock();
  EngramWeights w = b.w;
  w.embed_scale = TensorView::Contiguous(w.embed_scale.data, DType::kE8m0, {w.embed.sizes[0], 3});
  Status s = CheckEngramWeights(w, b.layout, 1, b.hc, b.dim, "layers.5.engram.");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("layers.5.engram.embed.scale"), std::string::npos) << s.ToString();
  w = b.w;
  w.embed = TensorView::Contiguous(w.embed.data, DType::kFp8E4m3, {100, 64});  // too few rows
  s = CheckEngramWeights(w, b.layout, 1, b.hc, b.dim, "layers.5.engram.");
  EXPECT_NE(s.ToString().find("layers.5.engram.embed.weight"), std::string::npos) << s.ToString();
  s = CheckEngramWeights(b.w, b.layout, 1, b.hc, 32, "layers.5.engram.");  // dim mismatch
  EXPECT_NE(s.ToString().find("wkv.weight"), std::string::npos) << s.ToString();
  EXPECT_FALSE(CheckEngramWeights(b.w, b.layout, 2, b.hc, b.dim, "x.").ok());
  const TensorView q = b.file->Find("q_weight")->view();
  auto bad = EngramGateWeight(q, q, b.hc, b.dim + 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("q_weight"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::deepseek_v4
