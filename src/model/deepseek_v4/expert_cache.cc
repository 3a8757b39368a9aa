// Routed experts streamed from the checkpoint (see expert_cache.h).
#include "model/deepseek_v4/expert_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "base/mapped_file.h"

namespace dsv4::deepseek_v4 {
namespace {

constexpr int64_t kAlign = 4096;  // direct I/O: offsets, lengths and buffers
int64_t RoundUp(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

// The six tensors of an expert, in Part order.
const TensorView* PartView(const ExpertWeights& w, int j) {
  const LinearWeight* lw[3] = {&w.w1, &w.w3, &w.w2};
  return j < 3 ? &lw[j]->weight : &lw[j - 3]->scale;
}
TensorView* PartView(ExpertWeights& w, int j) {
  LinearWeight* lw[3] = {&w.w1, &w.w3, &w.w2};
  return j < 3 ? &lw[j]->weight : &lw[j - 3]->scale;
}

}  // namespace

Result<std::unique_ptr<ExpertCache>> ExpertCache::Make(std::span<const MoeWeights* const> layers,
                                                       int64_t budget_bytes, int64_t min_slots,
                                                       int io_threads) {
  std::unique_ptr<ExpertCache> c(new ExpertCache());
  for (const MoeWeights* m : layers) {
    if (m != nullptr) c->n_experts_ = std::max<int64_t>(c->n_experts_, m->experts.size());
  }
  c->experts_.resize(layers.size() * c->n_experts_);
  int64_t largest[6] = {};
  for (size_t l = 0; l < layers.size(); ++l) {
    if (layers[l] == nullptr) continue;
    for (size_t e = 0; e < layers[l]->experts.size(); ++e) {
      Expert& x = c->experts_[l * c->n_experts_ + e];
      x.mapped = &layers[l]->experts[e];
      for (int j = 0; j < 6; ++j) {
        const TensorView* v = PartView(*x.mapped, j);
        if (v->data == nullptr) continue;  // no scale (dense experts)
        std::string path;
        uint64_t offset = 0;
        if (!v->is_contiguous() || !MappedFile::Locate(v->data, &path, &offset)) {
          return InvalidArgument("layer " + std::to_string(l) + " expert " + std::to_string(e) +
                                     ": its weights are not mapped from the checkpoint file "
                                     "(converted at load), so they cannot be streamed",
                                 "drop --ram-budget for this model or these load options");
        }
        auto it = std::find(c->paths_.begin(), c->paths_.end(), path);
        x.parts[j] = Part{.file = static_cast<int>(it - c->paths_.begin()),
                          .offset = offset,
                          .bytes = v->nbytes()};
        if (it == c->paths_.end()) c->paths_.push_back(path);
        largest[j] = std::max(largest[j], x.parts[j].bytes);
      }
    }
  }
  // A part's aligned read spans at most its bytes + one block before and after.
  for (int j = 0; j < 6; ++j) {
    c->region_bytes_[j] = largest[j] > 0 ? RoundUp(largest[j], kAlign) + 2 * kAlign : 0;
    c->slot_bytes_ += c->region_bytes_[j];
  }
  if (c->slot_bytes_ == 0) return InvalidArgument("the model has no routed experts to stream");
  const int64_t n_slots = budget_bytes / c->slot_bytes_;
  if (n_slots < min_slots) {
    return ResourceExhausted(
        "--ram-budget leaves " + std::to_string(budget_bytes >> 20) +
            " MiB for routed experts; one token's " + std::to_string(min_slots) + " need " +
            std::to_string((min_slots * c->slot_bytes_ + (1 << 20) - 1) >> 20) + " MiB",
        "raise --ram-budget");
  }
  c->stats_.direct_io = true;
  for (const std::string& path : c->paths_) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd < 0 && errno == EINVAL) {  // a file system without direct I/O (tmpfs)
      fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      c->stats_.direct_io = false;
    }
    if (fd < 0)
      return IoError(path + ": cannot open for expert streaming: " + std::strerror(errno));
    c->fds_.push_back(fd);
  }
  c->arena_bytes_ = static_cast<size_t>(n_slots * c->slot_bytes_);
  void* p =
      ::mmap(nullptr, c->arena_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return ResourceExhausted(
        "cannot allocate the expert cache (" + std::to_string(c->arena_bytes_ >> 20) + " MiB)",
        "lower --ram-budget");
  }
  c->arena_ = static_cast<uint8_t*>(p);
  ::madvise(p, c->arena_bytes_, MADV_HUGEPAGE);
  c->slots_.resize(n_slots);
  c->stats_.slots = n_slots;
  c->stats_.slot_bytes = c->slot_bytes_;
  for (int i = 0; i < std::max(1, io_threads); ++i) {
    c->workers_.emplace_back([raw = c.get()] { raw->Worker(); });
  }
  return c;
}

ExpertCache::~ExpertCache() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  for (int fd : fds_) ::close(fd);
  if (arena_ != nullptr) ::munmap(arena_, arena_bytes_);
}

void ExpertCache::Worker() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !now_.empty() || !ahead_.empty(); });
    if (stop_) return;
    std::deque<Read>& q = !now_.empty() ? now_ : ahead_;
    const Read r = q.front();
    q.pop_front();
    lock.unlock();
    // Aligned reads into an aligned buffer; the last block may end past EOF.
    int64_t done = 0;
    Status st;
    while (done < r.bytes) {
      const ssize_t n = ::pread(r.fd, r.dst + done, static_cast<size_t>(r.bytes - done),
                                static_cast<off_t>(r.offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        st = IoError(paths_[r.file] + ": expert read failed: " + std::strerror(errno));
        break;
      }
      if (n == 0) break;  // end of file: the caller checks the bytes it needs
      done += n;
    }
    if (!stats_.direct_io) {
      ::posix_fadvise(r.fd, static_cast<off_t>(r.offset), static_cast<off_t>(r.bytes),
                      POSIX_FADV_DONTNEED);
    }
    if (st.ok() && done < r.needed) {
      // Only the aligned tail past the end of the file may be missing.
      st = IoError(paths_[r.file] + ": expert read came back short (" + std::to_string(done) +
                   " of " + std::to_string(r.needed) +
                   " bytes): the file changed since it was loaded");
    }
    lock.lock();
    Slot& slot = slots_[r.slot];
    if (!st.ok() && slot.status.ok()) slot.status = st;
    if (--slot.reads_left == 0) done_cv_.notify_all();
  }
}

int32_t ExpertCache::Victim() const {
  int32_t victim = -1;
  for (size_t s = 0; s < slots_.size(); ++s) {
    const Slot& sl = slots_[s];
    if (sl.reads_left > 0) continue;
    if (sl.key < 0) return static_cast<int32_t>(s);
    if (sl.last_used == clock_) continue;
    if (victim < 0) {
      victim = static_cast<int32_t>(s);
      continue;
    }
    const Slot& best = slots_[victim];
    const uint32_t u = experts_[sl.key].uses, bu = experts_[best.key].uses;
    if (u < bu || (u == bu && sl.last_used < best.last_used)) victim = static_cast<int32_t>(s);
  }
  return victim;
}

void ExpertCache::Load(int64_t key, int32_t slot, std::deque<Read>& queue) {
  Slot& s = slots_[slot];
  if (s.key >= 0) experts_[s.key].slot = -1;
  Expert& x = experts_[key];
  s.key = key;
  s.last_used = clock_;
  s.ahead = false;
  s.status = Status::Ok();
  s.reads_left = 0;
  s.weights = *x.mapped;
  uint8_t* region = arena_ + slot * slot_bytes_;
  for (int j = 0; j < 6; ++j) {
    const Part& part = x.parts[j];
    if (part.bytes > 0) {
      const uint64_t first = part.offset / kAlign * kAlign;
      const int64_t lead = static_cast<int64_t>(part.offset - first);
      queue.push_back(Read{.file = part.file,
                           .fd = fds_[part.file],
                           .offset = first,
                           .bytes = RoundUp(lead + part.bytes, kAlign),
                           .needed = lead + part.bytes,
                           .dst = region,
                           .slot = slot});
      ++s.reads_left;
      PartView(s.weights, j)->data = region + lead;
      stats_.read_bytes += part.bytes;
    }
    region += region_bytes_[j];
  }
  x.slot = slot;
}

void ExpertCache::Begin(int64_t layer, std::span<const int32_t> ids,
                        std::span<const ExpertWeights*> out, std::span<uint8_t> pending) {
  CHECK(!in_flight_, "ExpertCache::Begin before the previous Finish");
  CHECK(static_cast<int64_t>(ids.size()) <= capacity() && out.size() >= ids.size() &&
        pending.size() >= ids.size());
  begin_t0_ = std::chrono::steady_clock::now();
  ++clock_;
  // Use counts halve every `slots` acquisitions: popularity fades.
  if (++acquisitions_ % slots_.size() == 0) {
    for (Expert& x : experts_) x.uses >>= 1;
  }
  std::unique_lock<std::mutex> lock(mu_);
  // Resident (or being read ahead) first: pinned by last_used before any
  // miss picks a victim.
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t key = layer * n_experts_ + ids[i];
    Expert& x = experts_[key];
    CHECK(x.mapped != nullptr, "layer %lld has no routed expert %d", static_cast<long long>(layer),
          ids[i]);
    ++x.uses;
    pending[i] = 1;
    if (x.slot >= 0 && slots_[x.slot].reads_left == 0 && !slots_[x.slot].status.ok()) {
      slots_[x.slot].key = -1;  // a read ahead that failed: read it again
      x.slot = -1;
    }
    if (x.slot < 0) continue;
    Slot& s = slots_[x.slot];
    ++stats_.hits;
    s.last_used = clock_;
    if (s.ahead) {
      ++stats_.ahead_used;
      s.ahead = false;
    }
    if (s.reads_left > 0) {
      waiting_.push_back(x.slot);
    } else {
      pending[i] = 0;
    }
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t key = layer * n_experts_ + ids[i];
    if (experts_[key].slot >= 0) continue;
    ++stats_.misses;
    int32_t victim;
    // Every other slot held by this call or being read ahead: wait for one.
    while ((victim = Victim()) < 0) done_cv_.wait(lock);
    Load(key, victim, now_);
    waiting_.push_back(victim);
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    out[i] = &slots_[experts_[layer * n_experts_ + ids[i]].slot].weights;
  }
  in_flight_ = true;
  lock.unlock();
  cv_.notify_all();
}

void ExpertCache::ReadAhead(int64_t layer, std::span<const int32_t> ids) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int32_t id : ids) {
      const int64_t key = layer * n_experts_ + id;
      if (id < 0 || id >= n_experts_ || experts_[key].mapped == nullptr) continue;
      if (experts_[key].slot >= 0) continue;
      const int32_t victim = Victim();
      if (victim < 0) break;
      Load(key, victim, ahead_);
      slots_[victim].ahead = true;
      ++stats_.ahead_reads;
    }
  }
  cv_.notify_all();
}

Status ExpertCache::Finish() {
  if (!in_flight_) return Status::Ok();
  in_flight_ = false;
  const auto waited_from = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] {
    return std::all_of(waiting_.begin(), waiting_.end(),
                       [&](int32_t s) { return slots_[s].reads_left == 0; });
  });
  const auto now = std::chrono::steady_clock::now();
  stats_.read_seconds += std::chrono::duration<double>(now - waited_from).count();
  stats_.read_span_seconds += std::chrono::duration<double>(now - begin_t0_).count();
  Status st;
  for (int32_t s : waiting_) {
    Slot& slot = slots_[s];
    if (slot.status.ok()) continue;
    // Nothing half-read stays: the experts whose reads failed are dropped.
    if (st.ok()) st = slot.status;
    experts_[slot.key].slot = -1;
    slot.key = -1;
    slot.status = Status::Ok();
  }
  waiting_.clear();
  return st;
}

ExpertCacheStats ExpertCache::stats() const {
  ExpertCacheStats s = stats_;
  s.files = paths_;
  return s;
}

}  // namespace dsv4::deepseek_v4
