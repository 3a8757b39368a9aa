// Tests of base/mapped_file.h: MappedFile::Open maps exactly a file's bytes,
// and errors (missing file, directory) are IoError naming the path with a hint;
// LockOpenMappings locks every mapping of one file (or names the limit);
// ReadFileToString likewise.
#include "base/mapped_file.h"

#include <gtest/gtest.h>
#include <unistd.h>  // getpid

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../common/locked_memory.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

// A fresh scratch directory per test, removed afterwards.
class MappedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Unique per process and test, so parallel runs (other build dirs, ctest -j) never collide.
    dir_ = fs::path(::testing::TempDir()) /
           ("dsv4_mapped_file_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& bytes) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p.string();
  }

  fs::path dir_;
};

TEST_F(MappedFileTest, MapsTheFileBytes) {
  std::string bytes;
  for (int i = 0; i < 10000; ++i) bytes.push_back(static_cast<char>((i * 7919) & 0xff));
  const std::string path = Write("data.bin", bytes);
  Result<std::shared_ptr<MappedFile>> f = MappedFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->path(), path);
  ASSERT_EQ((*f)->size(), bytes.size());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*f)->data()), (*f)->size()), bytes);
  EXPECT_EQ((*f)->bytes().size(), bytes.size());
  EXPECT_EQ((*f)->bytes().data(), (*f)->data());
  // Files under kPageCacheRefreshMinBytes are never refreshed (page_cache_test).
  EXPECT_FALSE((*f)->page_cache_refreshed());
}

TEST_F(MappedFileTest, MapsTheDefaultModel) {
  const std::string path = std::string(DSV4_SOURCE_DIR) + "/models/stories260K/tok512.bin";
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in.good()) << path;
  const std::vector<char> want((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
  Result<std::shared_ptr<MappedFile>> f = MappedFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ((*f)->size(), want.size());
  EXPECT_TRUE(std::equal(want.begin(), want.end(), reinterpret_cast<const char*>((*f)->data())));
}

TEST_F(MappedFileTest, EmptyFileHasSizeZero) {
  const std::string path = Write("empty.bin", "");
  Result<std::shared_ptr<MappedFile>> f = MappedFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->size(), 0u);
  EXPECT_TRUE((*f)->bytes().empty());
}

TEST_F(MappedFileTest, MappingOutlivesTheFileName) {
  const std::string path = Write("gone.bin", "hello");
  Result<std::shared_ptr<MappedFile>> f = MappedFile::Open(path);
  ASSERT_TRUE(f.ok());
  fs::remove(path);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*f)->data()), (*f)->size()), "hello");
}

TEST_F(MappedFileTest, MissingFileIsIoErrorNamingThePath) {
  const std::string path = (dir_ / "no_such_file.bin").string();
  Result<std::shared_ptr<MappedFile>> f = MappedFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kIo);
  EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status().ToString();
  EXPECT_FALSE(f.status().hint().empty());
}

TEST_F(MappedFileTest, DirectoryIsIoErrorNamingThePath) {
  const std::string path = dir_.string();
  Result<std::shared_ptr<MappedFile>> f = MappedFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kIo);
  EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status().ToString();
}

using ::dsv4::testing::LockedBytes;

TEST_F(MappedFileTest, LockOpenMappingsFindsTheFileByIdentity) {
  const std::string path = Write("w.bin", std::string(3 << 16, 'w'));
  const std::string other = Write("other.bin", std::string(1 << 16, 'o'));
  Result<std::shared_ptr<MappedFile>> a = MappedFile::Open(path);
  // The same file by another spelling of its path, and an unrelated file.
  Result<std::shared_ptr<MappedFile>> b = MappedFile::Open((dir_ / "." / "w.bin").string());
  Result<std::shared_ptr<MappedFile>> c = MappedFile::Open(other);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  const int64_t before = LockedBytes();
  ASSERT_GE(before, 0);
  int n = -1;
  const Status st = MappedFile::LockOpenMappings(path, &n);
  if (!st.ok()) {  // a locked-memory limit below 384 KiB, without CAP_IPC_LOCK
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
    EXPECT_NE(st.message().find("limit"), std::string::npos) << st.ToString();
    EXPECT_FALSE(st.hint().empty());
    return;
  }
  EXPECT_EQ(n, 2);
  if (::dsv4::testing::kMlockCountsInVmLck) {
    // Both mappings, not the other file; unmapping one takes its lock along.
    EXPECT_EQ(LockedBytes() - before, 2 * (3 << 16));
    b = NotFound("");
    EXPECT_EQ(LockedBytes() - before, 3 << 16);
  }
}

TEST_F(MappedFileTest, LockOpenMappingsOfAMissingFileIsIoError) {
  int n = -1;
  const std::string path = (dir_ / "missing.bin").string();
  const Status st = MappedFile::LockOpenMappings(path, &n);
  EXPECT_EQ(st.code(), StatusCode::kIo);
  EXPECT_NE(st.message().find(path), std::string::npos) << st.ToString();
  EXPECT_EQ(n, 0);
}

TEST_F(MappedFileTest, ReadFileToStringReadsAllBytes) {
  const std::string bytes = std::string("a\0b\nc", 5) + std::string(5000, 'z');
  const std::string path = Write("config.json", bytes);
  Result<std::string> s = ReadFileToString(path);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(*s, bytes);
}

TEST_F(MappedFileTest, ReadFileToStringMissingIsIoErrorNamingThePath) {
  const std::string path = (dir_ / "missing.json").string();
  Result<std::string> s = ReadFileToString(path);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kIo);
  EXPECT_NE(s.status().message().find(path), std::string::npos) << s.status().ToString();
}

}  // namespace
}  // namespace dsv4
