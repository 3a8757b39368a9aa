// SafetensorsWriter: header first (all offsets known up front), then the
// tensors' bytes streamed in declaration order.
#include "io/safetensors_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

namespace dsv4 {

Result<int64_t> SafetensorsDTypeSize(std::string_view dtype) {
  struct Size {
    std::string_view name;
    int64_t bytes;
  };
  static constexpr Size kSizes[] = {{"F32", 4},     {"F16", 2},     {"BF16", 2},
                                    {"F8_E4M3", 1}, {"F8_E8M0", 1}, {"I8", 1},
                                    {"U8", 1},      {"I32", 4},     {"I64", 8}};
  for (const Size& s : kSizes) {
    if (s.name == dtype) return s.bytes;
  }
  return InvalidArgument("safetensors dtype '" + std::string(dtype) + "' cannot be written",
                         "use F32, F16, BF16, F8_E4M3, F8_E8M0, I8, U8, I32 or I64");
}

Result<int64_t> SafetensorsEntryBytes(const SafetensorsEntry& entry) {
  ASSIGN_OR_RETURN(int64_t bytes, SafetensorsDTypeSize(entry.dtype));
  for (int64_t d : entry.shape) {
    if (d < 0) {
      return InvalidArgument("tensor '" + entry.name + "' has a negative dimension " +
                             std::to_string(d));
    }
    if (d != 0 && bytes > (int64_t{1} << 62) / d) {
      return InvalidArgument("tensor '" + entry.name + "' is too large");
    }
    bytes *= d;
  }
  return bytes;
}

void SortSafetensorsEntries(std::vector<SafetensorsEntry>& entries) {
  auto size = [](const SafetensorsEntry& e) {
    auto r = SafetensorsDTypeSize(e.dtype);
    return r.ok() ? *r : 0;
  };
  std::stable_sort(
      entries.begin(), entries.end(),
      [&](const SafetensorsEntry& a, const SafetensorsEntry& b) { return size(a) > size(b); });
}

Result<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::Create(
    const std::string& path, std::vector<SafetensorsEntry> entries,
    const std::map<std::string, std::string>& metadata) {
  std::unique_ptr<SafetensorsWriter> w(new SafetensorsWriter());
  w->path_ = path;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = meta;
  }
  std::set<std::string> names;
  int64_t offset = 0;
  for (const SafetensorsEntry& e : entries) {
    if (e.name.empty() || e.name == "__metadata__") {
      return InvalidArgument(path + ": tensor name '" + e.name + "' is not allowed",
                             "names must be non-empty and not __metadata__");
    }
    if (!names.insert(e.name).second) {
      return InvalidArgument(path + ": tensor '" + e.name + "' is declared twice");
    }
    auto bytes = SafetensorsEntryBytes(e);
    if (!bytes.ok()) return bytes.status().WithContext(path);
    const int64_t align = *SafetensorsDTypeSize(e.dtype);
    if (offset % align != 0) {
      return InvalidArgument(path + ": tensor '" + e.name + "' (" + e.dtype +
                                 ") would start at data byte " + std::to_string(offset) +
                                 ", not a multiple of its " + std::to_string(align) +
                                 "-byte elements",
                             "declare tensors by element size, largest first "
                             "(SortSafetensorsEntries)");
    }
    header[e.name] = {
        {"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + *bytes}}};
    w->sizes_.push_back(*bytes);
    offset += *bytes;
  }
  w->entries_ = std::move(entries);
  std::string text = header.dump();
  while (text.size() % 8 != 0) text += ' ';

  w->file_ = std::fopen(path.c_str(), "wb");
  if (w->file_ == nullptr) {
    return IoError(path + ": cannot create: " + std::strerror(errno),
                   "check that the directory exists and is writable");
  }
  uint8_t len[8];
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  if (std::fwrite(len, 1, 8, w->file_) != 8 ||
      std::fwrite(text.data(), 1, text.size(), w->file_) != text.size()) {
    return IoError(path + ": write failed: " + std::strerror(errno), "is the disk full?");
  }
  // Skip tensors with no bytes.
  while (w->index_ < w->sizes_.size() && w->sizes_[w->index_] == 0) ++w->index_;
  return w;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

std::string_view SafetensorsWriter::current() const {
  return index_ < entries_.size() ? std::string_view(entries_[index_].name) : std::string_view();
}

Status SafetensorsWriter::Append(std::span<const uint8_t> bytes) {
  if (file_ == nullptr) return InvalidArgument(path_ + ": Append after Finish");
  size_t done = 0;
  while (done < bytes.size()) {
    if (index_ >= entries_.size()) {
      return OutOfRange(
          path_ + ": " + std::to_string(bytes.size() - done) + " bytes past the last tensor",
          "every tensor is already complete");
    }
    const int64_t room = sizes_[index_] - written_;
    const size_t n = std::min<size_t>(bytes.size() - done, static_cast<size_t>(room));
    if (std::fwrite(bytes.data() + done, 1, n, file_) != n) {
      return IoError(path_ + ": write of tensor '" + entries_[index_].name +
                         "' failed: " + std::strerror(errno),
                     "is the disk full?");
    }
    done += n;
    written_ += static_cast<int64_t>(n);
    while (index_ < entries_.size() && written_ == sizes_[index_]) {
      ++index_;
      written_ = 0;
    }
  }
  return Status::Ok();
}

Status SafetensorsWriter::Finish() {
  if (file_ == nullptr) return InvalidArgument(path_ + ": Finish called twice");
  std::FILE* f = file_;
  file_ = nullptr;
  if (index_ < entries_.size()) {
    std::fclose(f);
    return DataLoss(path_ + ": tensor '" + entries_[index_].name + "' has " +
                        std::to_string(written_) + " of its " + std::to_string(sizes_[index_]) +
                        " bytes",
                    "append every tensor's data before Finish");
  }
  if (std::fclose(f) != 0) {
    return IoError(path_ + ": close failed: " + std::strerror(errno), "is the disk full?");
  }
  return Status::Ok();
}

Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                        const std::vector<std::span<const uint8_t>>& data,
                        const std::map<std::string, std::string>& metadata) {
  if (data.size() != entries.size()) {
    return InvalidArgument(path + ": " + std::to_string(entries.size()) + " tensors but " +
                           std::to_string(data.size()) + " data buffers");
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    auto bytes = SafetensorsEntryBytes(entries[i]);
    if (!bytes.ok()) return bytes.status().WithContext(path);
    if (static_cast<int64_t>(data[i].size()) != *bytes) {
      return InvalidArgument(path + ": tensor '" + entries[i].name + "' needs " +
                             std::to_string(*bytes) + " bytes, got " +
                             std::to_string(data[i].size()));
    }
  }
  std::vector<size_t> order(entries.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return *SafetensorsDTypeSize(entries[a].dtype) > *SafetensorsDTypeSize(entries[b].dtype);
  });
  std::vector<SafetensorsEntry> sorted;
  for (size_t i : order) sorted.push_back(entries[i]);
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsWriter> w,
                   SafetensorsWriter::Create(path, std::move(sorted), metadata));
  for (size_t i : order) RETURN_IF_ERROR(w->Append(data[i]));
  return w->Finish();
}

}  // namespace dsv4
