// Huge pages for mapped model files: whether a file's page cache is held in
// 2 MiB folios (which the kernel maps with one page-table entry each), and a
// refresh for one that is not.
//
// Why. Decode streams every weight once per token; through 4 KiB page-table
// entries it runs slower (a TLB miss per 4 KiB streamed; docs/performance.md).
// A file first read with MADV_HUGEPAGE is
// cached in 2 MiB folios. But reclaim that takes part of a folio (memory
// pressure, or DAMON's proactive pageout on a shared VM) splits it, and the
// file then stays cached, and mapped, in small pages for every later process,
// on a busy host a large share of the model within a day.
// Mapping the file again does not mend that; dropping the file's unmapped
// cached pages does: the next reads bring them back in 2 MiB folios.
#ifndef DSV4_BASE_PAGE_CACHE_H_
#define DSV4_BASE_PAGE_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dsv4 {

// Resident and PMD-mapped (2 MiB page-table entries) kilobytes of some
// mappings of a file.
struct HugePageProbe {
  int64_t rss_kb = 0;
  int64_t pmd_kb = 0;
};

// Σ of the "Rss:" and "FilePmdMapped:" fields of the mappings in `smaps` (the
// text of /proc/self/smaps) whose start address lies in [begin, end). Lines
// it cannot read, and figures of 2^40 kB or more, are skipped (text that is
// not smaps sums to zeros); the sums stop at 2^40 kB.
HugePageProbe SumSmaps(std::string_view smaps, uintptr_t begin, uintptr_t end);

// The measurement half of RefreshFragmentedPageCache's decision: at least
// half of the file is cached (otherwise reading it in makes huge folios
// anyway, and dropping would cost more disk reads than it saves), the probe
// saw at least 8 MiB and under 80% of that was PMD-mapped.
bool ShouldRefreshPageCache(double resident_share, const HugePageProbe& probe);

// For the file at `path`, mapped at [data, data + size) with MADV_HUGEPAGE and
// nothing of it touched yet: for four 16 MiB windows spread over it, how much
// is cached (mincore) and, where that is at least half (a file mostly not
// cached is not read here), how much of them the kernel maps with 2 MiB
// entries once mapped and read in (/proc/self/smaps). Where ShouldRefreshPageCache says so,
// it first tries 4 MiB: drops them from the cache and reads them back. Only
// if they come back in 2 MiB pages (the kernel and file system make huge
// page-cache folios here: otherwise every load would drop the cache for
// nothing) does it drop all the file's cached pages that no process maps
// (POSIX_FADV_DONTNEED), log what it did, and return true: the model's pages
// are then read from disk once more as they are first touched. Returns false,
// changing nothing else, where it cannot measure (no /proc, a kernel without
// MADV_POPULATE_READ, ...). DSV4_THP_REFRESH=0 turns it off (MappedFile::Open
// calls it for files of 256 MiB or more).
bool RefreshFragmentedPageCache(const std::string& path, const uint8_t* data, size_t size);

}  // namespace dsv4

#endif  // DSV4_BASE_PAGE_CACHE_H_
