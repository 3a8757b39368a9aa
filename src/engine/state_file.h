// Sequence states on disk: prompt caches that outlive a request and a process.
//
// A state file holds one sequence's decoding state (SequenceCache::SaveState)
// after a token prefix, guarded by the model's fingerprint and a checksum:
//
//   offset  field
//   0       magic "DSV4KVS\n"
//   8       u32 version (1), u32 0
//   16      u64 model fingerprint (LoadedModel::fingerprint)
//   24      u64 n tokens, u64 state bytes S
//   40      i32 tokens [n]
//   40+4n   state [S]
//   ...     u64 Hash64 of every byte before it
//
// A file that is truncated, corrupt or made for another model is refused
// (DataLoss / InvalidArgument) and never reaches a cache. Files are written
// atomically: a temporary file in the same directory, fsync, rename, so a
// crash leaves either the old state or the new one, never half of one.
//
// PromptStateStore is the server's prefix cache on disk (dsv4 serve
// --kv-cache-dir): one file per saved prompt, named by a hash of the
// fingerprint and the tokens, found again by the longest saved prefix of a
// new prompt, evicted least recently used beyond a size cap. The CLI's
// --prompt-cache keeps a single file (LoadPromptCache / SavePromptCache).
#ifndef DSV4_ENGINE_STATE_FILE_H_
#define DSV4_ENGINE_STATE_FILE_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "model/model.h"

namespace dsv4 {

inline constexpr char kStateFileExtension[] = ".dsv4kv";

struct StateFile {
  uint64_t fingerprint = 0;
  std::vector<int32_t> tokens;
  std::vector<uint8_t> state;  // SequenceCache::SaveState's bytes
};

// The file's bytes (format above).
std::vector<uint8_t> EncodeStateFile(uint64_t fingerprint, std::span<const int32_t> tokens,
                                     std::span<const uint8_t> state);
// Checks magic, version, sizes, checksum and fingerprint. Errors: DataLoss
// (truncated, bad checksum, not a state file), InvalidArgument (another
// model's fingerprint). `what` names the file in messages.
Result<StateFile> DecodeStateFile(std::span<const uint8_t> bytes, uint64_t fingerprint,
                                  const std::string& what);
// The fingerprint and tokens from the head of a state file without reading
// its state (the store's index); the checksum is checked when it is loaded.
Result<StateFile> ReadStateFileHead(const std::string& path);

// Reads the state file at `path` into `cache` when it is this model's and its
// tokens begin `prompt` (the cache then holds them all; its length is the
// count). Errors: the file's (Io, DataLoss, InvalidArgument for another
// model), NotFound when its tokens do not begin the prompt, LoadState's; the
// cache is then empty. *file_bytes: the bytes read.
Status LoadStateFile(const std::string& path, uint64_t fingerprint, std::span<const int32_t> prompt,
                     SequenceCache& cache, int64_t* file_bytes);

// Writes `bytes` to `path` atomically: `path`.tmp.<pid>.<n> in the same
// directory, fsync, rename over `path`. Io errors name the file.
Status WriteFileAtomic(const std::string& path, std::span<const uint8_t> bytes);

// `dsv4 run --prompt-cache FILE` (llama.cpp's flag): loads FILE's state into
// `cache` when it is this model's and its tokens begin the prompt, and returns
// the prompt tokens it holds (≤ prompt.size() − 1, so the last one runs and
// gives the first logits; 0 when the file is missing or not usable, with a
// warning unless it is missing). `cache` is empty on 0.
int64_t LoadPromptCache(const std::string& path, uint64_t fingerprint,
                        std::span<const int32_t> prompt, SequenceCache& cache);
// Saves `cache` (which holds `tokens`) to `path`, atomically.
Status SavePromptCache(const std::string& path, uint64_t fingerprint,
                       std::span<const int32_t> tokens, const SequenceCache& cache);

struct PromptStoreOptions {
  std::string dir;                       // created if missing
  uint64_t fingerprint = 0;              // LoadedModel::fingerprint
  int64_t max_bytes = int64_t{8} << 30;  // the files of this model together
};

struct PromptStoreStats {
  int64_t files = 0;  // states of this model on disk
  int64_t bytes = 0;  // their size
  int64_t hits = 0;   // states loaded into a cache
  int64_t hit_tokens = 0;
  int64_t read_bytes = 0;
  int64_t writes = 0;  // states written
  int64_t write_bytes = 0;
  int64_t evictions = 0;  // files removed by the size cap
  int64_t rejected = 0;   // files refused on load (corrupt, truncated, foreign)
};

class PromptStateStore {
 public:
  // Opens (creating) the directory and lists this model's states from the
  // heads of its files; temporary files of an interrupted write are removed,
  // other models' files are left alone and corrupt ones removed (each with a
  // warning). Errors: the directory cannot be created or read (Io).
  static Result<std::unique_ptr<PromptStateStore>> Open(const PromptStoreOptions& options);
  ~PromptStateStore();  // finishes the writes in flight

  // The most tokens of `prompt` a saved state holds: the longest saved token
  // list that is a prefix of `prompt` (0: none).
  int64_t Longest(std::span<const int32_t> prompt) const;
  // Loads that state into `cache` and returns its token count; 0 (cache
  // empty) when there is none or it cannot be loaded (warning; the file is
  // removed).
  int64_t Load(std::span<const int32_t> prompt, SequenceCache& cache);
  // Saves `cache`, which holds `tokens`, unless a state of exactly these
  // tokens is saved or it exceeds the cap on its own. The state is copied now
  // and written on the store's thread.
  void Save(std::span<const int32_t> tokens, const SequenceCache& cache);
  // Waits until every Save so far is on disk (tests, benchmarks).
  void Flush();
  PromptStoreStats stats() const;

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    std::string path;
    int64_t bytes = 0;
    uint64_t last_used = 0;
  };
  struct Job {
    std::vector<int32_t> tokens;
    std::vector<uint8_t> state;
  };
  explicit PromptStateStore(PromptStoreOptions options);
  void Writer();
  void EvictLocked();  // to max_bytes, least recently used first
  const Entry* FindLocked(std::span<const int32_t> prompt) const;
  // Drops the entry of `path` (and the file, unless told not to).
  void RemoveLocked(const std::string& path, bool delete_file = true);

  PromptStoreOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
  PromptStoreStats stats_;
  std::deque<Job> jobs_;
  bool writing_ = false;  // a job is being written: the tokens of it
  std::vector<int32_t> in_flight_;
  bool stop_ = false;
  std::thread writer_;
};

}  // namespace dsv4

#endif  // DSV4_ENGINE_STATE_FILE_H_
