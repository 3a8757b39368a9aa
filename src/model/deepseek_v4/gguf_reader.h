// A llama.cpp `deepseek4` GGUF file (spec deepseek-v4.md §14) as the
// CheckpointReader BindWeights binds through: every tensor of the file under
// its GGUF name (tensor_names.h's GGUF spelling), except that each MXFP4
// tensor — the routed experts, `blk.{L}.ffn_{gate,up,down}_exps.weight`
// [E, N, K] — is split at load into dsv4's FP4 layout: the e2m1 codes as I8
// [E, N, K/2] under the same name and the e8m0 scales as `<base>.scale`
// [E, N, K/32] (ops/ref/mxfp4_ref.h; bit for bit the codes and scales of the
// release's safetensors). The other tensors stay views into the mapped file.
// A llama.cpp gguf-split set (io/gguf.h OpenGgufSplit) reads as one file: the
// tensors of all its parts, the metadata of the first.
#ifndef DSV4_MODEL_DEEPSEEK_V4_GGUF_READER_H_
#define DSV4_MODEL_DEEPSEEK_V4_GGUF_READER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "io/checkpoint.h"
#include "io/gguf.h"

namespace dsv4::deepseek_v4 {

class GgufDeepSeekV4Reader final : public CheckpointReader {
 public:
  // Repacks the file's MXFP4 tensors; errors name the file and the tensor.
  static Result<std::unique_ptr<GgufDeepSeekV4Reader>> Create(std::unique_ptr<GgufFile> file);
  // The parts of a gguf-split set, in order (as OpenGgufSplit gives them).
  static Result<std::unique_ptr<GgufDeepSeekV4Reader>> Create(
      std::vector<std::unique_ptr<GgufFile>> parts);

  const std::string& path() const override { return files_.front()->path(); }
  const TensorInfo* Find(std::string_view name) const override;
  // Like the file's Lookup (which says why a tensor of an unsupported ggml
  // type cannot be bound), for the repacked tensors too.
  Result<const TensorInfo*> Lookup(std::string_view name) const override;
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }

  // The first part: the model's metadata.
  const GgufFile& file() const { return *files_.front(); }
  size_t part_count() const { return files_.size(); }
  // Bytes copied out of the file at load (the repacked MXFP4 experts).
  int64_t copied_bytes() const { return copied_bytes_; }

 private:
  explicit GgufDeepSeekV4Reader(std::vector<std::unique_ptr<GgufFile>> files)
      : files_(std::move(files)) {}
  // Lists one part's tensors (repacking its MXFP4 ones); Add fails on a name
  // already listed.
  Status AddPart(const GgufFile& file);
  Status Add(TensorInfo info);

  std::vector<std::unique_ptr<GgufFile>> files_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::vector<std::unique_ptr<uint8_t[]>> owned_;
  int64_t copied_bytes_ = 0;
};

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_GGUF_READER_H_
