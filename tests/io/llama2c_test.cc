// Tests for the llama2.c .bin reader: the real stories260K checkpoint, a
// crafted file with a separate classifier, and one test per bad input.
#include "io/llama2c.h"

#include <cstring>

#include <gtest/gtest.h>

#include "io_test_util.h"

namespace dsv4 {
namespace {

using testing_io::Bytes;
using testing_io::IsError;

// A .bin with the given header whose fp32 payload is 0, 1, 2, ... (`n_floats` of them).
Bytes MakeBin(std::initializer_list<int32_t> header, int64_t n_floats) {
  Bytes b;
  for (int32_t h : header) b.I32(h);
  for (int64_t i = 0; i < n_floats; ++i) b.F32(static_cast<float>(i));
  return b;
}

// Floats a v0 file holds after its header (the layout of run.c's memory_map_weights).
int64_t PayloadFloats(int64_t D, int64_t H, int64_t L, int64_t NH, int64_t NKV, int64_t V,
                      int64_t S, bool shared) {
  const int64_t hd = D / NH, kv = NKV * hd;
  return V * D + L * D + L * D * D + 2 * L * kv * D + L * D * D + L * D + 3 * L * H * D + D +
         2 * (S * hd / 2) + (shared ? 0 : V * D);
}

float FirstFloat(const TensorInfo& t) {
  float f;
  std::memcpy(&f, t.data, 4);
  return f;
}

TEST(Llama2cTest, OpensStories260K) {
  const std::string path = testing_io::ModelPath("stories260K.bin");
  auto file = OpenLlama2c(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const Llama2cConfig& c = (*file)->config();
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.seq_len, 512);
  EXPECT_TRUE(c.shared_classifier);
  EXPECT_EQ(c.head_dim(), 8);
  EXPECT_EQ(c.kv_dim(), 32);
  EXPECT_EQ((*file)->path(), path);

  // token_embd + 9 per layer + output_norm; no output.weight (shared classifier).
  EXPECT_EQ((*file)->tensors().size(), 1u + 9u * 5u + 1u);
  EXPECT_EQ((*file)->Find("output.weight"), nullptr);
  EXPECT_TRUE((*file)->Get("token_embd.weight", {512, 64}).ok());
  EXPECT_TRUE((*file)->Get("blk.4.attn_k.weight", {32, 64}).ok());
  EXPECT_TRUE((*file)->Get("blk.0.ffn_gate.weight", {172, 64}).ok());
  EXPECT_TRUE((*file)->Get("blk.0.ffn_down.weight", {64, 172}).ok());
  EXPECT_TRUE((*file)->Get("blk.3.ffn_norm.weight", {64}).ok());
  EXPECT_TRUE((*file)->Get("output_norm.weight", {64}).ok());

  // The bytes are the file's: compare against an independent read at the
  // offsets run.c uses.
  const std::vector<uint8_t> raw = testing_io::ReadFile(path);
  ASSERT_EQ(raw.size(), 1056540u);
  const TensorInfo* emb = (*file)->Find("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(0, std::memcmp(emb->data, raw.data() + 28, 512 * 64 * 4));
  const size_t wq1 = 28 + 4 * (512 * 64 + 5 * 64 + 1 * 64 * 64);  // wq of layer 1
  const TensorInfo* q1 = (*file)->Find("blk.1.attn_q.weight");
  ASSERT_NE(q1, nullptr);
  EXPECT_EQ(0, std::memcmp(q1->data, raw.data() + wq1, 64 * 64 * 4));
  EXPECT_EQ(q1->nbytes, 64 * 64 * 4);
}

TEST(Llama2cTest, TensorsAreInFileOrderAndContiguous) {
  auto file = OpenLlama2c(testing_io::ModelPath("stories260K.bin"));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const auto& ts = (*file)->tensors();
  for (size_t i = 1; i < ts.size(); ++i) {
    const auto* prev = static_cast<const uint8_t*>(ts[i - 1].data);
    EXPECT_EQ(static_cast<const uint8_t*>(ts[i].data), prev + ts[i - 1].nbytes) << ts[i].name;
  }
  EXPECT_EQ(ts.front().name, "token_embd.weight");
  EXPECT_EQ(ts[1].name, "blk.0.attn_norm.weight");
  EXPECT_EQ(ts[6].name, "blk.0.attn_q.weight");
  EXPECT_EQ(ts.back().name, "output_norm.weight");
}

TEST(Llama2cTest, SeparateClassifierFollowsRopeTables) {
  // D 4, H 6, L 2, 2 heads, 1 kv head, vocab -3 (separate classifier), seq 5.
  const int64_t n = PayloadFloats(4, 6, 2, 2, 1, 3, 5, false);
  Bytes b = MakeBin({4, 6, 2, 2, 1, -3, 5}, n);
  auto file = ParseLlama2c(b.span(), "mem.bin");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_FALSE((*file)->config().shared_classifier);
  EXPECT_EQ((*file)->config().vocab_size, 3);
  auto out = (*file)->Get("output.weight", {3, 4});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  // wcls is the last V*D floats: its first value is n - 12.
  EXPECT_EQ(out->As<float>()[0], static_cast<float>(n - 12));
  // Per-layer slices: wk [L, KV*hd = 2, D] starts after emb 12, rms_att 8, wq 32.
  EXPECT_EQ(FirstFloat(*(*file)->Find("blk.0.attn_k.weight")), 52.0f);
  EXPECT_EQ(FirstFloat(*(*file)->Find("blk.1.attn_k.weight")), 60.0f);
  EXPECT_EQ(FirstFloat(*(*file)->Find("blk.1.attn_norm.weight")), 16.0f);
  // w2 of layer 1: after emb 12, rms_att 8, wq 32, wk 16, wv 16, wo 32, rms_ffn 8, w1 48, w2 of
  // layer 0 24.
  EXPECT_EQ(FirstFloat(*(*file)->Find("blk.1.ffn_down.weight")), 196.0f);
  EXPECT_TRUE((*file)->Get("blk.1.ffn_down.weight", {4, 6}).ok());
}

TEST(Llama2cTest, ParsesHeaderAlone) {
  Bytes b = MakeBin({64, 172, 5, 8, 4, -512, 512}, 0);
  auto c = ParseLlama2cHeader(b.span(), "h.bin");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->vocab_size, 512);
  EXPECT_FALSE(c->shared_classifier);
}

// ---- bad input, one test per case ----

TEST(Llama2cBadInputTest, MissingFile) {
  const std::string path = testing_io::MakeTempDir() + "/absent.bin";
  EXPECT_TRUE(IsError(OpenLlama2c(path).status(), StatusCode::kIo, path, {"cannot open"}));
}

TEST(Llama2cBadInputTest, ShorterThanHeader) {
  Bytes b;
  b.I32(64).I32(172);
  EXPECT_TRUE(IsError(ParseLlama2c(b.span(), "short.bin").status(), StatusCode::kDataLoss,
                      "short.bin", {"8 bytes", "28-byte"}));
}

TEST(Llama2cBadInputTest, TruncatedFileNamesExpectedAndActualBytes) {
  const std::string path = testing_io::MakeTempDir() + "/cut.bin";
  std::vector<uint8_t> raw = testing_io::ReadFile(testing_io::ModelPath("stories260K.bin"));
  raw.resize(raw.size() - 100);
  testing_io::WriteFile(path, raw);
  EXPECT_TRUE(IsError(OpenLlama2c(path).status(), StatusCode::kDataLoss, path,
                      {"implies 1056540 bytes", "has 1056440 bytes", "100 bytes missing"}));
}

TEST(Llama2cBadInputTest, TrailingBytes) {
  const int64_t n = PayloadFloats(4, 6, 1, 2, 1, 3, 2, true);
  Bytes b = MakeBin({4, 6, 1, 2, 1, 3, 2}, n + 1);
  EXPECT_TRUE(IsError(ParseLlama2c(b.span(), "long.bin").status(), StatusCode::kDataLoss,
                      "long.bin", {"4 unexpected trailing bytes"}));
}

TEST(Llama2cBadInputTest, ZeroDim) {
  Bytes b = MakeBin({0, 6, 1, 2, 1, 3, 2}, 0);
  EXPECT_TRUE(IsError(ParseLlama2c(b.span(), "z.bin").status(), StatusCode::kDataLoss, "z.bin",
                      {"dim = 0", "byte 0"}));
}

TEST(Llama2cBadInputTest, NegativeLayerCount) {
  Bytes b = MakeBin({4, 6, -1, 2, 1, 3, 2}, 0);
  EXPECT_TRUE(IsError(ParseLlama2c(b.span(), "n.bin").status(), StatusCode::kDataLoss, "n.bin",
                      {"n_layers = -1", "byte 8"}));
}

TEST(Llama2cBadInputTest, ZeroVocab) {
  Bytes b = MakeBin({4, 6, 1, 2, 1, 0, 2}, 0);
  EXPECT_TRUE(IsError(ParseLlama2c(b.span(), "v.bin").status(), StatusCode::kDataLoss, "v.bin",
                      {"vocab_size = 0"}));
}

TEST(Llama2cBadInputTest, AbsurdDim) {
  Bytes b = MakeBin({4, (1 << 20) + 1, 1, 2, 1, 3, 2}, 0);
  EXPECT_TRUE(IsError(ParseLlama2c(b.span(), "a.bin").status(), StatusCode::kDataLoss, "a.bin",
                      {"hidden_dim = 1048577"}));
}

TEST(Llama2cBadInputTest, DimNotMultipleOfHeads) {
  Bytes b = MakeBin({10, 6, 1, 4, 1, 3, 2}, 0);
  EXPECT_TRUE(IsError(ParseLlama2c(b.span(), "h.bin").status(), StatusCode::kDataLoss, "h.bin",
                      {"dim 10 is not a multiple of n_heads 4"}));
}

TEST(Llama2cBadInputTest, HeadsNotMultipleOfKvHeads) {
  Bytes b = MakeBin({12, 6, 1, 6, 4, 3, 2}, 0);
  EXPECT_TRUE(IsError(ParseLlama2c(b.span(), "k.bin").status(), StatusCode::kDataLoss, "k.bin",
                      {"n_heads 6 is not a multiple of n_kv_heads 4"}));
}

TEST(Llama2cBadInputTest, SizeOverflowsInt64) {
  // Every field at the maximum: the implied size is far past 2^63 bytes.
  const int32_t m = 1 << 20;
  Bytes b = MakeBin({m, m, m, 1, 1, m, m}, 0);
  EXPECT_TRUE(IsError(ParseLlama2c(b.span(), "big.bin").status(), StatusCode::kOutOfRange,
                      "big.bin", {"larger than 2^63"}));
}

TEST(Llama2cBadInputTest, GgufFileGiven) {
  const std::string path = testing_io::ModelPath("stories260K.gguf");
  EXPECT_TRUE(
      IsError(OpenLlama2c(path).status(), StatusCode::kInvalidArgument, path, {"GGUF file"}));
}

TEST(Llama2cBadInputTest, NewerExportVersion) {
  Bytes b;
  b.U32(0x616b3432).I32(1);
  b.Zeros(20);
  EXPECT_TRUE(IsError(ParseLlama2c(b.span(), "v1.bin").status(), StatusCode::kUnimplemented,
                      "v1.bin", {"ak42"}));
}

}  // namespace
}  // namespace dsv4
