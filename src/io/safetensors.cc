// safetensors reader: header length and JSON checks (nlohmann::json, with
// every exception caught here), per-tensor dtype/shape/offset checks, the
// sharded-directory index, and the packed-FP4 view.
#include "io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"

namespace dsv4 {

static_assert(std::endian::native == std::endian::little, "safetensors is little-endian");

namespace {

using Json = nlohmann::json;

constexpr const char* kCorruptHint =
    "the file is corrupt or was not written by a safetensors writer";

struct StDType {
  std::string_view name;
  std::optional<DType> dtype;  // nullopt: known to the format, not supported here
  int bits;                    // bits per element
};

// safetensors dtype names (the Rust crate's `Dtype`) and how we read them.
constexpr StDType kStDTypes[] = {
    {"F32", DType::kF32, 32},        {"F16", DType::kF16, 16},     {"BF16", DType::kBF16, 16},
    {"F8_E4M3", DType::kFp8E4m3, 8}, {"F8_E8M0", DType::kE8m0, 8}, {"I8", DType::kI8, 8},
    {"U8", DType::kI8, 8},           {"I32", DType::kI32, 32},     {"I64", DType::kI64, 64},
    {"BOOL", std::nullopt, 8},       {"I16", std::nullopt, 16},    {"U16", std::nullopt, 16},
    {"U32", std::nullopt, 32},       {"U64", std::nullopt, 64},    {"F64", std::nullopt, 64},
    {"F8_E5M2", std::nullopt, 8},    {"C64", std::nullopt, 64},    {"F4", std::nullopt, 4},
    {"F6_E2M3", std::nullopt, 6},    {"F6_E3M2", std::nullopt, 6},
};

const StDType* FindStDType(std::string_view name) {
  for (const StDType& d : kStDTypes) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

// Parses JSON text, rejecting duplicate keys in any object. No exception escapes.
Result<Json> ParseJsonStrict(std::string_view text, const std::string& path, uint64_t base_offset,
                             std::string_view what) {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  auto callback = [&](int /*depth*/, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        open_objects.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!open_objects.empty() && parsed.is_string() && duplicate.empty()) {
          const std::string& k = parsed.get_ref<const std::string&>();
          if (!open_objects.back().insert(k).second) duplicate = k;
        }
        break;
      default:
        break;
    }
    return true;
  };
  try {
    Json j = Json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true);
    if (!duplicate.empty()) {
      return DataLoss(fmt::format("{}: {} has the key '{}' twice", path, what, duplicate),
                      kCorruptHint);
    }
    return j;
  } catch (const Json::parse_error& e) {
    return DataLoss(fmt::format("{}: {} is not valid JSON (error near file byte {}): {}", path,
                                what, base_offset + (e.byte > 0 ? e.byte - 1 : 0), e.what()),
                    kCorruptHint);
  } catch (const std::exception& e) {
    return DataLoss(fmt::format("{}: {} could not be parsed: {}", path, what, e.what()),
                    kCorruptHint);
  }
}

// A JSON non-negative integer that fits in int64.
bool AsCount(const Json& j, int64_t* out) {
  if (!j.is_number_unsigned()) return false;
  const uint64_t v = j.get<uint64_t>();
  if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

struct Entry {
  std::string name;
  std::string dtype_name;
  const StDType* dtype = nullptr;
  std::vector<int64_t> shape;
  int64_t begin = 0;  // data-section offsets
  int64_t end = 0;
};

}  // namespace

// Builds a SafetensorsFile from bytes; every check lives here.
class SafetensorsParser {
 public:
  SafetensorsParser(std::span<const uint8_t> bytes, const std::string& path)
      : bytes_(bytes), path_(path) {}

  Result<std::unique_ptr<SafetensorsFile>> Parse(std::shared_ptr<const void> owner) {
    if (bytes_.size() < 8) {
      return DataLoss(fmt::format("{}: file is {} bytes, shorter than the 8-byte safetensors "
                                  "header length",
                                  path_, bytes_.size()),
                      "the file is truncated or is not a safetensors file");
    }
    uint64_t n = 0;
    std::memcpy(&n, bytes_.data(), 8);
    const uint64_t room = bytes_.size() - 8;
    if (n > room) {
      return OutOfRange(fmt::format("{}: header length {} (u64 at byte 0) runs past the end of the "
                                    "file ({} bytes after the length)",
                                    path_, n, room),
                        "the file is truncated or is not a safetensors file");
    }
    if (n > kSafetensorsMaxHeaderBytes) {
      return OutOfRange(fmt::format("{}: header length {} is over the {}-byte limit", path_, n,
                                    kSafetensorsMaxHeaderBytes),
                        kCorruptHint);
    }
    if (n < 2) {
      return DataLoss(fmt::format("{}: header length {} is too short for a JSON object", path_, n),
                      kCorruptHint);
    }
    file_.reset(new SafetensorsFile());
    file_->path_ = path_;
    file_->owner_ = std::move(owner);
    file_->data_offset_ = 8 + n;
    data_size_ = static_cast<int64_t>(bytes_.size() - file_->data_offset_);
    const std::string_view text(reinterpret_cast<const char*>(bytes_.data()) + 8,
                                static_cast<size_t>(n));
    ASSIGN_OR_RETURN(Json header, ParseJsonStrict(text, path_, 8, "the header"));
    try {
      RETURN_IF_ERROR(ParseHeader(header));
    } catch (const std::exception& e) {  // not expected: every access is type-checked first
      return DataLoss(fmt::format("{}: the header could not be read: {}", path_, e.what()),
                      kCorruptHint);
    }
    RETURN_IF_ERROR(CheckLayout());
    return std::move(file_);
  }

 private:
  Status ParseHeader(const Json& header) {
    if (!header.is_object()) {
      return DataLoss(
          fmt::format("{}: the header is a JSON {}, expected an object", path_, header.type_name()),
          kCorruptHint);
    }
    entries_.reserve(header.size());
    for (auto it = header.begin(); it != header.end(); ++it) {
      const std::string& key = it.key();
      if (key == "__metadata__") {
        RETURN_IF_ERROR(ParseMetadata(it.value()));
        continue;
      }
      RETURN_IF_ERROR(ParseEntry(key, it.value()));
    }
    return Status::Ok();
  }

  Status ParseMetadata(const Json& meta) {
    if (!meta.is_object()) {
      return DataLoss(fmt::format("{}: __metadata__ is a JSON {}, expected an object of strings",
                                  path_, meta.type_name()),
                      kCorruptHint);
    }
    for (auto it = meta.begin(); it != meta.end(); ++it) {
      if (!it.value().is_string()) {
        return DataLoss(fmt::format("{}: __metadata__ key '{}' is a JSON {}, expected a string",
                                    path_, it.key(), it.value().type_name()),
                        kCorruptHint);
      }
      file_->metadata_.emplace(it.key(), it.value().get<std::string>());
    }
    return Status::Ok();
  }

  Status ParseEntry(const std::string& name, const Json& v) {
    const std::string where = fmt::format("{}: tensor '{}'", path_, name);
    if (name.empty())
      return DataLoss(path_ + ": the header has a tensor with an empty name", kCorruptHint);
    if (!v.is_object()) {
      return DataLoss(fmt::format("{} is a JSON {}, expected an object with dtype, shape and "
                                  "data_offsets",
                                  where, v.type_name()),
                      kCorruptHint);
    }
    Entry e;
    e.name = name;
    auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) {
      return DataLoss(where + ": 'dtype' is missing or not a string", kCorruptHint);
    }
    e.dtype_name = dt->get<std::string>();
    e.dtype = FindStDType(e.dtype_name);
    if (e.dtype == nullptr) {
      return Unimplemented(fmt::format("{} has unknown dtype '{}'", where, e.dtype_name),
                           "known: F32 F16 BF16 F8_E4M3 F8_E8M0 I8 U8 I32 I64 (and, not "
                           "bindable: BOOL I16 U16 U32 U64 F64 F8_E5M2 C64 F4 F6_*)");
    }
    auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) {
      return DataLoss(where + ": 'shape' is missing or not an array", kCorruptHint);
    }
    if (sh->size() > static_cast<size_t>(kSafetensorsMaxDims)) {
      return DataLoss(fmt::format("{} has {} dims, at most {} are allowed", where, sh->size(),
                                  kSafetensorsMaxDims),
                      kCorruptHint);
    }
    int64_t numel = 1;
    int64_t nonzero = 1;  // views multiply dims in any order: this must not overflow either
    for (size_t d = 0; d < sh->size(); ++d) {
      int64_t dim = 0;
      if (!AsCount((*sh)[d], &dim)) {
        return DataLoss(fmt::format("{}: shape entry {} is {}, expected a non-negative integer",
                                    where, d, (*sh)[d].dump()),
                        kCorruptHint);
      }
      e.shape.push_back(dim);
      if (__builtin_mul_overflow(numel, dim, &numel) ||
          (dim != 0 && __builtin_mul_overflow(nonzero, dim, &nonzero))) {
        return OutOfRange(
            fmt::format("{}: shape {} has more than 2^63 elements", where, (*sh).dump()),
            kCorruptHint);
      }
    }
    int64_t bits = 0;
    if (__builtin_mul_overflow(numel, static_cast<int64_t>(e.dtype->bits), &bits)) {
      return OutOfRange(fmt::format("{}: shape {} {} is larger than 2^63 bits", where,
                                    ShapeToString(e.shape), e.dtype_name),
                        kCorruptHint);
    }
    if (bits % 8 != 0) {
      return DataLoss(fmt::format("{}: shape {} of {} does not fill whole bytes", where,
                                  ShapeToString(e.shape), e.dtype_name),
                      kCorruptHint);
    }
    const int64_t nbytes = bits / 8;
    auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2 || !AsCount((*off)[0], &e.begin) ||
        !AsCount((*off)[1], &e.end)) {
      return DataLoss(where + ": 'data_offsets' must be [begin, end], two non-negative integers",
                      kCorruptHint);
    }
    if (e.begin > e.end || e.end > data_size_) {
      return OutOfRange(fmt::format("{}: data_offsets [{}, {}] are outside the data section ({} "
                                    "bytes from file byte {})",
                                    where, e.begin, e.end, data_size_, file_->data_offset_),
                        "the file is truncated or corrupt");
    }
    if (e.end - e.begin != nbytes) {
      return DataLoss(
          fmt::format("{}: data_offsets [{}, {}] hold {} bytes but shape {} of {} needs "
                      "{}",
                      where, e.begin, e.end, e.end - e.begin, ShapeToString(e.shape), e.dtype_name,
                      nbytes),
          "the shape or dtype does not match the data; the file is corrupt");
    }
    const int elem_bytes = e.dtype->bits / 8;
    if (e.dtype->dtype && elem_bytes > 1 &&
        (file_->data_offset_ + static_cast<uint64_t>(e.begin)) % elem_bytes != 0) {
      return DataLoss(fmt::format("{}: data at file byte {} is not aligned to its {}-byte {} "
                                  "elements",
                                  where, file_->data_offset_ + e.begin, elem_bytes, e.dtype_name),
                      "re-save with the safetensors library, which pads the header to 8 bytes");
    }
    entries_.push_back(std::move(e));
    return Status::Ok();
  }

  Status CheckLayout() {
    std::sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    const Entry* prev = nullptr;
    for (const Entry& e : entries_) {
      if (e.begin == e.end) continue;
      if (prev != nullptr && e.begin < prev->end) {
        return DataLoss(
            fmt::format("{}: tensors '{}' (data bytes [{}, {})) and '{}' ([{}, {})) "
                        "overlap",
                        path_, prev->name, prev->begin, prev->end, e.name, e.begin, e.end),
            kCorruptHint);
      }
      prev = &e;
    }
    const uint8_t* data = bytes_.data() + file_->data_offset_;
    for (Entry& e : entries_) {
      if (!e.dtype->dtype) {
        file_->unsupported_.emplace(e.name, fmt::format("dtype {} is not supported (shape {})",
                                                        e.dtype_name, ShapeToString(e.shape)));
        continue;
      }
      if (e.shape.size() > static_cast<size_t>(kMaxRank)) {
        file_->unsupported_.emplace(
            e.name, fmt::format("rank {} (shape {}) is above the {} dims a view supports",
                                e.shape.size(), ShapeToString(e.shape), kMaxRank));
        continue;
      }
      TensorInfo t;
      t.name = e.name;
      t.dtype = *e.dtype->dtype;
      t.shape = std::move(e.shape);
      t.data = data + e.begin;
      t.nbytes = e.end - e.begin;
      file_->index_.emplace(t.name, file_->tensors_.size());
      file_->tensors_.push_back(std::move(t));
      file_->stored_dtypes_.push_back(e.dtype_name);
    }
    return Status::Ok();
  }

  std::span<const uint8_t> bytes_;
  const std::string& path_;
  std::unique_ptr<SafetensorsFile> file_;
  int64_t data_size_ = 0;
  std::vector<Entry> entries_;
};

// ---- SafetensorsFile ----

const TensorInfo* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Result<const TensorInfo*> SafetensorsFile::Lookup(std::string_view name) const {
  if (const TensorInfo* t = Find(name)) return t;
  auto it = unsupported_.find(name);
  if (it != unsupported_.end()) {
    return Unimplemented(
        fmt::format("{}: tensor '{}' cannot be bound: {}", path_, name, it->second),
        "convert the checkpoint to a supported dtype (F32 F16 BF16 F8_E4M3 "
        "F8_E8M0 I8 U8 I32 I64) and rank <= 4");
  }
  return NotFound(path_ + ": tensor '" + std::string(name) + "' is missing",
                  "is this checkpoint for the architecture its config names?");
}

std::string_view SafetensorsFile::StoredDType(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? std::string_view() : std::string_view(stored_dtypes_[it->second]);
}

Result<std::unique_ptr<SafetensorsFile>> ParseSafetensors(std::span<const uint8_t> bytes,
                                                          const std::string& path,
                                                          std::shared_ptr<const void> owner) {
  SafetensorsParser parser(bytes, path);
  return parser.Parse(std::move(owner));
}

Result<std::unique_ptr<SafetensorsFile>> OpenSafetensors(const std::string& path) {
  ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> mapped, MappedFile::Open(path));
  std::span<const uint8_t> bytes = mapped->bytes();
  return ParseSafetensors(bytes, path, std::move(mapped));
}

// ---- the sharded index ----

namespace {

// A shard name must stay inside the checkpoint directory.
bool IsSafeShardName(std::string_view s) {
  if (s.empty() || s.front() == '/' || s.find('\0') != std::string_view::npos ||
      s.find('\\') != std::string_view::npos) {
    return false;
  }
  size_t start = 0;
  while (start <= s.size()) {
    size_t slash = s.find('/', start);
    if (slash == std::string_view::npos) slash = s.size();
    const std::string_view part = s.substr(start, slash - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = slash + 1;
  }
  return true;
}

Status ParseIndexJson(const Json& j, const std::string& path, SafetensorsIndex* out) {
  if (!j.is_object()) {
    return DataLoss(
        fmt::format("{}: the index is a JSON {}, expected an object", path, j.type_name()),
        "the index file is corrupt");
  }
  auto meta = j.find("metadata");
  if (meta != j.end() && !meta->is_null()) {
    if (!meta->is_object()) {
      return DataLoss(
          fmt::format("{}: 'metadata' is a JSON {}, expected an object", path, meta->type_name()),
          "the index file is corrupt");
    }
    for (auto it = meta->begin(); it != meta->end(); ++it) {
      out->metadata.emplace(
          it.key(), it.value().is_string() ? it.value().get<std::string>() : it.value().dump());
    }
  }
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object()) {
    return DataLoss(path + ": 'weight_map' is missing or not an object",
                    "an index maps every tensor name to its shard file: {\"weight_map\": "
                    "{\"name\": \"model-00001-of-00002.safetensors\"}}");
  }
  out->weight_map.reserve(wm->size());
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it.value().is_string()) {
      return DataLoss(fmt::format("{}: weight_map['{}'] is a JSON {}, expected a shard file name",
                                  path, it.key(), it.value().type_name()),
                      "the index file is corrupt");
    }
    std::string shard = it.value().get<std::string>();
    if (!IsSafeShardName(shard)) {
      return InvalidArgument(fmt::format("{}: weight_map['{}'] names shard '{}', which is not a "
                                         "relative path inside the checkpoint directory",
                                         path, it.key(), shard),
                             "shard names must not be absolute or contain '..'");
    }
    out->weight_map.emplace_back(it.key(), std::move(shard));
  }
  return Status::Ok();
}

}  // namespace

Result<SafetensorsIndex> ParseSafetensorsIndex(std::string_view json, const std::string& path) {
  ASSIGN_OR_RETURN(Json j, ParseJsonStrict(json, path, 0, "the index"));
  SafetensorsIndex index;
  try {
    RETURN_IF_ERROR(ParseIndexJson(j, path, &index));
  } catch (const std::exception& e) {  // not expected: every access is type-checked first
    return DataLoss(fmt::format("{}: the index could not be read: {}", path, e.what()),
                    "the index file is corrupt");
  }
  return index;
}

const TensorInfo* ShardedSafetensors::Find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

Result<const TensorInfo*> ShardedSafetensors::Lookup(std::string_view name) const {
  if (const TensorInfo* t = Find(name)) return t;
  auto it = shard_of_.find(name);
  if (it != shard_of_.end()) return shards_[it->second]->Lookup(name);
  return NotFound(path_ + ": tensor '" + std::string(name) + "' is not in the index",
                  "is this checkpoint for the architecture its config names?");
}

Result<std::unique_ptr<CheckpointReader>> OpenCheckpointDir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(dir, ec)) {
    ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, OpenSafetensors(dir));
    return std::unique_ptr<CheckpointReader>(std::move(file));
  }
  if (!fs::is_directory(dir, ec)) {
    return NotFound(dir + ": no such checkpoint directory",
                    "pass a directory holding model.safetensors or model.safetensors.index.json");
  }
  const std::string index_path = (fs::path(dir) / kSafetensorsIndexName).string();
  if (!fs::exists(index_path, ec)) {
    const std::string single = (fs::path(dir) / kSafetensorsSingleName).string();
    if (fs::exists(single, ec)) {
      ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, OpenSafetensors(single));
      return std::unique_ptr<CheckpointReader>(std::move(file));
    }
    return NotFound(dir + ": neither model.safetensors.index.json nor model.safetensors is here",
                    "pass the directory a Hugging Face checkpoint was downloaded to");
  }
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(index_path));
  ASSIGN_OR_RETURN(SafetensorsIndex index, ParseSafetensorsIndex(text, index_path));

  std::unique_ptr<ShardedSafetensors> out(new ShardedSafetensors());
  out->path_ = index_path;
  // Each shard is mapped once, in name order.
  std::map<std::string, size_t> shard_ids;
  std::map<std::string, std::string> example_tensor;  // shard -> a tensor it should hold
  for (const auto& [name, shard] : index.weight_map) {
    shard_ids.emplace(shard, 0);
    example_tensor.emplace(shard, name);
  }
  for (auto& [shard, id] : shard_ids) {
    const std::string shard_path = (fs::path(dir) / shard).string();
    if (!fs::exists(shard_path, ec)) {
      return NotFound(fmt::format("{}: shard '{}' (which should hold '{}', among others) is "
                                  "missing: {}",
                                  index_path, shard, example_tensor[shard], shard_path),
                      "the download is incomplete; fetch every file the index names");
    }
    ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, OpenSafetensors(shard_path));
    id = out->shards_.size();
    out->shards_.push_back(std::move(file));
  }
  std::map<std::string, size_t, std::less<>> wanted;  // name -> shard id
  for (const auto& [name, shard] : index.weight_map) {
    const size_t id = shard_ids.at(shard);
    const SafetensorsFile& file = *out->shards_[id];
    if (file.Find(name) == nullptr && file.unsupported().count(name) == 0) {
      return NotFound(fmt::format("{}: tensor '{}' is mapped to shard '{}', but that shard does "
                                  "not contain it",
                                  index_path, name, shard),
                      "the index and the shards do not match; download them again");
    }
    wanted.emplace(name, id);
  }
  for (size_t id = 0; id < out->shards_.size(); ++id) {
    for (const TensorInfo& t : out->shards_[id]->tensors()) {
      auto it = wanted.find(t.name);
      if (it == wanted.end() || it->second != id) continue;  // not indexed, or indexed elsewhere
      out->by_name_.emplace(t.name, out->tensors_.size());
      out->tensors_.push_back(t);
    }
  }
  out->shard_of_ = std::move(wanted);
  out->index_ = std::move(index);
  return std::unique_ptr<CheckpointReader>(std::move(out));
}

// ---- packed FP4 ----

Result<TensorView> GetPackedFp4(const CheckpointReader& reader, std::string_view name,
                                std::initializer_list<int64_t> shape) {
  const std::vector<int64_t> want(shape);
  CHECK(!want.empty() && want.size() <= static_cast<size_t>(kMaxRank) && want.back() % 2 == 0,
        "GetPackedFp4: logical shape must have 1..4 dims and an even last dim");
  ASSIGN_OR_RETURN(const TensorInfo* t, reader.Lookup(name));
  std::vector<int64_t> stored = want;
  if (t->dtype == DType::kFp4E2m1) {
    // Already typed as fp4 (element shape).
  } else if (t->dtype == DType::kI8) {
    stored.back() /= 2;
  } else {
    return InvalidArgument(fmt::format("{}: tensor '{}' is {}, expected I8/U8 bytes of packed FP4 "
                                       "e2m1",
                                       reader.path(), t->name, DTypeName(t->dtype)),
                           "this checkpoint stores the weight unquantized or in another format");
  }
  if (t->shape != stored) {
    return InvalidArgument(
        fmt::format("{}: tensor '{}' has shape {} {}, expected {} for packed FP4 "
                    "of logical shape {}",
                    reader.path(), t->name, ShapeToString(t->shape), DTypeName(t->dtype),
                    ShapeToString(stored), ShapeToString(want)),
        "the weights do not match the model config");
  }
  return TensorView::Contiguous(t->data, DType::kFp4E2m1, std::span<const int64_t>(want));
}

}  // namespace dsv4
