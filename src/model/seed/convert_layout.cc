// Seed-family checkpoint layout converter (see convert_layout.h).
#include "model/seed/convert_layout.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <span>

#include "base/log.h"
#include "base/mapped_file.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "model/seed/ced_mlp.h"
#include "model/seed/config.h"

namespace dsv4::seed {
namespace {

namespace fs = std::filesystem;

constexpr float kCedInitScale = 0.873f;  // S-013: the seed's initial ced_scale_factor

struct OutTensor {
  SafetensorsEntry entry;
  std::span<const uint8_t> bytes;  // into the input file, or into `owned`
  std::vector<float> owned;
};

std::span<const uint8_t> Bytes(const std::vector<float>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float)};
}

std::string Layer(int64_t l) { return "model.layers." + std::to_string(l) + "."; }

}  // namespace

Result<ConvertLayoutReport> ConvertSeedLayout(const std::string& in_dir, const std::string& out_dir,
                                              const ConvertLayoutOptions& o) {
  if (o.to != "ced" && o.to != "standard") {
    return InvalidArgument("convert-layout: --to '" + o.to + "' is not ced or standard");
  }
  if (o.topology_ced && o.to != "ced") {
    return InvalidArgument("convert-layout: --topology ced needs --to ced");
  }
  std::error_code ec;
  if (fs::weakly_canonical(in_dir, ec) == fs::weakly_canonical(out_dir, ec)) {
    return InvalidArgument("convert-layout: --out " + out_dir + " is the input directory",
                           "write to a new directory");
  }
  const std::string config_path = (fs::path(in_dir) / "config.json").string();
  ASSIGN_OR_RETURN(SeedConfig config, SeedConfig::FromFile(config_path));
  ASSIGN_OR_RETURN(std::string config_text, ReadFileToString(config_path));
  nlohmann::json cj = nlohmann::json::parse(config_text, nullptr, false);
  if (cj.is_discarded()) return DataLoss(config_path + ": not JSON");
  const std::string st_path = (fs::path(in_dir) / kSafetensorsSingleName).string();
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, OpenSafetensors(st_path));
  std::map<std::string, std::string> meta = file->metadata();
  const int64_t H = config.hidden_size;

  ConvertLayoutReport report;
  if (o.to == "ced" && config.task_adapter.enabled) {
    return InvalidArgument(config_path + ": the TaskAdapter gates the dense gate projection",
                           "a CED fused MLP cannot take the TaskAdapter; disable it first");
  }
  std::map<std::string, OutTensor> replaced;  // name → new tensor
  std::map<std::string, bool> dropped;        // input tensors not written
  std::vector<OutTensor> added;
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    const std::string n = Layer(l);
    if (o.to == "ced") {
      const TensorInfo* g = file->Find(n + "mlp.gate_proj.weight");
      const TensorInfo* u = file->Find(n + "mlp.up_proj.weight");
      const TensorInfo* d = file->Find(n + "mlp.down_proj.weight");
      if (g == nullptr || u == nullptr || d == nullptr) continue;  // MoE or already CED
      ASSIGN_OR_RETURN(TensorView gv, file->Get(g->name, {g->shape.at(0), H}));
      ASSIGN_OR_RETURN(TensorView uv, file->Get(u->name, {g->shape.at(0), H}));
      ASSIGN_OR_RETURN(TensorView dv, file->Get(d->name, {H, g->shape.at(0)}));
      for (const TensorView* v : {&gv, &uv, &dv}) {
        if (IsBlockDType(v->dtype)) {
          return Unimplemented(st_path + ": " + n + "mlp: block-quantized " +
                                   std::string(DTypeName(v->dtype)) + " weights",
                               "convert-layout handles f32/f16/bf16 dense MLPs");
        }
      }
      ASSIGN_OR_RETURN(CedOwned ced, ConvertSwiGluToCed(gv, uv, dv));
      const int64_t I = ced.fused.view.size(0);
      OutTensor w{{n + "mlp.ced_weight", "F32", {I, H}}, {}, std::move(ced.fused.data)};
      w.bytes = Bytes(w.owned);  // col_major bytes: column after column
      meta["dsv4.layout." + n + "mlp.ced_weight"] = "col_major";
      added.push_back(std::move(w));
      OutTensor down{{n + "mlp.down_proj.weight", "F32", {H, I}}, {}, std::move(ced.down.data)};
      replaced[down.entry.name] = std::move(down);
      dropped[g->name] = dropped[u->name] = true;
      if (o.topology_ced) {  // S-013: no norm before attention nor before the MLP
        added.push_back({{n + "ced_scale_factor", "F32", {1}}, {}, {kCedInitScale}});
        for (const char* norm : {"input_layernorm.weight", "post_attention_layernorm.weight"}) {
          if (file->Find(n + norm) != nullptr) dropped[n + norm] = true;
        }
      }
      report.converted.push_back(l);
    } else {
      const TensorInfo* w = file->Find(n + "mlp.ced_weight");
      if (w == nullptr) continue;
      const int64_t I = w->shape.at(0);
      ASSIGN_OR_RETURN(TensorView wv, file->Get(w->name, {I, H}));
      auto lay = meta.find("dsv4.layout." + w->name);
      if (lay != meta.end() && lay->second == "col_major") {
        ASSIGN_OR_RETURN(TensorView cv,
                         CheckedStridedView(wv.data, wv.numel(), wv.dtype, I, H, 1, I, w->name));
        wv = cv;
      }
      ASSIGN_OR_RETURN(TensorView dv, file->Get(n + "mlp.down_proj.weight", {H, I}));
      if (IsBlockDType(wv.dtype) || IsBlockDType(dv.dtype)) {
        return Unimplemented(st_path + ": " + w->name + ": block-quantized CED weights",
                             "convert-layout handles f32/f16/bf16 MLPs");
      }
      CedMlpWeights cw{wv, {}, dv};
      if (const TensorInfo* b = file->Find(n + "mlp.ced_bias"); b != nullptr) {
        ASSIGN_OR_RETURN(TensorView bv, file->Get(b->name, {I}));
        cw.bias.resize(I);
        DequantizeRow(bv.dtype, bv.data, I, cw.bias.data());
      }
      auto sw = ConvertCedToSwiGlu(cw);
      if (!sw.ok()) {
        report.kept.push_back(w->name + ": " + sw.status().message());
        continue;
      }
      const int64_t F = I / 2;
      added.push_back({{n + "mlp.gate_proj.weight", "F32", {F, H}}, {}, std::move(sw->gate.data)});
      added.push_back({{n + "mlp.up_proj.weight", "F32", {F, H}}, {}, std::move(sw->up.data)});
      OutTensor down{{n + "mlp.down_proj.weight", "F32", {H, F}}, {}, std::move(sw->down.data)};
      replaced[down.entry.name] = std::move(down);
      dropped[w->name] = true;
      dropped[n + "mlp.ced_bias"] = true;
      meta.erase("dsv4.layout." + w->name);
      report.converted.push_back(l);
    }
  }
  if (o.topology_ced && !report.converted.empty()) {
    report.warnings.push_back(
        "--topology ced: the converted layers are now norm-free CED blocks (ced_scale_factor = "
        "0.873; input_layernorm and post_attention_layernorm dropped, S-013); this is NOT "
        "function preserving and the model must be retrained (S-143)");
  }

  // Assemble: the input's tensors in order (replaced or dropped), then the added ones.
  std::vector<SafetensorsEntry> entries;
  std::vector<std::span<const uint8_t>> data;
  for (const TensorInfo& t : file->tensors()) {
    if (dropped.count(t.name)) continue;
    if (auto it = replaced.find(t.name); it != replaced.end()) {
      it->second.bytes = Bytes(it->second.owned);
      entries.push_back(it->second.entry);
      data.push_back(it->second.bytes);
      continue;
    }
    entries.push_back({t.name, std::string(file->StoredDType(t.name)), t.shape});
    data.push_back({static_cast<const uint8_t*>(t.data), static_cast<size_t>(t.nbytes)});
  }
  for (OutTensor& t : added) {
    t.bytes = Bytes(t.owned);
    entries.push_back(t.entry);
    data.push_back(t.bytes);
  }
  fs::create_directories(out_dir, ec);
  if (ec) return IoError("convert-layout: cannot create " + out_dir + ": " + ec.message());
  RETURN_IF_ERROR(
      WriteSafetensors((fs::path(out_dir) / kSafetensorsSingleName).string(), entries, data, meta));
  // extensions.ced present = enabled (config.h); its fields keep their values.
  if (o.to == "ced" && !cj["extensions"].contains("ced")) {
    cj["extensions"]["ced"] = nlohmann::json::object();
  }
  {
    const std::string out_config = (fs::path(out_dir) / "config.json").string();
    std::ofstream f(out_config);
    f << cj.dump(2) << "\n";
    if (!f) return IoError("convert-layout: cannot write " + out_config);
  }
  for (const auto& e : fs::directory_iterator(in_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.rfind("tok", 0) == 0) {
      fs::copy_file(e.path(), fs::path(out_dir) / name, fs::copy_options::overwrite_existing, ec);
      if (ec)
        return IoError("convert-layout: cannot copy " + e.path().string() + ": " + ec.message());
    }
  }
  return report;
}

}  // namespace dsv4::seed
