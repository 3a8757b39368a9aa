// Reader for Karpathy's llama2.c "v0" checkpoint (.bin): a header of 7 int32
// (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len), then
// raw little-endian fp32 arrays. The per-layer weights are exposed as 2-D
// tensors under GGUF llama spellings (token_embd.weight, blk.{l}.attn_q.weight,
// ...) so that model code binds a .bin and a .gguf through one name table.
// See docs/formats.md for the layout and the checks.
#ifndef DSV4_IO_LLAMA2C_H_
#define DSV4_IO_LLAMA2C_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "io/checkpoint.h"

namespace dsv4 {

// The .bin header, validated. D = dim, H = hidden_dim, L = n_layers,
// V = vocab_size, S = seq_len, hd = head_dim(), KV = n_kv_heads.
struct Llama2cConfig {
  int32_t dim = 0;         // D: model width
  int32_t hidden_dim = 0;  // H: FFN inner width
  int32_t n_layers = 0;    // L
  int32_t n_heads = 0;     // query heads
  int32_t n_kv_heads = 0;  // key/value heads (grouped-query attention)
  int32_t vocab_size = 0;  // V, always positive here (the header's sign is in shared_classifier)
  int32_t seq_len = 0;     // S: the longest sequence the model was trained for
  bool shared_classifier = true;  // header vocab_size > 0: the classifier is token_embd

  int32_t head_dim() const { return dim / n_heads; }          // hd
  int32_t kv_dim() const { return n_kv_heads * head_dim(); }  // KV * hd
};

inline constexpr size_t kLlama2cHeaderBytes = 7 * sizeof(int32_t);
// Any header field above this is rejected as absurd.
inline constexpr int32_t kLlama2cMaxDim = 1 << 20;

class Llama2cFile final : public CheckpointReader {
 public:
  const std::string& path() const override { return path_; }
  const TensorInfo* Find(std::string_view name) const override;
  // In file order: token_embd, all attn_norm, all attn_q, ..., output_norm[, output].
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }

  const Llama2cConfig& config() const { return config_; }

 private:
  friend Result<std::unique_ptr<Llama2cFile>> ParseLlama2c(std::span<const uint8_t> bytes,
                                                           const std::string& path,
                                                           std::shared_ptr<const void> owner);
  Llama2cFile() = default;

  std::string path_;
  Llama2cConfig config_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;  // name -> index in tensors_
  std::shared_ptr<const void> owner_;                   // keeps the bytes alive
};

// Reads and validates the 28-byte header only (no size check against the file).
// `path` names the source in error messages.
Result<Llama2cConfig> ParseLlama2cHeader(std::span<const uint8_t> bytes, const std::string& path);

// Parses a whole .bin held in memory. Tensors point into `bytes`, which must
// outlive the result; `owner` (may be null) is kept alive by the result.
Result<std::unique_ptr<Llama2cFile>> ParseLlama2c(std::span<const uint8_t> bytes,
                                                  const std::string& path,
                                                  std::shared_ptr<const void> owner = nullptr);

// Maps `path` and parses it. Errors start with the path.
Result<std::unique_ptr<Llama2cFile>> OpenLlama2c(const std::string& path);

}  // namespace dsv4

#endif  // DSV4_IO_LLAMA2C_H_
