// DeepSeek-V4 from a llama.cpp `deepseek4` GGUF file (spec §14), on the tiny
// file of tests/data/deepseek_v4/gguf_tiny (made by llama.cpp's converter from
// a dsv4 synth-model checkpoint; tools/goldens/ds4_gguf_tiny.py): its config,
// the MXFP4 experts as bound, the logits against llama.cpp's and against
// dsv4's run of the safetensors it came from, and the errors of a file that
// lacks a tensor or holds one of the wrong shape.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "../common/scoped_kquant_activations.h"
#include "base/float_types.h"
#include "deepseek_v4_test_util.h"
#include "io/gguf.h"
#include "model/deepseek_v4/gguf_reader.h"
#include "model/deepseek_v4/inspect.h"
#include "model/deepseek_v4/model.h"
#include "ops/ref/mxfp4_ref.h"
#include "tensor/dtype.h"

namespace dsv4::deepseek_v4 {
namespace {

using testing::DataDir;
using testing::ReadF32File;
using testing::ReadIds;

std::string TinyDir() { return DataDir() + "/gguf_tiny"; }
std::string TinyPath() { return TinyDir() + "/tiny.gguf"; }
constexpr int64_t kVocab = 512;

std::unique_ptr<GgufFile> OpenTiny() {
  auto f = OpenGguf(TinyPath());
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return f.ok() ? std::move(f).value() : nullptr;
}

std::shared_ptr<const GgufDeepSeekV4Reader> TinyReader(Mxfp4Layout layout = Mxfp4Layout::kNative) {
  auto r = GgufDeepSeekV4Reader::Create(OpenTiny(), layout);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::shared_ptr<const GgufDeepSeekV4Reader>(std::move(r).value()) : nullptr;
}

TEST(DeepSeekV4Gguf, ConfigFromMetadata) {
  auto f = OpenTiny();
  ASSERT_NE(f, nullptr);
  auto c = DeepSeekV4Config::FromGguf(*f);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->vocab_size, kVocab);  // no vocab_size key: the tokenizer's length
  EXPECT_EQ(c->hidden_size, 128);
  EXPECT_EQ(c->num_hidden_layers, 4);
  EXPECT_EQ(c->compress_ratios, (std::vector<int64_t>{0, 0, 4, 128}));
  EXPECT_EQ(c->num_attention_heads, 2);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->qk_rope_head_dim, 64);
  EXPECT_EQ(c->q_lora_rank, 128);
  EXPECT_EQ(c->o_groups, 2);
  EXPECT_EQ(c->o_lora_rank, 64);
  EXPECT_EQ(c->sliding_window, 8);
  EXPECT_EQ(c->index_n_heads, 2);
  EXPECT_EQ(c->index_head_dim, 64);
  EXPECT_EQ(c->index_topk, 4);
  EXPECT_EQ(c->n_routed_experts, 4);
  EXPECT_EQ(c->num_experts_per_tok, 2);
  EXPECT_EQ(c->moe_intermediate_size, 128);
  EXPECT_EQ(c->num_hash_layers, 1);
  EXPECT_EQ(c->scoring_func, ScoringFunc::kSqrtSoftplus);
  EXPECT_EQ(c->routed_scaling_factor, 1.5);
  EXPECT_EQ(c->swiglu_limit, 10.0);
  EXPECT_EQ(c->hc_mult, 4);
  EXPECT_EQ(c->hc_sinkhorn_iters, 20);
  EXPECT_EQ(c->rope_theta, 10000.0);
  EXPECT_EQ(c->compress_rope_theta, 160000.0);
  EXPECT_TRUE(c->rope_scaling.enabled);
  EXPECT_EQ(c->rope_scaling.factor, 16.0);
  EXPECT_EQ(c->rope_scaling.original_max_position, 65536);
  EXPECT_EQ(c->num_nextn_predict_layers, 0);
  EXPECT_EQ(c->expert_dtype, ExpertDType::kFp4);
  EXPECT_TRUE(c->qat_simulation);  // MXFP4 experts: the FP4 release's numerics
}

TEST(DeepSeekV4GgufBad, NotADeepSeek4File) {
  auto f = OpenGguf(std::string(DSV4_TEST_DATA_DIR) + "/kquant/tiny_llama_q8_0.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto c = DeepSeekV4Config::FromGguf(**f);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("tiny_llama_q8_0.gguf: GGUF architecture 'llama' is not "
                                      "deepseek4"),
            std::string::npos)
      << c.status().ToString();
}

// A deepseek4 file whose metadata lacks a key the config needs.
TEST(DeepSeekV4GgufBad, MissingMetadataKeyIsNamed) {
  std::vector<uint8_t> b;
  auto put = [&](const void* p, size_t n) {
    b.insert(b.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  };
  auto u32 = [&](uint32_t v) { put(&v, 4); };
  auto u64 = [&](uint64_t v) { put(&v, 8); };
  auto str = [&](std::string_view v) {
    u64(v.size());
    put(v.data(), v.size());
  };
  put("GGUF", 4);
  u32(3);  // version
  u64(0);  // tensors
  u64(1);  // key/values
  str("general.architecture");
  u32(8);  // string
  str("deepseek4");
  auto f = ParseGguf(b, "crafted.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto c = DeepSeekV4Config::FromGguf(**f);
  ASSERT_EQ(c.status().code(), StatusCode::kNotFound) << c.status().ToString();
  EXPECT_NE(c.status().message().find("crafted.gguf: metadata key 'deepseek4.embedding_length' "
                                      "(config 'hidden_size') is missing"),
            std::string::npos)
      << c.status().ToString();
}

// Every routed expert as bound (FP4 codes + e8m0 scales, a slice of the
// split MXFP4 tensor) holds the values of its rows of the file's blocks.
TEST(DeepSeekV4Gguf, RepackedExpertsHoldTheFilesMxfp4Values) {
  auto reader = TinyReader(Mxfp4Layout::kFp4);
  ASSERT_NE(reader, nullptr);
  auto c = DeepSeekV4Config::FromGguf(reader->file());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto w = BindWeights(*reader, *c, BuildLayerPlans(*c));
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->naming, "gguf");
  const GgufFile& file = reader->file();
  int checked = 0;
  for (int64_t l = 0; l < c->num_hidden_layers; ++l) {
    const std::map<std::string, LinearWeight ExpertWeights::*> projs = {
        {"ffn_gate_exps", &ExpertWeights::w1},
        {"ffn_up_exps", &ExpertWeights::w3},
        {"ffn_down_exps", &ExpertWeights::w2}};
    for (const auto& [name, member] : projs) {
      const std::string tensor = "blk." + std::to_string(l) + "." + name + ".weight";
      const GgufTensorInfo* t = nullptr;
      for (const GgufTensorInfo& g : file.ggml_tensors()) {
        if (g.name == tensor) t = &g;
      }
      ASSERT_NE(t, nullptr) << tensor;
      ASSERT_EQ(t->ggml_type, static_cast<uint32_t>(GgmlType::kMXFP4));
      const int64_t n = t->shape[1], k = t->shape[2];
      const int64_t row_bytes = k / 32 * ops::ref::kMxfp4BlockBytes;
      for (int64_t e = 0; e < c->n_routed_experts; ++e) {
        const LinearWeight& lw = w->layers[l].moe.experts[e].*member;
        ASSERT_EQ(lw.format, LinearFormat::kFp4Block);
        ASSERT_EQ(lw.rows(), n);
        ASSERT_EQ(lw.cols(), k);
        std::vector<float> want(k), got(k);
        for (int64_t r = 0; r < n; ++r) {
          DequantizeRow(DType::kMXFP4,
                        static_cast<const uint8_t*>(t->data) + (e * n + r) * row_bytes, k,
                        want.data());
          const auto* codes = static_cast<const uint8_t*>(lw.weight.data) + r * (k / 2);
          const auto* scales = static_cast<const uint8_t*>(lw.scale.data) + r * (k / 32);
          for (int64_t i = 0; i < k; ++i) {
            const uint8_t code = i % 2 == 0 ? codes[i / 2] & 0xf : codes[i / 2] >> 4;
            got[i] = Fp4E2m1ToF32(code) * E8m0ToF32(scales[i / 32]);
          }
          ASSERT_EQ(got, want) << tensor << " expert " << e << " row " << r;
        }
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 4 * 3 * 4);
  // Codes and scales: 16 + 1 bytes of each 17-byte block.
  int64_t mxfp4_bytes = 0;
  for (const GgufTensorInfo& g : file.ggml_tensors()) {
    if (g.ggml_type == static_cast<uint32_t>(GgmlType::kMXFP4)) mxfp4_bytes += g.nbytes;
  }
  EXPECT_EQ(reader->copied_bytes(), mxfp4_bytes);
}

// Natively (the default), every routed expert is an MXFP4 matrix viewing its
// rows of the mapped file: nothing is copied.
TEST(DeepSeekV4Gguf, NativeExpertsViewTheFilesMxfp4Blocks) {
  auto reader = TinyReader();
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(reader->copied_bytes(), 0);
  auto c = DeepSeekV4Config::FromGguf(reader->file());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto w = BindWeights(*reader, *c, BuildLayerPlans(*c));
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  int checked = 0;
  for (const GgufTensorInfo& t : reader->file().ggml_tensors()) {
    if (t.ggml_type != static_cast<uint32_t>(GgmlType::kMXFP4)) continue;
    const int64_t l = std::stoll(t.name.substr(4));  // "blk.{l}.ffn_..."
    LinearWeight ExpertWeights::*member =
        t.name.find("gate") != std::string::npos ? &ExpertWeights::w1
        : t.name.find("up") != std::string::npos ? &ExpertWeights::w3
                                                 : &ExpertWeights::w2;
    const int64_t n = t.shape[1], k = t.shape[2];
    for (int64_t e = 0; e < c->n_routed_experts; ++e) {
      const LinearWeight& lw = w->layers[l].moe.experts[e].*member;
      ASSERT_EQ(lw.format, LinearFormat::kDense) << t.name;
      ASSERT_EQ(lw.weight.dtype, DType::kMXFP4) << t.name;
      EXPECT_EQ(lw.weight.data, static_cast<const uint8_t*>(t.data) + e * n * (k / 32 * 17))
          << t.name << " expert " << e;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4 * 3 * 4);
}

struct Diff {
  double max_abs = 0, mean_abs = 0;
  int64_t top1_agree = 0;
  int64_t rows_within_quarter = 0;  // positions whose max |Δ| ≤ 0.25
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
    d.top1_agree += testing::ArgmaxRow(&got[t * kVocab], kVocab) ==
                    testing::ArgmaxRow(&want[t * kVocab], kVocab);
  }
  d.mean_abs /= double(rows * kVocab);
  return d;
}

// The tolerance of both comparisons (the logits have standard deviation 1).
// On this random model (top-2 of 4 experts, an indexer choosing 4 entries) a
// small difference can flip a routing or indexer choice at a position, which
// then differs far more than the rest: so the mean, the top-1 agreement and
// the share of positions within 0.25 are held tight, the maximum loosely.
// The test prints the figures.
void ExpectClose(const Diff& d, int64_t T, const char* what) {
  std::printf(
      "vs %s: max |d| %.4f, mean |d| %.4f, top-1 %lld/%lld, positions within 0.25: "
      "%lld/%lld\n",
      what, d.max_abs, d.mean_abs, static_cast<long long>(d.top1_agree), static_cast<long long>(T),
      static_cast<long long>(d.rows_within_quarter), static_cast<long long>(T));
  EXPECT_LE(d.mean_abs, 0.06) << what;
  EXPECT_LE(d.max_abs, 2.0) << what;
  EXPECT_GE(d.top1_agree, T * 85 / 100) << what;
  EXPECT_GE(d.rows_within_quarter, T * 3 / 4) << what;
}

std::vector<float> RunReader(std::shared_ptr<const GgufDeepSeekV4Reader> reader,
                             std::optional<NumericsOptions> numerics,
                             const std::vector<int32_t>& ids) {
  EXPECT_NE(reader, nullptr);
  if (reader == nullptr) return {};
  auto c = DeepSeekV4Config::FromGguf(reader->file());
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  LoadOptions o;
  o.numerics = numerics;
  auto model = DeepSeekV4Model::Load(reader, *c, o);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  if (!model.ok()) return {};
  const int64_t T = static_cast<int64_t>(ids.size());
  auto cache = (*model)->NewCache(T);
  std::vector<float> logits(T * kVocab);
  EXPECT_TRUE((*model)->Forward(ids, *cache, logits, /*all_logits=*/true).ok());
  return logits;
}

std::vector<float> RunTiny(std::optional<NumericsOptions> numerics,
                           const std::vector<int32_t>& ids) {
  return RunReader(TinyReader(), numerics, ids);
}

// Against llama.cpp on the same file, with llama.cpp's arithmetic where dsv4
// has it: no QAT simulations (llama.cpp has none), activations quantised to
// q8 for the Q8_0 weights. What stays different: llama.cpp quantises the
// activations of the MXFP4 experts to q8_0 and of bf16 weights to bf16, and
// keeps an f16 KV cache; dsv4 multiplies those in fp32. On a random model
// whose logits have standard deviation 1, those differences reach the top-k
// routing of some tokens, which is what the largest differences are.
TEST(DeepSeekV4Gguf, LogitsMatchLlamaCpp) {
  const std::vector<int32_t> ids = ReadIds(TinyDir() + "/input_ids.txt");
  const std::vector<float> want = ReadF32File(TinyDir() + "/llamacpp_logits.f32");
  const int64_t T = static_cast<int64_t>(ids.size());
  ASSERT_EQ(static_cast<int64_t>(want.size()), T * kVocab);
  dsv4::testing::ScopedKQuantActivations q8(ops::KQuantActivations::kQ8K);
  const std::vector<float> got = RunTiny(NumericsOptions{}, ids);
  ASSERT_EQ(got.size(), want.size());
  const Diff d = Compare(got, want, T);
  ExpectClose(d, T, "llama.cpp");
}

// Against dsv4's own run of the safetensors checkpoint the file was converted
// from (the first 512 logits of its 129,280), both without the QAT
// simulations (whose FP8/FP4 rounding of activations would amplify any
// difference): what differs is the converter's re-quantisation of the FP8
// weights to Q8_0 (the experts are the same bits).
TEST(DeepSeekV4Gguf, LogitsMatchTheSafetensorsRun) {
  const std::vector<int32_t> ids = ReadIds(TinyDir() + "/input_ids.txt");
  const std::vector<float> want = ReadF32File(TinyDir() + "/dsv4_safetensors_logits.f32");
  const int64_t T = static_cast<int64_t>(ids.size());
  ASSERT_EQ(static_cast<int64_t>(want.size()), T * kVocab);
  const std::vector<float> got = RunTiny(NumericsOptions{}, ids);
  ASSERT_EQ(got.size(), want.size());
  const Diff d = Compare(got, want, T);
  ExpectClose(d, T, "the safetensors run");
}

// ---- a file that lacks a tensor or holds one of the wrong shape ----

// The tiny file's tensors, less one or with one reshaped.
class EditedReader final : public CheckpointReader {
 public:
  EditedReader(std::shared_ptr<const CheckpointReader> base, std::string name,
               std::vector<int64_t> shape)
      : base_(std::move(base)), name_(std::move(name)) {
    for (const TensorInfo& t : base_->tensors()) {
      if (t.name != name_) {
        tensors_.push_back(t);
      } else if (!shape.empty()) {
        tensors_.push_back(t);
        tensors_.back().shape = shape;
      }
    }
  }
  const std::string& path() const override { return base_->path(); }
  const TensorInfo* Find(std::string_view name) const override {
    for (const TensorInfo& t : tensors_) {
      if (t.name == name) return &t;
    }
    return nullptr;
  }
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }

 private:
  std::shared_ptr<const CheckpointReader> base_;
  std::string name_;
  std::vector<TensorInfo> tensors_;
};

Status BindEdited(const std::string& name, std::vector<int64_t> shape) {
  auto reader = TinyReader();
  auto c = DeepSeekV4Config::FromGguf(reader->file());
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  EditedReader edited(reader, name, std::move(shape));
  auto w = BindWeights(edited, *c, BuildLayerPlans(*c));
  return w.ok() ? Status::Ok() : w.status();
}

TEST(DeepSeekV4GgufBad, MissingTensorNamesTheFileAndTheTensor) {
  const Status s = BindEdited("blk.2.indexer.attn_q_b.weight", {});
  ASSERT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_NE(
      s.message().find(TinyPath() + ": cannot bind the DeepSeek-V4 weights (gguf tensor names)\n"
                                    "  1 tensor(s) missing:\n"
                                    "    layers.2.attn.indexer.wq_b.weight (looked for "
                                    "'blk.2.indexer.attn_q_b.weight')"),
      std::string::npos)
      << s.message();
}

TEST(DeepSeekV4GgufBad, MissingExpertTensorIsNamedOnce) {
  const Status s = BindEdited("blk.1.ffn_down_exps.weight", {});
  ASSERT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("1 tensor(s) missing:\n    layers.1.ffn.experts.0.w2.weight (looked "
                             "for 'blk.1.ffn_down_exps.weight')"),
            std::string::npos)
      << s.message();
}

TEST(DeepSeekV4GgufBad, WrongShapeNamesTheTensorExpectedAndFound) {
  const Status s = BindEdited("blk.0.attn_q_a.weight", {128, 96});
  ASSERT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find(TinyPath() + ": cannot bind"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("tensor 'blk.0.attn_q_a.weight' is [128, 96] q8_0, expected [128, "
                             "128]"),
            std::string::npos)
      << s.message();
}

TEST(DeepSeekV4GgufBad, WrongExpertShapeNamesTheStackedTensor) {
  const Status s = BindEdited("blk.3.ffn_gate_exps.weight", {4, 128, 32});
  ASSERT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("tensor 'blk.3.ffn_gate_exps.weight' is [4, 128, 32] mxfp4, expected "
                             "[4, 128, 128] (mxfp4 or another GGUF type; f32/bf16/f16)"),
            std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace dsv4::deepseek_v4

// A llama.cpp gguf-split set (spec §14.1), written here the way gguf-split
// writes one: every part gets split.no (u16), split.count (u16) and
// split.tensors.count (i32); the first also the file's metadata, copied byte
// for byte; the tensors are divided into contiguous runs, in file order.
namespace dsv4::deepseek_v4 {
namespace {

class SplitWriter {
 public:
  // The bytes of tiny.gguf's metadata entries (the section after the header).
  static std::string MetadataBytes(const std::string& bytes, uint64_t n_kv) {
    size_t at = 24;
    auto u32 = [&] {
      uint32_t v;
      std::memcpy(&v, bytes.data() + at, 4);
      at += 4;
      return v;
    };
    auto u64 = [&] {
      uint64_t v;
      std::memcpy(&v, bytes.data() + at, 8);
      at += 8;
      return v;
    };
    auto skip_value = [&](uint32_t type) {
      static constexpr int kSizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
      if (type == 8) {
        at += u64();
      } else {
        at += kSizes[type];
      }
    };
    for (uint64_t i = 0; i < n_kv; ++i) {
      at += u64();  // key
      const uint32_t type = u32();
      if (type == 9) {
        const uint32_t elem = u32();
        const uint64_t n = u64();
        for (uint64_t j = 0; j < n; ++j) skip_value(elem);
      } else {
        skip_value(type);
      }
    }
    return bytes.substr(24, at - 24);
  }

  // Writes `path` holding `tensors` of `file`; `meta` (with `n_meta`
  // entries) before the split keys.
  static void WritePart(const std::string& path, const GgufFile& file,
                        const std::vector<const GgufTensorInfo*>& tensors, const std::string& meta,
                        uint64_t n_meta, uint16_t no, uint16_t count, int32_t total) {
    std::string out;
    auto put = [&](const auto& v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); };
    auto str = [&](std::string_view s) {
      put(static_cast<uint64_t>(s.size()));
      out.append(s);
    };
    out.append("GGUF");
    put(uint32_t{3});
    put(static_cast<uint64_t>(tensors.size()));
    put(n_meta + 3);
    out.append(meta);
    str("split.no");
    put(uint32_t{2});
    put(no);
    str("split.count");
    put(uint32_t{2});
    put(count);
    str("split.tensors.count");
    put(uint32_t{5});
    put(total);
    const uint64_t align = file.alignment();
    auto pad = [&](uint64_t n) { return (n + align - 1) / align * align; };
    uint64_t offset = 0;
    for (const GgufTensorInfo* t : tensors) {
      str(t->name);
      put(static_cast<uint32_t>(t->shape.size()));
      for (auto it = t->shape.rbegin(); it != t->shape.rend(); ++it) {
        put(static_cast<uint64_t>(*it));
      }
      put(t->ggml_type);
      put(offset);
      offset = pad(offset + static_cast<uint64_t>(t->nbytes));
    }
    out.resize(pad(out.size()), '\0');
    for (const GgufTensorInfo* t : tensors) {
      out.append(static_cast<const char*>(t->data), static_cast<size_t>(t->nbytes));
      out.resize(pad(out.size()), '\0');
    }
    std::ofstream f(path, std::ios::binary);
    f.write(out.data(), static_cast<std::streamsize>(out.size()));
    ASSERT_TRUE(f.good()) << path;
  }

  // Splits tiny.gguf into `count` parts named like gguf-split's, under a
  // fresh temporary folder; returns the prefix. `claimed_count` is what the
  // parts say in split.count (part `bad_part` only; -1: none).
  static std::string Split(const std::string& name, int count, int bad_part = -1,
                           uint16_t claimed_count = 0) {
    const std::string dir = (std::filesystem::temp_directory_path() /
                             ("dsv4_gguf_split_" + name + "_" + std::to_string(::getpid())))
                                .string();
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    auto file = OpenGguf(TinyPath());
    EXPECT_TRUE(file.ok()) << file.status().ToString();
    if (!file.ok()) return {};
    std::ifstream in(TinyPath(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    uint64_t n_kv;
    std::memcpy(&n_kv, bytes.data() + 16, 8);
    const std::string meta = MetadataBytes(bytes, n_kv);
    const auto& all = (*file)->ggml_tensors();
    const std::string prefix = dir + "/tiny";
    for (int i = 0; i < count; ++i) {
      std::vector<const GgufTensorInfo*> part;
      for (size_t j = all.size() * i / count; j < all.size() * (i + 1) / count; ++j) {
        part.push_back(&all[j]);
      }
      const uint16_t says = i == bad_part ? claimed_count : static_cast<uint16_t>(count);
      WritePart(GgufSplitPath(prefix, i, count), **file, part, i == 0 ? meta : std::string(),
                i == 0 ? n_kv : 0, static_cast<uint16_t>(i), says,
                static_cast<int32_t>(all.size()));
    }
    return prefix;
  }
};

TEST(DeepSeekV4GgufSplit, PartsAreNamedLikeLlamaCpp) {
  EXPECT_EQ(GgufSplitPath("/m/ds4", 0, 3), "/m/ds4-00001-of-00003.gguf");
  EXPECT_EQ(GgufSplitPath("x", 11, 12), "x-00012-of-00012.gguf");
}

// Three parts, opened from the second: the same tensors, the same logits to
// the bit as the single file.
TEST(DeepSeekV4GgufSplit, LogitsEqualTheSingleFileBitForBit) {
  const std::string prefix = SplitWriter::Split("ok", 3);
  ASSERT_FALSE(prefix.empty());
  auto parts = OpenGgufSplit(GgufSplitPath(prefix, 1, 3));
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  ASSERT_EQ(parts->size(), 3u);
  EXPECT_EQ((*parts)[0]->path(), GgufSplitPath(prefix, 0, 3));
  EXPECT_TRUE((*parts)[0]->HasMeta("general.architecture"));
  EXPECT_FALSE((*parts)[2]->HasMeta("general.architecture"));
  auto split = GgufDeepSeekV4Reader::Create(std::move(parts).value());
  ASSERT_TRUE(split.ok()) << split.status().ToString();
  std::shared_ptr<const GgufDeepSeekV4Reader> reader(std::move(split).value());
  EXPECT_EQ(reader->part_count(), 3u);
  auto single = TinyReader();
  ASSERT_NE(single, nullptr);
  EXPECT_EQ(reader->tensors().size(), single->tensors().size());
  EXPECT_EQ(reader->copied_bytes(), single->copied_bytes());

  const std::vector<int32_t> ids = ReadIds(TinyDir() + "/input_ids.txt");
  const std::vector<float> want = RunTiny(NumericsOptions{}, ids);
  const std::vector<float> got = RunReader(reader, NumericsOptions{}, ids);
  ASSERT_EQ(got.size(), want.size());
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);

  // Through the model loader too (the first part given this time).
  auto first = OpenGgufSplit(GgufSplitPath(prefix, 0, 3));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  LoadOptions lo;
  lo.numerics = NumericsOptions{};
  auto model = LoadDeepSeekV4Gguf(std::move(first).value(), lo);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::filesystem::remove_all(std::filesystem::path(prefix).parent_path());
}

// `dsv4 inspect` on a deepseek4 GGUF: the plan from its metadata and the
// bytes per GGUF tensor type as stored (MXFP4 experts included, not repacked),
// the same for the single file and the split set.
TEST(DeepSeekV4GgufSplit, InspectPrintsThePlanAndBytesPerType) {
  auto single = OpenTiny();
  ASSERT_NE(single, nullptr);
  std::map<std::string, int64_t> want;
  for (const GgufTensorInfo& t : single->ggml_tensors()) {
    want[std::string(GetGgmlTypeTraits(t.ggml_type)->name)] += t.nbytes;
  }
  ASSERT_TRUE(want.count("mxfp4") && want.count("q8_0")) << "tiny.gguf's types changed";
  auto one = InspectGguf({single.get()}, {1024});
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_NE(one->find("main layers: 2 window, 1 CSA, 1 HCA; 1 hash-routed"), std::string::npos)
      << *one;
  EXPECT_NE(one->find("bytes by GGUF tensor type (measured, " +
                      std::to_string(single->ggml_tensors().size()) + " tensors in the file)"),
            std::string::npos)
      << *one;
  for (const auto& [type, bytes] : want) {
    char line[64];
    std::snprintf(line, sizeof(line), "  %-10s %14lld", type.c_str(),
                  static_cast<long long>(bytes));
    EXPECT_NE(one->find(line), std::string::npos) << line << "\n" << *one;
  }
  EXPECT_NE(one->find("KV cache"), std::string::npos) << *one;
  EXPECT_NE(one->find("weights: dense as the GGUF stores them"), std::string::npos) << *one;
  EXPECT_EQ(one->find("unquantized"), std::string::npos) << *one;

  const std::string prefix = SplitWriter::Split("inspect", 3);
  ASSERT_FALSE(prefix.empty());
  auto parts = OpenGgufSplit(GgufSplitPath(prefix, 2, 3));
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  std::vector<const GgufFile*> views;
  for (const auto& part : *parts) views.push_back(part.get());
  auto three = InspectGguf(views, {1024});
  ASSERT_TRUE(three.ok()) << three.status().ToString();
  EXPECT_NE(three->find("(3-part gguf-split set)"), std::string::npos) << *three;
  // Past the header line, the same report (but for "files").
  std::string rest = three->substr(three->find('\n'));
  const size_t files = rest.find("tensors in the files");
  ASSERT_NE(files, std::string::npos) << rest;
  rest.replace(files, 20, "tensors in the file");
  EXPECT_EQ(rest, one->substr(one->find('\n')));
  std::filesystem::remove_all(std::filesystem::path(prefix).parent_path());

  auto bad = InspectGguf({single.get()}, {0});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

TEST(DeepSeekV4GgufSplitBad, MissingPartIsNamed) {
  const std::string prefix = SplitWriter::Split("missing", 3);
  ASSERT_FALSE(prefix.empty());
  const std::string gone = GgufSplitPath(prefix, 2, 3);
  std::filesystem::remove(gone);
  auto parts = OpenGgufSplit(GgufSplitPath(prefix, 0, 3));
  ASSERT_FALSE(parts.ok());
  EXPECT_NE(parts.status().message().find(gone), std::string::npos) << parts.status().ToString();
  EXPECT_NE(parts.status().message().find("part 3 of the 3-part gguf-split set"), std::string::npos)
      << parts.status().ToString();
  std::filesystem::remove_all(std::filesystem::path(prefix).parent_path());
}

TEST(DeepSeekV4GgufSplitBad, MismatchedSplitCountIsNamed) {
  const std::string prefix = SplitWriter::Split("count", 2, /*bad_part=*/1, /*claimed_count=*/3);
  ASSERT_FALSE(prefix.empty());
  auto parts = OpenGgufSplit(GgufSplitPath(prefix, 0, 2));
  ASSERT_FALSE(parts.ok());
  EXPECT_EQ(parts.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(parts.status().message().find(GgufSplitPath(prefix, 1, 2) +
                                          ": says split.no 1 and split.count 3; as part 2"),
            std::string::npos)
      << parts.status().ToString();
  std::filesystem::remove_all(std::filesystem::path(prefix).parent_path());
}

TEST(DeepSeekV4GgufSplitBad, TensorCountMismatchIsNamed) {
  const std::string prefix = SplitWriter::Split("tensors", 2);
  ASSERT_FALSE(prefix.empty());
  // Drop the second part's tensors: rewrite it with none.
  auto file = OpenGguf(TinyPath());
  ASSERT_TRUE(file.ok());
  SplitWriter::WritePart(GgufSplitPath(prefix, 1, 2), **file, {}, {}, 0, 1, 2,
                         static_cast<int32_t>((*file)->ggml_tensors().size()));
  auto parts = OpenGgufSplit(GgufSplitPath(prefix, 0, 2));
  ASSERT_FALSE(parts.ok());
  EXPECT_NE(parts.status().message().find("split.tensors.count is"), std::string::npos)
      << parts.status().ToString();
  std::filesystem::remove_all(std::filesystem::path(prefix).parent_path());
}

// ---- the NextN MTP block from the file llama.cpp's converter writes with --mtp
// (tests/data/deepseek_v4/gguf_mtp, tools/goldens/ds4_gguf_mtp.py) ----

std::string MtpDir() { return DataDir() + "/gguf_mtp"; }

struct MtpModel {
  std::shared_ptr<const GgufDeepSeekV4Reader> reader;
  std::unique_ptr<DeepSeekV4Model> model;
};

Result<MtpModel> LoadMtpModel(const std::string& main_path, const std::string& mtp_path) {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> main_file, OpenGguf(main_path));
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> mtp_file, OpenGguf(mtp_path));
  ASSIGN_OR_RETURN(DeepSeekV4Config c, DeepSeekV4Config::FromGguf(*main_file, *mtp_file));
  ASSIGN_OR_RETURN(std::unique_ptr<GgufDeepSeekV4Reader> reader,
                   GgufDeepSeekV4Reader::Create(std::move(main_file)));
  RETURN_IF_ERROR(
      reader->AddDraftFile(std::move(mtp_file), c.num_hidden_layers, Mxfp4Layout::kNative));
  MtpModel m;
  m.reader = std::move(reader);
  LoadOptions o;
  o.numerics = NumericsOptions{};  // llama.cpp has no QAT simulations
  ASSIGN_OR_RETURN(m.model, DeepSeekV4Model::Load(m.reader, c, o));
  return m;
}

// A set written by llama.cpp's own gguf-split (--split-max-tensors 50: three
// parts) computes the single file's logits bit for bit, with its NextN draft
// file beside it too.
TEST(DeepSeekV4GgufSplit, ASetWrittenByLlamaCppsGgufSplitEqualsTheFile) {
  const std::vector<int32_t> ids = ReadIds(MtpDir() + "/input_ids.txt");
  const int64_t T = static_cast<int64_t>(ids.size());
  auto run = [&](std::vector<std::unique_ptr<GgufFile>> parts) {
    auto r = GgufDeepSeekV4Reader::Create(std::move(parts));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? RunReader(std::shared_ptr<const GgufDeepSeekV4Reader>(std::move(r).value()),
                              NumericsOptions{}, ids)
                  : std::vector<float>{};
  };
  auto set = OpenGgufSplit(MtpDir() + "/split/tiny-00003-of-00003.gguf");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  ASSERT_EQ(set->size(), 3u);
  auto single = OpenGguf(MtpDir() + "/tiny.gguf");
  ASSERT_TRUE(single.ok());
  std::vector<std::unique_ptr<GgufFile>> one;
  one.push_back(std::move(*single));
  const std::vector<float> want = run(std::move(one));
  const std::vector<float> got = run(std::move(*set));
  ASSERT_EQ(static_cast<int64_t>(got.size()), T * kVocab);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);

  auto parts = OpenGgufSplit(MtpDir() + "/split/tiny-00001-of-00003.gguf");
  auto draft = OpenGguf(MtpDir() + "/mtp-tiny.gguf");
  ASSERT_TRUE(parts.ok() && draft.ok());
  auto model = LoadDeepSeekV4Gguf(std::move(*parts), {}, std::move(*draft));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_NE((*model)->draft_model(), nullptr);
}

TEST(DeepSeekV4GgufMtp, ConfigTakesTheDraftBlockFromTheMtpFile) {
  auto main_file = OpenGguf(MtpDir() + "/tiny.gguf");
  auto mtp_file = OpenGguf(MtpDir() + "/mtp-tiny.gguf");
  ASSERT_TRUE(main_file.ok() && mtp_file.ok());
  auto alone = DeepSeekV4Config::FromGguf(**main_file);
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  EXPECT_EQ(alone->num_nextn_predict_layers, 0);
  auto c = DeepSeekV4Config::FromGguf(**main_file, **mtp_file);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->num_hidden_layers, 4);
  EXPECT_EQ(c->num_nextn_predict_layers, 1);
  EXPECT_EQ(c->compress_ratios, (std::vector<int64_t>{0, 0, 4, 128, 0}));
}

// The draft logits against llama.cpp's MTP graph on the same two files: row t
// from the main model's output streams at t and the token at t + 1. The same
// differences as the main logits' (LogitsMatchLlamaCpp), plus llama.cpp's one
// product over [e | h] where dsv4 adds e_proj's and h_proj's.
TEST(DeepSeekV4GgufMtp, DraftLogitsMatchLlamaCpp) {
  const std::vector<int32_t> ids = ReadIds(MtpDir() + "/input_ids.txt");
  const std::vector<float> want = ReadF32File(MtpDir() + "/llamacpp_mtp_logits.f32");
  const int64_t T = static_cast<int64_t>(ids.size());
  ASSERT_EQ(static_cast<int64_t>(want.size()), (T - 1) * kVocab);
  dsv4::testing::ScopedKQuantActivations q8(ops::KQuantActivations::kQ8K);
  auto m = LoadMtpModel(MtpDir() + "/tiny.gguf", MtpDir() + "/mtp-tiny.gguf");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  DeepSeekV4Model& model = *m->model;
  ASSERT_TRUE(model.has_mtp());
  const int64_t row = model.config().hc_mult * model.config().hidden_size;
  auto cache = model.NewCache(T);
  std::vector<float> logits(T * kVocab);
  ASSERT_TRUE(model.Forward(ids, *cache, logits, /*all_logits=*/true).ok());
  const std::vector<float> hidden(model.last_hidden().begin(), model.last_hidden().end());
  ASSERT_EQ(static_cast<int64_t>(hidden.size()), T * row);
  auto mtp = model.NewMtpCache(T);
  std::vector<float> got((T - 1) * kVocab);
  ASSERT_TRUE(model
                  .ForwardMtp(std::span<const int32_t>(ids).subspan(1),
                              std::span<const float>(hidden).first((T - 1) * row), *mtp, got,
                              /*all_logits=*/true)
                  .ok());
  ExpectClose(Compare(got, want, T - 1), T - 1, "llama.cpp's MTP");
}

// e_proj and h_proj are eh_proj's two input halves, row by row.
TEST(DeepSeekV4GgufMtp, EhProjIsSplitIntoItsInputHalves) {
  auto m = LoadMtpModel(MtpDir() + "/tiny.gguf", MtpDir() + "/mtp-tiny.gguf");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto raw = OpenGguf(MtpDir() + "/mtp-tiny.gguf");
  ASSERT_TRUE(raw.ok());
  const TensorInfo* eh = (*raw)->Find("blk.4.nextn.eh_proj.weight");
  const TensorInfo* e = m->reader->Find("mtp.0.nextn.e_proj.weight");
  const TensorInfo* h = m->reader->Find("mtp.0.nextn.h_proj.weight");
  ASSERT_NE(eh, nullptr);
  ASSERT_NE(e, nullptr);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(eh->shape, (std::vector<int64_t>{128, 256}));
  EXPECT_EQ(e->shape, (std::vector<int64_t>{128, 128}));
  EXPECT_EQ(h->dtype, eh->dtype);
  std::vector<float> whole(256), half(128);
  const int64_t eh_row = eh->nbytes / 128, half_row = e->nbytes / 128;
  for (int64_t r = 0; r < 128; r += 37) {
    DequantizeRow(eh->dtype, static_cast<const uint8_t*>(eh->data) + r * eh_row, 256, whole.data());
    DequantizeRow(e->dtype, static_cast<const uint8_t*>(e->data) + r * half_row, 128, half.data());
    EXPECT_EQ(0, std::memcmp(half.data(), whole.data(), 128 * 4)) << "e_proj row " << r;
    DequantizeRow(h->dtype, static_cast<const uint8_t*>(h->data) + r * half_row, 128, half.data());
    EXPECT_EQ(0, std::memcmp(half.data(), whole.data() + 128, 128 * 4)) << "h_proj row " << r;
  }
  // The file's copies of the embedding and head are not listed twice.
  EXPECT_EQ(m->reader->Find("mtp.0.token_embd.weight"), nullptr);
  EXPECT_NE(m->reader->Find("mtp.0.output_hc_fn.weight"), nullptr);
}

// `dsv4 inspect X.gguf --model-draft D.gguf`: the draft's blocks join the plan
// and its tensors the bytes.
TEST(DeepSeekV4GgufMtp, InspectShowsTheDraftBlocks) {
  const std::string dir = DataDir() + "/gguf_drafts/";
  for (const auto& [main, draft, line] :
       {std::tuple<std::string, std::string, std::string>{"mtp_main", "mtp", "(+1 MTP)"},
        {"dspark_main", "dspark", "(+3 DSpark stages)"}}) {
    auto m = OpenGguf(dir + main + ".gguf");
    auto d = OpenGguf(dir + draft + ".gguf");
    ASSERT_TRUE(m.ok() && d.ok());
    auto report = InspectGguf({m->get()}, {4096}, d->get());
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_NE(report->find(line), std::string::npos) << *report;
    EXPECT_NE(report->find(" + draft " + dir + draft + ".gguf"), std::string::npos) << *report;
    EXPECT_NE(report->find("mtp.0."), std::string::npos) << *report;
  }
}

TEST(DeepSeekV4GgufMtpBad, TheMtpFileAloneIsRefusedWithAHint) {
  auto f = OpenGguf(MtpDir() + "/mtp-tiny.gguf");
  ASSERT_TRUE(f.ok());
  auto c = DeepSeekV4Config::FromGguf(**f);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("mtp-tiny.gguf: a NextN MTP file"), std::string::npos)
      << c.status().ToString();
  EXPECT_NE(c.status().hint().find("--model-draft"), std::string::npos);
}

TEST(DeepSeekV4GgufMtpBad, TheDSparkFileAloneIsRefusedWithAHint) {
  auto f = OpenGguf(DataDir() + "/gguf_drafts/dspark.gguf");
  ASSERT_TRUE(f.ok());
  auto c = DeepSeekV4Config::FromGguf(**f);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("dspark.gguf: a DSpark draft module"), std::string::npos)
      << c.status().ToString();
  EXPECT_NE(c.status().hint().find("--model-draft"), std::string::npos);
}

// A DSpark module drafts for the model whose layers it reads: another model's
// shapes are named.
TEST(DeepSeekV4GgufMtpBad, ADSparkFileOfAnotherModelNamesTheKey) {
  auto main_file = OpenGguf(MtpDir() + "/tiny.gguf");
  auto draft = OpenGguf(DataDir() + "/gguf_drafts/dspark.gguf");
  ASSERT_TRUE(main_file.ok() && draft.ok());
  auto c = DeepSeekV4Config::FromGguf(**main_file, **draft);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("dspark.gguf: 'dflash."), std::string::npos)
      << c.status().ToString();
}

TEST(DeepSeekV4GgufMtpBad, AMainFileAsTheDraftIsRefused) {
  auto main_file = OpenGguf(MtpDir() + "/tiny.gguf");
  auto again = OpenGguf(MtpDir() + "/tiny.gguf");
  ASSERT_TRUE(main_file.ok() && again.ok());
  auto c = DeepSeekV4Config::FromGguf(**main_file, **again);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("has no NextN block"), std::string::npos)
      << c.status().ToString();
}

TEST(DeepSeekV4GgufMtpBad, ADraftOfAnotherModelNamesTheKey) {
  // gguf_types' model is another shape.
  auto main_file = OpenGguf(DataDir() + "/gguf_types/q8_0.gguf");
  auto mtp_file = OpenGguf(MtpDir() + "/mtp-tiny.gguf");
  ASSERT_TRUE(main_file.ok()) << main_file.status().ToString();
  ASSERT_TRUE(mtp_file.ok());
  auto c = DeepSeekV4Config::FromGguf(**main_file, **mtp_file);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("mtp-tiny.gguf: "), std::string::npos)
      << c.status().ToString();
  EXPECT_NE(c.status().hint().find("converted from the model's checkpoint"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::deepseek_v4
