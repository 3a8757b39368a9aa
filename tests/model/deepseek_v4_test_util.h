// Helpers shared by the DeepSeek-V4 tests: an in-memory CheckpointReader,
// a generator of tiny random DeepSeek-V4 checkpoints (dense bf16/f32, or FP8
// dense + FP4 experts quantised like the release), and golden-file readers.
// Used only by tests/model/deepseek_v4_*_test.cc.
#ifndef DSV4_TESTS_MODEL_DEEPSEEK_V4_TEST_UTIL_H_
#define DSV4_TESTS_MODEL_DEEPSEEK_V4_TEST_UTIL_H_

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/float_types.h"
#include "io/checkpoint.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "model/deepseek_v4/config.h"
#include "model/deepseek_v4/gguf_reader.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/plan.h"
#include "model/deepseek_v4/weights.h"

namespace dsv4::deepseek_v4::testing {

inline std::string DataDir() { return std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v4"; }

// A checkpoint held in memory: tensors are added by name with raw bytes.
class MemoryCheckpoint final : public CheckpointReader {
 public:
  explicit MemoryCheckpoint(std::string path = "memory.safetensors") : path_(std::move(path)) {}
  const std::string& path() const override { return path_; }
  const TensorInfo* Find(std::string_view name) const override {
    auto it = index_.find(std::string(name));
    return it == index_.end() ? nullptr : &tensors_[it->second];
  }
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }

  // Adds (or replaces) a tensor with `bytes` of storage.
  void Add(const std::string& name, DType dtype, std::vector<int64_t> shape,
           std::vector<uint8_t> bytes) {
    auto storage = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
    storage_.push_back(storage);
    TensorInfo info{.name = name,
                    .dtype = dtype,
                    .shape = std::move(shape),
                    .data = storage->data(),
                    .nbytes = static_cast<int64_t>(storage->size())};
    auto it = index_.find(name);
    if (it != index_.end()) {
      tensors_[it->second] = info;
    } else {
      index_[name] = tensors_.size();
      tensors_.push_back(info);
    }
  }
  void Remove(const std::string& name) {
    auto it = index_.find(name);
    if (it == index_.end()) return;
    tensors_.erase(tensors_.begin() + static_cast<std::ptrdiff_t>(it->second));
    index_.clear();
    for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
  }
  // Renames every tensor through `fn` (returning "" drops the tensor).
  template <typename Fn>
  void RenameAll(Fn fn) {
    std::vector<TensorInfo> old = tensors_;
    tensors_.clear();
    index_.clear();
    for (TensorInfo t : old) {
      t.name = fn(t.name);
      if (t.name.empty()) continue;
      index_[t.name] = tensors_.size();
      tensors_.push_back(t);
    }
  }
  TensorInfo* Mutable(const std::string& name) {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
  }

 private:
  std::string path_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  std::vector<std::shared_ptr<std::vector<uint8_t>>> storage_;
};

inline std::vector<uint8_t> F32Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}
inline std::vector<uint8_t> Bf16Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = F32ToBf16(v[i]);
    std::memcpy(b.data() + 2 * i, &h, 2);
  }
  return b;
}

// Power-of-two scale 2^ceil(log2(a)) as an e8m0 byte (a > 0).
inline uint8_t E8m0Ceil(float a) {
  const uint32_t u = std::bit_cast<uint32_t>(a);
  const int e = static_cast<int>((u >> 23) & 0xff) + ((u & 0x7fffff) != 0);
  return static_cast<uint8_t>(std::clamp(e, 1, 254));
}

// FP8 e4m3 + e8m0 scales per 128×128 block, as the release quantises (README
// of tests/data/deepseek_v4): s = 2^ceil(log2(amax/448)), q = e4m3(w/s).
inline void QuantizeFp8(const std::vector<float>& w, int64_t n, int64_t k, std::vector<uint8_t>& q,
                        std::vector<uint8_t>& scale) {
  const int64_t nb = (n + 127) / 128, kb = (k + 127) / 128;
  q.assign(n * k, 0);
  scale.assign(nb * kb, 127);
  for (int64_t bi = 0; bi < nb; ++bi) {
    for (int64_t bj = 0; bj < kb; ++bj) {
      float amax = 1e-30f;
      for (int64_t i = bi * 128; i < std::min(n, bi * 128 + 128); ++i) {
        for (int64_t j = bj * 128; j < std::min(k, bj * 128 + 128); ++j) {
          amax = std::max(amax, std::fabs(w[i * k + j]));
        }
      }
      const uint8_t e = E8m0Ceil(amax / 448.0f);
      scale[bi * kb + bj] = e;
      const float s = E8m0ToF32(e);
      for (int64_t i = bi * 128; i < std::min(n, bi * 128 + 128); ++i) {
        for (int64_t j = bj * 128; j < std::min(k, bj * 128 + 128); ++j) {
          q[i * k + j] = F32ToFp8E4m3(std::clamp(w[i * k + j] / s, -448.0f, 448.0f));
        }
      }
    }
  }
}

// FP4 e2m1 packed two per byte (element 2j in the low nibble) + e8m0 per 32.
inline void QuantizeFp4(const std::vector<float>& w, int64_t n, int64_t k,
                        std::vector<uint8_t>& packed, std::vector<uint8_t>& scale) {
  packed.assign(n * k / 2, 0);
  scale.assign(n * (k / 32), 127);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t b = 0; b < k / 32; ++b) {
      float amax = 1e-30f;
      for (int64_t j = b * 32; j < b * 32 + 32; ++j) amax = std::max(amax, std::fabs(w[i * k + j]));
      const uint8_t e = E8m0Ceil(amax / 6.0f);
      scale[i * (k / 32) + b] = e;
      const float s = E8m0ToF32(e);
      for (int64_t j = b * 32; j < b * 32 + 32; ++j) {
        const uint8_t code = F32ToFp4E2m1(std::clamp(w[i * k + j] / s, -6.0f, 6.0f));
        packed[(i * k + j) / 2] |= (j % 2 == 0) ? code : static_cast<uint8_t>(code << 4);
      }
    }
  }
}

enum class SynthFormat { kF32, kBf16, kFp8Fp4 };

// Fills `ckpt` with random weights for every declared tensor of `config`
// (MTP layers only when `mtp`) under the official names. Norm weights are near
// 1, mHC fn small.
inline void FillRandomCheckpoint(const DeepSeekV4Config& config, uint32_t seed, SynthFormat format,
                                 MemoryCheckpoint& ckpt, bool mtp = false) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto plans = BuildLayerPlans(config);
  ForEachWeight(config, plans, [&](const WeightDecl& d) {
    if (d.mtp && !mtp) return;
    int64_t n = 1;
    for (int64_t s : d.shape) n *= s;
    std::vector<float> v(n);
    const std::string& name = d.name;
    const bool is_norm = name.find("norm.weight") != std::string::npos;
    const float fan_in = d.shape.size() == 2 ? static_cast<float>(d.shape[1]) : 1.0f;
    for (float& x : v) {
      x = normal(rng);
      if (is_norm) {
        x = 1.0f + 0.1f * x;
      } else if (name.find("hc_") != std::string::npos) {
        x *= name.find("_fn") != std::string::npos ? 0.05f : 0.5f;
      } else if (name.find("attn_sink") != std::string::npos ||
                 name.find("bias") != std::string::npos) {
        x *= 0.5f;
      } else if (d.shape.size() == 2) {
        x /= std::sqrt(fan_in);
      }
    }
    switch (d.kind) {
      case WeightKind::kIndexTable: {
        std::vector<uint8_t> b(n * 8);
        const int64_t k = d.shape[1];
        for (int64_t r = 0; r < d.shape[0]; ++r) {
          // Distinct experts per row.
          std::vector<int64_t> ids(config.n_routed_experts);
          for (int64_t e = 0; e < config.n_routed_experts; ++e) ids[e] = e;
          std::shuffle(ids.begin(), ids.end(), rng);
          std::memcpy(b.data() + r * k * 8, ids.data(), k * 8);
        }
        ckpt.Add(name, DType::kI64, d.shape, std::move(b));
        return;
      }
      case WeightKind::kF32Param:
        ckpt.Add(name, DType::kF32, d.shape, F32Bytes(v));
        return;
      case WeightKind::kLinear:
      case WeightKind::kExpertLinear:
        if (format == SynthFormat::kFp8Fp4) {
          const int64_t rows = d.shape[0], cols = d.shape[1];
          std::vector<uint8_t> q, s;
          const std::string scale_name = name.substr(0, name.size() - 7) + ".scale";
          if (d.kind == WeightKind::kExpertLinear) {
            QuantizeFp4(v, rows, cols, q, s);
            ckpt.Add(name, DType::kI8, {rows, cols / 2}, std::move(q));
            ckpt.Add(scale_name, DType::kE8m0, {rows, cols / 32}, std::move(s));
          } else {
            QuantizeFp8(v, rows, cols, q, s);
            ckpt.Add(name, DType::kFp8E4m3, d.shape, std::move(q));
            ckpt.Add(scale_name, DType::kE8m0, {(rows + 127) / 128, (cols + 127) / 128},
                     std::move(s));
          }
          return;
        }
        [[fallthrough]];
      default:
        if (format == SynthFormat::kF32) {
          ckpt.Add(name, DType::kF32, d.shape, F32Bytes(v));
        } else {
          ckpt.Add(name, DType::kBF16, d.shape, Bf16Bytes(v));
        }
        return;
    }
  });
}

// A tiny window-only config: 3 layers (1 hash), hidden 64, 2 heads × 128 (64 rope),
// 8 experts top-2, window 4.
inline DeepSeekV4Config TinyConfig() {
  DeepSeekV4Config c;
  c.vocab_size = 64;
  c.hidden_size = 64;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 2;
  c.head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.q_lora_rank = 32;
  c.o_groups = 2;
  c.o_lora_rank = 16;
  c.sliding_window = 4;
  c.max_position_embeddings = 4096;
  c.compress_ratios = {0, 0, 0, 0};
  c.index_n_heads = 2;
  c.index_head_dim = 64;
  c.index_topk = 4;
  c.n_routed_experts = 8;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 32;
  c.num_hash_layers = 1;
  c.swiglu_limit = 1.5;
  c.num_nextn_predict_layers = 1;
  return c;
}

// All three attention kinds: layer 0 window, layer 1 CSA (ratio 4, indexer
// top-2 of 4 heads × 64), layer 2 HCA ratio 8, plus the MTP layer; window 4.
inline DeepSeekV4Config TinyMixedConfig() {
  DeepSeekV4Config c = TinyConfig();
  c.compress_ratios = {0, 4, 8, 0};
  c.index_n_heads = 4;
  c.index_head_dim = 64;
  c.index_topk = 2;
  return c;
}

// FP8/FP4-friendly variant: every width a multiple of 128.
inline DeepSeekV4Config TinyQuantConfig() {
  DeepSeekV4Config c = TinyConfig();
  c.hidden_size = 128;
  c.q_lora_rank = 128;
  c.o_lora_rank = 64;
  c.moe_intermediate_size = 128;
  c.num_hidden_layers = 2;
  c.compress_ratios = {0, 0, 0};
  c.quantization_config.present = true;
  c.expert_dtype = ExpertDType::kFp4;
  return c;
}

// A checkpoint directory's model (config.json + safetensors) with the QAT
// simulations off: the numerics of the fp32 goldens (swa_fp8's config, an
// official-style FP8 release, would turn them on by default). Null, with a
// test failure, when it does not load.
inline std::unique_ptr<DeepSeekV4Model> LoadCheckpointDir(const std::string& dir) {
  auto config = DeepSeekV4Config::FromFile(dir + "/config.json");
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  if (!config.ok()) return nullptr;
  auto reader = OpenCheckpointDir(dir);
  EXPECT_TRUE(reader.ok()) << reader.status().ToString();
  if (!reader.ok()) return nullptr;
  std::shared_ptr<const CheckpointReader> shared(std::move(reader).value());
  LoadOptions o;
  o.numerics = NumericsOptions{};
  auto model = DeepSeekV4Model::Load(shared, *config, o);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return model.ok() ? std::move(model).value() : nullptr;
}

// A deepseek4 GGUF with its draft module's GGUF (NextN MTP or DSpark dflash),
// as `dsv4 run --model MAIN --model-draft DRAFT` loads them, with the QAT
// simulations off as LoadCheckpointDir. Null, with a test failure, when they
// do not load.
inline std::unique_ptr<DeepSeekV4Model> LoadGgufWithDraft(const std::string& main_path,
                                                          const std::string& draft_path) {
  auto main_file = OpenGguf(main_path);
  auto draft_file = OpenGguf(draft_path);
  EXPECT_TRUE(main_file.ok() && draft_file.ok());
  if (!main_file.ok() || !draft_file.ok()) return nullptr;
  auto c = DeepSeekV4Config::FromGguf(**main_file, **draft_file);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return nullptr;
  auto reader = GgufDeepSeekV4Reader::Create(std::move(*main_file));
  EXPECT_TRUE(reader.ok()) << reader.status().ToString();
  if (!reader.ok()) return nullptr;
  const Status added =
      (*reader)->AddDraftFile(std::move(*draft_file), c->num_hidden_layers, Mxfp4Layout::kNative);
  EXPECT_TRUE(added.ok()) << added.ToString();
  if (!added.ok()) return nullptr;
  LoadOptions o;
  o.numerics = NumericsOptions{};
  auto m =
      DeepSeekV4Model::Load(std::shared_ptr<const CheckpointReader>(std::move(*reader)), *c, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

// ---- golden files ----
inline std::vector<float> ReadF32File(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}
inline std::vector<int32_t> ReadIds(const std::string& path) {
  std::ifstream f(path);
  std::vector<int32_t> ids;
  int64_t x;
  while (f >> x) ids.push_back(static_cast<int32_t>(x));
  return ids;
}

// Mean over rows of KL(softmax(ref) || softmax(got)), in double.
inline double MeanKl(const std::vector<float>& ref, const std::vector<float>& got, int64_t rows,
                     int64_t vocab) {
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = ref.data() + r * vocab;
    const float* b = got.data() + r * vocab;
    double ma = -1e300, mb = -1e300;
    for (int64_t i = 0; i < vocab; ++i) {
      ma = std::max(ma, static_cast<double>(a[i]));
      mb = std::max(mb, static_cast<double>(b[i]));
    }
    double za = 0.0, zb = 0.0;
    for (int64_t i = 0; i < vocab; ++i) {
      za += std::exp(a[i] - ma);
      zb += std::exp(b[i] - mb);
    }
    double kl = 0.0;
    for (int64_t i = 0; i < vocab; ++i) {
      const double la = a[i] - ma - std::log(za), lb = b[i] - mb - std::log(zb);
      kl += std::exp(la) * (la - lb);
    }
    total += kl;
  }
  return total / static_cast<double>(rows);
}

inline int64_t ArgmaxRow(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

}  // namespace dsv4::deepseek_v4::testing

#endif  // DSV4_TESTS_MODEL_DEEPSEEK_V4_TEST_UTIL_H_
