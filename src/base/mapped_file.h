// MappedFile: a whole file mapped read-only into memory. Weights are views into
// such a mapping, so a model's pages are read from disk only when touched —
// in 2 MiB units where the kernel supports huge pages for the file's page
// cache (MADV_HUGEPAGE; DSV4_THP=0 turns that off).
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

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Reads a whole (small) file into a string, e.g. a JSON config.
Result<std::string> ReadFileToString(const std::string& path);

}  // namespace dsv4

#endif  // DSV4_BASE_MAPPED_FILE_H_
