// llama2.c "v0" .bin reader: header checks, the section walk, and the
// per-layer tensor table under GGUF llama names.
#include "io/llama2c.h"

#include <bit>
#include <cstring>

#include <fmt/format.h>

#include "base/mapped_file.h"

namespace dsv4 {
namespace {

static_assert(std::endian::native == std::endian::little, "llama2.c files are little-endian");

// The int32 llama2.c's newer export.py writes first (versions 1 and 2).
constexpr uint32_t kLlama2cV1Magic = 0x616b3432;  // "ak42"

constexpr const char* kFieldNames[7] = {"dim",        "hidden_dim", "n_layers", "n_heads",
                                        "n_kv_heads", "vocab_size", "seq_len"};

// a * b, or false on int64 overflow.
bool MulOk(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

// Walks the fp32 sections of the file, adding tensors as it goes.
class SectionWalker {
 public:
  SectionWalker(const uint8_t* base, std::vector<TensorInfo>* out)
      : base_(base), out_(out), offset_(kLlama2cHeaderBytes) {}

  // A section of `count` fp32 values; false on overflow.
  bool Skip(int64_t count) {
    int64_t bytes;
    if (!MulOk(count, 4, &bytes)) return false;
    return !__builtin_add_overflow(offset_, bytes, &offset_);
  }

  // L stacked tensors of shape `shape`, named by `name_fmt` with the layer number.
  bool AddLayers(int32_t n_layers, const char* name_fmt, std::vector<int64_t> shape) {
    int64_t per_layer = 1;
    for (int64_t d : shape) {
      if (!MulOk(per_layer, d, &per_layer)) return false;
    }
    const int64_t start = offset_;
    int64_t total;
    if (!MulOk(per_layer, n_layers, &total) || !Skip(total)) return false;
    if (base_ != nullptr) {  // only after the size check has passed
      for (int32_t l = 0; l < n_layers; ++l) {
        TensorInfo t;
        t.name = fmt::format(fmt::runtime(name_fmt), l);
        t.dtype = DType::kF32;
        t.shape = shape;
        t.nbytes = per_layer * 4;
        t.data = base_ + start + l * t.nbytes;
        out_->push_back(std::move(t));
      }
    }
    return true;
  }

  bool AddOne(const char* name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) {
      if (!MulOk(n, d, &n)) return false;
    }
    const int64_t start = offset_;
    if (!Skip(n)) return false;
    if (base_ != nullptr) {
      TensorInfo t;
      t.name = name;
      t.dtype = DType::kF32;
      t.shape = std::move(shape);
      t.nbytes = n * 4;
      t.data = base_ + start;
      out_->push_back(std::move(t));
    }
    return true;
  }

  int64_t offset() const { return offset_; }

 private:
  const uint8_t* base_;  // null: only measure
  std::vector<TensorInfo>* out_;
  int64_t offset_;
};

// Walks every section; with base == nullptr it only computes the total size.
// Returns false when a size overflows int64.
bool WalkSections(const Llama2cConfig& c, const uint8_t* base, std::vector<TensorInfo>* out,
                  int64_t* total_bytes) {
  const int64_t D = c.dim, H = c.hidden_dim, V = c.vocab_size, KV = c.kv_dim();
  const int32_t L = c.n_layers;
  SectionWalker w(base, out);
  bool ok = w.AddOne("token_embd.weight", {V, D}) &&                // [V, D]
            w.AddLayers(L, "blk.{}.attn_norm.weight", {D}) &&       // rms_att [L, D]
            w.AddLayers(L, "blk.{}.attn_q.weight", {D, D}) &&       // wq [L, D, D]
            w.AddLayers(L, "blk.{}.attn_k.weight", {KV, D}) &&      // wk [L, KV*hd, D]
            w.AddLayers(L, "blk.{}.attn_v.weight", {KV, D}) &&      // wv [L, KV*hd, D]
            w.AddLayers(L, "blk.{}.attn_output.weight", {D, D}) &&  // wo [L, D, D]
            w.AddLayers(L, "blk.{}.ffn_norm.weight", {D}) &&        // rms_ffn [L, D]
            w.AddLayers(L, "blk.{}.ffn_gate.weight", {H, D}) &&     // w1 [L, H, D]
            w.AddLayers(L, "blk.{}.ffn_down.weight", {D, H}) &&     // w2 [L, D, H]
            w.AddLayers(L, "blk.{}.ffn_up.weight", {H, D}) &&       // w3 [L, H, D]
            w.AddOne("output_norm.weight", {D});                    // rms_final [D]
  // freq_cis_real and freq_cis_imag, [S, hd/2] each: unused. run.c skips
  // seq_len * head_size / 2 floats twice; do exactly the same.
  int64_t freq = 0;
  ok = ok && MulOk(static_cast<int64_t>(c.seq_len), c.head_dim(), &freq);
  ok = ok && w.Skip(freq / 2) && w.Skip(freq / 2);
  if (ok && !c.shared_classifier) ok = w.AddOne("output.weight", {V, D});  // wcls [V, D]
  *total_bytes = w.offset();
  return ok;
}

std::string DescribeConfig(const Llama2cConfig& c) {
  return fmt::format(
      "dim {}, hidden_dim {}, n_layers {}, n_heads {}, n_kv_heads {}, vocab {} ({}), "
      "seq_len {}",
      c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size,
      c.shared_classifier ? "shared classifier" : "separate classifier", c.seq_len);
}

}  // namespace

Result<Llama2cConfig> ParseLlama2cHeader(std::span<const uint8_t> bytes, const std::string& path) {
  if (bytes.size() < kLlama2cHeaderBytes) {
    return DataLoss(fmt::format("{}: file is {} bytes, shorter than the {}-byte llama2.c header",
                                path, bytes.size(), kLlama2cHeaderBytes),
                    "the file is truncated or is not a llama2.c checkpoint");
  }
  int32_t h[7];
  std::memcpy(h, bytes.data(), sizeof(h));
  if (std::memcmp(bytes.data(), "GGUF", 4) == 0) {
    return InvalidArgument(path + ": this is a GGUF file, not a llama2.c .bin",
                           "open it with the GGUF reader (a .gguf extension selects it)");
  }
  if (static_cast<uint32_t>(h[0]) == kLlama2cV1Magic) {
    return Unimplemented(
        path + ": llama2.c export version 1/2 (magic \"ak42\" at byte 0) is not supported",
        "re-export with llama2.c's export.py --version 0 (the legacy format)");
  }
  for (int i = 0; i < 7; ++i) {
    const int64_t v = h[i];
    const int64_t magnitude = i == 5 ? (v < 0 ? -v : v) : v;  // vocab_size may be negative
    if (magnitude < 1 || magnitude > kLlama2cMaxDim) {
      return DataLoss(
          fmt::format("{}: header field {} = {} (byte {}) is out of range: must be "
                      "{}1..{}",
                      path, kFieldNames[i], v, i * 4, i == 5 ? "±" : "", kLlama2cMaxDim),
          "the file is corrupt or is not a llama2.c v0 checkpoint");
    }
  }
  Llama2cConfig c;
  c.dim = h[0];
  c.hidden_dim = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  c.shared_classifier = h[5] > 0;
  c.vocab_size = h[5] > 0 ? h[5] : -h[5];
  c.seq_len = h[6];
  if (c.dim % c.n_heads != 0) {
    return DataLoss(
        fmt::format("{}: header dim {} is not a multiple of n_heads {}", path, c.dim, c.n_heads),
        "the header is corrupt");
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    return DataLoss(fmt::format("{}: header n_heads {} is not a multiple of n_kv_heads {}", path,
                                c.n_heads, c.n_kv_heads),
                    "the header is corrupt");
  }
  return c;
}

const TensorInfo* Llama2cFile::Find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

Result<std::unique_ptr<Llama2cFile>> ParseLlama2c(std::span<const uint8_t> bytes,
                                                  const std::string& path,
                                                  std::shared_ptr<const void> owner) {
  ASSIGN_OR_RETURN(Llama2cConfig config, ParseLlama2cHeader(bytes, path));
  int64_t expected = 0;
  if (!WalkSections(config, nullptr, nullptr, &expected)) {
    return OutOfRange(fmt::format("{}: the header ({}) implies a file larger than 2^63 bytes", path,
                                  DescribeConfig(config)),
                      "the header is corrupt");
  }
  const int64_t actual = static_cast<int64_t>(bytes.size());
  if (actual != expected) {
    const bool short_file = actual < expected;
    return DataLoss(
        fmt::format("{}: the header ({}) implies {} bytes but the file has {} bytes ({} {})", path,
                    DescribeConfig(config), expected, actual,
                    short_file ? expected - actual : actual - expected,
                    short_file ? "bytes missing" : "unexpected trailing bytes"),
        short_file ? "the file is truncated; download or export it again"
                   : "is the header right? a negative vocab_size means a separate classifier "
                     "follows the RoPE tables");
  }
  std::unique_ptr<Llama2cFile> file(new Llama2cFile());
  file->path_ = path;
  file->config_ = config;
  file->owner_ = std::move(owner);
  int64_t total = 0;
  CHECK(WalkSections(config, bytes.data(), &file->tensors_, &total) && total == expected);
  for (size_t i = 0; i < file->tensors_.size(); ++i) {
    file->by_name_.emplace(file->tensors_[i].name, i);
  }
  return file;
}

Result<std::unique_ptr<Llama2cFile>> OpenLlama2c(const std::string& path) {
  ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> mapped, MappedFile::Open(path));
  std::span<const uint8_t> bytes = mapped->bytes();
  return ParseLlama2c(bytes, path, std::move(mapped));
}

}  // namespace dsv4
