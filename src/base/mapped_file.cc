#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/page_cache.h"

namespace dsv4 {
namespace {

// Every MappedFile alive, for LockOpenMappings.
std::mutex& RegistryMutex() {
  static std::mutex mu;
  return mu;
}
std::vector<MappedFile*>& Registry() {
  static std::vector<MappedFile*> live;
  return live;
}

// True the first time a file (device, inode) is asked about in this process:
// its page cache is checked once (a bench re-opens the shards it loaded).
bool FirstCacheCheck(uint64_t device, uint64_t inode) {
  static std::mutex mu;
  static std::set<std::pair<uint64_t, uint64_t>> seen;
  std::lock_guard<std::mutex> lock(mu);
  return seen.emplace(device, inode).second;
}

}  // namespace

Result<std::shared_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return IoError(path + ": cannot open: " + std::strerror(errno),
                   "check that the path exists and is readable");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return IoError(path + ": not a regular file", "pass the path of a model file");
  }
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  f->device_ = static_cast<uint64_t>(st.st_dev);
  f->inode_ = static_cast<uint64_t>(st.st_ino);
  if (f->size_ > 0) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return IoError(path + ": mmap failed: " + std::strerror(err));
    }
    f->data_ = static_cast<const uint8_t*>(p);
    // Ask for 2 MiB folios: the kernel's readahead then reads the file in
    // huge-page units and maps them with one page-table entry each (ext4 and
    // xfs on Linux ≥ 6.x; elsewhere the advice is ignored). Streaming the
    // weights then takes no 4 KiB TLB miss per page, a visible share of a
    // memory-bound decode (docs/performance.md). Pages already cached in small
    // folios (a file just written) stay as they are. DSV4_THP=0 turns it off.
    if (env::HugePageAdvice()) {
      ::madvise(p, f->size_, MADV_HUGEPAGE);
      // A model file cached in small pages is dropped from the cache, to be
      // read again in 2 MiB ones (base/page_cache.h); checked once per file.
      if (f->size_ >= kPageCacheRefreshMinBytes && env::PageCacheRefresh() &&
          FirstCacheCheck(f->device_, f->inode_)) {
        f->page_cache_refreshed_ = RefreshFragmentedPageCache(path, f->data_, f->size_);
      }
    }
  }
  ::close(fd);
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    Registry().push_back(f.get());
  }
  return f;
}

bool MappedFile::Locate(const void* p, std::string* path, uint64_t* offset) {
  const auto* b = static_cast<const uint8_t*>(p);
  std::lock_guard<std::mutex> lock(RegistryMutex());
  for (const MappedFile* f : Registry()) {
    if (f->size_ > 0 && b >= f->data_ && b < f->data_ + f->size_) {
      *path = f->path_;
      *offset = static_cast<uint64_t>(b - f->data_);
      return true;
    }
  }
  return false;
}

Status MappedFile::Lock() {
  if (size_ == 0) return Status::Ok();
  if (::mlock(data_, size_) == 0) return Status::Ok();
  const int err = errno;
  std::string limit = "unknown";
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
    limit = rl.rlim_cur == RLIM_INFINITY ? "unlimited"
            : rl.rlim_cur >= (1u << 20)  ? std::to_string(rl.rlim_cur >> 20) + " MiB"
                                         : std::to_string(rl.rlim_cur >> 10) + " KiB";
  }
  return ResourceExhausted(
      path_ + ": cannot lock its " + std::to_string((size_ + (1 << 19)) >> 20) +
          " MiB in memory: " + std::strerror(err) + " (locked-memory limit: " + limit + ")",
      "raise the limit (ulimit -l unlimited; LimitMEMLOCK=infinity in a "
      "systemd unit; --ulimit memlock=-1 for docker), or run without --mlock");
}

Status MappedFile::LockOpenMappings(const std::string& path, int* n_locked) {
  *n_locked = 0;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return IoError(path + ": cannot stat: " + std::strerror(errno),
                   "check that the path exists and is readable");
  }
  std::lock_guard<std::mutex> lock(RegistryMutex());
  for (MappedFile* f : Registry()) {
    if (f->device_ != static_cast<uint64_t>(st.st_dev) ||
        f->inode_ != static_cast<uint64_t>(st.st_ino)) {
      continue;
    }
    RETURN_IF_ERROR(f->Lock());
    ++*n_locked;
  }
  return Status::Ok();
}

MappedFile::~MappedFile() {
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    std::vector<MappedFile*>& live = Registry();
    live.erase(std::remove(live.begin(), live.end(), this), live.end());
  }
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

Result<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return IoError(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace dsv4
