// Readers for safetensors checkpoints: one file (u64 little-endian header
// length N, N bytes of JSON naming each tensor's dtype, shape and data
// offsets, then the data), or a Hugging Face directory of shards described by
// model.safetensors.index.json. DeepSeek-V4's FP4 routed-expert weights are
// stored as I8 bytes [O, I/2] (two e2m1 values per byte, element 2j in the low
// nibble); GetPackedFp4 views them as fp4_e2m1 [O, I]. See docs/formats.md.
#ifndef DSV4_IO_SAFETENSORS_H_
#define DSV4_IO_SAFETENSORS_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "io/checkpoint.h"

namespace dsv4 {

// Headers longer than this are rejected (the safetensors library's own limit).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;
// Shapes may have up to this many dims; more than kMaxRank (4) cannot be bound.
inline constexpr int kSafetensorsMaxDims = 8;

class SafetensorsFile final : public CheckpointReader {
 public:
  // CheckpointReader: the bindable tensors (supported dtype, rank <= 4) in data order.
  const std::string& path() const override { return path_; }
  const TensorInfo* Find(std::string_view name) const override;
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }

  // Like Find, but says why a tensor cannot be bound: NotFound when absent,
  // Unimplemented (naming the dtype or rank) when the file has it but it
  // cannot be bound.
  Result<const TensorInfo*> Lookup(std::string_view name) const override;

  // The dtype string the header gives for `name` ("U8", "BF16", ...); empty
  // when absent. (U8 tensors are read as DType::kI8 bytes.)
  std::string_view StoredDType(std::string_view name) const;
  // Tensors in the header that cannot be bound, name -> reason.
  const std::map<std::string, std::string, std::less<>>& unsupported() const {
    return unsupported_;
  }
  // The header's "__metadata__" (string -> string); empty when absent.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t data_offset() const { return data_offset_; }  // 8 + N

 private:
  friend class SafetensorsParser;
  SafetensorsFile() = default;

  std::string path_;
  uint64_t data_offset_ = 0;
  std::vector<TensorInfo> tensors_;
  std::vector<std::string> stored_dtypes_;  // parallel to tensors_
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string, std::less<>> unsupported_;
  std::map<std::string, std::string> metadata_;
  std::shared_ptr<const void> owner_;  // keeps the bytes alive
};

// Parses a whole .safetensors file held in memory. Tensors point into `bytes`,
// which must outlive the result; `owner` (may be null) is kept alive by it.
// `path` names the source in error messages.
Result<std::unique_ptr<SafetensorsFile>> ParseSafetensors(
    std::span<const uint8_t> bytes, const std::string& path,
    std::shared_ptr<const void> owner = nullptr);

// Maps `path` and parses it.
Result<std::unique_ptr<SafetensorsFile>> OpenSafetensors(const std::string& path);

// model.safetensors.index.json, parsed.
struct SafetensorsIndex {
  std::vector<std::pair<std::string, std::string>> weight_map;  // tensor name -> shard file name
  std::map<std::string, std::string> metadata;  // "metadata" entries (non-strings as JSON text)
};
// Parses an index's JSON text; `path` names it in error messages. Shard names
// must be plain relative paths (no "..", not absolute).
Result<SafetensorsIndex> ParseSafetensorsIndex(std::string_view json, const std::string& path);

// A checkpoint split over several safetensors shards.
class ShardedSafetensors final : public CheckpointReader {
 public:
  const std::string& path() const override { return path_; }  // the index file
  const TensorInfo* Find(std::string_view name) const override;
  // Shards in name order, each shard's tensors in data order.
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }
  Result<const TensorInfo*> Lookup(std::string_view name) const override;

  const SafetensorsIndex& index() const { return index_; }
  const std::vector<std::unique_ptr<SafetensorsFile>>& shards() const { return shards_; }

 private:
  friend Result<std::unique_ptr<CheckpointReader>> OpenCheckpointDir(const std::string& dir);
  ShardedSafetensors() = default;

  std::string path_;
  SafetensorsIndex index_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;   // name -> tensors_
  std::map<std::string, size_t, std::less<>> shard_of_;  // name -> shards_, every indexed name
};

inline constexpr std::string_view kSafetensorsIndexName = "model.safetensors.index.json";
inline constexpr std::string_view kSafetensorsSingleName = "model.safetensors";

// Opens a checkpoint directory: `dir`/model.safetensors.index.json (each shard
// it names is mapped once; every indexed tensor must be in its shard), else
// `dir`/model.safetensors. A path to a .safetensors file opens that file.
Result<std::unique_ptr<CheckpointReader>> OpenCheckpointDir(const std::string& dir);

// FP4 e2m1 weights packed two per byte and stored as I8 or U8 bytes of shape
// [..., n/2] (DeepSeek-V4 routed experts). Returns the fp4_e2m1 view with the
// logical `shape` [..., n]; the stored shape must be `shape` with the last dim
// halved. Errors name the file, the tensor and both shapes.
Result<TensorView> GetPackedFp4(const CheckpointReader& reader, std::string_view name,
                                std::initializer_list<int64_t> shape);

}  // namespace dsv4

#endif  // DSV4_IO_SAFETENSORS_H_
