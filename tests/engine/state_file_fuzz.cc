// libFuzzer target: state files (DecodeStateFile) and cache states
// (SequenceCache::LoadState) on arbitrary bytes, into a stories260K cache and
// a DeepSeek-V4 cache with every layer kind (tests/data/deepseek_v4/
// mixed_mtp_bf16). The input is read both as a state file (its own
// fingerprint is taken, so that only the checksum guards) and as a bare
// state. Nothing may crash; an error must say something and leave the cache
// empty; a state that loads must run the next token. Seeds in
// tests/engine/fuzz_corpus/state_file (the state files of a short prompt on
// both models, and their bare states).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "engine/loader.h"
#include "engine/state_file.h"

namespace {

struct Target {
  dsv4::LoadedModel model;
  std::unique_ptr<dsv4::SequenceCache> cache;
};

Target Open(const std::string& path) {
  dsv4::LoadOptions o;
  o.model_path = path;
  o.threads = 1;
  auto m = dsv4::LoadModel(o);
  if (!m.ok()) __builtin_trap();  // the seed models must load
  Target t{std::move(m).value(), nullptr};
  t.cache = t.model.model->NewCache(64);
  return t;
}

void Try(Target& t, std::span<const uint8_t> state) {
  const dsv4::Status st = t.cache->LoadState(state);
  if (!st.ok()) {
    if (st.message().empty() || t.cache->length() != 0) __builtin_trap();
    return;
  }
  // A loaded state is a consistent one: the next token runs on it.
  if (t.cache->length() >= 64) return;
  std::vector<float> logits(t.model.model->info().vocab_size);
  const int32_t next[1] = {1};
  if (!t.model.model->Forward(next, *t.cache, logits, false).ok()) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Target llama = Open(std::string(DSV4_SOURCE_DIR) + "/models/stories260K/stories260K.bin");
  static Target v4 = Open(std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v4/mixed_mtp_bf16");
  const std::span<const uint8_t> bytes(data, size);
  uint64_t fingerprint = 0;
  if (size >= 24) std::memcpy(&fingerprint, data + 16, 8);
  auto file = dsv4::DecodeStateFile(bytes, fingerprint, "fuzz");
  if (!file.ok()) {
    if (file.status().message().empty()) __builtin_trap();
  } else {
    Try(llama, file->state);
    Try(v4, file->state);
  }
  Try(llama, bytes);
  Try(v4, bytes);
  return 0;
}
