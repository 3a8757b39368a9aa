// DeepSeek-V4 from llama.cpp `deepseek4` GGUF files of every ggml quant type,
// against llama.cpp's logits on the same files (tests/data/deepseek_v4/gguf_types,
// made by tools/goldens/ds4_gguf_types.py). The model is random, of two layers
// (CSA, HCA), and every matrix — token embedding, attention, compressors and
// their ape tables, indexer, hyper-connection mixes, shared and routed experts,
// output head — was quantised by `llama-quantize --pure` to the file's type (the
// routers, norms, biases and sinks stay f32), but the token embedding, which is
// f32 (`--token-embedding-type f32`) and carries a relative noise of 1e-3 (the
// data's README, "Why the embedding is noised", and below).
//
// For each type:
//  - FileHoldsItsType: every matrix but token_embd is of the type, token_embd and
//    the rest f32, so the test can't pass on a file of another type;
//  - LogitsMatchLlamaCpp: the 64-id prompt, logits at every position, against
//    llama.cpp's on the file (one decode, 1 thread, f32 KV cache, flash attention
//    off), with ExpectClose's metrics of deepseek_v4_gguf_test.cc: mean |Δ|,
//    max |Δ|, top-1 agreement, positions whose max |Δ| ≤ 0.25 (printed);
//  - F32ActivationsMatchLlamaCppOnTheDequantisedWeights: dsv4 with f32
//    activations against llama.cpp on the file's weights dequantised to f32 by
//    gguf-py: the same arithmetic, so max |Δ| ≤ kDequantisedMaxAbs and every
//    top-1 equal (every type: max |Δ| < 1e-5): a wrong decoding of any
//    block shows here.
//
// Both sides run the same weights. What LogitsMatchLlamaCpp leaves to differ is
// llama.cpp's quantisation of the activations of each product (q8_0 for
// q4_0/q5_0/q8_0/iq4_nl, q8_1 for q4_1/q5_1, q8_K for the k- and i-quants),
// which dsv4 reproduces with kQ8K (its rounding included) on every CPU, so
// that what remains is the few activations within float rounding of a .5 tie
// of that rounding, which a last-bit difference upstream sends the other way
// (each a step of one in a q8 code, carried on to the later positions).
// The token embedding carries a noise so that such ties are as rare as for
// random values (on its lattice, the first layer's activations hit them 10 to
// 600 times as often, and the logits were defined only to ~0.02 mean |Δ|: the
// data's README). Every expert is used (top-2 of 2) and the indexer keeps
// every compressed entry (top-16 of 16), so no routing or indexer choice can
// flip (with a top-4, llama.cpp and dsv4 choose differently at a few positions
// even on f32 weights). The logits have standard deviation about 1.
//
// Measured on these files with the dsv4 of their making (AVX2, no AVX-512):
//
// | type    | mean |Δ| | max |Δ| | top-1 | type    | mean |Δ| | max |Δ| | top-1 |
// |---------|----------|---------|-------|---------|----------|---------|-------|
// | q4_0    | 0.00002  | 0.003   | 64/64 | q6_K    | 0.0002   | 0.038   | 64/64 |
// | q4_1    | 0.0048   | 0.083   | 63/64 | iq2_xxs | 0.0019   | 0.080   | 64/64 |
// | q5_0    | 0.0029   | 0.076   | 63/64 | iq2_xs  | 0.0023   | 0.108   | 63/64 |
// | q5_1    | 0.0047   | 0.082   | 64/64 | iq3_xxs | 0.0017   | 0.084   | 64/64 |
// | q8_0    | 0.0002   | 0.031   | 64/64 | iq1_s   | 0.0014   | 0.064   | 64/64 |
// | q2_K    | 0.0020   | 0.096   | 64/64 | iq4_nl  | 0.0012   | 0.044   | 64/64 |
// | q3_K    | 0.0017   | 0.062   | 64/64 | iq3_s   | 0.0044   | 0.071   | 63/64 |
// | q4_K    | 0.0018   | 0.086   | 64/64 | iq2_s   | 0.0002   | 0.040   | 64/64 |
// | q5_K    | 0.0009   | 0.074   | 63/64 | iq4_xs  | 0.0002   | 0.046   | 64/64 |
// |         |          |         |       | iq1_m   | 0.0016   | 0.061   | 64/64 |
//
// Which ties flip is chance: on a CPU where dsv4's f32 arithmetic differs in
// the last bit (another SIMD width) they are others. The same files made with
// three other noise seeds (57 type-seed pairs, not kept) gave mean |Δ| up to
// 0.013 and max |Δ| up to 0.164 (top-1 ≥ 61/64), the type mattering no more
// than the seed (q8_0's mean over the four seeds: 0.0002, 0.010, 0.010,
// 0.0001). So every type has the same tolerances, ~1.5× the worst of those and
// ~4× (mean) / ~2.3× (max) the worst above:
//
// | types | mean |Δ| | max |Δ| | top-1 | within 0.25 |
// |-------|----------|---------|-------|-------------|
// | all   | ≤ 0.02   | ≤ 0.25  | ≥ 90% | 100%        |
//
// (Activations left in f32 would be 0.017–0.018 mean |Δ| from these goldens
// for the 32-value block types and 0.025–0.027 for the 256-value ones, by
// llama.cpp's own figures: the data's README, "What the activation
// quantisation costs"; the bound on the mean catches that for the latter only.)
//
// Measured with the dsv4 of the golden's making: the README of the data directory.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../common/scoped_kquant_activations.h"
#include "deepseek_v4_test_util.h"
#include "io/gguf.h"
#include "model/deepseek_v4/gguf_reader.h"
#include "model/deepseek_v4/model.h"

namespace dsv4::deepseek_v4 {
namespace {

using testing::DataDir;
using testing::ReadF32File;
using testing::ReadIds;

constexpr int64_t kVocab = 512;
constexpr int64_t kPromptLen = 64;
// The bound of the comparison on the dequantised weights, for every type.
constexpr double kDequantisedMaxAbs = 1e-3;
// Matrices of the two-layer model that llama-quantize quantises: token_embd (to
// kEmbeddingType here), output, output_hc_fn; per layer attn_q_a, attn_q_b, attn_kv, attn_output_a,
// attn_output_b, hc_attn_fn, hc_ffn_fn, attn_compressor_{kv,gate,ape},
// ffn_{gate,up,down}_shexp, ffn_{gate,up,down}_exps (16); the CSA layer's
// indexer.attn_q_b, indexer.proj, indexer_compressor_{kv,gate,ape} (5).
constexpr int kQuantisedTensors = 3 + 2 * 16 + 5;
// The type of token_embd in every file (`llama-quantize --token-embedding-type`).
constexpr uint32_t kEmbeddingType = static_cast<uint32_t>(GgmlType::kF32);

std::string TypesDir() { return DataDir() + "/gguf_types"; }

struct TypeCase {
  const char* file;  // <file>.gguf and <file>_llamacpp_logits.f32
  GgmlType type;
  double mean_abs;  // tolerances, as the table above
  double max_abs;
  int top1_percent;
  int quarter_percent;
};

void PrintTo(const TypeCase& c, std::ostream* os) { *os << c.file; }

// Tolerances: the table at the top.
constexpr TypeCase Case(const char* file, GgmlType type) {
  return {file, type, 0.02, 0.25, 90, 100};
}

const TypeCase kCases[] = {
    Case("q4_0", GgmlType::kQ4_0),       Case("q4_1", GgmlType::kQ4_1),
    Case("q5_0", GgmlType::kQ5_0),       Case("q5_1", GgmlType::kQ5_1),
    Case("q8_0", GgmlType::kQ8_0),       Case("q2_k", GgmlType::kQ2_K),
    Case("q3_k", GgmlType::kQ3_K),       Case("q4_k", GgmlType::kQ4_K),
    Case("q5_k", GgmlType::kQ5_K),       Case("q6_k", GgmlType::kQ6_K),
    Case("iq2_xxs", GgmlType::kIQ2_XXS), Case("iq2_xs", GgmlType::kIQ2_XS),
    Case("iq3_xxs", GgmlType::kIQ3_XXS), Case("iq1_s", GgmlType::kIQ1_S),
    Case("iq4_nl", GgmlType::kIQ4_NL),   Case("iq3_s", GgmlType::kIQ3_S),
    Case("iq2_s", GgmlType::kIQ2_S),     Case("iq4_xs", GgmlType::kIQ4_XS),
    Case("iq1_m", GgmlType::kIQ1_M),
};

std::string GgmlName(uint32_t t) {
  auto traits = GetGgmlTypeTraits(t);
  return traits ? std::string(traits->name) : "ggml type " + std::to_string(t);
}

class DeepSeekV4GgufTypes : public ::testing::TestWithParam<TypeCase> {
 protected:
  std::string Path() const { return TypesDir() + "/" + GetParam().file + ".gguf"; }
};

// Every matrix llama-quantize quantises but token_embd is of the file's type,
// token_embd of kEmbeddingType, the rest f32.
TEST_P(DeepSeekV4GgufTypes, FileHoldsItsType) {
  const TypeCase& c = GetParam();
  auto f = OpenGguf(Path());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  int of_the_type = 0;
  bool embedding = false;
  for (const GgufTensorInfo& t : (*f)->ggml_tensors()) {
    const bool matrix = t.shape.size() >= 2 && t.name.find("ffn_gate_inp") == std::string::npos;
    uint32_t want = matrix ? static_cast<uint32_t>(c.type) : 0u;
    if (t.name == "token_embd.weight") {
      embedding = true;
      want = kEmbeddingType;
    } else {
      of_the_type += matrix;
    }
    EXPECT_EQ(t.ggml_type, want) << t.name << " is " << GgmlName(t.ggml_type) << ", expected "
                                 << GgmlName(want);
  }
  EXPECT_TRUE(embedding) << "no token_embd.weight";
  EXPECT_EQ(of_the_type, kQuantisedTensors - 1);
}

struct Diff {
  double max_abs = 0, mean_abs = 0;
  int64_t top1_agree = 0;
  int64_t rows_within_quarter = 0;  // positions whose max |Δ| ≤ 0.25
  std::string rows_beyond;          // "position:max |Δ|" of the others
};

Diff Compare(const std::vector<float>& got, const std::vector<float>& want, int64_t rows) {
  Diff d;
  for (int64_t t = 0; t < rows; ++t) {
    double row_max = 0;
    for (int64_t v = 0; v < kVocab; ++v) {
      const double a = std::fabs(double(got[t * kVocab + v]) - want[t * kVocab + v]);
      row_max = std::max(row_max, a);
      d.mean_abs += a;
    }
    d.max_abs = std::max(d.max_abs, row_max);
    d.rows_within_quarter += row_max <= 0.25;
    if (row_max > 0.25) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), " %lld:%.2f", static_cast<long long>(t), row_max);
      d.rows_beyond += buf;
    }
    d.top1_agree += testing::ArgmaxRow(&got[t * kVocab], kVocab) ==
                    testing::ArgmaxRow(&want[t * kVocab], kVocab);
  }
  d.mean_abs /= double(rows * kVocab);
  return d;
}

// dsv4's logits of the prompt on the file, with the given k-quant activations.
std::vector<float> RunFile(const std::string& path, const std::vector<int32_t>& ids,
                           ops::KQuantActivations activations, int threads = 1) {
  auto f = OpenGguf(path);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  if (!f.ok()) return {};
  auto r = GgufDeepSeekV4Reader::Create(std::move(f).value());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return {};
  std::shared_ptr<const GgufDeepSeekV4Reader> reader(std::move(r).value());
  auto config = DeepSeekV4Config::FromGguf(reader->file());
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  if (!config.ok()) return {};
  EXPECT_EQ(config->vocab_size, kVocab);
  EXPECT_EQ(config->compress_ratios, (std::vector<int64_t>{4, 128}));
  EXPECT_EQ(config->index_topk, 16);  // every CSA entry of the 64 positions

  dsv4::testing::ScopedKQuantActivations scoped(activations);
  LoadOptions o;
  o.numerics = NumericsOptions{};  // no QAT simulations: llama.cpp has none
  o.threads = threads;
  auto model = DeepSeekV4Model::Load(reader, *config, o);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  if (!model.ok()) return {};
  const int64_t T = static_cast<int64_t>(ids.size());
  auto cache = (*model)->NewCache(T);
  std::vector<float> got(T * kVocab);
  EXPECT_TRUE((*model)->Forward(ids, *cache, got, /*all_logits=*/true).ok());
  return got;
}

Diff CompareWithGolden(const TypeCase& c, const std::string& golden,
                       ops::KQuantActivations activations, const char* what) {
  const std::vector<int32_t> ids = ReadIds(TypesDir() + "/input_ids.txt");
  const std::vector<float> want = ReadF32File(TypesDir() + "/" + c.file + golden);
  const int64_t T = static_cast<int64_t>(ids.size());
  EXPECT_EQ(T, kPromptLen);
  EXPECT_EQ(static_cast<int64_t>(want.size()), T * kVocab);
  const std::vector<float> got = RunFile(TypesDir() + "/" + c.file + ".gguf", ids, activations);
  if (T != kPromptLen || got.size() != want.size()) {
    ADD_FAILURE() << "no logits to compare";
    Diff none;
    none.max_abs = none.mean_abs = INFINITY;
    return none;
  }
  const Diff d = Compare(got, want, T);
  std::printf(
      "%s vs %s: max |d| %.3g, mean |d| %.3g, top-1 %lld/%lld, positions within 0.25: "
      "%lld/%lld (beyond:%s)\n",
      c.file, what, d.max_abs, d.mean_abs, static_cast<long long>(d.top1_agree),
      static_cast<long long>(T), static_cast<long long>(d.rows_within_quarter),
      static_cast<long long>(T), d.rows_beyond.c_str());
  return d;
}

// llama.cpp's arithmetic where dsv4 has it: the activations of the quantised
// weights quantised (kQ8K) where this CPU has dsv4's kernels for that, f32
// elsewhere.
TEST_P(DeepSeekV4GgufTypes, LogitsMatchLlamaCpp) {
  const TypeCase& c = GetParam();
  const Diff d =
      CompareWithGolden(c, "_llamacpp_logits.f32", ops::KQuantActivations::kQ8K, "llama.cpp");
  EXPECT_LE(d.mean_abs, c.mean_abs);
  EXPECT_LE(d.max_abs, c.max_abs);
  EXPECT_GE(d.top1_agree * 100, kPromptLen * c.top1_percent);
  EXPECT_GE(d.rows_within_quarter * 100, kPromptLen * c.quarter_percent);
}

// f32 activations against llama.cpp on the file's weights dequantised to f32:
// the same arithmetic on both sides, so only the weights' decoding and the
// summation order can differ.
TEST_P(DeepSeekV4GgufTypes, F32ActivationsMatchLlamaCppOnTheDequantisedWeights) {
  const TypeCase& c = GetParam();
  const Diff d = CompareWithGolden(c, "_llamacpp_f32_logits.f32", ops::KQuantActivations::kF32,
                                   "llama.cpp on the dequantised weights");
  EXPECT_LE(d.max_abs, kDequantisedMaxAbs);
  EXPECT_EQ(d.top1_agree, kPromptLen);
}

// Two threads give one thread's bits: the products split over the pool (the
// activations quantised once by the caller, ops::PreparedActivations) and the
// MoE's jobs compute every output the same way.
TEST_P(DeepSeekV4GgufTypes, TwoThreadsGiveTheBitsOfOne) {
  const TypeCase& c = GetParam();
  const std::vector<int32_t> ids = ReadIds(TypesDir() + "/input_ids.txt");
  const std::string path = TypesDir() + "/" + c.file + ".gguf";
  const std::vector<float> one = RunFile(path, ids, ops::KQuantActivations::kQ8K, 1);
  const std::vector<float> two = RunFile(path, ids, ops::KQuantActivations::kQ8K, 2);
  ASSERT_EQ(one.size(), two.size());
  ASSERT_FALSE(one.empty());
  EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DeepSeekV4GgufTypes, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<TypeCase>& i) {
                           return std::string(i.param.file);
                         });

}  // namespace
}  // namespace dsv4::deepseek_v4
