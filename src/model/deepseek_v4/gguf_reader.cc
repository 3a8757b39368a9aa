// A deepseek4 GGUF file as a CheckpointReader (see gguf_reader.h).
#include "model/deepseek_v4/gguf_reader.h"

#include "ops/ref/mxfp4_ref.h"

namespace dsv4::deepseek_v4 {

Result<std::unique_ptr<GgufDeepSeekV4Reader>> GgufDeepSeekV4Reader::Create(
    std::unique_ptr<GgufFile> file, Mxfp4Layout layout) {
  std::vector<std::unique_ptr<GgufFile>> parts;
  parts.push_back(std::move(file));
  return Create(std::move(parts), layout);
}

Result<std::unique_ptr<GgufDeepSeekV4Reader>> GgufDeepSeekV4Reader::Create(
    std::vector<std::unique_ptr<GgufFile>> parts, Mxfp4Layout layout) {
  if (parts.empty()) return InvalidArgument("a deepseek4 GGUF reader needs at least one file");
  std::unique_ptr<GgufDeepSeekV4Reader> r(new GgufDeepSeekV4Reader(std::move(parts)));
  for (const std::unique_ptr<GgufFile>& file : r->files_) {
    RETURN_IF_ERROR(r->AddPart(*file, layout));
  }
  return r;
}

Status GgufDeepSeekV4Reader::Add(TensorInfo info) {
  auto [it, fresh] = index_.emplace(info.name, tensors_.size());
  if (!fresh) {
    return InvalidArgument(path() + ": tensor '" + info.name + "' appears twice",
                           "the file is corrupt");
  }
  tensors_.push_back(std::move(info));
  return Status::Ok();
}

Status GgufDeepSeekV4Reader::AddPart(const GgufFile& file, Mxfp4Layout layout) {
  const std::string& path = file.path();
  for (const GgufTensorInfo& t : file.ggml_tensors()) {
    if (layout == Mxfp4Layout::kNative || t.ggml_type != static_cast<uint32_t>(GgmlType::kMXFP4)) {
      if (const TensorInfo* info = file.Find(t.name)) RETURN_IF_ERROR(Add(*info));
      continue;
    }
    const int64_t k = t.shape.empty() ? 0 : t.shape.back();
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < t.shape.size(); ++i) rows *= t.shape[i];
    if (k % ops::ref::kMxfp4BlockElems != 0 ||
        t.nbytes != rows * (k / ops::ref::kMxfp4BlockElems) * ops::ref::kMxfp4BlockBytes) {
      return DataLoss(path + ": MXFP4 tensor '" + t.name + "' " + ShapeToString(t.shape) +
                          " does not hold whole 32-value blocks in its " +
                          std::to_string(t.nbytes) + " bytes",
                      "the file is corrupt");
    }
    const int64_t code_bytes = rows * (k / 2);
    const int64_t scale_bytes = rows * (k / ops::ref::kMxfp4BlockElems);
    // The copy: as many bytes as the file's blocks, held for the model's
    // lifetime (the routed experts are most of a DeepSeek-V4 model, so a GGUF
    // model takes about its file size in anonymous memory, where safetensors
    // stay mapped). The FP4 kernels read codes and scales from separate arrays.
    auto codes = std::make_unique<uint8_t[]>(code_bytes);
    auto scales = std::make_unique<uint8_t[]>(scale_bytes);
    const auto* blocks = static_cast<const uint8_t*>(t.data);
    const int64_t row_bytes = (k / ops::ref::kMxfp4BlockElems) * ops::ref::kMxfp4BlockBytes;
    for (int64_t i = 0; i < rows; ++i) {
      ops::ref::RepackMxfp4Row(blocks + i * row_bytes, k, codes.get() + i * (k / 2),
                               scales.get() + i * (k / ops::ref::kMxfp4BlockElems));
    }
    std::vector<int64_t> code_shape = t.shape, scale_shape = t.shape;
    code_shape.back() = k / 2;
    scale_shape.back() = k / ops::ref::kMxfp4BlockElems;
    const std::string_view suffix = ".weight";
    const std::string base =
        t.name.ends_with(suffix) ? t.name.substr(0, t.name.size() - suffix.size()) : t.name;
    RETURN_IF_ERROR(Add(TensorInfo{.name = t.name,
                                   .dtype = DType::kI8,
                                   .shape = code_shape,
                                   .data = codes.get(),
                                   .nbytes = code_bytes}));
    RETURN_IF_ERROR(Add(TensorInfo{.name = base + ".scale",
                                   .dtype = DType::kE8m0,
                                   .shape = scale_shape,
                                   .data = scales.get(),
                                   .nbytes = scale_bytes}));
    copied_bytes_ += code_bytes + scale_bytes;
    owned_.push_back(std::move(codes));
    owned_.push_back(std::move(scales));
  }
  return Status::Ok();
}

const TensorInfo* GgufDeepSeekV4Reader::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Result<const TensorInfo*> GgufDeepSeekV4Reader::Lookup(std::string_view name) const {
  if (const TensorInfo* t = Find(name)) return t;
  // Absent, or of a type the file cannot bind: the part that lists it says which.
  for (const std::unique_ptr<GgufFile>& file : files_) {
    auto r = file->Lookup(name);
    if (r.ok() || r.status().code() != StatusCode::kNotFound) return r;
  }
  return files_.front()->Lookup(name);
}

}  // namespace dsv4::deepseek_v4
