// Reader for GGUF v3 (and v2) files, the llama.cpp/ggml container: a header,
// typed key/value metadata, tensor infos, then aligned tensor data. Metadata is
// read through typed accessors whose errors name the key and both types.
// Tensor dims are stored innermost-first (ggml `ne`) and are exposed
// outermost-first. F32, F16, BF16, Q8_0, Q4_K, Q6_K, I8, I32 and I64 tensors map to a
// DType; tensors of other ggml types (q4_0, q5_K, ...) are listed with their
// ggml type id and give Unimplemented when bound. See docs/formats.md.
#ifndef DSV4_IO_GGUF_H_
#define DSV4_IO_GGUF_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "io/checkpoint.h"

namespace dsv4 {

// Metadata value types, numbered as in the file.
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
// "uint32", "array", ...; "type 99" for an unknown value.
std::string GgufTypeName(GgufType type);

// One metadata value. Which fields are meaningful depends on `type`.
struct GgufValue {
  GgufType type = GgufType::kUint8;
  uint64_t u64 = 0;  // kUint8/16/32/64 and kBool (0 or 1)
  int64_t i64 = 0;   // kInt8/16/32/64
  double f64 = 0;    // kFloat32/64
  std::string str;   // kString (valid UTF-8)

  // kArray only.
  GgufType elem_type = GgufType::kUint8;  // never kArray (nested arrays are rejected)
  uint64_t count = 0;                     // number of elements
  std::vector<std::string> strs;          // the elements, when elem_type == kString
  std::span<const uint8_t> raw;           // the elements, little-endian, for numeric arrays

  bool is_integer() const;  // a scalar integer type (not bool)
  bool is_array() const { return type == GgufType::kArray; }
  // "uint32", "array of string", ...
  std::string TypeString() const;
};

struct GgufKeyValue {
  std::string key;
  GgufValue value;
};

// ggml tensor type ids (ggml.h `enum ggml_type`).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
  kNVFP4 = 40,
};

// Block layout of a ggml type: elements per block, bytes per block.
struct GgmlTypeTraits {
  std::string_view name;  // "f32", "q4_K", ...
  int64_t block_elems = 0;
  int64_t block_bytes = 0;
};
// nullopt for an id this reader does not know (the file is then rejected,
// since its tensor sizes cannot be checked).
std::optional<GgmlTypeTraits> GetGgmlTypeTraits(uint32_t ggml_type);
// The DType a ggml type is read as; nullopt when unsupported.
std::optional<DType> DTypeFromGgml(uint32_t ggml_type);

struct GgufTensorInfo {
  std::string name;
  uint32_t ggml_type = 0;      // see GgmlType
  std::vector<int64_t> shape;  // outermost first (the file's ne[] reversed)
  uint64_t offset = 0;         // from the start of the data section
  int64_t nbytes = 0;
  std::optional<DType> dtype;  // nullopt: a ggml type we cannot bind yet
  const void* data = nullptr;  // its bytes in the mapped file (any type)
};

inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr int kGgufMaxDims = 4;

class GgufFile final : public CheckpointReader {
 public:
  // CheckpointReader: only tensors whose ggml type maps to a DType.
  const std::string& path() const override { return path_; }
  const TensorInfo* Find(std::string_view name) const override;
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }

  // Like Find, but says why a tensor cannot be bound: NotFound when absent,
  // Unimplemented (naming the ggml type) when its type is not supported.
  Result<const TensorInfo*> Lookup(std::string_view name) const override;

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // absolute byte offset

  // Every tensor in the file, in file order, including unsupported types.
  const std::vector<GgufTensorInfo>& ggml_tensors() const { return ggml_tensors_; }

  // Metadata, in file order.
  const std::vector<GgufKeyValue>& metadata() const { return metadata_; }
  // nullptr when absent.
  const GgufValue* GetMeta(std::string_view key) const;
  bool HasMeta(std::string_view key) const { return GetMeta(key) != nullptr; }

  // Typed accessors. Integer getters accept any integer type whose value fits;
  // GetF32 accepts float32 and float64. Errors: NotFound when the key is
  // absent, InvalidArgument naming the key, the expected and the found type
  // (or the value that does not fit).
  Result<uint32_t> GetU32(std::string_view key) const;
  Result<uint64_t> GetU64(std::string_view key) const;
  Result<int32_t> GetI32(std::string_view key) const;
  Result<int64_t> GetI64(std::string_view key) const;
  Result<float> GetF32(std::string_view key) const;
  Result<bool> GetBool(std::string_view key) const;
  Result<std::string> GetString(std::string_view key) const;
  Result<std::vector<std::string>> GetStringArray(std::string_view key) const;
  // Arrays of float32 (or float64, narrowed).
  Result<std::vector<float>> GetF32Array(std::string_view key) const;
  // Arrays of any integer type whose every element fits in int32.
  Result<std::vector<int32_t>> GetI32Array(std::string_view key) const;

 private:
  friend class GgufParser;
  GgufFile() = default;
  Result<const GgufValue*> GetTyped(std::string_view key) const;

  std::string path_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<GgufKeyValue> metadata_;
  std::map<std::string, size_t, std::less<>> meta_index_;
  std::vector<GgufTensorInfo> ggml_tensors_;
  std::map<std::string, size_t, std::less<>> ggml_index_;  // name -> ggml_tensors_
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> tensors_
  std::shared_ptr<const void> owner_;                 // keeps the bytes alive
};

// Parses a whole GGUF file held in memory. Tensors and numeric metadata arrays
// point into `bytes`, which must outlive the result; `owner` (may be null) is
// kept alive by it. `path` names the source in error messages.
Result<std::unique_ptr<GgufFile>> ParseGguf(std::span<const uint8_t> bytes, const std::string& path,
                                            std::shared_ptr<const void> owner = nullptr);

// Maps `path` and parses it.
Result<std::unique_ptr<GgufFile>> OpenGguf(const std::string& path);

// llama.cpp's split-file naming (llama_split_path): "<prefix>-00002-of-00004.gguf"
// for split_no 1 (0-based) of 4.
std::string GgufSplitPath(std::string_view prefix, int split_no, int split_count);

// Opens `path` and, when it is one part of a llama.cpp `gguf-split` set
// (`split.count` > 1), every part of the set, in order: part i is named
// GgufSplitPath(prefix, i, N) with the prefix taken from `path`'s own name, so
// any part may be given. Each part must say `split.no` i and `split.count` N,
// and every part's `split.tensors.count` must equal the tensors of all parts
// together (no name twice). A file without `split.count` is returned alone.
// Errors name the missing or disagreeing file. The first part holds the
// model's metadata.
Result<std::vector<std::unique_ptr<GgufFile>>> OpenGgufSplit(const std::string& path);

// True when `s` is well-formed UTF-8 (no overlongs, surrogates or code points
// past U+10FFFF).
bool IsValidUtf8(std::string_view s);

}  // namespace dsv4

#endif  // DSV4_IO_GGUF_H_
