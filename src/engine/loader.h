// LoadModel: opens a model file or directory, detects its format, reads its
// config, binds the weights and loads the tokenizer — everything a front end
// needs before it can generate.
//   *.bin      llama2.c "v0" checkpoint; tokenizer from --tokenizer or a
//              tok512.bin / tokenizer.bin beside it
//   *.gguf     GGUF (arch `llama`), vocabulary inside
//   DIR        a checkpoint directory whose config.json names model_type
//              deepseek_v4 (safetensors, official or HF names); the
//              tokenizer is DIR/tokenizer.json when present, else none
//              (ids in, ids out)
#ifndef DSV4_ENGINE_LOADER_H_
#define DSV4_ENGINE_LOADER_H_

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/model.h"
#include "ops/matmul.h"
#include "tensor/dtype.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {

class GgufFile;

struct LoadOptions {
  std::string model_path;      // empty: the default model; or a bundled model's name
  std::string tokenizer_path;  // empty: found from the model
  // A draft model for speculative decoding in a file of its own (llama.cpp's
  // -md): a deepseek4 GGUF's NextN MTP file (`mtp-*.gguf`) or DSpark module
  // (architecture dflash). Empty: the model's own draft layers, if any.
  std::string draft_model_path = "";
  int threads = 0;  // 0: all hardware threads
  // Keep the model's weight files resident (MappedFile::Lock): every page read
  // at load, none paged out later (llama.cpp's --mlock). Fails the load with
  // the locked-memory limit and a hint where the process may not lock them.
  bool mlock = false;
  // How GGUF q4_K/q6_K/q8_0 weights meet their activations, set for the
  // process at load (ops::SetKQuantActivations): quantised to 8 bits as
  // llama.cpp does (q8_K; q8_0 for q8_0 weights; the default), or f32.
  ops::KQuantActivations kquant_activations = ops::KQuantActivations::kQ8K;
  // Llama models' KV cache element types (LlamaConfig::cache_k / cache_v):
  // f32 (default) or f16. Other models reject f16 at load.
  DType cache_type_k = DType::kF32;
  DType cache_type_v = DType::kF32;
  // DeepSeek-V4 checkpoints: wo_a's input, the attention output, rounded to
  // bf16 as the released code holds it (true) or kept f32 (false); unset: the
  // checkpoint's numerics decide (bf16 with the release's, deepseek_v4::
  // NumericsOptions::o_bf16). Other models ignore it.
  std::optional<bool> wo_a_bf16 = std::nullopt;
  // DeepSeek-V4: keep every sliding-window and compressor row of a sequence
  // (llama.cpp's --swa-full), so a Truncate to any length is in place: the
  // serving engine then reuses any common prefix of a slot (more memory per
  // token: the window kv and compressor rows). Default: the last 16 tokens'
  // rows beyond what the next token needs, and a checkpoint every 16384.
  bool swa_full = false;
  // DeepSeek-V4.1: the index keys an index source scores (--v41-index-keys):
  // the reference's shared slot (false, the default: what DeepSeek's code
  // computes) or each layer's own kv source's keys (true: the architectural
  // reading, a different model; model/deepseek_v4/csa2.h).
  bool v41_owner_index_keys = false;
  // The RAM the model may take (--ram-budget): when its weight files are
  // larger, a DeepSeek-V4 model streams its routed experts from them through
  // a cache (model/deepseek_v4/expert_cache.h) sized to what the budget
  // leaves after the other weights and a reserve (an eighth of the budget, at
  // least 256 MiB) for caches and activations. kRamBudgetAuto: 90% of the
  // memory available at load (MemAvailable); 0: no budget (plain mmap).
  int64_t ram_budget = kRamBudgetAuto;
  static constexpr int64_t kRamBudgetAuto = -1;
  // Streamed experts: each layer reads ahead the experts the next one will
  // likely pick (--expert-read-ahead; off by default: where the guess is often
  // wrong the extra reads cost more disk time than they hide, docs/benchmarks.md).
  bool expert_read_ahead = false;
  // Under `mpirun -n N` (engine/distributed.h): how the model is split over
  // the N processes. `parallel`: "pipeline" (layers split), "expert"
  // (routed experts split) or both (below); `layers_split`: "auto" or one layer count per rank
  // ("10,11,11,11"); `mpi_timeout_s`: how long a rank waits for another inside
  // a call before the job ends with an error naming both (0: forever).
  // "pipeline,expert": `stages` stages of N / stages ranks each, a stage's
  // ranks splitting its routed experts.
  std::string parallel = "pipeline";
  std::string layers_split = "auto";
  int stages = 2;
  double mpi_timeout_s = 300;
  // Pipeline micro-batches (model.h PipelineStage::micro_batch): tokens per
  // piece of a one-sequence call; 0: auto (ceil(T / ranks), at least 16);
  // -1: off.
  int64_t pipeline_micro_batch = 0;
};

struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the model ships none
  std::string path;                      // what was loaded
  std::string format;                    // "llama2c", "gguf", "safetensors"
  // The model file's own chat template (a GGUF's `tokenizer.chat_template`,
  // Jinja source); empty when it has none.
  std::string chat_template;
  // LoadOptions::ram_budget: the bytes of the routed-expert cache (0: the
  // experts are mapped as the rest).
  int64_t expert_cache_bytes = 0;
  // LoadOptions::mlock: how many of the model's mappings of its weight files
  // were locked (they stay locked while the model maps them).
  int locked_mappings = 0;
  // The token ids that end generation (sampled, not emitted): a checkpoint
  // directory's generation_config.json `eos_token_id` (one id or a list, as
  // transformers reads it), else the model's EOS; llama2.c models add BOS,
  // which delimits their stories. Never BOS otherwise.
  std::vector<int32_t> stop_ids;
  // The files the model was read from (weights, a directory's config.json, a
  // draft file), and a hash of its format, architecture and the load options
  // that change what a cache holds or how it is computed: ModelFingerprint's
  // inputs.
  std::vector<std::string> files;
  uint64_t load_hash = 0;
  bool IsStop(int32_t id) const {
    return std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end();
  }
};

// Under mpirun with several processes, LoadDistributed (engine/distributed.h):
// on ranks other than 0 it does not return.
Result<LoadedModel> LoadModel(const LoadOptions& options);
// The load itself, in this process alone (LoadDistributed's part on each rank).
Result<LoadedModel> LoadModelInProcess(const LoadOptions& options);

// What identifies a loaded model's numerics for saved sequence states
// (engine/state_file.h): LoadedModel::load_hash and each of its files' size
// and first and last MiB (a file replaced by another gives another
// fingerprint; its path does not matter). Reads those bytes: called only
// where states are kept.
uint64_t ModelFingerprint(const LoadedModel& m);

// "auto", "off" / "0", or a size with an optional binary unit: "24G", "512M",
// "1.5T" (K, M, G, T; with or without "iB"/"B"). Errors name the flag.
Result<int64_t> ParseRamBudget(std::string_view text);
// MemAvailable of /proc/meminfo in bytes (0 when unreadable).
int64_t AvailableMemoryBytes();

// A tokenizer on its own: a tokenizer.json (or .json.gz), a GGUF file (its
// `llama` or `gpt2` vocabulary), a llama2.c tokenizer .bin, or a model
// directory holding tokenizer.json.
Result<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path);

// The vocabulary inside a GGUF file: `tokenizer.ggml.model` "llama"
// (SentencePiece) or "gpt2" (byte-level BPE, its pre-tokenizer named by
// `tokenizer.ggml.pre`; a deepseek4 file's "joyai-llm" is DeepSeek-V3/V4's).
// Errors name the file and the key that is missing or malformed.
Result<std::unique_ptr<Tokenizer>> TokenizerFromGguf(const GgufFile& file);

// The bundled default model: the DeepSeek-V4 student distilled from stories260K
// (models/deepseek_v4_stories, tools/train/).
inline constexpr const char* kDefaultModelName = "deepseek_v4_stories";

// A model bundled under models/<name>/, searched for next to the executable (and
// its parents) and in the source tree it was built from: the directory when it is
// a checkpoint (config.json), else models/<name>/<name>.bin (a llama2.c model such
// as stories260K). Empty when not found or when `name` is a path.
std::string BundledModelPath(const std::string& name);

// BundledModelPath(kDefaultModelName).
std::string DefaultModelPath();

// The whole of a file the front ends read (prompts, messages, documents, id
// lists). Errors name the file.
Result<std::string> ReadTextFile(const std::string& path);

}  // namespace dsv4

#endif  // DSV4_ENGINE_LOADER_H_
