#include "engine/loader.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/core.h>

#include "base/hash.h"
#include "base/log.h"
#include "base/mapped_file.h"
#include "engine/distributed.h"
#include "io/gguf.h"
#include "io/llama2c.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/v41_model.h"
#include "model/llama/llama_model.h"
#include "model/seed/model.h"

#include <nlohmann/json.hpp>
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/token_map.h"

namespace dsv4 {
namespace fs = std::filesystem;
namespace {

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> TokenizerFromGguf(const GgufFile& file) {
  ASSIGN_OR_RETURN(std::string tok_model, file.GetString("tokenizer.ggml.model"));
  if (tok_model == "gpt2") {
    BpeVocab vocab;
    ASSIGN_OR_RETURN(vocab.tokens, file.GetStringArray("tokenizer.ggml.tokens"));
    ASSIGN_OR_RETURN(vocab.merges, file.GetStringArray("tokenizer.ggml.merges"));
    if (file.HasMeta("tokenizer.ggml.token_type")) {
      ASSIGN_OR_RETURN(vocab.token_types, file.GetI32Array("tokenizer.ggml.token_type"));
    }
    if (file.HasMeta("tokenizer.ggml.bos_token_id")) {
      ASSIGN_OR_RETURN(vocab.bos_id, file.GetI32("tokenizer.ggml.bos_token_id"));
    }
    if (file.HasMeta("tokenizer.ggml.eos_token_id")) {
      ASSIGN_OR_RETURN(vocab.eos_id, file.GetI32("tokenizer.ggml.eos_token_id"));
    }
    if (file.HasMeta("tokenizer.ggml.add_bos_token")) {
      ASSIGN_OR_RETURN(vocab.add_bos, file.GetBool("tokenizer.ggml.add_bos_token"));
    }
    if (file.HasMeta("tokenizer.ggml.pre")) {
      ASSIGN_OR_RETURN(vocab.pre, file.GetString("tokenizer.ggml.pre"));
    }
    ASSIGN_OR_RETURN(std::unique_ptr<BpeTokenizer> tok,
                     BpeTokenizer::FromVocab(vocab, file.path()));
    return std::unique_ptr<Tokenizer>(std::move(tok));
  }
  if (tok_model != "llama") {
    return Unimplemented(file.path() + ": tokenizer model '" + tok_model + "' is not supported",
                         "supported: llama (SentencePiece), gpt2 (byte-level BPE)");
  }
  GgufSpmMetadata meta;
  ASSIGN_OR_RETURN(meta.tokens, file.GetStringArray("tokenizer.ggml.tokens"));
  if (file.HasMeta("tokenizer.ggml.scores")) {
    ASSIGN_OR_RETURN(meta.scores, file.GetF32Array("tokenizer.ggml.scores"));
  }
  if (file.HasMeta("tokenizer.ggml.token_type")) {
    ASSIGN_OR_RETURN(meta.types, file.GetI32Array("tokenizer.ggml.token_type"));
  }
  if (file.HasMeta("tokenizer.ggml.bos_token_id")) {
    ASSIGN_OR_RETURN(meta.bos, file.GetI64("tokenizer.ggml.bos_token_id"));
  }
  if (file.HasMeta("tokenizer.ggml.eos_token_id")) {
    ASSIGN_OR_RETURN(meta.eos, file.GetI64("tokenizer.ggml.eos_token_id"));
  }
  if (file.HasMeta("tokenizer.ggml.unknown_token_id")) {
    ASSIGN_OR_RETURN(meta.unk, file.GetI64("tokenizer.ggml.unknown_token_id"));
  }
  if (file.HasMeta("tokenizer.ggml.add_space_prefix")) {
    ASSIGN_OR_RETURN(meta.add_space_prefix, file.GetBool("tokenizer.ggml.add_space_prefix"));
  }
  ASSIGN_OR_RETURN(SpmVocab vocab, SpmVocabFromGguf(std::move(meta)));
  ASSIGN_OR_RETURN(std::unique_ptr<SpmTokenizer> tok, SpmTokenizer::Create(std::move(vocab)));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

namespace {

// A llama2.c tokenizer file (tok512.bin, tokenizer.bin) of `vocab_size` tokens (-1: all).
Result<std::unique_ptr<Tokenizer>> Tok512Tokenizer(const std::string& path, int32_t vocab_size) {
  ASSIGN_OR_RETURN(SpmVocab vocab, ReadTok512(path, vocab_size));
  ASSIGN_OR_RETURN(std::unique_ptr<SpmTokenizer> tok, SpmTokenizer::Create(std::move(vocab)));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

// Binds a Llama model over `reader` and pairs it with its tokenizer.
Result<LoadedModel> FinishLlama(std::unique_ptr<CheckpointReader> file, LlamaConfig c,
                                std::unique_ptr<Tokenizer> tok, const LoadOptions& o,
                                const char* format) {
  c.bos_id = tok->bos_id();
  c.eos_id = tok->eos_id();
  c.cache_k = o.cache_type_k;
  c.cache_v = o.cache_type_v;
  const std::string& path = o.model_path;
  std::shared_ptr<const CheckpointReader> reader(std::move(file));
  ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model, LlamaModel::Load(reader, c));
  LoadedModel m;
  m.model = std::move(model);
  m.tokenizer = std::move(tok);
  m.path = path;
  m.format = format;
  if (c.eos_id >= 0) m.stop_ids.push_back(c.eos_id);
  if (m.format == "llama2c" && c.bos_id >= 0) m.stop_ids.push_back(c.bos_id);
  return m;
}

Result<LoadedModel> LoadLlama2c(const LoadOptions& o) {
  ASSIGN_OR_RETURN(std::unique_ptr<Llama2cFile> file, OpenLlama2c(o.model_path));
  const Llama2cConfig& h = file->config();
  LlamaConfig c = LlamaConfigFromLlama2c(h);
  // The tokenizer: --tokenizer, else tok<V>.bin or tokenizer.bin beside the model.
  std::string tok_path = o.tokenizer_path;
  if (tok_path.empty()) {
    const fs::path dir = fs::path(o.model_path).parent_path();
    for (const std::string& name :
         {"tok" + std::to_string(h.vocab_size) + ".bin", std::string("tokenizer.bin")}) {
      if (fs::exists(dir / name)) {
        tok_path = (dir / name).string();
        break;
      }
    }
    if (tok_path.empty()) {
      return NotFound(o.model_path + ": no tokenizer found beside the model (looked for tok" +
                          std::to_string(h.vocab_size) + ".bin and tokenizer.bin)",
                      "pass --tokenizer PATH");
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, Tok512Tokenizer(tok_path, h.vocab_size));
  return FinishLlama(std::move(file), c, std::move(tok), o, "llama2c");
}

// A GGUF file's `tokenizer.chat_template`, "" when it has none.
Result<std::string> GgufChatTemplate(const GgufFile& file) {
  if (!file.HasMeta("tokenizer.chat_template")) return std::string();
  return file.GetString("tokenizer.chat_template");
}

// A llama.cpp `deepseek4` GGUF file. Its tokenizer: --tokenizer when given,
// else the file's own `tokenizer.ggml.*` vocabulary (the converter copies the
// release's tokenizer.json into it), else none (the model runs on ids).
Result<LoadedModel> LoadDeepSeekV4GgufFile(std::vector<std::unique_ptr<GgufFile>> parts,
                                           const LoadOptions& o) {
  const GgufFile* file = parts.front().get();
  deepseek_v4::LoadOptions lo;
  lo.threads = o.threads > 0 ? o.threads : ThreadPool::DefaultThreads();
  lo.o_bf16 = o.wo_a_bf16;
  if (o.swa_full) lo.rollback.horizon = deepseek_v4::RollbackOptions::kAll;
  std::unique_ptr<Tokenizer> gguf_tokenizer;
  if (o.tokenizer_path.empty() && file->HasMeta("tokenizer.ggml.model")) {
    ASSIGN_OR_RETURN(gguf_tokenizer, TokenizerFromGguf(*file));
  }
  ASSIGN_OR_RETURN(std::string chat_template, GgufChatTemplate(*file));
  std::unique_ptr<GgufFile> draft_file;
  if (!o.draft_model_path.empty()) {
    if (!EndsWith(o.draft_model_path, ".gguf")) {
      return InvalidArgument(o.draft_model_path + ": a deepseek4 GGUF model takes a GGUF draft",
                             "pass the NextN MTP file (mtp-*.gguf) or DSpark file llama.cpp's "
                             "converter writes");
    }
    ASSIGN_OR_RETURN(draft_file, OpenGguf(o.draft_model_path));
  }
  LoadedModel m;
  ASSIGN_OR_RETURN(m.model, LoadDeepSeekV4Gguf(std::move(parts), lo, std::move(draft_file)));
  if (gguf_tokenizer && gguf_tokenizer->vocab_size() > m.model->info().vocab_size) {
    return InvalidArgument(
        fmt::format("{}: tokenizer.ggml.tokens has {} entries, more than the model's {} "
                    "embedding rows",
                    o.model_path, gguf_tokenizer->vocab_size(), m.model->info().vocab_size),
        "the file's vocabulary does not belong to its weights; pass --tokenizer PATH");
  }
  if (!o.tokenizer_path.empty()) {
    ASSIGN_OR_RETURN(m.tokenizer, LoadTokenizer(o.tokenizer_path));
  } else if (gguf_tokenizer) {
    m.tokenizer = std::move(gguf_tokenizer);
  }
  m.path = o.model_path;
  m.format = "gguf";
  m.chat_template = std::move(chat_template);
  if (m.model->info().eos_id >= 0) m.stop_ids.push_back(m.model->info().eos_id);
  return m;
}

Result<LoadedModel> LoadGguf(const LoadOptions& o) {
  // Any part of a gguf-split set opens the whole set; the first holds the metadata.
  ASSIGN_OR_RETURN(std::vector<std::unique_ptr<GgufFile>> parts, OpenGgufSplit(o.model_path));
  ASSIGN_OR_RETURN(std::string arch, parts.front()->GetString("general.architecture"));
  if (arch == "deepseek4") return LoadDeepSeekV4GgufFile(std::move(parts), o);
  if (!o.draft_model_path.empty()) {
    return InvalidArgument(o.model_path +
                               ": --model-draft applies to deepseek4 GGUF models, "
                               "this one's architecture is '" +
                               arch + "'",
                           "drop --model-draft");
  }
  if (parts.size() > 1) {
    return Unimplemented(fmt::format("{}: a {}-part gguf-split set of architecture '{}'; split "
                                     "GGUF sets are supported for deepseek4 only",
                                     o.model_path, parts.size(), arch),
                         "merge the parts with llama.cpp's gguf-split --merge");
  }
  std::unique_ptr<GgufFile> file = std::move(parts.front());
  // A llama GGUF file carries its own vocabulary, which the weights were
  // trained with; another tokenizer would silently give the model wrong ids.
  if (!o.tokenizer_path.empty()) {
    return InvalidArgument(o.model_path + ": --tokenizer " + o.tokenizer_path +
                               " does not apply to .gguf models (they use the vocabulary "
                               "inside the file)",
                           "drop --tokenizer");
  }
  if (arch != "llama") {
    return Unimplemented(o.model_path + ": GGUF architecture '" + arch + "' is not supported",
                         "supported GGUF architectures: llama, deepseek4");
  }
  auto u32 = [&](const char* key) { return file->GetU32(std::string("llama.") + key); };
  LlamaConfig c;
  ASSIGN_OR_RETURN(c.d_model, u32("embedding_length"));
  ASSIGN_OR_RETURN(c.d_ff, u32("feed_forward_length"));
  ASSIGN_OR_RETURN(c.n_layers, u32("block_count"));
  ASSIGN_OR_RETURN(c.n_heads, u32("attention.head_count"));
  c.n_kv_heads = c.n_heads;
  if (file->HasMeta("llama.attention.head_count_kv")) {
    ASSIGN_OR_RETURN(c.n_kv_heads, u32("attention.head_count_kv"));
  }
  ASSIGN_OR_RETURN(c.max_context, u32("context_length"));
  if (file->HasMeta("llama.rope.freq_base")) {
    ASSIGN_OR_RETURN(c.rope_theta, file->GetF32("llama.rope.freq_base"));
  }
  if (file->HasMeta("llama.attention.layer_norm_rms_epsilon")) {
    ASSIGN_OR_RETURN(c.norm_eps, file->GetF32("llama.attention.layer_norm_rms_epsilon"));
  }
  if (file->HasMeta("llama.rope.dimension_count")) {
    ASSIGN_OR_RETURN(uint32_t rot, u32("rope.dimension_count"));
    if (c.n_heads > 0 && rot != c.d_model / c.n_heads) {
      return Unimplemented(o.model_path + ": llama.rope.dimension_count " + std::to_string(rot) +
                           " differs from head_dim; partial RoPE is not supported for llama");
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, TokenizerFromGguf(*file));
  c.vocab_size = tok->vocab_size();
  ASSIGN_OR_RETURN(std::string chat_template, GgufChatTemplate(*file));
  ASSIGN_OR_RETURN(LoadedModel m, FinishLlama(std::move(file), c, std::move(tok), o, "gguf"));
  m.chat_template = std::move(chat_template);
  return m;
}

// A checkpoint directory's stop ids: generation_config.json `eos_token_id`
// (an id or a list of ids) when the file has one, else {eos_id}.
Result<std::vector<int32_t>> DirectoryStopIds(const fs::path& dir, int32_t eos_id) {
  std::vector<int32_t> ids;
  if (eos_id >= 0) ids.push_back(eos_id);
  const fs::path path = dir / "generation_config.json";
  if (!fs::exists(path)) return ids;
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path.string()));
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument(path.string() + ": not a JSON object",
                           "fix or remove the file; it names the tokens that end generation");
  }
  const auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return ids;
  const nlohmann::json list = it->is_array() ? *it : nlohmann::json::array({*it});
  ids.clear();
  for (const auto& v : list) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
      return InvalidArgument(
          path.string() + ": eos_token_id entry " + v.dump() + " is not a token id",
          "eos_token_id is a non-negative integer or a list of them");
    }
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

Result<LoadedModel> LoadDirectory(const LoadOptions& o) {
  const fs::path dir(o.model_path);
  const std::string config_path = (dir / "config.json").string();
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(config_path));
  auto config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return InvalidArgument(config_path + ": not a JSON object", "is this a model directory?");
  }
  const auto type_it = config.find("model_type");
  const std::string type =
      type_it != config.end() && type_it->is_string() ? type_it->get<std::string>() : "";
  const int threads = o.threads > 0 ? o.threads : ThreadPool::DefaultThreads();
  LoadedModel m;
  if (type == "deepseek_v4") {
    deepseek_v4::LoadOptions lo;
    lo.threads = threads;
    lo.o_bf16 = o.wo_a_bf16;
    if (o.swa_full) lo.rollback.horizon = deepseek_v4::RollbackOptions::kAll;
    ASSIGN_OR_RETURN(m.model, LoadDeepSeekV4(o.model_path, lo));
  } else if (type == "deepseek_v41") {
    // The Engram hash runs over the tokenizer's compressed token map, so the
    // tokenizer comes first.
    const std::string tok = !o.tokenizer_path.empty() ? o.tokenizer_path : o.model_path;
    if (fs::exists(dir / "tokenizer.json") || fs::exists(dir / "tokenizer.json.gz") ||
        !o.tokenizer_path.empty()) {
      ASSIGN_OR_RETURN(m.tokenizer, LoadTokenizer(tok));
    }
    deepseek_v4::LoadOptions lo;
    lo.threads = threads;
    if (o.swa_full) lo.rollback.horizon = deepseek_v4::RollbackOptions::kAll;
    lo.index_key_reading = o.v41_owner_index_keys ? deepseek_v4::IndexKeyReading::kOwner
                                                  : deepseek_v4::IndexKeyReading::kReference;
    const bool engram = config.contains("engram_layer_ids") &&
                        config["engram_layer_ids"].is_array() &&
                        !config["engram_layer_ids"].empty();
    if (engram && !m.tokenizer && fs::exists(dir / "engram_token_map.i32")) {
      // A model without its tokenizer (token-id prompts only) may carry the
      // map itself: int32 [vocab] compressed ids, in order of first appearance.
      ASSIGN_OR_RETURN(std::string bytes,
                       ReadFileToString((dir / "engram_token_map.i32").string()));
      if (bytes.empty() || bytes.size() % 4 != 0) {
        return InvalidArgument((dir / "engram_token_map.i32").string() + ": " +
                                   std::to_string(bytes.size()) + " bytes, not int32 ids",
                               "write one little-endian int32 compressed id per token id");
      }
      lo.engram_token_map.resize(bytes.size() / 4);
      std::memcpy(lo.engram_token_map.data(), bytes.data(), bytes.size());
      int32_t next = 0;  // ids are handed out in order of first appearance
      for (size_t i = 0; i < lo.engram_token_map.size(); ++i) {
        const int32_t id = lo.engram_token_map[i];
        if (id < 0 || id > next) {
          return InvalidArgument((dir / "engram_token_map.i32").string() + ": token " +
                                     std::to_string(i) + " maps to " + std::to_string(id) +
                                     ", expected an id in [0, " + std::to_string(next) + "]",
                                 "compressed ids are numbered in order of first appearance");
        }
        if (id == next) ++next;
      }
      lo.engram_token_count = next;
    } else if (engram) {
      const auto* bpe = dynamic_cast<const BpeTokenizer*>(m.tokenizer.get());
      if (bpe == nullptr) {
        return InvalidArgument(config_path +
                                   ": the Engram layers hash n-grams over the compressed ids of "
                                   "the model's byte-level BPE tokenizer, and none was found",
                               "put the release's tokenizer.json beside config.json or pass "
                               "--tokenizer");
      }
      ASSIGN_OR_RETURN(CompressedTokenMap map, BuildCompressedTokenMap(*bpe));
      lo.engram_token_map = std::move(map.ids);
      lo.engram_token_count = map.count;
    }
    ASSIGN_OR_RETURN(m.model, LoadDeepSeekV41(o.model_path, lo));
  } else if (type == seed::kSeedModelType) {
    // The seed-article family (docs/seed-mechanisms.md); tokenizer: tokenizer.json or a
    // llama2.c tokenizer tok<V>.bin / tok512.bin beside the config.
    ASSIGN_OR_RETURN(m.model, LoadSeedModel(o.model_path, threads));
  } else {
    return Unimplemented(config_path + ": model_type '" + type + "' is not supported",
                         "supported checkpoint directories: deepseek_v4, deepseek_v41, " +
                             std::string(seed::kSeedModelType));
  }
  const std::string tok_path = !o.tokenizer_path.empty() ? o.tokenizer_path : o.model_path;
  if (!m.tokenizer && (!o.tokenizer_path.empty() || fs::exists(dir / "tokenizer.json") ||
                       fs::exists(dir / "tokenizer.json.gz"))) {
    ASSIGN_OR_RETURN(m.tokenizer, LoadTokenizer(tok_path));
  }
  if (!m.tokenizer) {
    // A small model trained on a llama2.c vocabulary (models/deepseek_v4_stories,
    // the seed family) carries tok<V>.bin or tok512.bin beside its config.
    const int64_t V = m.model->info().vocab_size;
    for (const std::string& name :
         {"tok" + std::to_string(V) + ".bin", std::string("tok512.bin")}) {
      if (!fs::exists(dir / name)) continue;
      ASSIGN_OR_RETURN(m.tokenizer,
                       Tok512Tokenizer((dir / name).string(), static_cast<int32_t>(V)));
      break;
    }
  }
  m.path = o.model_path;
  m.format = "safetensors";
  ASSIGN_OR_RETURN(m.stop_ids, DirectoryStopIds(dir, m.model->info().eos_id));
  return m;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    for (const char* name : {"tokenizer.json", "tokenizer.json.gz"}) {
      if (fs::exists(dir / name)) {
        const fs::path config = dir / "tokenizer_config.json";
        ASSIGN_OR_RETURN(
            std::unique_ptr<BpeTokenizer> tok,
            LoadTokenizerJson((dir / name).string(), fs::exists(config) ? config.string() : ""));
        return std::unique_ptr<Tokenizer>(std::move(tok));
      }
    }
    return NotFound(path + ": the directory has no tokenizer.json",
                    "pass a tokenizer.json, a GGUF file or a model directory that has one");
  }
  if (!fs::exists(path, ec)) return NotFound(path + ": no such file", "check the tokenizer path");
  if (EndsWith(path, ".gguf")) {
    ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, OpenGguf(path));
    return TokenizerFromGguf(*file);
  }
  if (EndsWith(path, ".json") || EndsWith(path, ".json.gz")) {
    ASSIGN_OR_RETURN(std::unique_ptr<BpeTokenizer> tok, LoadTokenizerJson(path));
    return std::unique_ptr<Tokenizer>(std::move(tok));
  }
  if (EndsWith(path, ".bin")) return Tok512Tokenizer(path, -1);
  return Unimplemented(path + ": unknown tokenizer format",
                       "supported: tokenizer.json(.gz), .gguf, llama2.c tokenizer .bin, a model "
                       "directory");
}

namespace {

// `rel` under the checkout dsv4 runs from: next to the executable or one of its
// parents, else the source tree it was built from. Empty when neither has it.
std::string FindInCheckout(const fs::path& rel) {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (fs::path dir = exe.parent_path(); !dir.empty(); dir = dir.parent_path()) {
      if (fs::exists(dir / rel, ec)) return (dir / rel).string();
      if (dir == dir.root_path()) break;
    }
  }
  const fs::path src = fs::path(DSV4_SOURCE_DIR) / rel;
  if (fs::exists(src, ec)) return src.string();
  return "";
}

}  // namespace

std::string DefaultModelPath() { return BundledModelPath(kDefaultModelName); }

std::string BundledModelPath(const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
    return "";
  }
  const std::string dir = FindInCheckout(fs::path("models") / name);
  if (dir.empty()) return "";
  std::error_code ec;
  if (fs::exists(fs::path(dir) / "config.json", ec)) return dir;  // a checkpoint directory
  const fs::path bin = fs::path(dir) / (name + ".bin");           // a llama2.c model
  if (fs::exists(bin, ec)) return bin.string();
  return "";
}

namespace {

uint64_t LoadHash(const LoadOptions& o, const LoadedModel& m) {
  Hasher h(0x64737634);  // "dsv4"
  h.Update(m.format).Update(m.model->info().architecture);
  h.UpdatePod(m.model->info().vocab_size).UpdatePod(m.model->info().n_params);
  h.UpdatePod(static_cast<int>(o.kquant_activations));
  h.UpdatePod(static_cast<int>(o.cache_type_k)).UpdatePod(static_cast<int>(o.cache_type_v));
  h.UpdatePod(o.wo_a_bf16.has_value() ? (*o.wo_a_bf16 ? 2 : 1) : 0).UpdatePod(o.swa_full);
  h.UpdatePod(o.v41_owner_index_keys);
  return h.digest();
}

// Streams a DeepSeek-V4 model's routed experts when its files exceed the budget.
Status ApplyRamBudget(const LoadOptions& o, const std::vector<std::string>& files, LoadedModel& m) {
  int64_t budget = o.ram_budget;
  if (budget == LoadOptions::kRamBudgetAuto) budget = AvailableMemoryBytes() / 10 * 9;
  if (budget <= 0) return Status::Ok();
  int64_t total = 0;
  std::error_code ec;
  for (const std::string& f : files) total += static_cast<int64_t>(fs::file_size(f, ec));
  if (total <= budget) return Status::Ok();
  // DeepSeek-V4 and V4.1 stream their routed experts. V4.1's Engram tables
  // are read a few rows a token and stay on disk: the budget is for the rest.
  auto* v4 = dynamic_cast<deepseek_v4::DeepSeekV4Model*>(m.model.get());
  auto* v41 = dynamic_cast<deepseek_v4::DeepSeekV41Model*>(m.model.get());
  if (v41 != nullptr) {
    total -= v41->engram_table_bytes();
    if (total <= budget) return Status::Ok();
  }
  if (v4 == nullptr && v41 == nullptr) {
    if (o.ram_budget == LoadOptions::kRamBudgetAuto) return Status::Ok();  // paged by the kernel
    return Unimplemented(o.model_path + ": " + std::to_string(total >> 20) +
                             " MiB of weights exceed --ram-budget, and only DeepSeek-V4 models "
                             "stream their experts",
                         "raise --ram-budget or pass --ram-budget off");
  }
  const int64_t experts = v4 != nullptr ? v4->routed_expert_bytes() : v41->routed_expert_bytes();
  const int64_t reserve = std::max<int64_t>(int64_t{256} << 20, budget / 8);
  const int64_t cache = budget - (total - experts) - reserve;
  if (cache <= 0) {
    return ResourceExhausted(o.model_path + ": --ram-budget " + std::to_string(budget >> 20) +
                                 " MiB does not hold the " +
                                 std::to_string((total - experts) >> 20) +
                                 " MiB of weights other than the routed experts" +
                                 (v41 != nullptr ? " and the Engram tables" : "") +
                                 ", and a reserve of " + std::to_string(reserve >> 20) + " MiB",
                             "raise --ram-budget");
  }
  RETURN_IF_ERROR(
      (v4 != nullptr ? v4->StreamExperts(cache, o.expert_read_ahead) : v41->StreamExperts(cache))
          .WithContext("--ram-budget"));
  const ExpertStreamStats st = *m.model->expert_stream_stats();
  m.expert_cache_bytes = st.slots * st.slot_bytes;
  LOG_INFO(
      "--ram-budget {} MiB: routed experts ({} MiB) streamed through a {} MiB cache ({} "
      "experts{})",
      budget >> 20, experts >> 20, m.expert_cache_bytes >> 20, st.slots,
      st.direct_io ? ", direct I/O" : "");
  return Status::Ok();
}

}  // namespace

int64_t AvailableMemoryBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

Result<int64_t> ParseRamBudget(std::string_view text) {
  if (text == "auto") return LoadOptions::kRamBudgetAuto;
  if (text == "off" || text == "0") return int64_t{0};
  std::string t(text);
  for (const char* suffix : {"iB", "B"}) {
    if (EndsWith(t, suffix)) {
      t.resize(t.size() - std::strlen(suffix));
      break;
    }
  }
  int shift = 0;
  if (!t.empty()) {
    switch (std::toupper(static_cast<unsigned char>(t.back()))) {
      case 'K':
        shift = 10;
        break;
      case 'M':
        shift = 20;
        break;
      case 'G':
        shift = 30;
        break;
      case 'T':
        shift = 40;
        break;
      default:
        break;
    }
    if (shift > 0) t.pop_back();
  }
  char* end = nullptr;
  const double v = t.empty() ? -1 : std::strtod(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size() || !(v > 0) || v * std::ldexp(1.0, shift) > 9e18) {
    return InvalidArgument("--ram-budget " + std::string(text) + " is not a size",
                           "pass e.g. 24G, 512M, auto or off");
  }
  return static_cast<int64_t>(v * std::ldexp(1.0, shift));
}

Result<LoadedModel> LoadModel(const LoadOptions& options) {
  if (DistributedLaunch()) return LoadDistributed(options);
  return LoadModelInProcess(options);
}

Result<LoadedModel> LoadModelInProcess(const LoadOptions& options) {
  LoadOptions o = options;
  if (o.model_path.empty()) {
    o.model_path = DefaultModelPath();
    if (o.model_path.empty()) {
      return NotFound(
          std::string("the default model models/") + kDefaultModelName + " was not found",
          "pass --model PATH, or run from a dsv4 checkout");
    }
  }
  std::error_code ec;
  if (!fs::exists(o.model_path, ec)) {
    // A bundled model's name (stories260K, deepseek_v4_stories) stands for its path.
    const std::string bundled = BundledModelPath(o.model_path);
    if (bundled.empty()) {
      return NotFound(o.model_path + ": no such file or directory",
                      std::string("check the --model path; bundled models by name: ") +
                          kDefaultModelName + ", stories260K");
    }
    o.model_path = bundled;
  }
  if (!o.draft_model_path.empty()) {
    if (!fs::exists(o.draft_model_path, ec)) {
      return NotFound(o.draft_model_path + ": no such file", "check the --model-draft path");
    }
    if (!EndsWith(o.model_path, ".gguf")) {
      return InvalidArgument(o.model_path + ": --model-draft applies to deepseek4 GGUF models",
                             "a checkpoint directory carries its draft layers (mtp.*) itself; "
                             "drop --model-draft");
    }
  }
  ops::SetKQuantActivations(o.kquant_activations);
  Result<LoadedModel> r = NotFound("");
  if (fs::is_directory(o.model_path, ec)) {
    if (o.cache_type_k != DType::kF32 || o.cache_type_v != DType::kF32) {
      return InvalidArgument(o.model_path +
                                 ": --cache-type-k/--cache-type-v f16 apply to llama "
                                 "models (.gguf, llama2.c .bin)",
                             "a checkpoint directory's model keeps its own cache; drop the flags");
    }
    r = LoadDirectory(o);
  } else if (EndsWith(o.model_path, ".gguf")) {
    r = LoadGguf(o);
  } else if (EndsWith(o.model_path, ".bin")) {
    r = LoadLlama2c(o);
  } else {
    return Unimplemented(o.model_path + ": unknown model format",
                         "supported: llama2.c .bin, .gguf, a DeepSeek-V4 checkpoint directory");
  }
  if (r.ok()) {
    r->model->SetThreads(o.threads > 0 ? o.threads : ThreadPool::DefaultThreads());
  }
  if (!r.ok()) return r;
  // A checkpoint directory's weights are its .safetensors shards; a file model is the file.
  std::vector<std::string> files;
  if (fs::is_directory(o.model_path, ec)) {
    for (const fs::directory_entry& e : fs::directory_iterator(o.model_path, ec)) {
      if (e.is_regular_file(ec) && EndsWith(e.path().string(), ".safetensors")) {
        files.push_back(e.path().string());
      }
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(o.model_path);
  }
  if (o.mlock) {
    for (const std::string& path : files) {
      int n = 0;
      RETURN_IF_ERROR(MappedFile::LockOpenMappings(path, &n).WithContext("--mlock"));
      r->locked_mappings += n;
    }
  }
  if (!o.draft_model_path.empty()) files.push_back(o.draft_model_path);
  RETURN_IF_ERROR(ApplyRamBudget(o, files, *r));  // weights only
  if (fs::is_directory(o.model_path, ec)) {
    files.push_back((fs::path(o.model_path) / "config.json").string());
  }
  r->files = std::move(files);
  r->load_hash = LoadHash(o, *r);
  return r;
}

uint64_t ModelFingerprint(const LoadedModel& m) {
  Hasher h(m.load_hash);
  constexpr uint64_t kSample = 1 << 20;
  std::vector<char> buf(kSample);
  for (const std::string& path : m.files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) continue;
    in.seekg(0, std::ios::end);
    const uint64_t size = static_cast<uint64_t>(in.tellg());
    h.UpdatePod(size);
    for (uint64_t at : {uint64_t{0}, size > kSample ? size - kSample : uint64_t{0}}) {
      in.seekg(static_cast<std::streamoff>(at));
      in.read(buf.data(), static_cast<std::streamsize>(std::min(size, kSample)));
      h.Update(buf.data(), static_cast<size_t>(in.gcount()));
    }
  }
  return h.digest();
}

Result<std::string> ReadTextFile(const std::string& path) { return ReadFileToString(path); }

}  // namespace dsv4
