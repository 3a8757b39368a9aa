// SafetensorsWriter: writes a .safetensors file (u64 little-endian header
// length N, N bytes of JSON padded with spaces to a multiple of 8 giving each
// tensor's dtype, shape and data offsets, then the data), streaming: every
// tensor is declared up front (the header holds all offsets), then the data
// is appended in declaration order, a tensor in as many pieces as the caller
// likes — so multi-GB checkpoints never sit in memory. The reader is
// io/safetensors.h.
#ifndef DSV4_IO_SAFETENSORS_WRITER_H_
#define DSV4_IO_SAFETENSORS_WRITER_H_

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dsv4 {

// One tensor of a file to write: a safetensors dtype name ("F32", "BF16",
// "F16", "F8_E4M3", "F8_E8M0", "I8", "U8", "I32", "I64") and its stored shape,
// outermost first.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
};

// Bytes one element of a writable safetensors dtype takes; InvalidArgument for
// any other name.
Result<int64_t> SafetensorsDTypeSize(std::string_view dtype);
// Bytes of the entry's data (elements × element size).
Result<int64_t> SafetensorsEntryBytes(const SafetensorsEntry& entry);

// Stable-sorts entries by element size, largest first — the order the
// safetensors library writes, which keeps every tensor's data aligned to its
// element size (readers map the file and require it).
void SortSafetensorsEntries(std::vector<SafetensorsEntry>& entries);

class SafetensorsWriter {
 public:
  // Creates `path` and writes the header for `entries` (names unique and
  // non-empty, known dtypes, non-negative dims, each tensor's data offset a
  // multiple of its element size — see SortSafetensorsEntries) and `metadata`
  // (the "__metadata__" strings). Errors name the path and the bad entry.
  static Result<std::unique_ptr<SafetensorsWriter>> Create(
      const std::string& path, std::vector<SafetensorsEntry> entries,
      const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Appends bytes of the current tensor; moves to the next one when it is
  // complete. OutOfRange when the bytes run past the current tensor's size or
  // past the last tensor.
  Status Append(std::span<const uint8_t> bytes);
  // The tensor the next Append writes into (empty once all are complete).
  std::string_view current() const;
  // Flushes and closes; DataLoss when some tensor is incomplete.
  Status Finish();

 private:
  SafetensorsWriter() = default;

  std::string path_;
  std::FILE* file_ = nullptr;
  std::vector<SafetensorsEntry> entries_;
  std::vector<int64_t> sizes_;  // bytes per entry
  size_t index_ = 0;            // the entry being written
  int64_t written_ = 0;         // bytes of it written so far
};

// A whole file from in-memory tensors: data[i] holds entries[i]'s bytes. The
// data is laid out in SortSafetensorsEntries order.
Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                        const std::vector<std::span<const uint8_t>>& data,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace dsv4

#endif  // DSV4_IO_SAFETENSORS_WRITER_H_
