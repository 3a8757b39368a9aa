// Helpers shared by the io reader tests: a little-endian byte builder for
// crafting (bad) files in memory, temp files, the expected.json sidecar that
// tests/data/io/make_io_data.py writes, and an error-status matcher.
#ifndef DSV4_TESTS_IO_IO_TEST_UTIL_H_
#define DSV4_TESTS_IO_IO_TEST_UTIL_H_

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/status.h"
#include "tensor/dtype.h"

namespace dsv4::testing_io {

inline std::string TestDataPath(std::string_view rel) {
  return std::string(DSV4_TEST_DATA_DIR) + "/io/" + std::string(rel);
}
inline std::string ModelPath(std::string_view file) {
  return std::string(DSV4_SOURCE_DIR) + "/models/stories260K/" + std::string(file);
}

// Appends little-endian values.
class Bytes {
 public:
  Bytes& U8(uint8_t v) { return Raw(&v, 1); }
  Bytes& U32(uint32_t v) { return Raw(&v, 4); }
  Bytes& I32(int32_t v) { return Raw(&v, 4); }
  Bytes& U64(uint64_t v) { return Raw(&v, 8); }
  Bytes& F32(float v) { return Raw(&v, 4); }
  // GGUF string: u64 length then the bytes.
  Bytes& Str(std::string_view s) {
    U64(s.size());
    return Raw(s.data(), s.size());
  }
  Bytes& Raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    data_.insert(data_.end(), b, b + n);
    return *this;
  }
  Bytes& Text(std::string_view s) { return Raw(s.data(), s.size()); }
  Bytes& Zeros(size_t n) {
    data_.resize(data_.size() + n, 0);
    return *this;
  }
  // Zero bytes up to a multiple of `align`.
  Bytes& PadTo(size_t align) {
    while (data_.size() % align != 0) data_.push_back(0);
    return *this;
  }
  size_t size() const { return data_.size(); }
  const std::vector<uint8_t>& data() const { return data_; }
  std::span<const uint8_t> span() const { return data_; }
  std::vector<uint8_t>& mutable_data() { return data_; }

 private:
  std::vector<uint8_t> data_;
};

// A fresh directory under the gtest temp dir, named after the running test.
inline std::string MakeTempDir() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) /
      (std::string("dsv4_io_") + info->test_suite_name() + "_" + info->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

inline void WriteFile(const std::string& path, std::span<const uint8_t> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  ASSERT_TRUE(out) << path;
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}
inline void WriteFile(const std::string& path, std::string_view text) {
  WriteFile(path,
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

inline std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
}

// tests/data/io/expected.json (written by make_io_data.py with numpy/gguf-py).
inline const nlohmann::json& Expected() {
  static const nlohmann::json j = [] {
    std::ifstream in(TestDataPath("expected.json"));
    return nlohmann::json::parse(in);
  }();
  return j;
}

// All elements of a contiguous tensor as floats.
inline std::vector<float> Dequantize(DType dtype, const void* data, int64_t numel) {
  std::vector<float> out(static_cast<size_t>(numel));
  if (numel > 0) DequantizeRow(dtype, data, numel, out.data());
  return out;
}

// Checks that `status` is an error of `code` whose message starts with
// `path` and contains every string in `parts`.
inline ::testing::AssertionResult IsError(const Status& status, StatusCode code,
                                          std::string_view path,
                                          std::initializer_list<std::string_view> parts) {
  if (status.ok()) return ::testing::AssertionFailure() << "expected an error, got ok";
  if (status.code() != code) {
    return ::testing::AssertionFailure()
           << "code " << StatusCodeName(status.code()) << ", expected " << StatusCodeName(code)
           << ": " << status.ToString();
  }
  if (status.message().rfind(std::string(path), 0) != 0) {
    return ::testing::AssertionFailure()
           << "message does not start with '" << path << "': " << status.ToString();
  }
  for (std::string_view p : parts) {
    if (status.message().find(std::string(p)) == std::string::npos) {
      return ::testing::AssertionFailure() << "message lacks '" << p << "': " << status.ToString();
    }
  }
  if (status.hint().empty())
    return ::testing::AssertionFailure() << "no hint: " << status.ToString();
  return ::testing::AssertionSuccess();
}

}  // namespace dsv4::testing_io

#endif  // DSV4_TESTS_IO_IO_TEST_UTIL_H_
