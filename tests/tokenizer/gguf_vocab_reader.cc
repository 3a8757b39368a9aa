// Test-only GGUF metadata walk for the tokenizer tests (see the header).
#include "gguf_vocab_reader.h"

#include <cstdint>
#include <cstring>
#include <string_view>

#include "base/mapped_file.h"

namespace dsv4::testing {
namespace {

// GGUF metadata value types.
enum : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, std::string path)
      : data_(data), size_(size), path_(std::move(path)) {}

  template <typename T>
  Result<T> Read() {
    if (size_ - pos_ < sizeof(T))
      return DataLoss(path_ + ": truncated at byte " + std::to_string(pos_));
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  Result<std::string> ReadString() {
    ASSIGN_OR_RETURN(const uint64_t n, Read<uint64_t>());
    if (n > size_ - pos_)
      return DataLoss(path_ + ": string past the end at byte " + std::to_string(pos_));
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }
  Status Skip(uint32_t type) {
    switch (type) {
      case kU8:
      case kI8:
      case kBool:
        return Advance(1);
      case kU16:
      case kI16:
        return Advance(2);
      case kU32:
      case kI32:
      case kF32:
        return Advance(4);
      case kU64:
      case kI64:
      case kF64:
        return Advance(8);
      case kString:
        return ReadString().status();
      default:
        return DataLoss(path_ + ": unknown value type " + std::to_string(type));
    }
  }
  Status Advance(size_t n) {
    if (n > size_ - pos_) return DataLoss(path_ + ": truncated at byte " + std::to_string(pos_));
    pos_ += n;
    return Status::Ok();
  }
  // A scalar integer of any integer type.
  Result<int64_t> ReadInteger(uint32_t type) {
    switch (type) {
      case kU8: {
        ASSIGN_OR_RETURN(auto v, Read<uint8_t>());
        return int64_t{v};
      }
      case kI8: {
        ASSIGN_OR_RETURN(auto v, Read<int8_t>());
        return int64_t{v};
      }
      case kU16: {
        ASSIGN_OR_RETURN(auto v, Read<uint16_t>());
        return int64_t{v};
      }
      case kI16: {
        ASSIGN_OR_RETURN(auto v, Read<int16_t>());
        return int64_t{v};
      }
      case kU32: {
        ASSIGN_OR_RETURN(auto v, Read<uint32_t>());
        return int64_t{v};
      }
      case kI32: {
        ASSIGN_OR_RETURN(auto v, Read<int32_t>());
        return int64_t{v};
      }
      case kU64: {
        ASSIGN_OR_RETURN(auto v, Read<uint64_t>());
        return static_cast<int64_t>(v);
      }
      case kI64: {
        ASSIGN_OR_RETURN(auto v, Read<int64_t>());
        return v;
      }
      default:
        return InvalidArgument(path_ + ": expected an integer, found type " + std::to_string(type));
    }
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  std::string path_;
};

}  // namespace

Result<GgufSpmMetadata> ReadGgufSpmMetadata(const std::string& path) {
  ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::Open(path));
  Cursor in(file->data(), file->size(), path);
  ASSIGN_OR_RETURN(const uint32_t magic, in.Read<uint32_t>());
  if (magic != 0x46554747u) return DataLoss(path + ": not a GGUF file");
  ASSIGN_OR_RETURN(const uint32_t version, in.Read<uint32_t>());
  if (version < 2) return Unimplemented(path + ": GGUF v" + std::to_string(version));
  ASSIGN_OR_RETURN(const uint64_t n_tensors, in.Read<uint64_t>());
  (void)n_tensors;
  ASSIGN_OR_RETURN(const uint64_t n_kv, in.Read<uint64_t>());
  GgufSpmMetadata meta;
  for (uint64_t k = 0; k < n_kv; ++k) {
    ASSIGN_OR_RETURN(const std::string key, in.ReadString());
    ASSIGN_OR_RETURN(const uint32_t type, in.Read<uint32_t>());
    if (type == kArray) {
      ASSIGN_OR_RETURN(const uint32_t elem, in.Read<uint32_t>());
      ASSIGN_OR_RETURN(const uint64_t count, in.Read<uint64_t>());
      if (count > file->size()) return DataLoss(path + ": absurd array length in " + key);
      for (uint64_t i = 0; i < count; ++i) {
        if (key == "tokenizer.ggml.tokens" && elem == kString) {
          ASSIGN_OR_RETURN(std::string s, in.ReadString());
          meta.tokens.push_back(std::move(s));
        } else if (key == "tokenizer.ggml.scores" && elem == kF32) {
          ASSIGN_OR_RETURN(const float f, in.Read<float>());
          meta.scores.push_back(f);
        } else if (key == "tokenizer.ggml.token_type" && elem != kString) {
          ASSIGN_OR_RETURN(const int64_t t, in.ReadInteger(elem));
          meta.types.push_back(static_cast<int32_t>(t));
        } else {
          RETURN_IF_ERROR(in.Skip(elem));
        }
      }
    } else if (key == "tokenizer.ggml.bos_token_id") {
      ASSIGN_OR_RETURN(meta.bos, in.ReadInteger(type));
    } else if (key == "tokenizer.ggml.eos_token_id") {
      ASSIGN_OR_RETURN(meta.eos, in.ReadInteger(type));
    } else if (key == "tokenizer.ggml.unknown_token_id") {
      ASSIGN_OR_RETURN(meta.unk, in.ReadInteger(type));
    } else if (key == "tokenizer.ggml.add_space_prefix" && type == kBool) {
      ASSIGN_OR_RETURN(const uint8_t b, in.Read<uint8_t>());
      meta.add_space_prefix = b != 0;
    } else {
      RETURN_IF_ERROR(in.Skip(type));
    }
  }
  return meta;
}

}  // namespace dsv4::testing
