// libFuzzer target: a deepseek4 GGUF's config (DeepSeekV4Config::FromGguf) and
// a draft module's GGUF beside a real main model (FromGguf(main, draft), then
// GgufDeepSeekV4Reader::AddDraftFile: NextN MTP or DSpark dflash renames, the
// eh_proj split) on arbitrary bytes. Nothing may crash, hang or throw; errors
// must come back as a Status that says something. Seeds in
// tests/model/fuzz_corpus/deepseek_v4_gguf_draft (the NextN and DSpark files
// of tests/data/deepseek_v4/gguf_drafts).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "io/gguf.h"
#include "model/deepseek_v4/config.h"
#include "model/deepseek_v4/gguf_reader.h"

namespace {

const std::string kMain =
    std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v4/gguf_drafts/mtp_main.gguf";

void Check(const dsv4::Status& s) {
  if (!s.ok() && s.message().empty()) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using dsv4::deepseek_v4::DeepSeekV4Config;
  using dsv4::deepseek_v4::GgufDeepSeekV4Reader;
  auto draft = dsv4::ParseGguf(std::span<const uint8_t>(data, size), "fuzz.gguf");
  if (!draft.ok()) {
    Check(draft.status());
    return 0;
  }
  Check(DeepSeekV4Config::FromGguf(**draft).status());
  auto main_file = dsv4::OpenGguf(kMain);
  if (!main_file.ok()) __builtin_trap();  // the seed model must open
  auto config = DeepSeekV4Config::FromGguf(**main_file, **draft);
  if (!config.ok()) {
    Check(config.status());
    return 0;
  }
  auto reader = GgufDeepSeekV4Reader::Create(std::move(*main_file));
  if (!reader.ok()) __builtin_trap();
  Check((*reader)->AddDraftFile(std::move(*draft), config->num_hidden_layers,
                                dsv4::deepseek_v4::Mxfp4Layout::kNative));
  return 0;
}
