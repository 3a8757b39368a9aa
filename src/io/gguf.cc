// GGUF reader: a bounds-checked cursor over the bytes, the metadata and
// tensor-info parser, data-section checks, and the typed metadata accessors.
#include "io/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "base/mapped_file.h"

namespace dsv4 {

static_assert(std::endian::native == std::endian::little, "GGUF files are little-endian");

namespace {

constexpr char kGgufMagic[4] = {'G', 'G', 'U', 'F'};
constexpr const char* kTruncatedHint =
    "the file is incomplete (an interrupted download?) or is not a GGUF file";
// Smallest possible encodings, used to reject absurd counts before allocating.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // key length, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // name length, n_dims, type, offset

// Bytes of one element of a scalar metadata type; 0 for string/array/unknown.
size_t ScalarSize(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    case GgufType::kString:
    case GgufType::kArray:
      return 0;
  }
  return 0;
}

bool IsKnownType(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kFloat64); }

bool IsIntegerType(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64:
      return true;
    default:
      return false;
  }
}

bool IsUnsignedType(GgufType t) {
  return t == GgufType::kUint8 || t == GgufType::kUint16 || t == GgufType::kUint32 ||
         t == GgufType::kUint64;
}

// A decoded integer of any metadata integer type, as sign + magnitude so that
// every int64 and uint64 value is representable.
struct IntValue {
  bool negative = false;
  uint64_t magnitude_or_value = 0;  // the value when !negative, else -(value) as uint64
};

IntValue DecodeInt(GgufType t, const uint8_t* p) {
  IntValue v;
  auto set_signed = [&v](int64_t x) {
    v.negative = x < 0;
    v.magnitude_or_value = x < 0 ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
  };
  switch (t) {
    case GgufType::kUint8:
      v.magnitude_or_value = p[0];
      break;
    case GgufType::kInt8:
      set_signed(static_cast<int8_t>(p[0]));
      break;
    case GgufType::kUint16: {
      uint16_t x;
      std::memcpy(&x, p, 2);
      v.magnitude_or_value = x;
      break;
    }
    case GgufType::kInt16: {
      int16_t x;
      std::memcpy(&x, p, 2);
      set_signed(x);
      break;
    }
    case GgufType::kUint32: {
      uint32_t x;
      std::memcpy(&x, p, 4);
      v.magnitude_or_value = x;
      break;
    }
    case GgufType::kInt32: {
      int32_t x;
      std::memcpy(&x, p, 4);
      set_signed(x);
      break;
    }
    case GgufType::kUint64:
      std::memcpy(&v.magnitude_or_value, p, 8);
      break;
    case GgufType::kInt64: {
      int64_t x;
      std::memcpy(&x, p, 8);
      set_signed(x);
      break;
    }
    default:
      break;
  }
  return v;
}

std::string Hex4(const uint8_t* p) {
  return fmt::format("{:02x} {:02x} {:02x} {:02x}", p[0], p[1], p[2], p[3]);
}

// A bounds-checked little-endian reader over the file bytes.
class Cursor {
 public:
  Cursor(std::span<const uint8_t> bytes, const std::string& path) : b_(bytes), path_(path) {}

  size_t pos() const { return pos_; }
  size_t left() const { return b_.size() - pos_; }
  const uint8_t* here() const { return b_.data() + pos_; }

  Status Need(size_t n, std::string_view what) const {
    if (n > left()) {
      return DataLoss(fmt::format("{}: truncated at byte {} while reading {}: need {} bytes, {} "
                                  "left",
                                  path_, pos_, what, n, left()),
                      kTruncatedHint);
    }
    return Status::Ok();
  }

  template <typename T>
  Status Read(T* out, std::string_view what) {
    RETURN_IF_ERROR(Need(sizeof(T), what));
    std::memcpy(out, here(), sizeof(T));
    pos_ += sizeof(T);
    return Status::Ok();
  }

  void Skip(size_t n) { pos_ += n; }  // after Need

  // u64 length + bytes.
  Status ReadString(std::string* out, std::string_view what) {
    const size_t at = pos_;
    uint64_t len = 0;
    RETURN_IF_ERROR(Read(&len, what));
    if (len > left()) {
      return OutOfRange(fmt::format("{}: {} at byte {} claims {} bytes but only {} remain in the "
                                    "file",
                                    path_, what, at, len, left()),
                        kTruncatedHint);
    }
    out->assign(reinterpret_cast<const char*>(here()), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return Status::Ok();
  }

 private:
  std::span<const uint8_t> b_;
  const std::string& path_;
  size_t pos_ = 0;
};

}  // namespace

std::string GgufTypeName(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
      return "uint8";
    case GgufType::kInt8:
      return "int8";
    case GgufType::kUint16:
      return "uint16";
    case GgufType::kInt16:
      return "int16";
    case GgufType::kUint32:
      return "uint32";
    case GgufType::kInt32:
      return "int32";
    case GgufType::kFloat32:
      return "float32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kUint64:
      return "uint64";
    case GgufType::kInt64:
      return "int64";
    case GgufType::kFloat64:
      return "float64";
  }
  return fmt::format("type {}", static_cast<uint32_t>(type));
}

bool GgufValue::is_integer() const { return IsIntegerType(type); }

std::string GgufValue::TypeString() const {
  if (type == GgufType::kArray) return "array of " + GgufTypeName(elem_type);
  return GgufTypeName(type);
}

std::optional<GgmlTypeTraits> GetGgmlTypeTraits(uint32_t ggml_type) {
  // Block layouts from ggml's type_traits table (ggml/src/ggml.c).
  switch (static_cast<GgmlType>(ggml_type)) {
    case GgmlType::kF32:
      return GgmlTypeTraits{"f32", 1, 4};
    case GgmlType::kF16:
      return GgmlTypeTraits{"f16", 1, 2};
    case GgmlType::kQ4_0:
      return GgmlTypeTraits{"q4_0", 32, 18};
    case GgmlType::kQ4_1:
      return GgmlTypeTraits{"q4_1", 32, 20};
    case GgmlType::kQ5_0:
      return GgmlTypeTraits{"q5_0", 32, 22};
    case GgmlType::kQ5_1:
      return GgmlTypeTraits{"q5_1", 32, 24};
    case GgmlType::kQ8_0:
      return GgmlTypeTraits{"q8_0", 32, 34};
    case GgmlType::kQ8_1:
      return GgmlTypeTraits{"q8_1", 32, 36};
    case GgmlType::kQ2_K:
      return GgmlTypeTraits{"q2_K", 256, 84};
    case GgmlType::kQ3_K:
      return GgmlTypeTraits{"q3_K", 256, 110};
    case GgmlType::kQ4_K:
      return GgmlTypeTraits{"q4_K", 256, 144};
    case GgmlType::kQ5_K:
      return GgmlTypeTraits{"q5_K", 256, 176};
    case GgmlType::kQ6_K:
      return GgmlTypeTraits{"q6_K", 256, 210};
    case GgmlType::kQ8_K:
      return GgmlTypeTraits{"q8_K", 256, 292};
    case GgmlType::kIQ2_XXS:
      return GgmlTypeTraits{"iq2_xxs", 256, 66};
    case GgmlType::kIQ2_XS:
      return GgmlTypeTraits{"iq2_xs", 256, 74};
    case GgmlType::kIQ3_XXS:
      return GgmlTypeTraits{"iq3_xxs", 256, 98};
    case GgmlType::kIQ1_S:
      return GgmlTypeTraits{"iq1_s", 256, 50};
    case GgmlType::kIQ4_NL:
      return GgmlTypeTraits{"iq4_nl", 32, 18};
    case GgmlType::kIQ3_S:
      return GgmlTypeTraits{"iq3_s", 256, 110};
    case GgmlType::kIQ2_S:
      return GgmlTypeTraits{"iq2_s", 256, 82};
    case GgmlType::kIQ4_XS:
      return GgmlTypeTraits{"iq4_xs", 256, 136};
    case GgmlType::kI8:
      return GgmlTypeTraits{"i8", 1, 1};
    case GgmlType::kI16:
      return GgmlTypeTraits{"i16", 1, 2};
    case GgmlType::kI32:
      return GgmlTypeTraits{"i32", 1, 4};
    case GgmlType::kI64:
      return GgmlTypeTraits{"i64", 1, 8};
    case GgmlType::kF64:
      return GgmlTypeTraits{"f64", 1, 8};
    case GgmlType::kIQ1_M:
      return GgmlTypeTraits{"iq1_m", 256, 56};
    case GgmlType::kBF16:
      return GgmlTypeTraits{"bf16", 1, 2};
    case GgmlType::kTQ1_0:
      return GgmlTypeTraits{"tq1_0", 256, 54};
    case GgmlType::kTQ2_0:
      return GgmlTypeTraits{"tq2_0", 256, 66};
    case GgmlType::kMXFP4:
      return GgmlTypeTraits{"mxfp4", 32, 17};
    case GgmlType::kNVFP4:
      return GgmlTypeTraits{"nvfp4", 64, 36};
  }
  return std::nullopt;
}

std::optional<DType> DTypeFromGgml(uint32_t ggml_type) {
  switch (static_cast<GgmlType>(ggml_type)) {
    case GgmlType::kF32:
      return DType::kF32;
    case GgmlType::kF16:
      return DType::kF16;
    case GgmlType::kBF16:
      return DType::kBF16;
    case GgmlType::kQ8_0:
      return DType::kQ8_0;
    case GgmlType::kQ4_K:
      return DType::kQ4_K;
    case GgmlType::kQ6_K:
      return DType::kQ6_K;
    case GgmlType::kQ4_0:
      return DType::kQ4_0;
    case GgmlType::kQ4_1:
      return DType::kQ4_1;
    case GgmlType::kQ5_0:
      return DType::kQ5_0;
    case GgmlType::kQ5_1:
      return DType::kQ5_1;
    case GgmlType::kQ2_K:
      return DType::kQ2_K;
    case GgmlType::kQ3_K:
      return DType::kQ3_K;
    case GgmlType::kQ5_K:
      return DType::kQ5_K;
    case GgmlType::kIQ2_XXS:
      return DType::kIQ2_XXS;
    case GgmlType::kIQ2_XS:
      return DType::kIQ2_XS;
    case GgmlType::kIQ2_S:
      return DType::kIQ2_S;
    case GgmlType::kIQ3_XXS:
      return DType::kIQ3_XXS;
    case GgmlType::kIQ3_S:
      return DType::kIQ3_S;
    case GgmlType::kIQ1_S:
      return DType::kIQ1_S;
    case GgmlType::kIQ1_M:
      return DType::kIQ1_M;
    case GgmlType::kIQ4_NL:
      return DType::kIQ4_NL;
    case GgmlType::kIQ4_XS:
      return DType::kIQ4_XS;
    case GgmlType::kMXFP4:
      return DType::kMXFP4;
    case GgmlType::kI8:
      return DType::kI8;
    case GgmlType::kI32:
      return DType::kI32;
    case GgmlType::kI64:
      return DType::kI64;
    default:
      return std::nullopt;
  }
}

bool IsValidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
      cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;  // continuation byte, overlong lead (c0/c1) or > f4
    }
    if (n - i < static_cast<size_t>(len)) return false;
    for (int k = 1; k < len; ++k) {
      const unsigned cc = p[i + k];
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)) return false;  // overlong
    if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

// Builds a GgufFile from bytes; every check lives here.
class GgufParser {
 public:
  GgufParser(std::span<const uint8_t> bytes, const std::string& path)
      : bytes_(bytes), path_(path), cur_(bytes, path) {}

  Result<std::unique_ptr<GgufFile>> Parse(std::shared_ptr<const void> owner) {
    file_.reset(new GgufFile());
    file_->path_ = path_;
    file_->owner_ = std::move(owner);
    RETURN_IF_ERROR(ParseHeader());
    RETURN_IF_ERROR(ParseMetadata());
    RETURN_IF_ERROR(ParseAlignment());
    RETURN_IF_ERROR(ParseTensorInfos());
    RETURN_IF_ERROR(CheckData());
    return std::move(file_);
  }

 private:
  Status ParseHeader() {
    if (bytes_.size() < 4) {
      return DataLoss(
          fmt::format("{}: file is {} bytes, too short for the GGUF magic", path_, bytes_.size()),
          kTruncatedHint);
    }
    if (std::memcmp(bytes_.data(), kGgufMagic, 4) != 0) {
      return InvalidArgument(fmt::format("{}: bad magic {} at byte 0, expected \"GGUF\" (47 47 55 "
                                         "46)",
                                         path_, Hex4(bytes_.data())),
                             "this is not a GGUF file");
    }
    cur_.Skip(4);
    uint32_t version = 0;
    RETURN_IF_ERROR(cur_.Read(&version, "the version"));
    if (version != 2 && version != 3) {
      const bool swapped =
          (version & 0xffffu) == 0 && ((version >> 24) == 2 || (version >> 24) == 3);
      if (swapped) {
        return Unimplemented(path_ +
                                 ": big-endian GGUF (version bytes at byte 4 are byte-swapped) "
                                 "is not supported",
                             "convert the model again on a little-endian machine");
      }
      return Unimplemented(fmt::format("{}: GGUF version {} at byte 4 is not supported (only 2 "
                                       "and 3)",
                                       path_, version),
                           version == 1 ? "GGUF v1 is obsolete; convert the model again"
                                        : "the file is corrupt or from a newer GGUF");
    }
    file_->version_ = version;
    RETURN_IF_ERROR(cur_.Read(&n_tensors_, "the tensor count"));
    RETURN_IF_ERROR(cur_.Read(&n_kv_, "the metadata count"));
    // Reject counts the rest of the file cannot possibly hold, before allocating.
    const uint64_t left = cur_.left();
    if (n_kv_ > left / kMinKvBytes) {
      return OutOfRange(fmt::format("{}: header claims {} metadata entries (byte 16) but only {} "
                                    "bytes follow",
                                    path_, n_kv_, left),
                        "the header is corrupt");
    }
    if (n_tensors_ > left / kMinTensorInfoBytes) {
      return OutOfRange(fmt::format("{}: header claims {} tensors (byte 8) but only {} bytes "
                                    "follow",
                                    path_, n_tensors_, left),
                        "the header is corrupt");
    }
    return Status::Ok();
  }

  Status ParseMetadata() {
    file_->metadata_.reserve(static_cast<size_t>(n_kv_));
    for (uint64_t i = 0; i < n_kv_; ++i) {
      const size_t at = cur_.pos();
      GgufKeyValue kv;
      RETURN_IF_ERROR(cur_.ReadString(&kv.key, fmt::format("the key of metadata entry {}", i)));
      if (kv.key.empty()) {
        return DataLoss(
            fmt::format("{}: metadata entry {} at byte {} has an empty key", path_, i, at),
            "the file is corrupt");
      }
      if (!IsValidUtf8(kv.key)) {
        return DataLoss(fmt::format("{}: the key of metadata entry {} at byte {} is not valid "
                                    "UTF-8",
                                    path_, i, at),
                        "the file is corrupt");
      }
      if (file_->meta_index_.count(kv.key) != 0) {
        return DataLoss(
            fmt::format("{}: duplicate metadata key '{}' at byte {}", path_, kv.key, at),
            "the file is corrupt; each key may appear once");
      }
      uint32_t type = 0;
      RETURN_IF_ERROR(cur_.Read(&type, fmt::format("the type of metadata key '{}'", kv.key)));
      RETURN_IF_ERROR(ReadValue(kv.key, type, &kv.value));
      file_->meta_index_.emplace(kv.key, file_->metadata_.size());
      file_->metadata_.push_back(std::move(kv));
    }
    return Status::Ok();
  }

  Status ReadValue(const std::string& key, uint32_t type, GgufValue* v) {
    if (!IsKnownType(type)) {
      return DataLoss(fmt::format("{}: metadata key '{}' has unknown value type {} (byte {})",
                                  path_, key, type, cur_.pos() - 4),
                      "the file is corrupt or from a newer GGUF");
    }
    v->type = static_cast<GgufType>(type);
    const std::string what = fmt::format("the value of metadata key '{}'", key);
    switch (v->type) {
      case GgufType::kString:
        RETURN_IF_ERROR(cur_.ReadString(&v->str, what));
        if (!IsValidUtf8(v->str)) {
          return DataLoss(
              fmt::format("{}: metadata key '{}': the string value is not valid UTF-8", path_, key),
              "the file is corrupt");
        }
        return Status::Ok();
      case GgufType::kArray:
        return ReadArray(key, v);
      case GgufType::kFloat32: {
        float f = 0;
        RETURN_IF_ERROR(cur_.Read(&f, what));
        v->f64 = f;
        return Status::Ok();
      }
      case GgufType::kFloat64:
        return cur_.Read(&v->f64, what);
      case GgufType::kBool: {
        uint8_t b = 0;
        RETURN_IF_ERROR(cur_.Read(&b, what));
        if (b > 1) {
          return DataLoss(fmt::format("{}: metadata key '{}': bool value is {} (byte {}), must be "
                                      "0 or 1",
                                      path_, key, b, cur_.pos() - 1),
                          "the file is corrupt");
        }
        v->u64 = b;
        return Status::Ok();
      }
      default: {  // integers
        const size_t n = ScalarSize(v->type);
        RETURN_IF_ERROR(cur_.Need(n, what));
        const IntValue x = DecodeInt(v->type, cur_.here());
        cur_.Skip(n);
        if (IsUnsignedType(v->type)) {
          v->u64 = x.magnitude_or_value;
        } else {
          v->i64 = x.negative ? static_cast<int64_t>(0 - x.magnitude_or_value)
                              : static_cast<int64_t>(x.magnitude_or_value);
        }
        return Status::Ok();
      }
    }
  }

  Status ReadArray(const std::string& key, GgufValue* v) {
    uint32_t elem = 0;
    RETURN_IF_ERROR(cur_.Read(&elem, fmt::format("the element type of array '{}'", key)));
    if (!IsKnownType(elem)) {
      return DataLoss(fmt::format("{}: metadata array '{}' has unknown element type {} (byte {})",
                                  path_, key, elem, cur_.pos() - 4),
                      "the file is corrupt or from a newer GGUF");
    }
    v->elem_type = static_cast<GgufType>(elem);
    if (v->elem_type == GgufType::kArray) {
      return Unimplemented(fmt::format("{}: metadata key '{}' is an array of arrays, which this "
                                       "reader does not support",
                                       path_, key),
                           "no model this engine runs needs nested arrays");
    }
    const size_t count_at = cur_.pos();
    RETURN_IF_ERROR(cur_.Read(&v->count, fmt::format("the length of array '{}'", key)));
    const size_t elem_size = v->elem_type == GgufType::kString ? 8 : ScalarSize(v->elem_type);
    if (v->count > cur_.left() / elem_size) {
      return OutOfRange(
          fmt::format("{}: metadata array '{}' claims {} elements of {} (byte {}) but "
                      "only {} bytes remain",
                      path_, key, v->count, GgufTypeName(v->elem_type), count_at, cur_.left()),
          kTruncatedHint);
    }
    if (v->elem_type == GgufType::kString) {
      v->strs.reserve(static_cast<size_t>(v->count));
      for (uint64_t i = 0; i < v->count; ++i) {
        std::string s;
        RETURN_IF_ERROR(cur_.ReadString(&s, fmt::format("element {} of array '{}'", i, key)));
        if (!IsValidUtf8(s)) {
          return DataLoss(fmt::format("{}: metadata key '{}': string element {} is not valid "
                                      "UTF-8",
                                      path_, key, i),
                          "the file is corrupt");
        }
        v->strs.push_back(std::move(s));
      }
      return Status::Ok();
    }
    const size_t n = static_cast<size_t>(v->count) * elem_size;  // <= left(), no overflow
    v->raw = std::span<const uint8_t>(cur_.here(), n);
    if (v->elem_type == GgufType::kBool) {
      for (size_t i = 0; i < n; ++i) {
        if (v->raw[i] > 1) {
          return DataLoss(fmt::format("{}: metadata key '{}': bool element {} is {}, must be 0 or "
                                      "1",
                                      path_, key, i, v->raw[i]),
                          "the file is corrupt");
        }
      }
    }
    cur_.Skip(n);
    return Status::Ok();
  }

  Status ParseAlignment() {
    const GgufValue* a = file_->GetMeta("general.alignment");
    if (a == nullptr) return Status::Ok();
    if (!a->is_integer()) {
      return InvalidArgument(fmt::format("{}: metadata key 'general.alignment' is {}, expected an "
                                         "unsigned integer",
                                         path_, a->TypeString()),
                             "the file is corrupt");
    }
    const bool neg = !IsUnsignedType(a->type) && a->i64 < 0;
    const uint64_t value = IsUnsignedType(a->type) ? a->u64 : static_cast<uint64_t>(a->i64);
    if (neg || value == 0 || value > (1u << 30) || (value & (value - 1)) != 0) {
      return DataLoss(fmt::format("{}: general.alignment = {} is not a power of two in [1, 2^30]",
                                  path_, neg ? a->i64 : static_cast<int64_t>(value)),
                      "the file is corrupt");
    }
    file_->alignment_ = static_cast<uint32_t>(value);
    return Status::Ok();
  }

  Status ParseTensorInfos() {
    // Recheck against what is left after the metadata.
    if (n_tensors_ > cur_.left() / kMinTensorInfoBytes) {
      return OutOfRange(fmt::format("{}: header claims {} tensors but only {} bytes follow the "
                                    "metadata (byte {})",
                                    path_, n_tensors_, cur_.left(), cur_.pos()),
                        "the header is corrupt");
    }
    file_->ggml_tensors_.reserve(static_cast<size_t>(n_tensors_));
    for (uint64_t i = 0; i < n_tensors_; ++i) {
      const size_t at = cur_.pos();
      GgufTensorInfo t;
      RETURN_IF_ERROR(cur_.ReadString(&t.name, fmt::format("the name of tensor {}", i)));
      if (!IsValidUtf8(t.name)) {
        return DataLoss(fmt::format("{}: the name of tensor {} (info at byte {}) is not valid "
                                    "UTF-8",
                                    path_, i, at),
                        "the file is corrupt");
      }
      if (file_->ggml_index_.count(t.name) != 0) {
        return DataLoss(
            fmt::format("{}: duplicate tensor name '{}' (info at byte {})", path_, t.name, at),
            "the file is corrupt; each tensor may appear once");
      }
      const std::string where = fmt::format("tensor '{}' (info at byte {})", t.name, at);
      uint32_t n_dims = 0;
      RETURN_IF_ERROR(cur_.Read(&n_dims, "the n_dims of " + where));
      if (n_dims > kGgufMaxDims) {
        return DataLoss(fmt::format("{}: {} has {} dims, at most {} are allowed", path_, where,
                                    n_dims, kGgufMaxDims),
                        "the file is corrupt");
      }
      uint64_t ne[kGgufMaxDims] = {1, 1, 1, 1};  // innermost first
      for (uint32_t d = 0; d < n_dims; ++d) {
        RETURN_IF_ERROR(cur_.Read(&ne[d], "the dims of " + where));
        if (ne[d] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return DataLoss(fmt::format("{}: {} has dim {} = {}, which is negative as int64", path_,
                                      where, d, ne[d]),
                          "the file is corrupt");
        }
      }
      RETURN_IF_ERROR(cur_.Read(&t.ggml_type, "the type of " + where));
      RETURN_IF_ERROR(cur_.Read(&t.offset, "the offset of " + where));
      const std::optional<GgmlTypeTraits> traits = GetGgmlTypeTraits(t.ggml_type);
      if (!traits) {
        return Unimplemented(
            fmt::format("{}: {} has unknown ggml type {}", path_, where, t.ggml_type),
            "the file is corrupt or uses a ggml type newer than this reader");
      }
      // Outermost first: reverse ggml's ne.
      for (int d = static_cast<int>(n_dims) - 1; d >= 0; --d) {
        t.shape.push_back(static_cast<int64_t>(ne[d]));
      }
      if (static_cast<int64_t>(ne[0]) % traits->block_elems != 0) {
        return DataLoss(
            fmt::format("{}: {} has rows of {} elements, not a multiple of the {} block "
                        "size {}",
                        path_, where, ne[0], traits->name, traits->block_elems),
            "the file is corrupt");
      }
      int64_t blocks = static_cast<int64_t>(ne[0]) / traits->block_elems;
      bool overflow = false;
      for (uint32_t d = 1; d < n_dims; ++d) {
        overflow |= __builtin_mul_overflow(blocks, static_cast<int64_t>(ne[d]), &blocks);
      }
      overflow |= __builtin_mul_overflow(blocks, traits->block_bytes, &t.nbytes);
      // Views multiply dims in any order: the nonzero ones must not overflow either.
      int64_t nonzero = 1;
      for (uint32_t d = 0; d < n_dims; ++d) {
        if (ne[d] != 0)
          overflow |= __builtin_mul_overflow(nonzero, static_cast<int64_t>(ne[d]), &nonzero);
      }
      if (overflow) {
        return OutOfRange(fmt::format("{}: {} with shape {} ({}) is too large: its size overflows "
                                      "64 bits",
                                      path_, where, ShapeToString(t.shape), traits->name),
                          "the file is corrupt");
      }
      t.dtype = DTypeFromGgml(t.ggml_type);
      file_->ggml_index_.emplace(t.name, file_->ggml_tensors_.size());
      file_->ggml_tensors_.push_back(std::move(t));
    }
    return Status::Ok();
  }

  Status CheckData() {
    const uint64_t align = file_->alignment_;
    const uint64_t end_of_infos = cur_.pos();
    const uint64_t data_offset = (end_of_infos + align - 1) / align * align;  // no overflow: small
    file_->data_offset_ = data_offset;
    const uint64_t data_size = data_offset <= bytes_.size() ? bytes_.size() - data_offset : 0;
    std::vector<size_t> order;
    order.reserve(file_->ggml_tensors_.size());
    for (size_t i = 0; i < file_->ggml_tensors_.size(); ++i) {
      const GgufTensorInfo& t = file_->ggml_tensors_[i];
      if (t.offset % align != 0) {
        return DataLoss(fmt::format("{}: tensor '{}' data offset {} is not a multiple of the "
                                    "alignment {}",
                                    path_, t.name, t.offset, align),
                        "the file is corrupt");
      }
      const uint64_t nbytes = static_cast<uint64_t>(t.nbytes);
      if (t.offset > data_size || nbytes > data_size - t.offset) {
        return OutOfRange(fmt::format("{}: tensor '{}' ({} bytes at data offset {}, file byte {}) "
                                      "ends past the end of the file ({} bytes of data from byte "
                                      "{})",
                                      path_, t.name, nbytes, t.offset, data_offset + t.offset,
                                      data_size, data_offset),
                          kTruncatedHint);
      }
      if (nbytes > 0) order.push_back(i);
    }
    std::sort(order.begin(), order.end(), [this](size_t a, size_t b) {
      return file_->ggml_tensors_[a].offset < file_->ggml_tensors_[b].offset;
    });
    for (size_t k = 1; k < order.size(); ++k) {
      const GgufTensorInfo& prev = file_->ggml_tensors_[order[k - 1]];
      const GgufTensorInfo& t = file_->ggml_tensors_[order[k]];
      if (t.offset < prev.offset + static_cast<uint64_t>(prev.nbytes)) {
        return DataLoss(fmt::format("{}: tensors '{}' (data bytes [{}, {})) and '{}' ([{}, {})) "
                                    "overlap",
                                    path_, prev.name, prev.offset, prev.offset + prev.nbytes,
                                    t.name, t.offset, t.offset + t.nbytes),
                        "the file is corrupt");
      }
    }
    for (GgufTensorInfo& t : file_->ggml_tensors_) {
      // Within the file: a tensor of 0 bytes may sit at the aligned data start
      // of a file that ends before it (no padding written after the infos).
      t.data = bytes_.data() + std::min<uint64_t>(data_offset + t.offset, bytes_.size());
      if (!t.dtype) continue;
      TensorInfo info;
      info.name = t.name;
      info.dtype = *t.dtype;
      info.shape = t.shape;
      info.data = t.data;
      info.nbytes = t.nbytes;
      file_->index_.emplace(info.name, file_->tensors_.size());
      file_->tensors_.push_back(std::move(info));
    }
    return Status::Ok();
  }

  std::span<const uint8_t> bytes_;
  const std::string& path_;
  Cursor cur_;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
  std::unique_ptr<GgufFile> file_;
};

// ---- GgufFile ----

const TensorInfo* GgufFile::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Result<const TensorInfo*> GgufFile::Lookup(std::string_view name) const {
  if (const TensorInfo* t = Find(name)) return t;
  auto it = ggml_index_.find(name);
  if (it == ggml_index_.end()) {
    return NotFound(path_ + ": tensor '" + std::string(name) + "' is missing",
                    "is this checkpoint for the architecture its config names?");
  }
  const GgufTensorInfo& g = ggml_tensors_[it->second];
  const std::optional<GgmlTypeTraits> traits = GetGgmlTypeTraits(g.ggml_type);
  return Unimplemented(fmt::format("{}: tensor '{}' has ggml type {} ({}), which is not supported "
                                   "yet",
                                   path_, g.name, traits ? traits->name : "unknown", g.ggml_type),
                       "supported: f32, f16, bf16, q8_0, q4_K, q6_K, i8, i32, i64; requantize the "
                       "model (llama-quantize ... Q4_K_M or q8_0) or convert it to one of these");
}

const GgufValue* GgufFile::GetMeta(std::string_view key) const {
  auto it = meta_index_.find(key);
  return it == meta_index_.end() ? nullptr : &metadata_[it->second].value;
}

Result<const GgufValue*> GgufFile::GetTyped(std::string_view key) const {
  const GgufValue* v = GetMeta(key);
  if (v == nullptr) {
    return NotFound(fmt::format("{}: metadata key '{}' is missing", path_, key),
                    "is this model of the architecture the loader expects?");
  }
  return v;
}

namespace {

constexpr const char* kDoesNotFitHint =
    "the value is out of range for what the model expects; the file is corrupt or not for this "
    "model";

Status WrongType(const std::string& path, std::string_view key, std::string_view want,
                 const GgufValue& v) {
  return InvalidArgument(
      fmt::format("{}: metadata key '{}' is {}, expected {}", path, key, v.TypeString(), want),
      "the file was written by a converter with different conventions");
}

// The scalar integer `v` as T, or an error naming the key.
template <typename T>
Result<T> IntAs(const std::string& path, std::string_view key, std::string_view want,
                const GgufValue& v) {
  if (!v.is_integer()) return WrongType(path, key, want, v);
  if (IsUnsignedType(v.type)) {
    if (v.u64 > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
      return InvalidArgument(
          fmt::format("{}: metadata key '{}' = {} does not fit in {}", path, key, v.u64, want),
          kDoesNotFitHint);
    }
    return static_cast<T>(v.u64);
  }
  if (v.i64 < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
      (v.i64 > 0 &&
       static_cast<uint64_t>(v.i64) > static_cast<uint64_t>(std::numeric_limits<T>::max()))) {
    return InvalidArgument(
        fmt::format("{}: metadata key '{}' = {} does not fit in {}", path, key, v.i64, want),
        kDoesNotFitHint);
  }
  return static_cast<T>(v.i64);
}

}  // namespace

Result<uint32_t> GgufFile::GetU32(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, GetTyped(key));
  return IntAs<uint32_t>(path_, key, "an unsigned 32-bit integer", *v);
}

Result<uint64_t> GgufFile::GetU64(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, GetTyped(key));
  return IntAs<uint64_t>(path_, key, "an unsigned 64-bit integer", *v);
}

Result<int32_t> GgufFile::GetI32(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, GetTyped(key));
  return IntAs<int32_t>(path_, key, "a signed 32-bit integer", *v);
}

Result<int64_t> GgufFile::GetI64(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, GetTyped(key));
  return IntAs<int64_t>(path_, key, "a signed 64-bit integer", *v);
}

Result<float> GgufFile::GetF32(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, GetTyped(key));
  if (v->type != GgufType::kFloat32 && v->type != GgufType::kFloat64) {
    return WrongType(path_, key, "float32", *v);
  }
  return static_cast<float>(v->f64);
}

Result<bool> GgufFile::GetBool(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, GetTyped(key));
  if (v->type != GgufType::kBool) return WrongType(path_, key, "bool", *v);
  return v->u64 != 0;
}

Result<std::string> GgufFile::GetString(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, GetTyped(key));
  if (v->type != GgufType::kString) return WrongType(path_, key, "string", *v);
  return v->str;
}

Result<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, GetTyped(key));
  if (!v->is_array() || v->elem_type != GgufType::kString) {
    return WrongType(path_, key, "array of string", *v);
  }
  return v->strs;
}

Result<std::vector<float>> GgufFile::GetF32Array(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, GetTyped(key));
  if (!v->is_array() ||
      (v->elem_type != GgufType::kFloat32 && v->elem_type != GgufType::kFloat64)) {
    return WrongType(path_, key, "array of float32", *v);
  }
  std::vector<float> out(static_cast<size_t>(v->count));
  for (size_t i = 0; i < out.size(); ++i) {
    if (v->elem_type == GgufType::kFloat32) {
      std::memcpy(&out[i], v->raw.data() + 4 * i, 4);
    } else {
      double d;
      std::memcpy(&d, v->raw.data() + 8 * i, 8);
      out[i] = static_cast<float>(d);
    }
  }
  return out;
}

Result<std::vector<int32_t>> GgufFile::GetI32Array(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, GetTyped(key));
  if (!v->is_array() || !IsIntegerType(v->elem_type)) {
    return WrongType(path_, key, "array of int32", *v);
  }
  const size_t elem = ScalarSize(v->elem_type);
  std::vector<int32_t> out(static_cast<size_t>(v->count));
  for (size_t i = 0; i < out.size(); ++i) {
    const IntValue x = DecodeInt(v->elem_type, v->raw.data() + elem * i);
    const uint64_t limit = x.negative ? uint64_t{1} << 31 : (uint64_t{1} << 31) - 1;
    if (x.magnitude_or_value > limit) {
      return InvalidArgument(
          fmt::format("{}: metadata key '{}': element {} = {}{} does not fit in "
                      "int32",
                      path_, key, i, x.negative ? "-" : "", x.magnitude_or_value),
          kDoesNotFitHint);
    }
    out[i] = x.negative ? static_cast<int32_t>(-static_cast<int64_t>(x.magnitude_or_value))
                        : static_cast<int32_t>(x.magnitude_or_value);
  }
  return out;
}

// ---- entry points ----

Result<std::unique_ptr<GgufFile>> ParseGguf(std::span<const uint8_t> bytes, const std::string& path,
                                            std::shared_ptr<const void> owner) {
  GgufParser parser(bytes, path);
  return parser.Parse(std::move(owner));
}

Result<std::unique_ptr<GgufFile>> OpenGguf(const std::string& path) {
  ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> mapped, MappedFile::Open(path));
  std::span<const uint8_t> bytes = mapped->bytes();
  return ParseGguf(bytes, path, std::move(mapped));
}

std::string GgufSplitPath(std::string_view prefix, int split_no, int split_count) {
  return fmt::format("{}-{:05d}-of-{:05d}.gguf", prefix, split_no + 1, split_count);
}

Result<std::vector<std::unique_ptr<GgufFile>>> OpenGgufSplit(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> given, OpenGguf(path));
  std::vector<std::unique_ptr<GgufFile>> parts;
  if (!given->HasMeta("split.count")) {
    parts.push_back(std::move(given));
    return parts;
  }
  ASSIGN_OR_RETURN(uint32_t count, given->GetU32("split.count"));
  ASSIGN_OR_RETURN(uint32_t no, given->GetU32("split.no"));
  if (count == 0 || no >= count) {
    return InvalidArgument(
        fmt::format("{}: split.no {} is not below split.count {}", path, no, count),
        "the file is not a valid gguf-split part");
  }
  if (count == 1) {
    parts.push_back(std::move(given));
    return parts;
  }
  const std::string suffix = GgufSplitPath("", static_cast<int>(no), static_cast<int>(count));
  if (path.size() <= suffix.size() || !path.ends_with(suffix)) {
    return InvalidArgument(fmt::format("{}: part {} of a {}-part gguf-split set, but not named "
                                       "<prefix>{}, so the other parts cannot be found",
                                       path, no + 1, count, suffix),
                           "keep the names gguf-split gave the parts");
  }
  const std::string prefix = path.substr(0, path.size() - suffix.size());
  parts.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    if (i == no) {
      parts[i] = std::move(given);
      continue;
    }
    const std::string part_path =
        GgufSplitPath(prefix, static_cast<int>(i), static_cast<int>(count));
    auto part = OpenGguf(part_path);
    if (!part.ok()) {
      return part.status().WithContext(
          fmt::format("part {} of the {}-part gguf-split set of {}", i + 1, count, path));
    }
    parts[i] = std::move(part).value();
  }
  int64_t total = 0;
  std::map<std::string, std::string, std::less<>> seen;  // tensor name -> part path
  for (uint32_t i = 0; i < count; ++i) {
    const GgufFile& p = *parts[i];
    ASSIGN_OR_RETURN(uint32_t p_no, p.GetU32("split.no"));
    ASSIGN_OR_RETURN(uint32_t p_count, p.GetU32("split.count"));
    if (p_no != i || p_count != count) {
      return InvalidArgument(
          fmt::format("{}: says split.no {} and split.count {}; as part {} of {}'s set it should "
                      "say split.no {} and split.count {}",
                      p.path(), p_no, p_count, i + 1, path, i, count),
          "the parts come from different gguf-split runs");
    }
    for (const GgufTensorInfo& t : p.ggml_tensors()) {
      auto [it, fresh] = seen.emplace(t.name, p.path());
      if (!fresh) {
        return InvalidArgument(
            fmt::format("{}: tensor '{}' is also in {}", p.path(), t.name, it->second),
            "the parts come from different gguf-split runs");
      }
    }
    total += static_cast<int64_t>(p.ggml_tensors().size());
  }
  for (uint32_t i = 0; i < count; ++i) {
    const GgufFile& p = *parts[i];
    ASSIGN_OR_RETURN(int64_t want, p.GetI64("split.tensors.count"));
    if (want != total) {
      return DataLoss(fmt::format("{}: split.tensors.count is {}, but the {} parts hold {} "
                                  "tensors",
                                  p.path(), want, count, total),
                      "a part is missing tensors or comes from another gguf-split run");
    }
  }
  return parts;
}

}  // namespace dsv4
