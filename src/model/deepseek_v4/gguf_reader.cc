// A deepseek4 GGUF file as a CheckpointReader (see gguf_reader.h).
#include "model/deepseek_v4/gguf_reader.h"

#include <cstring>

#include "base/status.h"
#include "ops/ref/mxfp4_ref.h"
#include "tensor/dtype.h"

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

Status GgufDeepSeekV4Reader::AddPart(const GgufFile& file, Mxfp4Layout layout,
                                     const Rename& rename) {
  const std::string& path = file.path();
  for (const GgufTensorInfo& t : file.ggml_tensors()) {
    std::string name = t.name;
    if (rename) {
      std::optional<std::string> renamed = rename(t.name);
      if (!renamed) continue;
      name = std::move(*renamed);
    }
    if (layout == Mxfp4Layout::kNative || t.ggml_type != static_cast<uint32_t>(GgmlType::kMXFP4)) {
      if (const TensorInfo* info = file.Find(t.name)) {
        TensorInfo listed = *info;
        listed.name = name;
        RETURN_IF_ERROR(Add(std::move(listed)));
      }
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
        name.ends_with(suffix) ? name.substr(0, name.size() - suffix.size()) : name;
    RETURN_IF_ERROR(Add(TensorInfo{.name = name,
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

Status GgufDeepSeekV4Reader::AddDraftFile(std::unique_ptr<GgufFile> file, int64_t n_main_layers,
                                          Mxfp4Layout layout) {
  ASSIGN_OR_RETURN(std::string arch, file->GetString("general.architecture"));
  if (arch != "dflash" && arch != "deepseek4") {
    return InvalidArgument(file->path() + ": the draft model's architecture is '" + arch +
                               "', not deepseek4 (NextN MTP) or dflash (DSpark)",
                           "a DeepSeek-V4 draft GGUF is written by llama.cpp's "
                           "convert_hf_to_gguf.py (--mtp, or the DSpark model)");
  }
  // Held first: the tensors listed below are views into it.
  files_.push_back(std::move(file));
  const GgufFile& f = *files_.back();
  return arch == "dflash" ? AddDSparkFile(f, layout) : AddNextnFile(f, n_main_layers, layout);
}

Status GgufDeepSeekV4Reader::AddDSparkFile(const GgufFile& f, Mxfp4Layout layout) {
  ASSIGN_OR_RETURN(int64_t stages, f.GetI64("dflash.block_count"));
  const std::string first = "mtp.0.", last = "mtp." + std::to_string(stages - 1) + ".";
  Status unknown = Status::Ok();
  auto rename = [&](const std::string& name) -> std::optional<std::string> {
    if (name.rfind("blk.", 0) == 0) return "mtp." + name.substr(4);
    if (name == "fc.weight" || name == "enc.output_norm.weight") return first + name;
    if (name == "markov_w1.weight" || name == "markov_w2.weight" || name == "conf_proj.weight" ||
        name.rfind("output_hc_", 0) == 0) {
      return last + name;
    }
    if (name == "output_norm.weight") return last + "nextn.shared_head_norm.weight";
    if (unknown.ok()) {
      unknown = Unimplemented(f.path() + ": tensor '" + name +
                                  "' is not part of DeepSeek-V4's "
                                  "DSpark module",
                              "dsv4 reads the dflash files llama.cpp's converter writes for "
                              "DeepSeek-V4 (DeepseekV4DSparkModel)");
    }
    return std::nullopt;
  };
  RETURN_IF_ERROR(AddPart(f, layout, rename));
  return unknown;
}

Status GgufDeepSeekV4Reader::AddNextnFile(const GgufFile& f, int64_t n_main_layers,
                                          Mxfp4Layout layout) {
  const std::string& path = f.path();
  ASSIGN_OR_RETURN(int64_t nextn, f.GetI64("deepseek4.nextn_predict_layers"));
  ASSIGN_OR_RETURN(int64_t blocks, f.GetI64("deepseek4.block_count"));
  if (nextn != 1 || blocks != n_main_layers + nextn) {
    return InvalidArgument(
        path + ": " + std::to_string(nextn) + " NextN layer(s) after " +
            std::to_string(blocks - nextn) +
            " main layers (deepseek4.nextn_predict_layers, block_count); the model has " +
            std::to_string(n_main_layers) + " main layers",
        "DeepSeek-V4 has one NextN block; the draft file must come from the same model");
  }
  const std::string block = "blk." + std::to_string(n_main_layers) + ".";
  const std::string mtp = "mtp.0.";
  const std::string eh = block + "nextn.eh_proj.weight";
  auto rename = [&](const std::string& name) -> std::optional<std::string> {
    if (name == eh) return std::nullopt;  // split below
    if (name.rfind(block, 0) == 0) return mtp + name.substr(block.size());
    if (name.rfind("output_hc_", 0) == 0) return mtp + name;
    return std::nullopt;  // the embedding, head and final norm: the main file's
  };
  for (const GgufTensorInfo& t : f.ggml_tensors()) {
    if (t.name.rfind("blk.", 0) == 0 && t.name.rfind(block, 0) != 0) {
      return InvalidArgument(path + ": tensor '" + t.name + "' belongs to a main layer",
                             "pass the main model with --model and its MTP file with "
                             "--model-draft");
    }
  }
  RETURN_IF_ERROR(AddPart(f, layout, rename));
  ASSIGN_OR_RETURN(const TensorInfo* eh_info, f.Lookup(eh));
  return AddSplitColumns(f, *eh_info, mtp + "nextn.e_proj.weight", mtp + "nextn.h_proj.weight");
}

Status GgufDeepSeekV4Reader::AddSplitColumns(const GgufFile& file, const TensorInfo& t,
                                             const std::string& e_name, const std::string& h_name) {
  const DTypeInfo& type = GetDTypeInfo(t.dtype);
  if (t.shape.size() != 2 || t.shape[1] % 2 != 0 || (t.shape[1] / 2) % type.block_elems != 0) {
    return InvalidArgument(file.path() + ": tensor '" + t.name + "' " + ShapeToString(t.shape) +
                               " (" + std::string(type.name) +
                               ") cannot be split into two input halves of whole blocks",
                           "nextn.eh_proj is [hidden, 2 × hidden], e_proj's columns first");
  }
  const int64_t rows = t.shape[0], half = t.shape[1] / 2;
  const int64_t half_bytes = DTypeBytes(t.dtype, half);
  if (t.nbytes != rows * 2 * half_bytes) {
    return DataLoss(file.path() + ": tensor '" + t.name + "' holds " + std::to_string(t.nbytes) +
                        " bytes, not " + std::to_string(rows * 2 * half_bytes),
                    "the file is corrupt");
  }
  const auto* src = static_cast<const uint8_t*>(t.data);
  for (int side = 0; side < 2; ++side) {
    auto buf = std::make_unique<uint8_t[]>(rows * half_bytes);
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(buf.get() + r * half_bytes, src + (2 * r + side) * half_bytes, half_bytes);
    }
    RETURN_IF_ERROR(Add(TensorInfo{.name = side == 0 ? e_name : h_name,
                                   .dtype = t.dtype,
                                   .shape = {rows, half},
                                   .data = buf.get(),
                                   .nbytes = rows * half_bytes}));
    copied_bytes_ += rows * half_bytes;
    owned_.push_back(std::move(buf));
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
