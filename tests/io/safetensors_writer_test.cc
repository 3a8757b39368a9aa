// SafetensorsWriter: files it writes read back through io/safetensors.h with
// the same names, dtypes, shapes, bytes and metadata (whole and streamed in
// odd-sized pieces), and one test per misuse or bad input.
#include "io/safetensors_writer.h"

#include <gtest/gtest.h>

#include "../common/status_matchers.h"

#include <cstring>
#include <filesystem>
#include <numeric>

#include <unistd.h>

#include "io/safetensors.h"

namespace dsv4 {
namespace {

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("dsv4_st_writer_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + 7 * i + (i >> 8));
  return v;
}

struct Case {
  std::vector<SafetensorsEntry> entries;
  std::vector<std::vector<uint8_t>> data;
};

Case MixedCase() {
  Case c;
  c.entries = {{"embed.weight", "BF16", {5, 8}},
               {"layers.0.w.weight", "F8_E4M3", {130, 7}},
               {"layers.0.w.scale", "F8_E8M0", {2, 1}},
               {"experts.w1.weight", "I8", {4, 16}},
               {"experts.w1.scale", "F8_E8M0", {4, 1}},
               {"norm", "F32", {3}},
               {"tid2eid", "I64", {6, 2}},
               {"empty", "F32", {0, 4}},
               {"half", "F16", {2, 3}},
               {"ids", "I32", {4}}};
  uint8_t seed = 1;
  for (const auto& e : c.entries) c.data.push_back(Pattern(*SafetensorsEntryBytes(e), seed++));
  return c;
}

void ExpectReadsBack(const std::string& path, const Case& c,
                     const std::map<std::string, std::string>& metadata) {
  auto file = OpenSafetensors(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ((*file)->metadata(), metadata);
  ASSERT_EQ((*file)->tensors().size(), c.entries.size());
  for (size_t i = 0; i < c.entries.size(); ++i) {
    SCOPED_TRACE(c.entries[i].name);
    const TensorInfo* t = (*file)->Find(c.entries[i].name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ((*file)->StoredDType(t->name), c.entries[i].dtype);
    EXPECT_EQ(t->shape, c.entries[i].shape);
    ASSERT_EQ(t->nbytes, static_cast<int64_t>(c.data[i].size()));
    if (t->nbytes > 0) {
      EXPECT_EQ(std::memcmp(t->data, c.data[i].data(), t->nbytes), 0);
    }
  }
}

TEST(SafetensorsWriter, WholeFileRoundTrips) {
  const Case c = MixedCase();
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"origin", "dsv4 test"}};
  std::vector<std::span<const uint8_t>> spans(c.data.begin(), c.data.end());
  const std::string path = TempPath("whole.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, c.entries, spans, meta).ok());
  ExpectReadsBack(path, c, meta);
  std::filesystem::remove(path);
}

TEST(SafetensorsWriter, WholeFileLaysOutDataAlignedWhateverTheOrder) {
  // One-byte tensor first: without reordering the F32/I64 data would be misaligned.
  Case c;
  c.entries = {{"b", "U8", {3}}, {"f", "F32", {5}}, {"h", "BF16", {3}}, {"l", "I64", {2}}};
  uint8_t seed = 9;
  for (const auto& e : c.entries) c.data.push_back(Pattern(*SafetensorsEntryBytes(e), seed++));
  std::vector<std::span<const uint8_t>> spans(c.data.begin(), c.data.end());
  const std::string path = TempPath("aligned.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, c.entries, spans).ok());
  ExpectReadsBack(path, c, {});
  std::filesystem::remove(path);
}

TEST(SafetensorsWriter, MisalignedDeclarationIsAnError) {
  auto w = SafetensorsWriter::Create(TempPath("misaligned.safetensors"),
                                     {{"b", "U8", {3}}, {"f", "F32", {5}}});
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("'f'"), std::string::npos) << w.status().ToString();
  std::vector<SafetensorsEntry> entries = {{"b", "U8", {3}}, {"f", "F32", {5}}, {"c", "I8", {1}}};
  SortSafetensorsEntries(entries);
  EXPECT_EQ(entries[0].name, "f");
  EXPECT_EQ(entries[1].name, "b");
  EXPECT_EQ(entries[2].name, "c");
  const std::string path = TempPath("sorted.safetensors");
  EXPECT_TRUE(SafetensorsWriter::Create(path, entries).ok());
  std::filesystem::remove(path);
}

TEST(SafetensorsWriter, StreamedInOddPiecesAcrossTensorBoundaries) {
  Case c = MixedCase();
  {
    // Streaming writes in declaration order: sort the case first.
    std::vector<SafetensorsEntry> sorted = c.entries;
    SortSafetensorsEntries(sorted);
    Case s;
    for (const auto& e : sorted) {
      for (size_t i = 0; i < c.entries.size(); ++i) {
        if (c.entries[i].name == e.name) {
          s.entries.push_back(e);
          s.data.push_back(c.data[i]);
        }
      }
    }
    c = s;
  }
  std::vector<uint8_t> all;
  for (const auto& d : c.data) all.insert(all.end(), d.begin(), d.end());
  const std::string path = TempPath("stream.safetensors");
  auto w = SafetensorsWriter::Create(path, c.entries);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ((*w)->current(), "tid2eid");
  size_t pos = 0, piece = 1;
  while (pos < all.size()) {
    const size_t n = std::min(piece, all.size() - pos);
    ASSERT_TRUE((*w)->Append(std::span<const uint8_t>(all.data() + pos, n)).ok());
    pos += n;
    piece = piece * 3 % 97 + 1;
  }
  EXPECT_EQ((*w)->current(), "");
  ASSERT_TRUE((*w)->Finish().ok());
  ExpectReadsBack(path, c, {});
  std::filesystem::remove(path);
}

TEST(SafetensorsWriter, UnknownDTypeIsAnError) {
  auto w = SafetensorsWriter::Create(TempPath("bad.safetensors"), {{"a", "F4", {2}}});
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("'F4'"), std::string::npos) << w.status().ToString();
}

TEST(SafetensorsWriter, DuplicateNameIsAnError) {
  auto w = SafetensorsWriter::Create(TempPath("dup.safetensors"),
                                     {{"a", "F32", {2}}, {"a", "F32", {3}}});
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("declared twice"), std::string::npos);
}

TEST(SafetensorsWriter, EmptyOrReservedNameIsAnError) {
  EXPECT_ERROR(SafetensorsWriter::Create(TempPath("e.safetensors"), {{"", "F32", {1}}}),
               StatusCode::kInvalidArgument, "tensor name '' is not allowed");
  EXPECT_ERROR(SafetensorsWriter::Create(TempPath("m.safetensors"), {{"__metadata__", "F32", {1}}}),
               StatusCode::kInvalidArgument, "tensor name '__metadata__' is not allowed");
}

TEST(SafetensorsWriter, NegativeDimensionIsAnError) {
  auto w = SafetensorsWriter::Create(TempPath("neg.safetensors"), {{"a", "F32", {2, -1}}});
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("negative"), std::string::npos);
}

TEST(SafetensorsWriter, UnwritablePathIsAnIoError) {
  auto w = SafetensorsWriter::Create("/nonexistent-dir/x.safetensors", {{"a", "F32", {1}}});
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kIo);
  EXPECT_NE(w.status().message().find("/nonexistent-dir/x.safetensors"), std::string::npos);
}

TEST(SafetensorsWriter, BytesPastTheLastTensorAreAnError) {
  const std::string path = TempPath("past.safetensors");
  auto w = SafetensorsWriter::Create(path, {{"a", "F32", {1}}});
  ASSERT_TRUE(w.ok());
  const std::vector<uint8_t> five(5, 0);
  const Status st = (*w)->Append(five);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.ToString();
  std::filesystem::remove(path);
}

TEST(SafetensorsWriter, FinishWithAnIncompleteTensorIsDataLoss) {
  const std::string path = TempPath("short.safetensors");
  auto w = SafetensorsWriter::Create(path, {{"a", "F32", {2}}, {"b", "F32", {1}}});
  ASSERT_TRUE(w.ok());
  const std::vector<uint8_t> six(6, 0);
  ASSERT_TRUE((*w)->Append(six).ok());
  const Status st = (*w)->Finish();
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("'a'"), std::string::npos) << st.ToString();
  std::filesystem::remove(path);
}

TEST(SafetensorsWriter, WholeFileWithWrongBufferSizeIsAnError) {
  const std::vector<uint8_t> three(3, 0);
  const Status st = WriteSafetensors(TempPath("size.safetensors"), {{"a", "F32", {1}}},
                                     {std::span<const uint8_t>(three)});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("needs 4 bytes"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace dsv4
