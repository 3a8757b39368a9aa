// Helpers for the seed-family tests: the tiny profile checkpoints of
// tests/data/seed/<profile>/ (tools/reference/make_seed_checkpoints.py), their
// goldens, a reader that overlays or removes tensors of another reader, and
// logit comparisons at the fp32 forward tolerance of the oracles README.
#ifndef DSV4_TESTS_MODEL_SEED_TEST_UTIL_H_
#define DSV4_TESTS_MODEL_SEED_TEST_UTIL_H_

#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "io/safetensors.h"
#include "model/seed/model.h"

namespace dsv4::seed::testing {

inline std::string ProfileDir(const std::string& profile) {
  return std::string(DSV4_TEST_DATA_DIR) + "/seed/" + profile;
}

inline std::vector<float> ReadF32(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

inline nlohmann::json ReadJson(const std::string& path) {
  auto text = ReadFileToString(path);
  return nlohmann::json::parse(text.ok() ? *text : std::string("{}"), nullptr, false);
}

// Wraps a reader; tensors may be replaced (f32 data) or hidden.
class OverlayReader final : public CheckpointReader {
 public:
  explicit OverlayReader(std::shared_ptr<const CheckpointReader> base) : base_(std::move(base)) {
    Rebuild();
  }
  const std::string& path() const override { return base_->path(); }
  const TensorInfo* Find(std::string_view name) const override {
    for (const TensorInfo& t : tensors_) {
      if (t.name == name) return &t;
    }
    return nullptr;
  }
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }
  void Replace(const std::string& name, std::vector<int64_t> shape, std::vector<float> data) {
    auto store = std::make_shared<std::vector<float>>(std::move(data));
    owned_.push_back(store);
    replaced_[name] = TensorInfo{name, DType::kF32, std::move(shape), store->data(),
                                 static_cast<int64_t>(store->size() * 4)};
    Rebuild();
  }
  void Remove(const std::string& name) {
    removed_.insert(name);
    Rebuild();
  }
  // A copy of a stored f32 tensor's values.
  std::vector<float> Values(const std::string& name) const {
    const TensorInfo* t = Find(name);
    const float* p = static_cast<const float*>(t->data);
    return std::vector<float>(p, p + t->nbytes / 4);
  }

 private:
  void Rebuild() {
    tensors_.clear();
    for (const TensorInfo& t : base_->tensors()) {
      if (removed_.count(t.name)) continue;
      auto it = replaced_.find(t.name);
      tensors_.push_back(it != replaced_.end() ? it->second : t);
    }
    for (const auto& [name, t] : replaced_) {
      if (base_->Find(name) == nullptr && !removed_.count(name)) tensors_.push_back(t);
    }
  }
  std::shared_ptr<const CheckpointReader> base_;
  std::map<std::string, TensorInfo> replaced_;
  std::set<std::string> removed_;
  std::vector<std::shared_ptr<std::vector<float>>> owned_;
  std::vector<TensorInfo> tensors_;
};

struct Profile {
  SeedConfig config;
  std::shared_ptr<const CheckpointReader> reader;
  std::map<std::string, std::string> metadata;
  nlohmann::json golden;
  std::vector<int32_t> ids;
};

inline Profile LoadProfile(const std::string& name) {
  Profile p;
  const std::string dir = ProfileDir(name);
  auto config = SeedConfig::FromFile(dir + "/config.json");
  if (!config.ok()) {
    ADD_FAILURE() << config.status().ToString();
    return p;
  }
  p.config = *config;
  auto file = OpenSafetensors(dir + "/model.safetensors");
  if (!file.ok()) {
    ADD_FAILURE() << file.status().ToString();
    return p;
  }
  p.metadata = (*file)->metadata();
  p.reader = std::shared_ptr<const CheckpointReader>(std::move(file).value());
  p.golden = ReadJson(dir + "/golden.json");
  for (const auto& id : p.golden["input_ids"]) p.ids.push_back(id.get<int32_t>());
  return p;
}

inline std::unique_ptr<SeedModel> Build(const Profile& p, const SeedConfig& config,
                                        std::shared_ptr<const CheckpointReader> reader = nullptr) {
  SeedLoadOptions o;
  o.metadata = p.metadata;
  auto m = SeedModel::Load(reader ? reader : p.reader, config, o);
  if (!m.ok()) {
    ADD_FAILURE() << m.status().ToString();
    return nullptr;
  }
  return std::move(m).value();
}

// Runs `ids` in calls of `chunks` tokens; returns the logits of every token
// (or the last token of each call when last_only).
inline std::vector<float> RunCalls(SeedModel& m, SequenceCache& cache,
                                   const std::vector<int32_t>& ids,
                                   const std::vector<int64_t>& chunks, bool last_only,
                                   std::vector<std::vector<int64_t>>* live = nullptr) {
  const int64_t V = m.info().vocab_size;
  std::vector<float> out;
  size_t at = 0;
  for (int64_t n : chunks) {
    std::vector<float> lg((last_only ? 1 : n) * V);
    std::span<const int32_t> span(ids.data() + at, static_cast<size_t>(n));
    Status st = m.Forward(span, cache, lg, !last_only);
    EXPECT_TRUE(st.ok()) << st.ToString();
    out.insert(out.end(), lg.begin(), lg.end());
    if (live != nullptr) live->push_back(static_cast<SeedCache&>(cache).live_positions());
    at += static_cast<size_t>(n);
  }
  return out;
}

struct Diff {
  double max_abs = 0;
  double mean_kl = 0;
  int64_t argmax_mismatch = 0;
};

inline Diff Compare(const std::vector<float>& got, const std::vector<float>& want, int64_t V) {
  Diff d;
  const int64_t rows = static_cast<int64_t>(want.size()) / V;
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = got.data() + r * V;
    const float* b = want.data() + r * V;
    int64_t ia = 0, ib = 0;
    double ma = -1e30, mb = -1e30;
    for (int64_t i = 0; i < V; ++i) {
      d.max_abs = std::max(d.max_abs, std::fabs(static_cast<double>(a[i]) - b[i]));
      if (a[i] > a[ia]) ia = i;
      if (b[i] > b[ib]) ib = i;
      ma = std::max(ma, static_cast<double>(a[i]));
      mb = std::max(mb, static_cast<double>(b[i]));
    }
    if (ia != ib) ++d.argmax_mismatch;
    double za = 0, zb = 0;
    for (int64_t i = 0; i < V; ++i) {
      za += std::exp(a[i] - ma);
      zb += std::exp(b[i] - mb);
    }
    double kl = 0;
    for (int64_t i = 0; i < V; ++i) {
      const double pb = std::exp(b[i] - mb) / zb;
      const double lpa = a[i] - ma - std::log(za), lpb = b[i] - mb - std::log(zb);
      kl += pb * (lpb - lpa);
    }
    d.mean_kl += kl / static_cast<double>(rows);
  }
  return d;
}

}  // namespace dsv4::seed::testing

#endif  // DSV4_TESTS_MODEL_SEED_TEST_UTIL_H_
