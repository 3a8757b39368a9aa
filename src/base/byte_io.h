// ByteWriter / ByteReader: fixed-width little-endian fields and raw arrays
// appended to / read from a byte buffer (the state files of engine/
// state_file.h). The reader never reads past its span: every Get returns false
// instead, and the caller reports the file as truncated or corrupt.
#ifndef DSV4_BASE_BYTE_IO_H_
#define DSV4_BASE_BYTE_IO_H_

#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

namespace dsv4 {

class ByteWriter {
 public:
  explicit ByteWriter(std::vector<uint8_t>& out) : out_(out) {}
  template <typename T>
  void Put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    PutBytes(&v, sizeof(T));
  }
  void PutBytes(const void* data, size_t n) {
    if (n == 0) return;
    const size_t at = out_.size();
    out_.resize(at + n);
    std::memcpy(out_.data() + at, data, n);
  }
  size_t size() const { return out_.size(); }

 private:
  std::vector<uint8_t>& out_;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> in) : in_(in) {}
  template <typename T>
  [[nodiscard]] bool Get(T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    return GetBytes(&v, sizeof(T));
  }
  [[nodiscard]] bool GetBytes(void* out, size_t n) {
    if (n > left()) return false;
    if (n > 0) std::memcpy(out, in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  // `count` elements of T into `out` (resized); false past the end.
  template <typename T>
  [[nodiscard]] bool GetArray(uint64_t count, std::vector<T>& out) {
    if (count > left() / sizeof(T)) return false;
    out.resize(count);
    return GetBytes(out.data(), count * sizeof(T));
  }
  size_t left() const { return in_.size() - pos_; }
  size_t position() const { return pos_; }

 private:
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

}  // namespace dsv4

#endif  // DSV4_BASE_BYTE_IO_H_
