// A llama.cpp `deepseek4` GGUF file (spec deepseek-v4.md §14) as the
// CheckpointReader BindWeights binds through: every tensor of the file under
// its GGUF name (tensor_names.h's GGUF spelling), as a view into the mapped
// file. The MXFP4 tensors — the routed experts,
// `blk.{L}.ffn_{gate,up,down}_exps.weight` [E, N, K] — either stay so
// (Mxfp4Layout::kNative: DType kMXFP4, multiplied with q8_0 activations as
// llama.cpp does, ops/ref/ggml_dot_ref.h) or are split at load into dsv4's
// FP4 layout (kFp4: the e2m1 codes as I8 [E, N, K/2] under the same name and
// the e8m0 scales as `<base>.scale` [E, N, K/32], ops/ref/mxfp4_ref.h; bit for
// bit the codes and scales of the release's safetensors, for the FP4 kernels'
// exact f32 / bf16 products, at the cost of a copy).
// A llama.cpp gguf-split set (io/gguf.h OpenGgufSplit) reads as one file: the
// tensors of all its parts, the metadata of the first.
// The NextN MTP block comes in a file of its own (llama.cpp's converter with
// --mtp writes `mtp-*.gguf`: architecture deepseek4, block_count = main layers
// + nextn_predict_layers, only the blocks `blk.{n_main + M}.*`, the draft's
// own mHC head at the top level as `output_hc_*`, and `nextn.eh_proj` =
// [e_proj | h_proj] concatenated along the input). AddNextnFile lists its
// tensors as `mtp.{M}.<GGUF name>` (tensor_names.h's GGUF spelling of the MTP
// scope), eh_proj split into `nextn.e_proj` and `nextn.h_proj` (each row's two
// halves, copied); its copies of the embedding, head and final norm are not
// listed (the main file's are the same tensors).
// A DSpark module comes as llama.cpp's architecture `dflash` (its converter's
// DeepseekV4DSparkModel): the stages as `blk.{S}.*`, listed as `mtp.{S}.*`;
// `fc` and `enc.output_norm` (the target-feature projection and norm) under
// stage 0; `markov_w1`, `markov_w2`, `conf_proj`, `output_hc_*` and
// `output_norm` (as `nextn.shared_head_norm`) under the last stage.
#ifndef DSV4_MODEL_DEEPSEEK_V4_GGUF_READER_H_
#define DSV4_MODEL_DEEPSEEK_V4_GGUF_READER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "io/checkpoint.h"
#include "io/gguf.h"

namespace dsv4::deepseek_v4 {

enum class Mxfp4Layout { kNative, kFp4 };

class GgufDeepSeekV4Reader final : public CheckpointReader {
 public:
  // Errors name the file and the tensor.
  static Result<std::unique_ptr<GgufDeepSeekV4Reader>> Create(
      std::unique_ptr<GgufFile> file, Mxfp4Layout layout = Mxfp4Layout::kNative);
  // The parts of a gguf-split set, in order (as OpenGgufSplit gives them).
  static Result<std::unique_ptr<GgufDeepSeekV4Reader>> Create(
      std::vector<std::unique_ptr<GgufFile>> parts, Mxfp4Layout layout = Mxfp4Layout::kNative);

  // Adds a draft file (above: NextN MTP or DSpark, by its architecture) to a
  // reader of the main model's `n_main_layers`. Errors name the file and the
  // tensor.
  Status AddDraftFile(std::unique_ptr<GgufFile> file, int64_t n_main_layers, Mxfp4Layout layout);

  const std::string& path() const override { return files_.front()->path(); }
  const TensorInfo* Find(std::string_view name) const override;
  // Like the file's Lookup (which says why a tensor of an unsupported ggml
  // type cannot be bound), for the repacked tensors too.
  Result<const TensorInfo*> Lookup(std::string_view name) const override;
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }

  // The first part: the model's metadata.
  const GgufFile& file() const { return *files_.front(); }
  size_t part_count() const { return files_.size(); }
  // Bytes copied out of the file at load (the MXFP4 experts, with kFp4).
  int64_t copied_bytes() const { return copied_bytes_; }

 private:
  explicit GgufDeepSeekV4Reader(std::vector<std::unique_ptr<GgufFile>> files)
      : files_(std::move(files)) {}
  // Lists one part's tensors (with kFp4, repacking its MXFP4 ones) under the
  // names `rename` gives (nullopt: not listed); Add fails on a name already
  // listed.
  using Rename = std::function<std::optional<std::string>(const std::string&)>;
  Status AddPart(const GgufFile& file, Mxfp4Layout layout, const Rename& rename = nullptr);
  Status AddNextnFile(const GgufFile& file, int64_t n_main_layers, Mxfp4Layout layout);
  Status AddDSparkFile(const GgufFile& file, Mxfp4Layout layout);
  // Lists the two input halves of `t` [N, 2K] as `e_name` and `h_name` [N, K].
  Status AddSplitColumns(const GgufFile& file, const TensorInfo& t, const std::string& e_name,
                         const std::string& h_name);
  Status Add(TensorInfo info);

  std::vector<std::unique_ptr<GgufFile>> files_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::vector<std::unique_ptr<uint8_t[]>> owned_;
  int64_t copied_bytes_ = 0;
};

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_GGUF_READER_H_
