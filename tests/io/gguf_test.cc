// Tests for the GGUF reader: stories260K.gguf against stories260K.bin (every
// weight bit for bit, metadata against the header), a file written by gguf-py
// with every metadata type, the typed accessors, and one test per bad input.
#include "io/gguf.h"

#include <cmath>
#include <cstring>
#include <set>

#include <gtest/gtest.h>

#include "io/llama2c.h"
#include "io_test_util.h"

namespace dsv4 {
namespace {

using testing_io::Bytes;
using testing_io::IsError;

// ---- a GGUF writer for crafted files ----

class GgufBuilder {
 public:
  GgufBuilder& Version(uint32_t v) {
    version_ = v;
    return *this;
  }
  GgufBuilder& Alignment(uint32_t a) {
    align_ = a;
    return KvU32("general.alignment", a);
  }
  GgufBuilder& KvU32(std::string_view key, uint32_t v) {
    kv_.Str(key).U32(static_cast<uint32_t>(GgufType::kUint32)).U32(v);
    ++n_kv_;
    return *this;
  }
  GgufBuilder& KvStr(std::string_view key, std::string_view v) {
    kv_.Str(key).U32(static_cast<uint32_t>(GgufType::kString)).Str(v);
    ++n_kv_;
    return *this;
  }
  // Anything: key, then the caller writes type and value into the returned bytes.
  Bytes& KvRaw(std::string_view key) {
    kv_.Str(key);
    ++n_kv_;
    return kv_;
  }
  // ne innermost first, as in the file.
  GgufBuilder& Tensor(std::string_view name, std::vector<uint64_t> ne, uint32_t type,
                      uint64_t offset) {
    ti_.Str(name).U32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) ti_.U64(d);
    ti_.U32(type).U64(offset);
    ++n_tensors_;
    return *this;
  }
  Bytes& data() { return data_; }
  GgufBuilder& Counts(uint64_t n_tensors, uint64_t n_kv) {
    forced_tensors_ = n_tensors;
    forced_kv_ = n_kv;
    forced_ = true;
    return *this;
  }

  Bytes Build() const {
    Bytes b;
    b.Text("GGUF").U32(version_);
    b.U64(forced_ ? forced_tensors_ : n_tensors_).U64(forced_ ? forced_kv_ : n_kv_);
    b.Raw(kv_.data().data(), kv_.size());
    b.Raw(ti_.data().data(), ti_.size());
    b.PadTo(align_);
    b.Raw(data_.data().data(), data_.size());
    return b;
  }

 private:
  uint32_t version_ = 3;
  uint32_t align_ = 32;
  Bytes kv_, ti_, data_;
  uint64_t n_kv_ = 0, n_tensors_ = 0;
  bool forced_ = false;
  uint64_t forced_tensors_ = 0, forced_kv_ = 0;
};

constexpr uint32_t kF32 = 0, kQ8_0 = 8, kQ4_K = 12, kQ6_K = 14;

// A valid file with one f32 [2, 4] tensor (values 0..7); bad-input tests change one thing.
GgufBuilder ValidBuilder() {
  GgufBuilder g;
  g.KvStr("general.architecture", "llama").KvU32("llama.block_count", 1);
  g.Tensor("w", {4, 2}, kF32, 0);
  for (int i = 0; i < 8; ++i) g.data().F32(static_cast<float>(i));
  return g;
}

Status ParseStatus(const Bytes& b, const std::string& path = "x.gguf") {
  return ParseGguf(b.span(), path).status();
}

// ---- the real model ----

TEST(GgufTest, Stories260KMetadataMatchesBinHeader) {
  auto gguf = OpenGguf(testing_io::ModelPath("stories260K.gguf"));
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  auto bin = OpenLlama2c(testing_io::ModelPath("stories260K.bin"));
  ASSERT_TRUE(bin.ok()) << bin.status().ToString();
  const GgufFile& g = **gguf;
  const Llama2cConfig& c = (*bin)->config();
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.alignment(), 32u);
  EXPECT_EQ(g.data_offset() % 32, 0u);
  EXPECT_EQ(*g.GetString("general.architecture"), "llama");
  EXPECT_EQ(*g.GetU32("llama.embedding_length"), static_cast<uint32_t>(c.dim));
  EXPECT_EQ(*g.GetU32("llama.feed_forward_length"), static_cast<uint32_t>(c.hidden_dim));
  EXPECT_EQ(*g.GetU32("llama.block_count"), static_cast<uint32_t>(c.n_layers));
  EXPECT_EQ(*g.GetU32("llama.attention.head_count"), static_cast<uint32_t>(c.n_heads));
  EXPECT_EQ(*g.GetU32("llama.attention.head_count_kv"), static_cast<uint32_t>(c.n_kv_heads));
  EXPECT_EQ(*g.GetU32("llama.rope.dimension_count"), static_cast<uint32_t>(c.head_dim()));
  EXPECT_FLOAT_EQ(*g.GetF32("llama.attention.layer_norm_rms_epsilon"), 1e-5f);
  // The converter wrote its default context length (2048), not the .bin's seq_len (512).
  EXPECT_EQ(*g.GetU32("llama.context_length"), 2048u);
  auto tokens = g.GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
  EXPECT_EQ(tokens->size(), static_cast<size_t>(c.vocab_size));
  EXPECT_EQ((*tokens)[0], "<unk>");
  EXPECT_EQ((*tokens)[1], "<s>");
  EXPECT_EQ(g.GetF32Array("tokenizer.ggml.scores")->size(), static_cast<size_t>(c.vocab_size));
  auto types = g.GetI32Array("tokenizer.ggml.token_type");
  ASSERT_TRUE(types.ok()) << types.status().ToString();
  EXPECT_EQ(types->size(), static_cast<size_t>(c.vocab_size));
  EXPECT_EQ(*g.GetU32("tokenizer.ggml.bos_token_id"), 1u);
  EXPECT_EQ(*g.GetU32("tokenizer.ggml.eos_token_id"), 2u);
}

TEST(GgufTest, Stories260KWeightsEqualBinBitForBit) {
  auto gguf = OpenGguf(testing_io::ModelPath("stories260K.gguf"));
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  auto bin = OpenLlama2c(testing_io::ModelPath("stories260K.bin"));
  ASSERT_TRUE(bin.ok()) << bin.status().ToString();
  std::set<std::string> gguf_names;
  for (const TensorInfo& t : (*gguf)->tensors()) gguf_names.insert(t.name);
  std::set<std::string> bin_names;
  for (const TensorInfo& t : (*bin)->tensors()) {
    bin_names.insert(t.name);
    const TensorInfo* g = (*gguf)->Find(t.name);
    ASSERT_NE(g, nullptr) << t.name << " is not in the GGUF";
    EXPECT_EQ(g->dtype, DType::kF32) << t.name;
    EXPECT_EQ(g->shape, t.shape) << t.name;
    ASSERT_EQ(g->nbytes, t.nbytes) << t.name;
    EXPECT_EQ(0, std::memcmp(g->data, t.data, static_cast<size_t>(t.nbytes))) << t.name;
  }
  // The GGUF also carries the (shared) classifier as output.weight: equal to the embedding.
  std::set<std::string> extra;
  for (const std::string& n : gguf_names) {
    if (bin_names.count(n) == 0) extra.insert(n);
  }
  EXPECT_EQ(extra, std::set<std::string>{"output.weight"});
  const TensorInfo* out = (*gguf)->Find("output.weight");
  const TensorInfo* emb = (*bin)->Find("token_embd.weight");
  ASSERT_NE(out, nullptr);
  ASSERT_EQ(out->nbytes, emb->nbytes);
  EXPECT_EQ(0, std::memcmp(out->data, emb->data, static_cast<size_t>(emb->nbytes)));
}

// ---- a file written by gguf-py (tests/data/io/make_io_data.py) ----

TEST(GgufTest, ReadsEveryMetadataTypeFromGgufPy) {
  auto f = OpenGguf(testing_io::TestDataPath("tiny.gguf"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const GgufFile& g = **f;
  const auto& ex = testing_io::Expected()["gguf"];
  EXPECT_EQ(g.GetMeta("test.u8")->type, GgufType::kUint8);
  EXPECT_EQ(*g.GetU32("test.u8"), 200u);
  EXPECT_EQ(*g.GetI32("test.i8"), -100);
  EXPECT_EQ(*g.GetU32("test.u16"), 60000u);
  EXPECT_EQ(*g.GetI32("test.i16"), -30000);
  EXPECT_EQ(*g.GetU32("test.u32"), 4000000000u);
  EXPECT_EQ(*g.GetI32("test.i32"), -2000000000);
  EXPECT_EQ(*g.GetF32("test.f32"), ex["test.f32"].get<float>());
  EXPECT_EQ(*g.GetBool("test.bool"), true);
  EXPECT_EQ(*g.GetString("test.str"), "héllo wörld ✓");
  EXPECT_EQ(*g.GetU64("test.u64"), (uint64_t{1} << 63) + 5);
  EXPECT_EQ(*g.GetI64("test.i64"), -(int64_t{1} << 62));
  EXPECT_EQ(g.GetMeta("test.f64")->f64, ex["test.f64"].get<double>());
  EXPECT_EQ(*g.GetStringArray("test.arr_str"),
            (std::vector<std::string>{"a", "", "日本語", "<0x0A>"}));
  EXPECT_EQ(*g.GetF32Array("test.arr_f32"), ex["test.arr_f32"].get<std::vector<float>>());
  EXPECT_EQ(*g.GetI32Array("test.arr_i32"), (std::vector<int32_t>{1, -2, 2147483647}));
  EXPECT_EQ(*g.GetI32Array("test.arr_u8"), (std::vector<int32_t>{1, 2, 255}));
  EXPECT_EQ(*g.GetI32Array("test.arr_i64"), (std::vector<int32_t>{5, -6}));
  EXPECT_EQ(*g.GetF32Array("test.arr_f64"), (std::vector<float>{0.25f, -8.0f}));
  const GgufValue* bools = g.GetMeta("test.arr_bool");
  ASSERT_NE(bools, nullptr);
  EXPECT_EQ(bools->TypeString(), "array of bool");
  EXPECT_EQ(bools->count, 2u);
  EXPECT_EQ(*g.GetU32("llama.context_length"), 128u);
  // File order is kept.
  EXPECT_EQ(g.metadata().front().key, "general.architecture");
}

TEST(GgufTest, TensorsMatchGgufPyDecoding) {
  auto f = OpenGguf(testing_io::TestDataPath("tiny.gguf"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const auto& ex = testing_io::Expected()["gguf"];
  for (const char* name : {"t.f32", "t.f16", "t.bf16", "t.q8_0", "t.i32"}) {
    SCOPED_TRACE(name);
    const auto& e = ex[name];
    const TensorInfo* t = (*f)->Find(name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(DTypeName(t->dtype), e["dtype"].get<std::string>());
    EXPECT_EQ(t->shape, e["shape"].get<std::vector<int64_t>>());
    const std::vector<float> got = testing_io::Dequantize(t->dtype, t->data, t->view().numel());
    const std::vector<double> want = e["values"].get<std::vector<double>>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], static_cast<float>(want[i])) << i;
  }
  EXPECT_EQ((*f)->Find("t.q8_0")->nbytes, 2 * 2 * 34);
}

TEST(GgufTest, Q4KTensorBindsAsQ4K) {
  auto f = OpenGguf(testing_io::TestDataPath("tiny.gguf"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const TensorInfo* t = (*f)->Find("t.q4_k");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::kQ4_K);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 256}));
  EXPECT_EQ(t->nbytes, 2 * 144);
  EXPECT_EQ((*f)->ggml_tensors().size(), 6u);
  EXPECT_EQ((*f)->tensors().size(), 6u);
  auto v = (*f)->Get("t.q4_k", {2, 256});
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->nbytes(), 2 * 144);
}

TEST(GgufTest, UnsupportedTypeIsListedAndUnimplementedWhenBound) {
  constexpr uint32_t kTQ1_0 = 34;  // 256 values in 54 bytes; no DType for it
  GgufBuilder g;
  g.Tensor("t.tq1_0", {256, 2}, kTQ1_0, 0);
  g.data().Zeros(128);  // 108 bytes, padded to the alignment
  g.Tensor("t.f32", {4}, kF32, 128);
  g.data().Zeros(16);
  const std::string path = "crafted.gguf";
  auto f = ParseGguf(g.Build().span(), path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->Find("t.tq1_0"), nullptr);
  bool listed = false;
  for (const GgufTensorInfo& t : (*f)->ggml_tensors()) {
    if (t.name != "t.tq1_0") continue;
    listed = true;
    EXPECT_EQ(t.ggml_type, kTQ1_0);
    EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 256}));
    EXPECT_EQ(t.nbytes, 2 * 54);
    EXPECT_FALSE(t.dtype.has_value());
  }
  EXPECT_TRUE(listed);
  EXPECT_EQ((*f)->ggml_tensors().size(), 2u);
  EXPECT_EQ((*f)->tensors().size(), 1u);
  EXPECT_TRUE(IsError((*f)->Lookup("t.tq1_0").status(), StatusCode::kUnimplemented, path,
                      {"t.tq1_0", "tq1_0", "34"}));
  EXPECT_TRUE(IsError((*f)->Lookup("nope").status(), StatusCode::kNotFound, path, {"'nope'"}));
  auto ok = (*f)->Lookup("t.f32");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)->name, "t.f32");
}

// ---- typed accessors ----

class GgufAccessorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto f = OpenGguf(path_);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    file_ = std::move(*f);
  }
  std::string path_ = testing_io::TestDataPath("tiny.gguf");
  std::unique_ptr<GgufFile> file_;
};

TEST_F(GgufAccessorTest, MissingKeyIsNotFound) {
  EXPECT_TRUE(IsError(file_->GetU32("no.such.key").status(), StatusCode::kNotFound, path_,
                      {"'no.such.key'", "missing"}));
  EXPECT_EQ(file_->GetMeta("no.such.key"), nullptr);
}

TEST_F(GgufAccessorTest, WrongTypeNamesKeyAndBothTypes) {
  EXPECT_TRUE(IsError(file_->GetU32("test.str").status(), StatusCode::kInvalidArgument, path_,
                      {"'test.str'", "is string", "unsigned 32-bit"}));
  EXPECT_TRUE(IsError(file_->GetString("test.u32").status(), StatusCode::kInvalidArgument, path_,
                      {"'test.u32'", "is uint32", "expected string"}));
  EXPECT_TRUE(IsError(file_->GetF32("test.i32").status(), StatusCode::kInvalidArgument, path_,
                      {"is int32", "float32"}));
  EXPECT_TRUE(IsError(file_->GetBool("test.u8").status(), StatusCode::kInvalidArgument, path_,
                      {"is uint8", "bool"}));
  EXPECT_TRUE(IsError(file_->GetStringArray("test.arr_f32").status(), StatusCode::kInvalidArgument,
                      path_, {"array of float32", "array of string"}));
  EXPECT_TRUE(IsError(file_->GetF32Array("test.arr_str").status(), StatusCode::kInvalidArgument,
                      path_, {"array of string", "array of float32"}));
  EXPECT_TRUE(IsError(file_->GetI32Array("test.arr_f32").status(), StatusCode::kInvalidArgument,
                      path_, {"array of float32", "array of int32"}));
  EXPECT_TRUE(IsError(file_->GetU32("test.arr_i32").status(), StatusCode::kInvalidArgument, path_,
                      {"array of int32"}));
}

TEST_F(GgufAccessorTest, IntegerThatDoesNotFitIsAnError) {
  EXPECT_TRUE(IsError(file_->GetU32("test.u64").status(), StatusCode::kInvalidArgument, path_,
                      {"'test.u64'", "does not fit"}));
  EXPECT_TRUE(IsError(file_->GetI32("test.u32").status(), StatusCode::kInvalidArgument, path_,
                      {"4000000000", "does not fit"}));
  EXPECT_TRUE(IsError(file_->GetU32("test.i8").status(), StatusCode::kInvalidArgument, path_,
                      {"-100", "does not fit"}));
  EXPECT_TRUE(IsError(file_->GetI64("test.u64").status(), StatusCode::kInvalidArgument, path_,
                      {"does not fit"}));
}

TEST_F(GgufAccessorTest, WiderIntegerTypesConvertWhenTheyFit) {
  EXPECT_EQ(*file_->GetU64("test.u8"), 200u);
  EXPECT_EQ(*file_->GetI64("test.i32"), -2000000000);
  EXPECT_EQ(*file_->GetI32("test.u16"), 60000);
  EXPECT_EQ(*file_->GetF32("test.f64"), static_cast<float>(1.0 / 3.0));
}

// ---- crafted files ----

TEST(GgufCraftedTest, ValidBuilderFileParses) {
  Bytes b = ValidBuilder().Build();
  auto f = ParseGguf(b.span(), "ok.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto w = (*f)->Get("w", {2, 4});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->As<float>()[7], 7.0f);
}

TEST(GgufCraftedTest, Version2AndCustomAlignment) {
  GgufBuilder g;
  g.Version(2).Alignment(64).Tensor("a", {3}, kF32, 0).Tensor("b", {2, 3, 4}, kF32, 64);
  g.data().F32(1).F32(2).F32(3).PadTo(64);
  for (int i = 0; i < 24; ++i) g.data().F32(static_cast<float>(100 + i));
  Bytes b = g.Build();
  auto f = ParseGguf(b.span(), "v2.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->version(), 2u);
  EXPECT_EQ((*f)->alignment(), 64u);
  EXPECT_EQ((*f)->data_offset() % 64, 0u);
  // ne [2, 3, 4] innermost first is shape [4, 3, 2] outermost first.
  auto t = (*f)->Get("b", {4, 3, 2});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->As<float>()[0], 100.0f);
  EXPECT_EQ(t->As<float>()[23], 123.0f);
}

TEST(GgufCraftedTest, ZeroTensorsNoDataSection) {
  // No padding and no data after the metadata: fine when there are no tensors.
  Bytes b;
  b.Text("GGUF").U32(3).U64(0).U64(1);
  b.Str("general.architecture").U32(static_cast<uint32_t>(GgufType::kString)).Str("x");
  ASSERT_NE(b.size() % 32, 0u);
  auto f = ParseGguf(b.span(), "meta.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE((*f)->tensors().empty());
}

// Found by fuzz_gguf: a tensor with a zero dimension (0 bytes) in a file that
// ends right after its infos, before the aligned data start. It parses (as
// llama.cpp's reader accepts it), and its data pointer stays inside the file.
TEST(GgufCraftedTest, EmptyTensorInAFileWithoutDataSection) {
  Bytes b;
  b.Text("GGUF").U32(3).U64(1).U64(0);
  b.Str("e").U32(1).U64(0).U32(kF32).U64(0);  // "e": ne = {0}, f32, offset 0
  ASSERT_NE(b.size() % 32, 0u);
  auto f = ParseGguf(b.span(), "empty.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ((*f)->tensors().size(), 1u);
  const TensorInfo& t = (*f)->tensors()[0];
  EXPECT_EQ(t.nbytes, 0);
  const auto* p = static_cast<const uint8_t*>(t.data);
  EXPECT_GE(p, b.span().data());
  EXPECT_LE(p, b.span().data() + b.size());
}

TEST(GgufCraftedTest, Q8_0TensorNeedsWholeBlocks) {
  GgufBuilder g;
  g.Tensor("q", {64, 1}, kQ8_0, 0);
  g.data().Zeros(68);
  Bytes b = g.Build();
  auto f = ParseGguf(b.span(), "q.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->Find("q")->nbytes, 68);
  EXPECT_EQ((*f)->Find("q")->dtype, DType::kQ8_0);
}

// ---- bad input, one test per case ----

TEST(GgufBadInputTest, MissingFile) {
  const std::string path = testing_io::MakeTempDir() + "/absent.gguf";
  EXPECT_TRUE(IsError(OpenGguf(path).status(), StatusCode::kIo, path, {"cannot open"}));
}

TEST(GgufBadInputTest, TooShortForMagic) {
  Bytes b;
  b.Text("GG");
  EXPECT_TRUE(IsError(ParseStatus(b), StatusCode::kDataLoss, "x.gguf", {"2 bytes"}));
}

TEST(GgufBadInputTest, WrongMagic) {
  Bytes b = ValidBuilder().Build();
  b.mutable_data()[0] = 'X';
  EXPECT_TRUE(IsError(ParseStatus(b), StatusCode::kInvalidArgument, "x.gguf",
                      {"bad magic", "58 47 55 46"}));
}

TEST(GgufBadInputTest, TruncatedHeader) {
  Bytes b;
  b.Text("GGUF").U32(3).U64(0);
  EXPECT_TRUE(IsError(ParseStatus(b), StatusCode::kDataLoss, "x.gguf",
                      {"truncated at byte 16", "metadata count"}));
}

TEST(GgufBadInputTest, UnsupportedVersion) {
  Bytes b = ValidBuilder().Version(1).Build();
  EXPECT_TRUE(IsError(ParseStatus(b), StatusCode::kUnimplemented, "x.gguf", {"version 1"}));
}

TEST(GgufBadInputTest, BigEndianVersion) {
  Bytes b = ValidBuilder().Version(0x03000000).Build();
  EXPECT_TRUE(IsError(ParseStatus(b), StatusCode::kUnimplemented, "x.gguf", {"big-endian"}));
}

TEST(GgufBadInputTest, AbsurdMetadataCount) {
  Bytes b = ValidBuilder().Counts(1, uint64_t{1} << 60).Build();
  EXPECT_TRUE(IsError(ParseStatus(b), StatusCode::kOutOfRange, "x.gguf",
                      {"1152921504606846976 metadata entries"}));
}

TEST(GgufBadInputTest, AbsurdTensorCount) {
  Bytes b = ValidBuilder().Counts(uint64_t{1} << 40, 2).Build();
  EXPECT_TRUE(
      IsError(ParseStatus(b), StatusCode::kOutOfRange, "x.gguf", {"1099511627776 tensors"}));
}

TEST(GgufBadInputTest, KeyLengthPastEof) {
  GgufBuilder g;
  g.KvRaw("k").U32(4);  // type, but the value is cut: then patch the key length
  Bytes b = g.Build();
  // Key length sits right after the 24-byte header.
  const uint64_t huge = 1000000;
  std::memcpy(b.mutable_data().data() + 24, &huge, 8);
  EXPECT_TRUE(IsError(ParseStatus(b), StatusCode::kOutOfRange, "x.gguf",
                      {"key of metadata entry 0", "byte 24", "claims 1000000 bytes"}));
}

TEST(GgufBadInputTest, NonUtf8Key) {
  GgufBuilder g = ValidBuilder();
  g.KvU32("bad\xff key", 1);
  EXPECT_TRUE(IsError(ParseStatus(g.Build()), StatusCode::kDataLoss, "x.gguf",
                      {"key of metadata entry 2", "not valid UTF-8"}));
}

TEST(GgufBadInputTest, NonUtf8StringValue) {
  GgufBuilder g = ValidBuilder();
  g.KvStr("general.name", "ok\xc3\x28");
  EXPECT_TRUE(IsError(ParseStatus(g.Build()), StatusCode::kDataLoss, "x.gguf",
                      {"'general.name'", "not valid UTF-8"}));
}

TEST(GgufBadInputTest, NonUtf8ArrayElement) {
  GgufBuilder g = ValidBuilder();
  g.KvRaw("tokenizer.ggml.tokens")
      .U32(static_cast<uint32_t>(GgufType::kArray))
      .U32(static_cast<uint32_t>(GgufType::kString))
      .U64(2)
      .Str("fine")
      .Str("\xed\xa0\x80");  // an encoded surrogate
  EXPECT_TRUE(IsError(ParseStatus(g.Build()), StatusCode::kDataLoss, "x.gguf",
                      {"'tokenizer.ggml.tokens'", "element 1", "not valid UTF-8"}));
}

TEST(GgufBadInputTest, DuplicateKey) {
  GgufBuilder g = ValidBuilder();
  g.KvU32("llama.block_count", 2);
  EXPECT_TRUE(IsError(ParseStatus(g.Build()), StatusCode::kDataLoss, "x.gguf",
                      {"duplicate metadata key 'llama.block_count'"}));
}

TEST(GgufBadInputTest, DuplicateTensorName) {
  GgufBuilder g = ValidBuilder();
  g.Tensor("w", {4, 2}, kF32, 32);
  g.data().Zeros(32);
  EXPECT_TRUE(IsError(ParseStatus(g.Build()), StatusCode::kDataLoss, "x.gguf",
                      {"duplicate tensor name 'w'"}));
}

TEST(GgufBadInputTest, UnknownValueType) {
  GgufBuilder g = ValidBuilder();
  g.KvRaw("weird").U32(13).U32(0);
  EXPECT_TRUE(IsError(ParseStatus(g.Build()), StatusCode::kDataLoss, "x.gguf",
                      {"'weird'", "unknown value type 13"}));
}

TEST(GgufBadInputTest, NestedArray) {
  GgufBuilder g = ValidBuilder();
  g.KvRaw("nested")
      .U32(static_cast<uint32_t>(GgufType::kArray))
      .U32(static_cast<uint32_t>(GgufType::kArray))
      .U64(0);
  EXPECT_TRUE(IsError(ParseStatus(g.Build()), StatusCode::kUnimplemented, "x.gguf",
                      {"'nested'", "array of arrays"}));
}

TEST(GgufBadInputTest, ArrayCountPastEof) {
  GgufBuilder g;
  g.KvRaw("scores")
      .U32(static_cast<uint32_t>(GgufType::kArray))
      .U32(static_cast<uint32_t>(GgufType::kFloat32))
      .U64(uint64_t{1} << 61)
      .F32(1.0f);
  EXPECT_TRUE(IsError(ParseStatus(g.Build()), StatusCode::kOutOfRange, "x.gguf",
                      {"'scores'", "2305843009213693952 elements of float32"}));
}

TEST(GgufBadInputTest, BoolNotZeroOrOne) {
  GgufBuilder g = ValidBuilder();
  g.KvRaw("flag").U32(static_cast<uint32_t>(GgufType::kBool)).U8(2);
  EXPECT_TRUE(IsError(ParseStatus(g.Build()), StatusCode::kDataLoss, "x.gguf",
                      {"'flag'", "bool value is 2"}));
}

TEST(GgufBadInputTest, AlignmentNotPowerOfTwo) {
  GgufBuilder g;
  g.KvU32("general.alignment", 48);
  EXPECT_TRUE(
      IsError(ParseStatus(g.Build()), StatusCode::kDataLoss, "x.gguf", {"general.alignment = 48"}));
}

TEST(GgufBadInputTest, AlignmentWrongType) {
  GgufBuilder g;
  g.KvStr("general.alignment", "32");
  EXPECT_TRUE(IsError(ParseStatus(g.Build()), StatusCode::kInvalidArgument, "x.gguf",
                      {"'general.alignment' is string"}));
}

TEST(GgufBadInputTest, TooManyDims) {
  GgufBuilder g;
  g.Tensor("t5", {1, 1, 1, 1, 1}, kF32, 0);
  g.data().Zeros(4);
  EXPECT_TRUE(
      IsError(ParseStatus(g.Build()), StatusCode::kDataLoss, "x.gguf", {"tensor 't5'", "5 dims"}));
}

TEST(GgufBadInputTest, NegativeDim) {
  GgufBuilder g;
  g.Tensor("neg", {uint64_t{1} << 63}, kF32, 0);
  EXPECT_TRUE(IsError(ParseStatus(g.Build()), StatusCode::kDataLoss, "x.gguf",
                      {"tensor 'neg'", "negative"}));
}

TEST(GgufBadInputTest, TruncatedTensorInfo) {
  Bytes b = ValidBuilder().Build();
  // Cut inside the tensor info (after its name).
  const size_t info_at = b.size() - 32 - 8 * 4;  // data 32 bytes; info ends before padding
  b.mutable_data().resize(info_at);
  const Status s = ParseStatus(b);
  EXPECT_TRUE(IsError(s, StatusCode::kDataLoss, "x.gguf", {"truncated", "tensor 'w'"}));
}

TEST(GgufBadInputTest, UnknownGgmlType) {
  GgufBuilder g;
  g.Tensor("odd", {4}, 99, 0);
  g.data().Zeros(32);
  EXPECT_TRUE(IsError(ParseStatus(g.Build()), StatusCode::kUnimplemented, "x.gguf",
                      {"tensor 'odd'", "unknown ggml type 99"}));
}

TEST(GgufBadInputTest, RowNotMultipleOfBlockSize) {
  GgufBuilder g;
  g.Tensor("q", {31, 2}, kQ8_0, 0);
  g.data().Zeros(68);
  EXPECT_TRUE(IsError(ParseStatus(g.Build()), StatusCode::kDataLoss, "x.gguf",
                      {"tensor 'q'", "rows of 31 elements", "q8_0 block size 32"}));
}

TEST(GgufCraftedTest, KQuantTensorsMapToDTypes) {
  GgufBuilder g;
  g.Tensor("a", {512, 3}, kQ4_K, 0);
  g.data().Zeros(3 * 2 * 144);  // 864 bytes, a multiple of 32
  g.Tensor("b", {256, 2}, kQ6_K, 864);
  g.data().Zeros(2 * 210);
  auto f = ParseGguf(g.Build().span(), "x.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const TensorInfo* a = (*f)->Find("a");
  const TensorInfo* b = (*f)->Find("b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->dtype, DType::kQ4_K);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{3, 512}));
  EXPECT_EQ(a->nbytes, 3 * 512 / 256 * 144);
  EXPECT_EQ(b->dtype, DType::kQ6_K);
  EXPECT_EQ(b->shape, (std::vector<int64_t>{2, 256}));
  EXPECT_EQ(b->nbytes, 2 * 210);
}

TEST(GgufBadInputTest, Q4KRowNotMultipleOf256) {
  GgufBuilder g;
  g.Tensor("q", {128, 4}, kQ4_K, 0);
  g.data().Zeros(4 * 144);
  EXPECT_TRUE(IsError(ParseStatus(g.Build()), StatusCode::kDataLoss, "x.gguf",
                      {"tensor 'q'", "rows of 128 elements", "q4_K block size 256"}));
}

TEST(GgufBadInputTest, Q6KRowNotMultipleOf256) {
  GgufBuilder g;
  g.Tensor("q", {384, 2}, kQ6_K, 0);
  g.data().Zeros(3 * 210);
  EXPECT_TRUE(IsError(ParseStatus(g.Build()), StatusCode::kDataLoss, "x.gguf",
                      {"tensor 'q'", "rows of 384 elements", "q6_K block size 256"}));
}

TEST(GgufBadInputTest, Q4KDataTruncated) {
  GgufBuilder g;
  g.Tensor("q", {256, 2}, kQ4_K, 0);
  g.data().Zeros(2 * 144 - 1);
  EXPECT_TRUE(IsError(ParseStatus(g.Build()), StatusCode::kOutOfRange, "x.gguf",
                      {"tensor 'q'", "288 bytes at data offset 0", "past the end"}));
}

TEST(GgufBadInputTest, Q6KDataTruncated) {
  GgufBuilder g;
  g.Tensor("q", {512, 1}, kQ6_K, 0);
  g.data().Zeros(210);
  EXPECT_TRUE(IsError(ParseStatus(g.Build()), StatusCode::kOutOfRange, "x.gguf",
                      {"tensor 'q'", "420 bytes at data offset 0", "past the end"}));
}

TEST(GgufBadInputTest, MisalignedTensorOffset) {
  GgufBuilder g;
  g.Tensor("m", {4}, kF32, 4);
  g.data().Zeros(32);
  EXPECT_TRUE(IsError(ParseStatus(g.Build()), StatusCode::kDataLoss, "x.gguf",
                      {"tensor 'm'", "offset 4", "alignment 32"}));
}

TEST(GgufBadInputTest, TensorPastEof) {
  GgufBuilder g = ValidBuilder();
  Bytes b = g.Build();
  b.mutable_data().resize(b.size() - 4);  // the last float of 'w' is cut
  EXPECT_TRUE(IsError(ParseStatus(b), StatusCode::kOutOfRange, "x.gguf",
                      {"tensor 'w'", "32 bytes at data offset 0", "past the end"}));
}

TEST(GgufBadInputTest, TensorOffsetPastEof) {
  GgufBuilder g;
  g.Tensor("far", {4}, kF32, uint64_t{1} << 40);
  g.data().Zeros(32);
  EXPECT_TRUE(IsError(ParseStatus(g.Build()), StatusCode::kOutOfRange, "x.gguf",
                      {"tensor 'far'", "1099511627776", "past the end"}));
}

TEST(GgufBadInputTest, TensorByteSizeOverflows) {
  GgufBuilder g;
  g.Tensor("huge", {uint64_t{1} << 62, 4}, kF32, 0);
  EXPECT_TRUE(IsError(ParseStatus(g.Build()), StatusCode::kOutOfRange, "x.gguf",
                      {"tensor 'huge'", "overflows 64 bits"}));
}

TEST(GgufBadInputTest, EmptyTensorWithHugeDims) {
  // Zero elements, but [2^62, 2^62, 0] would overflow any product of its dims.
  GgufBuilder g;
  g.Tensor("z", {0, uint64_t{1} << 62, uint64_t{1} << 62}, kF32, 0);
  EXPECT_TRUE(IsError(ParseStatus(g.Build()), StatusCode::kOutOfRange, "x.gguf",
                      {"tensor 'z'", "overflows 64 bits"}));
}

TEST(GgufBadInputTest, OverlappingTensors) {
  GgufBuilder g;
  g.Tensor("a", {16}, kF32, 0).Tensor("b", {8}, kF32, 32);
  g.data().Zeros(64);
  EXPECT_TRUE(
      IsError(ParseStatus(g.Build()), StatusCode::kDataLoss, "x.gguf", {"'a'", "'b'", "overlap"}));
}

TEST(GgufBadInputTest, ShapeMismatchWhenBound) {
  Bytes b = ValidBuilder().Build();
  auto f = ParseGguf(b.span(), "x.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE(IsError((*f)->Get("w", {4, 2}).status(), StatusCode::kInvalidArgument, "x.gguf",
                      {"'w'", "[2, 4]", "expected [4, 2]"}));
}

TEST(GgufUtf8Test, Validator) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("\xc3\xa9\xe2\x9c\x93\xf0\x9f\x98\x80"));  // é ✓ 😀
  EXPECT_FALSE(IsValidUtf8("\x80"));                                 // lone continuation
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));                             // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xe0\x80\xaf"));                         // overlong, 3 bytes
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));                         // surrogate
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));                     // > U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xe2\x9c"));                             // truncated
}

}  // namespace
}  // namespace dsv4
