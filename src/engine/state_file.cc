// State files and the prompt state store (see state_file.h).
#include "engine/state_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/byte_io.h"
#include "base/hash.h"
#include "base/log.h"
#include "base/mapped_file.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'D', 'S', 'V', '4', 'K', 'V', 'S', '\n'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeadBytes = 40;

std::string Hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// The header fields after the magic; false when they are not a state file's.
struct Head {
  uint64_t fingerprint = 0, n_tokens = 0, state_bytes = 0;
};
Status ParseHead(ByteReader& r, uint64_t file_bytes, Head& h, const std::string& what) {
  char magic[8];
  uint32_t version = 0, zero = 0;
  if (!r.GetBytes(magic, 8) || !r.Get(version) || !r.Get(zero) || !r.Get(h.fingerprint) ||
      !r.Get(h.n_tokens) || !r.Get(h.state_bytes)) {
    return DataLoss(what + ": truncated state file header");
  }
  if (std::memcmp(magic, kMagic, 8) != 0) return DataLoss(what + ": not a dsv4 state file");
  if (version != kVersion) {
    return DataLoss(what + ": state file version " + std::to_string(version) + ", expected " +
                    std::to_string(kVersion));
  }
  // Every size must fit the file exactly: head, tokens, state, checksum.
  if (h.n_tokens > file_bytes / 4 || h.state_bytes > file_bytes ||
      kHeadBytes + 4 * h.n_tokens + h.state_bytes + 8 != file_bytes) {
    return DataLoss(what + ": state file sizes do not match its length (truncated?)");
  }
  return Status::Ok();
}

}  // namespace

std::vector<uint8_t> EncodeStateFile(uint64_t fingerprint, std::span<const int32_t> tokens,
                                     std::span<const uint8_t> state) {
  std::vector<uint8_t> out;
  out.reserve(kHeadBytes + tokens.size_bytes() + state.size() + 8);
  ByteWriter w(out);
  w.PutBytes(kMagic, 8);
  w.Put(kVersion);
  w.Put(uint32_t{0});
  w.Put(fingerprint);
  w.Put(static_cast<uint64_t>(tokens.size()));
  w.Put(static_cast<uint64_t>(state.size()));
  w.PutBytes(tokens.data(), tokens.size_bytes());
  w.PutBytes(state.data(), state.size());
  w.Put(Hash64(out.data(), out.size()));
  return out;
}

Result<StateFile> DecodeStateFile(std::span<const uint8_t> bytes, uint64_t fingerprint,
                                  const std::string& what) {
  ByteReader r(bytes);
  Head h;
  RETURN_IF_ERROR(ParseHead(r, bytes.size(), h, what));
  uint64_t sum = 0;
  std::memcpy(&sum, bytes.data() + bytes.size() - 8, 8);
  if (sum != Hash64(bytes.data(), bytes.size() - 8)) {
    return DataLoss(what + ": state file checksum mismatch (corrupt)");
  }
  if (h.fingerprint != fingerprint) {
    return InvalidArgument(what + ": state file of another model (fingerprint " +
                               Hex16(h.fingerprint) + ", this model " + Hex16(fingerprint) + ")",
                           "states are kept per model file and load options");
  }
  StateFile f;
  f.fingerprint = h.fingerprint;
  if (!r.GetArray(h.n_tokens, f.tokens) || !r.GetArray(h.state_bytes, f.state)) {
    return DataLoss(what + ": truncated state file");
  }
  return f;
}

Result<StateFile> ReadStateFileHead(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return IoError(path + ": cannot open: " + std::strerror(errno));
  in.seekg(0, std::ios::end);
  const uint64_t size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  std::vector<uint8_t> head(std::min<uint64_t>(size, kHeadBytes));
  in.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(head.size()));
  ByteReader r(head);
  Head h;
  RETURN_IF_ERROR(ParseHead(r, size, h, path));
  StateFile f;
  f.fingerprint = h.fingerprint;
  f.tokens.resize(h.n_tokens);
  in.read(reinterpret_cast<char*>(f.tokens.data()),
          static_cast<std::streamsize>(h.n_tokens * sizeof(int32_t)));
  if (!in) return DataLoss(path + ": truncated state file");
  return f;
}

Status WriteFileAtomic(const std::string& path, std::span<const uint8_t> bytes) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(getpid()) + "." +
                          std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError(tmp + ": cannot create: " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const Status st = IoError(tmp + ": write failed: " + std::strerror(errno));
      ::close(fd);
      ::unlink(tmp.c_str());
      return st;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const Status st = IoError(tmp + ": fsync/close failed: " + std::strerror(errno));
    ::unlink(tmp.c_str());
    return st;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const Status st = IoError(path + ": rename failed: " + std::strerror(errno));
    ::unlink(tmp.c_str());
    return st;
  }
  return Status::Ok();
}

Status LoadStateFile(const std::string& path, uint64_t fingerprint, std::span<const int32_t> prompt,
                     SequenceCache& cache, int64_t* file_bytes) {
  cache.Truncate(0);
  *file_bytes = 0;
  ASSIGN_OR_RETURN(const std::string bytes, ReadFileToString(path));
  *file_bytes = static_cast<int64_t>(bytes.size());
  ASSIGN_OR_RETURN(const StateFile f,
                   DecodeStateFile({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()},
                                   fingerprint, path));
  if (f.tokens.empty() || f.tokens.size() > prompt.size() ||
      !std::equal(f.tokens.begin(), f.tokens.end(), prompt.begin())) {
    return NotFound(path + ": its " + std::to_string(f.tokens.size()) +
                    " tokens do not begin this prompt");
  }
  if (Status st = cache.LoadState(f.state); !st.ok()) {
    cache.Truncate(0);
    return st.WithContext(path);
  }
  return Status::Ok();
}

int64_t LoadPromptCache(const std::string& path, uint64_t fingerprint,
                        std::span<const int32_t> prompt, SequenceCache& cache) {
  cache.Truncate(0);
  std::error_code ec;
  if (!fs::exists(path, ec)) return 0;
  int64_t bytes = 0;
  if (Status st = LoadStateFile(path, fingerprint, prompt, cache, &bytes); !st.ok()) {
    if (st.code() == StatusCode::kNotFound) {
      LOG_INFO("prompt cache not used: {}", st.message());
    } else {
      LOG_WARNING("prompt cache not used: {}", st.ToString());
    }
    return 0;
  }
  // Kept up to the prompt's last token (which runs again) as far as the cache can truncate.
  const int64_t keep = cache.KeepablePrefix(
      std::min<int64_t>(cache.length(), static_cast<int64_t>(prompt.size()) - 1));
  cache.Truncate(keep);
  return keep;
}

Status SavePromptCache(const std::string& path, uint64_t fingerprint,
                       std::span<const int32_t> tokens, const SequenceCache& cache) {
  std::vector<uint8_t> state;
  RETURN_IF_ERROR(cache.SaveState(state));
  return WriteFileAtomic(path, EncodeStateFile(fingerprint, tokens, state));
}

// ---- PromptStateStore ----

PromptStateStore::PromptStateStore(PromptStoreOptions options) : options_(std::move(options)) {}

Result<std::unique_ptr<PromptStateStore>> PromptStateStore::Open(
    const PromptStoreOptions& options) {
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec || !fs::is_directory(options.dir, ec)) {
    return IoError(options.dir + ": cannot create the KV state directory: " + ec.message(),
                   "pass a writable --kv-cache-dir");
  }
  std::unique_ptr<PromptStateStore> store(new PromptStateStore(options));
  int foreign = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(options.dir, ec)) {
    const std::string path = e.path().string();
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file(ec)) continue;
    if (const size_t at = name.find(std::string(kStateFileExtension) + ".tmp.");
        at != std::string::npos) {
      // A write never renamed, hence never valid: removed once its writer
      // (the pid in its name) is gone.
      const long pid =
          std::strtol(name.c_str() + at + std::strlen(kStateFileExtension) + 5, nullptr, 10);
      if (pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)) {
        fs::remove(e.path(), ec);
      }
      continue;
    }
    if (!name.ends_with(kStateFileExtension)) continue;
    Result<StateFile> head = ReadStateFileHead(path);
    if (!head.ok()) {
      LOG_WARNING("kv-cache-dir: removing {}", head.status().ToString());
      fs::remove(e.path(), ec);
      continue;
    }
    if (head->fingerprint != options.fingerprint) {
      ++foreign;
      continue;
    }
    Entry en;
    en.tokens = std::move(head->tokens);
    en.path = path;
    en.bytes = static_cast<int64_t>(e.file_size(ec));
    en.last_used = static_cast<uint64_t>(
        std::max<int64_t>(0, fs::last_write_time(e.path(), ec).time_since_epoch().count()));
    store->entries_.push_back(std::move(en));
  }
  if (ec) return IoError(options.dir + ": cannot list: " + ec.message());
  if (foreign > 0) {
    LOG_WARNING("kv-cache-dir {}: {} state files of another model or load options ignored",
                options.dir, foreign);
  }
  // Recency from the files' times, then this process's clock above them all.
  std::sort(store->entries_.begin(), store->entries_.end(),
            [](const Entry& a, const Entry& b) { return a.last_used < b.last_used; });
  for (Entry& en : store->entries_) {
    en.last_used = ++store->clock_;
    store->stats_.bytes += en.bytes;
  }
  {
    std::lock_guard<std::mutex> lock(store->mu_);
    store->EvictLocked();
  }
  LOG_INFO("kv-cache-dir {}: {} saved states ({:.1f} MiB) of this model", options.dir,
           store->entries_.size(), static_cast<double>(store->stats_.bytes) / (1 << 20));
  store->writer_ = std::thread([s = store.get()] { s->Writer(); });
  return store;
}

PromptStateStore::~PromptStateStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

const PromptStateStore::Entry* PromptStateStore::FindLocked(std::span<const int32_t> prompt) const {
  const Entry* best = nullptr;
  for (const Entry& e : entries_) {
    if (e.tokens.empty() || e.tokens.size() > prompt.size()) continue;
    if (best != nullptr && e.tokens.size() <= best->tokens.size()) continue;
    if (std::equal(e.tokens.begin(), e.tokens.end(), prompt.begin())) best = &e;
  }
  return best;
}

int64_t PromptStateStore::Longest(std::span<const int32_t> prompt) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Entry* e = FindLocked(prompt);
  return e ? static_cast<int64_t>(e->tokens.size()) : 0;
}

void PromptStateStore::RemoveLocked(const std::string& path, bool delete_file) {
  std::error_code ec;
  if (delete_file) fs::remove(path, ec);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->path == path) {
      stats_.bytes -= it->bytes;
      entries_.erase(it);
      return;
    }
  }
}

int64_t PromptStateStore::Load(std::span<const int32_t> prompt, SequenceCache& cache) {
  std::string path;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Entry* e = FindLocked(prompt);
    if (e == nullptr) return 0;
    path = e->path;
  }
  // The index listed its tokens as a prefix of the prompt: any error here
  // (NotFound included: the file changed since) means the file is bad.
  int64_t bytes = 0;
  const Status st = LoadStateFile(path, options_.fingerprint, prompt, cache, &bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (!st.ok()) {
    LOG_WARNING("kv-cache-dir: state not used, file removed: {}", st.ToString());
    cache.Truncate(0);
    ++stats_.rejected;
    RemoveLocked(path);
    return 0;
  }
  for (Entry& e : entries_) {
    if (e.path == path) e.last_used = ++clock_;
  }
  ++stats_.hits;
  stats_.hit_tokens += cache.length();
  stats_.read_bytes += bytes;
  return cache.length();
}

void PromptStateStore::Save(std::span<const int32_t> tokens, const SequenceCache& cache) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Entry& e : entries_) {
      if (std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin(), tokens.end())) return;
    }
    for (const Job& j : jobs_) {
      if (std::equal(j.tokens.begin(), j.tokens.end(), tokens.begin(), tokens.end())) return;
    }
    if (writing_ &&
        std::equal(in_flight_.begin(), in_flight_.end(), tokens.begin(), tokens.end())) {
      return;
    }
  }
  Job job;
  job.tokens.assign(tokens.begin(), tokens.end());
  if (Status st = cache.SaveState(job.state); !st.ok()) {
    LOG_WARNING("kv-cache-dir: state not saved: {}", st.ToString());
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_all();
}

void PromptStateStore::Writer() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stop_, nothing left to write
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    writing_ = true;
    in_flight_ = job.tokens;
    lock.unlock();
    const std::vector<uint8_t> bytes = EncodeStateFile(options_.fingerprint, job.tokens, job.state);
    const uint64_t name = Hasher(options_.fingerprint)
                              .Update(job.tokens.data(), job.tokens.size() * sizeof(int32_t))
                              .digest();
    const std::string path =
        (fs::path(options_.dir) / (Hex16(name) + kStateFileExtension)).string();
    Status st = static_cast<int64_t>(bytes.size()) > options_.max_bytes
                    ? ResourceExhausted("a state of " + std::to_string(bytes.size()) +
                                        " bytes exceeds --kv-cache-size on its own")
                    : WriteFileAtomic(path, bytes);
    lock.lock();
    writing_ = false;
    if (!st.ok()) {
      LOG_WARNING("kv-cache-dir: state not saved: {}", st.ToString());
    } else {
      RemoveLocked(path, /*delete_file=*/false);  // the same tokens' entry, replaced by the rename
      Entry e;
      e.tokens = std::move(job.tokens);
      e.path = path;
      e.bytes = static_cast<int64_t>(bytes.size());
      e.last_used = ++clock_;
      stats_.bytes += e.bytes;
      ++stats_.writes;
      stats_.write_bytes += e.bytes;
      entries_.push_back(std::move(e));
      EvictLocked();
    }
    cv_.notify_all();
  }
}

void PromptStateStore::EvictLocked() {
  while (stats_.bytes > options_.max_bytes && !entries_.empty()) {
    auto oldest =
        std::min_element(entries_.begin(), entries_.end(),
                         [](const Entry& a, const Entry& b) { return a.last_used < b.last_used; });
    ++stats_.evictions;
    RemoveLocked(oldest->path);
  }
}

void PromptStateStore::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return jobs_.empty() && !writing_; });
}

PromptStoreStats PromptStateStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  PromptStoreStats s = stats_;
  s.files = static_cast<int64_t>(entries_.size());
  return s;
}

}  // namespace dsv4
