// MappedFile: a whole file mapped read-only into memory. Weights are views into
// such a mapping, so a model's pages are read from disk only when touched —
// in 2 MiB units where the kernel supports huge pages for the file's page
// cache (MADV_HUGEPAGE; DSV4_THP=0 turns that off), and read again in those
// where a large file's cache had been left in small pages
// (base/page_cache.h; DSV4_THP_REFRESH=0 turns that off).
#ifndef DSV4_BASE_MAPPED_FILE_H_
#define DSV4_BASE_MAPPED_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "base/status.h"

namespace dsv4 {

class MappedFile {
 public:
  // Maps `path` read-only. Errors name the path and the OS reason.
  static Result<std::shared_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Keeps the whole mapping resident (mlock): its pages are read in now and
  // not paged out while this object lives, so a long-running process meets no
  // page-cache misses after idle spells (--mlock; docs/performance.md).
  // ResourceExhausted naming the file and the locked-memory limit where
  // the process may not lock that much (RLIMIT_MEMLOCK without CAP_IPC_LOCK).
  Status Lock();
  // Lock() on every mapping open now of the file at `path` (the same file,
  // by device and inode, whatever path opened it): a loaded model's own
  // mappings, so that they are locked once and counted once. The number
  // locked goes to *n_locked (0: none open; an unreadable path is an error).
  static Status LockOpenMappings(const std::string& path, int* n_locked);

  // The file and offset of a byte of a live mapping (weights streamed from
  // the file instead of through the mapping: the expert cache); false when
  // `p` is in none.
  static bool Locate(const void* p, std::string* path, uint64_t* offset);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }
  // Whether Open dropped the file's page cache to have it read again in 2 MiB
  // pages (RefreshFragmentedPageCache, for files of at least
  // kPageCacheRefreshMinBytes, the first time this process opens the file).
  bool page_cache_refreshed() const { return page_cache_refreshed_; }
  static constexpr size_t kPageCacheRefreshMinBytes = size_t{256} << 20;

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  uint64_t device_ = 0, inode_ = 0;  // the file's identity (LockOpenMappings)
  bool page_cache_refreshed_ = false;
};

// Reads a whole (small) file into a string, e.g. a JSON config.
Result<std::string> ReadFileToString(const std::string& path);

}  // namespace dsv4

#endif  // DSV4_BASE_MAPPED_FILE_H_
