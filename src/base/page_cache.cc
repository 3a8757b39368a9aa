#include "base/page_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/log.h"
#include "base/mapped_file.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14
#endif

namespace dsv4 {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kWindow = size_t{16} << 20;
constexpr int kWindows = 4;
constexpr size_t kTrial = size_t{4} << 20;
constexpr uint64_t kMaxKb = uint64_t{1} << 40;  // SumSmaps' ceiling per field and sum

// The number at the start of `s` (after spaces) in `base`; false if none.
bool ParseNumber(std::string_view s, int base, uint64_t* out) {
  size_t i = 0;
  while (i < s.size() && s[i] == ' ') ++i;
  const char* first = s.data() + i;
  const char* last = s.data() + s.size();
  const auto [ptr, ec] = std::from_chars(first, last, *out, base);
  return ec == std::errc() && ptr != first;
}

// Maps `bytes` of fd at `offset` with MADV_HUGEPAGE, reads them in, and
// returns what /proc/self/smaps says of that mapping; *ok false where that
// could not be done.
HugePageProbe ProbeWindow(int fd, size_t offset, size_t bytes, bool* ok) {
  *ok = false;
  void* w = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, static_cast<off_t>(offset));
  if (w == MAP_FAILED) return {};
  ::madvise(w, bytes, MADV_HUGEPAGE);
  HugePageProbe p;
  if (::madvise(w, bytes, MADV_POPULATE_READ) == 0) {
    const Result<std::string> smaps = ReadFileToString("/proc/self/smaps");
    if (smaps.ok()) {
      const auto begin = reinterpret_cast<uintptr_t>(w);
      p = SumSmaps(*smaps, begin, begin + bytes);
      *ok = true;
    }
  }
  ::munmap(w, bytes);
  return p;
}

}  // namespace

HugePageProbe SumSmaps(std::string_view smaps, uintptr_t begin, uintptr_t end) {
  HugePageProbe sum;
  bool inside = false;  // the current mapping starts in [begin, end)
  while (!smaps.empty()) {
    const size_t nl = smaps.find('\n');
    const std::string_view line = smaps.substr(0, nl);
    smaps.remove_prefix(nl == std::string_view::npos ? smaps.size() : nl + 1);
    const size_t dash = line.find('-');
    const size_t colon = line.find(':');
    if (dash != std::string_view::npos && (colon == std::string_view::npos || dash < colon)) {
      // A mapping's header: "start-end perms offset dev inode path" (hex).
      uint64_t start = 0;
      inside = ParseNumber(line.substr(0, dash), 16, &start) && start >= begin && start < end;
      continue;
    }
    if (!inside || colon == std::string_view::npos) continue;
    const std::string_view key = line.substr(0, colon);
    uint64_t kb = 0;
    // No mapping holds 2^40 kB (1 EiB): a larger figure is not smaps.
    if (!ParseNumber(line.substr(colon + 1), 10, &kb) || kb >= kMaxKb) continue;
    if (key == "Rss") sum.rss_kb = std::min(kMaxKb, static_cast<uint64_t>(sum.rss_kb) + kb);
    if (key == "FilePmdMapped") {
      sum.pmd_kb = std::min(kMaxKb, static_cast<uint64_t>(sum.pmd_kb) + kb);
    }
  }
  return sum;
}

bool ShouldRefreshPageCache(double resident_share, const HugePageProbe& probe) {
  if (resident_share < 0.5 || probe.rss_kb < 8 * 1024) return false;
  return static_cast<double>(probe.pmd_kb) < 0.8 * static_cast<double>(probe.rss_kb);
}

bool RefreshFragmentedPageCache(const std::string& path, const uint8_t* data, size_t size) {
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  if (size < kWindow || page == 0) return false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  // Windows spread over the file, 2 MiB-aligned: how much of them is cached
  // (mincore on the untouched mapping); if enough, read in and measured.
  size_t offsets[kWindows];
  for (int i = 0; i < kWindows; ++i) {
    offsets[i] =
        (size - kWindow) * static_cast<size_t>(2 * i + 1) / (2 * kWindows) / kHugePage * kHugePage;
  }
  size_t cached = 0, pages = 0;
  std::vector<unsigned char> resident(kWindow / page);
  for (const size_t offset : offsets) {
    if (::mincore(const_cast<uint8_t*>(data) + offset, kWindow, resident.data()) != 0) {
      ::close(fd);
      return false;
    }
    cached += static_cast<size_t>(std::count_if(resident.begin(), resident.end(),
                                                [](unsigned char r) { return (r & 1) != 0; }));
    pages += resident.size();
  }
  const double resident_share = static_cast<double>(cached) / static_cast<double>(pages);
  HugePageProbe probe;
  bool measured = resident_share >= 0.5;  // else nothing to measure: see ShouldRefreshPageCache
  for (int i = 0; i < kWindows && measured; ++i) {
    const HugePageProbe p = ProbeWindow(fd, offsets[i], kWindow, &measured);
    probe.rss_kb += p.rss_kb;
    probe.pmd_kb += p.pmd_kb;
  }
  bool refresh = measured && ShouldRefreshPageCache(resident_share, probe);
  if (refresh) {
    // The trial: 4 MiB dropped and read back must come back in 2 MiB pages.
    ::posix_fadvise(fd, static_cast<off_t>(offsets[0]), kTrial, POSIX_FADV_DONTNEED);
    bool ok = false;
    const HugePageProbe trial = ProbeWindow(fd, offsets[0], kTrial, &ok);
    refresh = ok && trial.pmd_kb >= static_cast<int64_t>(kHugePage >> 10);
    if (!refresh) {
      LOG_DEBUG("{}: cached in small pages, but read again it still is: left as it is", path);
    }
  }
  if (refresh) {
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    LOG_WARNING(
        "{}: its cached pages were mostly in small pages ({} of {} MiB sampled in 2 MiB "
        "pages); dropped them from the page cache so that they are read again in 2 MiB pages "
        "(one more read from disk; DSV4_THP_REFRESH=0 keeps the cache as it is)",
        path, probe.pmd_kb >> 10, probe.rss_kb >> 10);
  }
  ::close(fd);
  return refresh;
}

}  // namespace dsv4
