// Tests for the safetensors readers: a file written by the safetensors PyPI
// package (every dtype, metadata, unsupported entries), a file written here
// byte by byte, the packed-FP4 view, the sharded directory, and one test per
// bad input.
#include "io/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include <gtest/gtest.h>

#include "io_test_util.h"

namespace dsv4 {
namespace {

using testing_io::Bytes;
using testing_io::IsError;

// header JSON (padded with spaces to a multiple of 8, as the safetensors
// library does) + data.
Bytes MakeSt(std::string header, const Bytes& data = Bytes()) {
  while (header.size() % 8 != 0) header += ' ';
  Bytes b;
  b.U64(header.size()).Text(header);
  b.Raw(data.data().data(), data.size());
  return b;
}

Status ParseStatus(const Bytes& b, const std::string& path = "x.safetensors") {
  return ParseSafetensors(b.span(), path).status();
}

// Compares a tensor with its expected.json entry.
void ExpectTensor(const TensorInfo& t, const nlohmann::json& e) {
  SCOPED_TRACE(t.name);
  EXPECT_EQ(t.shape, e["shape"].get<std::vector<int64_t>>());
  const int64_t n = t.view().numel();
  if (t.dtype == DType::kI64) {
    const std::vector<int64_t> want = e["values"].get<std::vector<int64_t>>();
    ASSERT_EQ(static_cast<size_t>(n), want.size());
    for (int64_t i = 0; i < n; ++i) {
      int64_t v;
      std::memcpy(&v, static_cast<const uint8_t*>(t.data) + 8 * i, 8);
      EXPECT_EQ(v, want[i]) << i;
    }
    return;
  }
  const std::vector<float> got = testing_io::Dequantize(t.dtype, t.data, n);
  const std::vector<double> want = e["values"].get<std::vector<double>>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], static_cast<float>(want[i])) << i;
}

// ---- a file written by the safetensors package (tests/data/io/make_io_data.py) ----

TEST(SafetensorsTest, ReadsEveryDTypeFromTheReferenceWriter) {
  const std::string path = testing_io::TestDataPath("tiny.safetensors");
  auto f = OpenSafetensors(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const auto& ex = testing_io::Expected()["safetensors"];
  const std::map<std::string, DType> want_dtype = {
      {"f32", DType::kF32},       {"f16", DType::kF16},    {"bf16", DType::kBF16},
      {"fp8", DType::kFp8E4m3},   {"e8m0", DType::kE8m0},  {"i8", DType::kI8},
      {"u8", DType::kI8},         {"i32", DType::kI32},    {"i64", DType::kI64},
      {"packed_fp4", DType::kI8}, {"scalar", DType::kF32}, {"empty", DType::kF32},
      {"big", DType::kF32}};
  for (const auto& [name, dtype] : want_dtype) {
    const TensorInfo* t = (*f)->Find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->dtype, dtype) << name;
    EXPECT_EQ((*f)->StoredDType(name), ex[name]["dtype"].get<std::string>()) << name;
    if (name == "u8") {
      // U8 is read as bytes: compare them unsigned.
      const auto* p = static_cast<const uint8_t*>(t->data);
      const std::vector<int> want = ex[name]["values"].get<std::vector<int>>();
      for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(p[i], want[i]);
      continue;
    }
    ExpectTensor(*t, ex[name]);
  }
  EXPECT_EQ((*f)->tensors().size(), want_dtype.size());
  EXPECT_EQ((*f)->Find("scalar")->shape, std::vector<int64_t>{});
  EXPECT_EQ((*f)->Find("empty")->nbytes, 0);
  EXPECT_EQ((*f)->metadata().at("producer"), "make_io_data.py");
  EXPECT_EQ((*f)->metadata().at("format"), "np");
  EXPECT_EQ((*f)->data_offset() % 8, 0u);
  // Data order.
  const auto& ts = (*f)->tensors();
  for (size_t i = 1; i < ts.size(); ++i) EXPECT_LE(ts[i - 1].data, ts[i].data);
}

TEST(SafetensorsTest, UnbindableEntriesAreListedWithReasons) {
  const std::string path = testing_io::TestDataPath("tiny.safetensors");
  auto f = OpenSafetensors(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->unsupported().size(), 3u);
  EXPECT_EQ((*f)->Find("flags"), nullptr);
  EXPECT_TRUE(IsError((*f)->Lookup("flags").status(), StatusCode::kUnimplemented, path,
                      {"'flags'", "BOOL"}));
  EXPECT_TRUE(
      IsError((*f)->Lookup("f64").status(), StatusCode::kUnimplemented, path, {"'f64'", "F64"}));
  EXPECT_TRUE(IsError((*f)->Lookup("rank5").status(), StatusCode::kUnimplemented, path,
                      {"'rank5'", "rank 5", "[1, 1, 1, 2, 1]"}));
  EXPECT_TRUE(IsError((*f)->Lookup("zzz").status(), StatusCode::kNotFound, path, {"'zzz'"}));
  EXPECT_TRUE((*f)->Lookup("f32").ok());
  // A model binding weights through the reader interface gets the same reason,
  // not "missing".
  const CheckpointReader& reader = **f;
  EXPECT_TRUE(
      IsError(reader.Get("f64", {2}).status(), StatusCode::kUnimplemented, path, {"'f64'", "F64"}));
  EXPECT_TRUE(IsError(GetPackedFp4(reader, "flags", {2}).status(), StatusCode::kUnimplemented, path,
                      {"'flags'", "BOOL"}));
  EXPECT_TRUE(IsError(reader.Get("zzz", {2}).status(), StatusCode::kNotFound, path, {"'zzz'"}));
}

TEST(SafetensorsTest, PackedFp4ViewMatchesMlDtypesDecoding) {
  auto f = OpenSafetensors(testing_io::TestDataPath("tiny.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const auto& e = testing_io::Expected()["safetensors"]["packed_fp4"];
  auto v = GetPackedFp4(**f, "packed_fp4", {2, 8});
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->dtype, DType::kFp4E2m1);
  EXPECT_EQ(v->rank, 2);
  EXPECT_EQ(v->size(1), 8);
  EXPECT_EQ(v->nbytes(), 8);
  const std::vector<float> got = testing_io::Dequantize(DType::kFp4E2m1, v->data, 16);
  const std::vector<double> want = e["fp4_values"].get<std::vector<double>>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i], static_cast<float>(want[i])) << i;
    EXPECT_EQ(std::signbit(got[i]), std::signbit(want[i])) << i;
  }
}

TEST(SafetensorsTest, PackedFp4Errors) {
  const std::string path = testing_io::TestDataPath("tiny.safetensors");
  auto f = OpenSafetensors(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE(IsError(GetPackedFp4(**f, "packed_fp4", {2, 4}).status(),
                      StatusCode::kInvalidArgument, path, {"[2, 4] i8", "expected [2, 2]"}));
  EXPECT_TRUE(IsError(GetPackedFp4(**f, "f32", {2, 6}).status(), StatusCode::kInvalidArgument, path,
                      {"'f32' is f32", "packed FP4"}));
  EXPECT_TRUE(
      IsError(GetPackedFp4(**f, "nope", {2, 8}).status(), StatusCode::kNotFound, path, {"'nope'"}));
}

// ---- a file written here ----

TEST(SafetensorsTest, HandWrittenFileReadsBackExactly) {
  Bytes data;
  for (int i = 0; i < 6; ++i) data.F32(0.25f * static_cast<float>(i) - 1.0f);
  data.U8(0x80).U8(0x3f).U8(0x00).U8(0xc0);  // bf16 1.0, -2.0
  Bytes b = MakeSt(R"({"__metadata__":{"k":"v"},)"
                   R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                   R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[24,28]}})",
                   data);
  const std::string path = testing_io::MakeTempDir() + "/hand.safetensors";
  testing_io::WriteFile(path, b.span());
  auto f = OpenSafetensors(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto a = (*f)->Get("a", {2, 3});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  for (int i = 0; i < 6; ++i) EXPECT_EQ(a->As<float>()[i], 0.25f * static_cast<float>(i) - 1.0f);
  auto bv = (*f)->Get("b", {2});
  ASSERT_TRUE(bv.ok()) << bv.status().ToString();
  EXPECT_EQ(testing_io::Dequantize(DType::kBF16, bv->data, 2), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ((*f)->metadata().at("k"), "v");
  EXPECT_EQ((*f)->path(), path);
}

// ---- sharded directory ----

TEST(SafetensorsDirTest, ShardedIndexRoundTrip) {
  const std::string dir = testing_io::TestDataPath("sharded");
  auto r = OpenCheckpointDir(dir);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& ex = testing_io::Expected()["sharded"];
  EXPECT_EQ((*r)->tensors().size(), 3u);
  for (const char* name : {"layers.0.w", "layers.0.b", "head.weight"}) {
    const TensorInfo* t = (*r)->Find(name);
    ASSERT_NE(t, nullptr) << name;
    ExpectTensor(*t, ex[name]);
  }
  EXPECT_EQ((*r)->Find("stray"), nullptr);  // in a shard, not in the index
  EXPECT_TRUE((*r)->Get("layers.0.w", {3, 4}).ok());
  const auto* sharded = dynamic_cast<const ShardedSafetensors*>(r->get());
  ASSERT_NE(sharded, nullptr);
  EXPECT_EQ(sharded->shards().size(), 2u);
  EXPECT_EQ(sharded->index().metadata.at("total_size"), "72");
  EXPECT_TRUE(IsError(sharded->Lookup("stray").status(), StatusCode::kNotFound, sharded->path(),
                      {"'stray'", "not in the index"}));
  EXPECT_NE((*r)->path().find("model.safetensors.index.json"), std::string::npos);
}

TEST(SafetensorsDirTest, SingleFileDirectory) {
  const std::string dir = testing_io::MakeTempDir();
  std::filesystem::copy_file(testing_io::TestDataPath("tiny.safetensors"),
                             dir + "/model.safetensors");
  auto r = OpenCheckpointDir(dir);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE((*r)->Find("f32"), nullptr);
  EXPECT_EQ((*r)->path(), dir + "/model.safetensors");
}

TEST(SafetensorsDirTest, FilePathOpensThatFile) {
  auto r = OpenCheckpointDir(testing_io::TestDataPath("tiny.safetensors"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE((*r)->Find("bf16"), nullptr);
}

// Copies tests/data/io/sharded to a temp dir and replaces the index.
std::string ShardedCopyWithIndex(std::string_view index_json) {
  const std::string dir = testing_io::MakeTempDir();
  for (const auto& e : std::filesystem::directory_iterator(testing_io::TestDataPath("sharded"))) {
    std::filesystem::copy_file(e.path(), dir + "/" + e.path().filename().string());
  }
  testing_io::WriteFile(dir + "/model.safetensors.index.json", index_json);
  return dir;
}

TEST(SafetensorsDirBadInputTest, MissingShard) {
  const std::string dir = ShardedCopyWithIndex(
      R"({"weight_map":{"layers.0.w":"model-00001-of-00002.safetensors","x":"gone.safetensors"}})");
  EXPECT_TRUE(IsError(OpenCheckpointDir(dir).status(), StatusCode::kNotFound,
                      dir + "/model.safetensors.index.json",
                      {"shard 'gone.safetensors'", "'x'", "missing"}));
}

TEST(SafetensorsDirBadInputTest, IndexedTensorNotInItsShard) {
  const std::string dir =
      ShardedCopyWithIndex(R"({"weight_map":{"head.weight":"model-00001-of-00002.safetensors"}})");
  EXPECT_TRUE(IsError(OpenCheckpointDir(dir).status(), StatusCode::kNotFound,
                      dir + "/model.safetensors.index.json",
                      {"'head.weight'", "model-00001-of-00002.safetensors", "does not contain"}));
}

TEST(SafetensorsDirBadInputTest, BadIndexJson) {
  const std::string dir = ShardedCopyWithIndex(R"({"weight_map": {"a": )");
  EXPECT_TRUE(IsError(OpenCheckpointDir(dir).status(), StatusCode::kDataLoss,
                      dir + "/model.safetensors.index.json", {"not valid JSON"}));
}

TEST(SafetensorsDirBadInputTest, IndexWithoutWeightMap) {
  const std::string dir = ShardedCopyWithIndex(R"({"metadata":{}})");
  EXPECT_TRUE(IsError(OpenCheckpointDir(dir).status(), StatusCode::kDataLoss,
                      dir + "/model.safetensors.index.json", {"'weight_map'"}));
}

TEST(SafetensorsDirBadInputTest, ShardNameEscapesDirectory) {
  const std::string dir = ShardedCopyWithIndex(R"({"weight_map":{"a":"../evil.safetensors"}})");
  EXPECT_TRUE(IsError(OpenCheckpointDir(dir).status(), StatusCode::kInvalidArgument,
                      dir + "/model.safetensors.index.json", {"'../evil.safetensors'"}));
}

TEST(SafetensorsDirBadInputTest, ShardNameNotAString) {
  const std::string dir = ShardedCopyWithIndex(R"({"weight_map":{"a":3}})");
  EXPECT_TRUE(IsError(OpenCheckpointDir(dir).status(), StatusCode::kDataLoss,
                      dir + "/model.safetensors.index.json", {"weight_map['a']", "number"}));
}

TEST(SafetensorsDirBadInputTest, EmptyDirectory) {
  const std::string dir = testing_io::MakeTempDir();
  EXPECT_TRUE(
      IsError(OpenCheckpointDir(dir).status(), StatusCode::kNotFound, dir, {"model.safetensors"}));
}

TEST(SafetensorsDirBadInputTest, NoSuchDirectory) {
  const std::string dir = testing_io::MakeTempDir() + "/nope";
  EXPECT_TRUE(IsError(OpenCheckpointDir(dir).status(), StatusCode::kNotFound, dir,
                      {"no such checkpoint directory"}));
}

// ---- bad input, one test per case ----

TEST(SafetensorsBadInputTest, MissingFile) {
  const std::string path = testing_io::MakeTempDir() + "/absent.safetensors";
  EXPECT_TRUE(IsError(OpenSafetensors(path).status(), StatusCode::kIo, path, {"cannot open"}));
}

TEST(SafetensorsBadInputTest, ShorterThanLength) {
  Bytes b;
  b.U8(1).U8(2).U8(3);
  EXPECT_TRUE(IsError(ParseStatus(b), StatusCode::kDataLoss, "x.safetensors",
                      {"3 bytes", "8-byte safetensors header length"}));
}

TEST(SafetensorsBadInputTest, HeaderLengthPastEof) {
  Bytes b = MakeSt(R"({})");
  std::memcpy(b.mutable_data().data(), "\x00\x10\x00\x00\x00\x00\x00\x00", 8);  // 4096
  EXPECT_TRUE(IsError(ParseStatus(b), StatusCode::kOutOfRange, "x.safetensors",
                      {"header length 4096", "past the end"}));
}

TEST(SafetensorsBadInputTest, HeaderLengthOverLimit) {
  // A sparse file just over the limit: mapped, never read in full.
  const std::string path = testing_io::MakeTempDir() + "/huge.safetensors";
  const uint64_t n = kSafetensorsMaxHeaderBytes + 1;
  {
    Bytes b;
    b.U64(n);
    testing_io::WriteFile(path, b.span());
    std::filesystem::resize_file(path, 8 + n);
  }
  EXPECT_TRUE(IsError(OpenSafetensors(path).status(), StatusCode::kOutOfRange, path,
                      {"header length 100000001", "limit"}));
}

TEST(SafetensorsBadInputTest, BadJson) {
  EXPECT_TRUE(IsError(ParseStatus(MakeSt(R"({"a": {"dtype": "F32",)")), StatusCode::kDataLoss,
                      "x.safetensors", {"not valid JSON"}));
}

TEST(SafetensorsBadInputTest, NonUtf8InJson) {
  EXPECT_TRUE(IsError(ParseStatus(MakeSt("{\"a\xff\":{}}")), StatusCode::kDataLoss, "x.safetensors",
                      {"not valid JSON"}));
}

TEST(SafetensorsBadInputTest, HeaderNotAnObject) {
  EXPECT_TRUE(IsError(ParseStatus(MakeSt("[1, 2]")), StatusCode::kDataLoss, "x.safetensors",
                      {"is a JSON array, expected an object"}));
}

TEST(SafetensorsBadInputTest, DuplicateTensorName) {
  Bytes data;
  data.Zeros(8);
  Bytes b = MakeSt(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                   R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                   data);
  EXPECT_TRUE(IsError(ParseStatus(b), StatusCode::kDataLoss, "x.safetensors", {"'a' twice"}));
}

TEST(SafetensorsBadInputTest, EntryNotAnObject) {
  EXPECT_TRUE(IsError(ParseStatus(MakeSt(R"({"a":[0,4]})")), StatusCode::kDataLoss, "x.safetensors",
                      {"tensor 'a'", "is a JSON array"}));
}

TEST(SafetensorsBadInputTest, MissingDtype) {
  EXPECT_TRUE(IsError(ParseStatus(MakeSt(R"({"a":{"shape":[1],"data_offsets":[0,4]}})")),
                      StatusCode::kDataLoss, "x.safetensors", {"tensor 'a'", "'dtype'"}));
}

TEST(SafetensorsBadInputTest, UnknownDtype) {
  EXPECT_TRUE(
      IsError(ParseStatus(MakeSt(R"({"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,4]}})")),
              StatusCode::kUnimplemented, "x.safetensors", {"tensor 'a'", "unknown dtype 'Q4'"}));
}

TEST(SafetensorsBadInputTest, MissingShape) {
  EXPECT_TRUE(IsError(ParseStatus(MakeSt(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})")),
                      StatusCode::kDataLoss, "x.safetensors", {"tensor 'a'", "'shape'"}));
}

TEST(SafetensorsBadInputTest, NegativeShape) {
  EXPECT_TRUE(
      IsError(ParseStatus(MakeSt(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})")),
              StatusCode::kDataLoss, "x.safetensors", {"tensor 'a'", "shape entry 0 is -1"}));
}

TEST(SafetensorsBadInputTest, FractionalShape) {
  EXPECT_TRUE(
      IsError(ParseStatus(MakeSt(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})")),
              StatusCode::kDataLoss, "x.safetensors", {"shape entry 0 is 1.5"}));
}

TEST(SafetensorsBadInputTest, TooManyDims) {
  EXPECT_TRUE(IsError(
      ParseStatus(
          MakeSt(R"({"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})")),
      StatusCode::kDataLoss, "x.safetensors", {"tensor 'a'", "9 dims"}));
}

TEST(SafetensorsBadInputTest, ElementCountOverflows) {
  EXPECT_TRUE(IsError(ParseStatus(MakeSt(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],)"
                                         R"("data_offsets":[0,4]}})")),
                      StatusCode::kOutOfRange, "x.safetensors", {"tensor 'a'", "2^63"}));
}

TEST(SafetensorsBadInputTest, EmptyTensorWithHugeDims) {
  EXPECT_TRUE(IsError(ParseStatus(MakeSt(R"({"a":{"dtype":"F32","shape":[0,4294967296,4294967296],)"
                                         R"("data_offsets":[0,0]}})")),
                      StatusCode::kOutOfRange, "x.safetensors", {"tensor 'a'", "2^63"}));
}

TEST(SafetensorsBadInputTest, MissingOffsets) {
  EXPECT_TRUE(IsError(ParseStatus(MakeSt(R"({"a":{"dtype":"F32","shape":[1]}})")),
                      StatusCode::kDataLoss, "x.safetensors", {"tensor 'a'", "'data_offsets'"}));
}

TEST(SafetensorsBadInputTest, OffsetsNotAPair) {
  EXPECT_TRUE(
      IsError(ParseStatus(MakeSt(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})")),
              StatusCode::kDataLoss, "x.safetensors", {"'data_offsets' must be [begin, end]"}));
}

TEST(SafetensorsBadInputTest, OffsetsReversed) {
  Bytes data;
  data.Zeros(8);
  EXPECT_TRUE(IsError(
      ParseStatus(MakeSt(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", data)),
      StatusCode::kOutOfRange, "x.safetensors", {"tensor 'a'", "[8, 4]"}));
}

TEST(SafetensorsBadInputTest, OffsetsPastEndOfData) {
  Bytes data;
  data.Zeros(4);
  EXPECT_TRUE(IsError(
      ParseStatus(MakeSt(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data)),
      StatusCode::kOutOfRange, "x.safetensors",
      {"tensor 'a'", "[0, 8]", "outside the data section (4 bytes"}));
}

TEST(SafetensorsBadInputTest, ShapeAndDtypeDoNotMatchSize) {
  Bytes data;
  data.Zeros(8);
  EXPECT_TRUE(IsError(
      ParseStatus(MakeSt(R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,8]}})", data)),
      StatusCode::kDataLoss, "x.safetensors",
      {"tensor 'a'", "hold 8 bytes", "[2] of F16 needs 4"}));
}

TEST(SafetensorsBadInputTest, SubByteDtypeNotWholeBytes) {
  Bytes data;
  data.Zeros(8);
  EXPECT_TRUE(
      IsError(ParseStatus(MakeSt(R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", data)),
              StatusCode::kDataLoss, "x.safetensors", {"tensor 'a'", "whole bytes"}));
}

TEST(SafetensorsBadInputTest, OverlappingTensors) {
  Bytes data;
  data.Zeros(16);
  EXPECT_TRUE(
      IsError(ParseStatus(MakeSt(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                                 R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                                 data)),
              StatusCode::kDataLoss, "x.safetensors", {"'a'", "'b'", "overlap"}));
}

TEST(SafetensorsBadInputTest, MisalignedData) {
  Bytes data;
  data.Zeros(8);
  EXPECT_TRUE(IsError(
      ParseStatus(MakeSt(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})", data)),
      StatusCode::kDataLoss, "x.safetensors", {"tensor 'a'", "not aligned", "4-byte F32"}));
}

TEST(SafetensorsBadInputTest, MetadataNotStrings) {
  EXPECT_TRUE(IsError(ParseStatus(MakeSt(R"({"__metadata__":{"n":3}})")), StatusCode::kDataLoss,
                      "x.safetensors", {"__metadata__ key 'n'", "number"}));
}

TEST(SafetensorsBadInputTest, ShapeMismatchWhenBound) {
  auto f = OpenSafetensors(testing_io::TestDataPath("tiny.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE(IsError((*f)->Get("f32", {3, 2}).status(), StatusCode::kInvalidArgument, (*f)->path(),
                      {"'f32'", "[2, 3]", "expected [3, 2]"}));
}

}  // namespace
}  // namespace dsv4
