// Tests of base/page_cache.h: SumSmaps reads the Rss and FilePmdMapped fields
// of the mappings in a range of /proc/self/smaps text and skips what it cannot
// read; ShouldRefreshPageCache's thresholds; and RefreshFragmentedPageCache on
// a real file: cached in small pages (made so with MADV_PAGEOUT), it is
// dropped and comes back in 2 MiB pages where this kernel and file system make
// huge page-cache folios, and is left alone where they do not, or where it
// stayed in 2 MiB pages.
#include "base/page_cache.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

constexpr char kSmaps[] =
    "7f0000000000-7f0001000000 r--p 00000000 fd:01 123 /models/a.safetensors\n"
    "Size:              16384 kB\n"
    "Rss:               16384 kB\n"
    "FilePmdMapped:     12288 kB\n"
    "VmFlags: rd mr mw me hg\n"
    "7f0001000000-7f0001400000 r--p 01000000 fd:01 123 /models/a.safetensors\n"
    "Rss:                4096 kB\n"
    "FilePmdMapped:         0 kB\n"
    "7f0002000000-7f0002200000 rw-p 00000000 00:00 0\n"
    "Rss:                2048 kB\n"
    "FilePmdMapped:      2048 kB\n";

TEST(SumSmaps, SumsTheMappingsThatStartInTheRange) {
  const HugePageProbe all = SumSmaps(kSmaps, 0x7f0000000000, 0x7f0002000000);
  EXPECT_EQ(all.rss_kb, 16384 + 4096);
  EXPECT_EQ(all.pmd_kb, 12288);
  const HugePageProbe second = SumSmaps(kSmaps, 0x7f0001000000, 0x7f0001000001);
  EXPECT_EQ(second.rss_kb, 4096);
  EXPECT_EQ(second.pmd_kb, 0);
  const HugePageProbe last = SumSmaps(kSmaps, 0x7f0002000000, UINTPTR_MAX);
  EXPECT_EQ(last.rss_kb, 2048);
  EXPECT_EQ(last.pmd_kb, 2048);
  const HugePageProbe none = SumSmaps(kSmaps, 0x1000, 0x2000);
  EXPECT_EQ(none.rss_kb, 0);
  EXPECT_EQ(none.pmd_kb, 0);
}

TEST(SumSmaps, SkipsWhatItCannotRead) {
  EXPECT_EQ(SumSmaps("", 0, UINTPTR_MAX).rss_kb, 0);
  EXPECT_EQ(SumSmaps("not smaps at all\n\n:::\n-\n", 0, UINTPTR_MAX).rss_kb, 0);
  // A header whose start is not hex: its fields do not count.
  const HugePageProbe bad_header = SumSmaps("zz-10 r--p\nRss: 5 kB\n", 0, UINTPTR_MAX);
  EXPECT_EQ(bad_header.rss_kb, 0);
  // Fields without a number, or before any header, do not count.
  const HugePageProbe bad_fields = SumSmaps(
      "Rss: 7 kB\n10-20 r--p 0 0:0 0\nRss: lots\nFilePmdMapped:\nRss: 3 kB\nFilePmdMapped: 2 kB", 0,
      UINTPTR_MAX);
  EXPECT_EQ(bad_fields.rss_kb, 3);
  EXPECT_EQ(bad_fields.pmd_kb, 2);
  // Figures past 2^40 kB are not smaps (one once wrapped to a negative sum),
  // and sums stop there.
  const HugePageProbe huge = SumSmaps(
      "10-20 r--p 0 0:0 0\nRss: 99999999999999999999999 kB\nRss: 1099511627776 kB\nRss: 5 kB\n"
      "FilePmdMapped: 1099511627775 kB\nFilePmdMapped: 1099511627775 kB\n",
      0, UINTPTR_MAX);
  EXPECT_EQ(huge.rss_kb, 5);
  EXPECT_EQ(huge.pmd_kb, int64_t{1} << 40);
}

TEST(ShouldRefreshPageCache, Thresholds) {
  const HugePageProbe small_pages{.rss_kb = 64 << 10, .pmd_kb = 0};
  const HugePageProbe huge_pages{.rss_kb = 64 << 10, .pmd_kb = 64 << 10};
  EXPECT_TRUE(ShouldRefreshPageCache(1.0, small_pages));
  EXPECT_FALSE(ShouldRefreshPageCache(1.0, huge_pages));
  EXPECT_FALSE(ShouldRefreshPageCache(0.49, small_pages));  // mostly not cached
  EXPECT_TRUE(ShouldRefreshPageCache(0.5, small_pages));
  EXPECT_FALSE(ShouldRefreshPageCache(1.0, {.rss_kb = 4 << 10, .pmd_kb = 0}));  // too little seen
  // Under 80% in 2 MiB pages.
  EXPECT_TRUE(ShouldRefreshPageCache(1.0, {.rss_kb = 100 << 10, .pmd_kb = 79 << 10}));
  EXPECT_FALSE(ShouldRefreshPageCache(1.0, {.rss_kb = 100 << 10, .pmd_kb = 80 << 10}));
}

// A 64 MiB file mapped read-only.
class PageCacheFileTest : public ::testing::Test {
 protected:
  static constexpr size_t kSize = size_t{64} << 20;

  void SetUp() override {
    path_ = (fs::path(::testing::TempDir()) /
             ("dsv4_page_cache_" + std::to_string(::getpid()) + "_" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                .string();
    std::vector<char> block(size_t{1} << 20);
    for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<char>(i * 131 + 7);
    std::ofstream out(path_, std::ios::binary);
    for (size_t m = 0; m < kSize / block.size(); ++m) out.write(block.data(), block.size());
    out.close();
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd_, 0);
    ::fdatasync(fd_);
  }
  void TearDown() override {
    if (fd_ >= 0) ::close(fd_);
    std::error_code ec;
    fs::remove(path_, ec);
  }
  // The whole file mapped with MADV_HUGEPAGE and read in; what smaps says.
  HugePageProbe ReadIn() {
    void* p = ::mmap(nullptr, kSize, PROT_READ, MAP_PRIVATE, fd_, 0);
    EXPECT_NE(p, MAP_FAILED);
    ::madvise(p, kSize, MADV_HUGEPAGE);
    EXPECT_EQ(::madvise(p, kSize, MADV_POPULATE_READ), 0);
    std::ifstream in("/proc/self/smaps");
    const std::string smaps((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto b = reinterpret_cast<uintptr_t>(p);
    const HugePageProbe probe = SumSmaps(smaps, b, b + kSize);
    ::munmap(p, kSize);
    return probe;
  }
  // Pages out 64 KiB of every 2 MiB and reads the file in again: whatever
  // folios it had are split, and it is cached in small pages.
  void Fragment() {
    auto* p = static_cast<uint8_t*>(::mmap(nullptr, kSize, PROT_READ, MAP_PRIVATE, fd_, 0));
    ASSERT_NE(p, MAP_FAILED);
    ASSERT_EQ(::madvise(p, kSize, MADV_POPULATE_READ), 0);
    for (size_t o = 0; o < kSize; o += size_t{2} << 20) {
      ::madvise(p + o + (size_t{1} << 20), size_t{64} << 10, MADV_PAGEOUT);
    }
    ::munmap(p, kSize);
    ReadIn();
  }
  // Calls the refresh as MappedFile::Open does: on a fresh, untouched mapping.
  bool Refresh() {
    void* p = ::mmap(nullptr, kSize, PROT_READ, MAP_PRIVATE, fd_, 0);
    EXPECT_NE(p, MAP_FAILED);
    ::madvise(p, kSize, MADV_HUGEPAGE);
    const bool r = RefreshFragmentedPageCache(path_, static_cast<const uint8_t*>(p), kSize);
    ::munmap(p, kSize);
    return r;
  }

  std::string path_;
  int fd_ = -1;
};

TEST_F(PageCacheFileTest, SmallPagesComeBackHugeWhereTheKernelMakesHugeFolios) {
  // Whether this kernel and file system cache a file in 2 MiB folios at all:
  // the file dropped from the cache, then read in with MADV_HUGEPAGE.
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
  const HugePageProbe fresh = ReadIn();
  ASSERT_GT(fresh.rss_kb, 0);
  const bool huge_folios = fresh.pmd_kb > 0;
  Fragment();
  const HugePageProbe fragmented = ReadIn();
  ASSERT_GT(fragmented.rss_kb, 0);
  if (fragmented.pmd_kb >= fragmented.rss_kb * 8 / 10) {
    // Paging out did not split the folios (a tmpfs without swap keeps its
    // pages): the file is in 2 MiB pages, and there is nothing to mend.
    std::printf("the file stayed in 2 MiB pages: the refresh must decline\n");
    EXPECT_FALSE(Refresh());
  } else if (huge_folios) {
    std::printf("this kernel caches files in 2 MiB folios: the refresh must mend the file\n");
    EXPECT_TRUE(Refresh());
    const HugePageProbe mended = ReadIn();
    EXPECT_GE(mended.pmd_kb, mended.rss_kb * 8 / 10);
    // Now in 2 MiB pages: a second refresh has nothing to do.
    EXPECT_FALSE(Refresh());
  } else {
    std::printf("this kernel caches files in small folios only: the refresh must decline\n");
    EXPECT_FALSE(Refresh());  // its trial comes back small: the cache is left as it is
  }
}

TEST_F(PageCacheFileTest, AnUncachedFileIsLeftAlone) {
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
  EXPECT_FALSE(Refresh());  // not cached: reading it in makes whatever folios it can
  // ... and the check read none of it in (its windows are probed only when cached).
  void* p = ::mmap(nullptr, kSize, PROT_READ, MAP_PRIVATE, fd_, 0);
  ASSERT_NE(p, MAP_FAILED);
  std::vector<unsigned char> resident(kSize / static_cast<size_t>(::sysconf(_SC_PAGESIZE)));
  ASSERT_EQ(::mincore(p, kSize, resident.data()), 0);
  size_t cached = 0;
  for (unsigned char r : resident) cached += r & 1;
  ::munmap(p, kSize);
  EXPECT_LT(cached, resident.size() / 4);
}

}  // namespace
}  // namespace dsv4
