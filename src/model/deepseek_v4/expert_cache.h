// ExpertCache: DeepSeek-V4's routed experts streamed from the checkpoint under
// a RAM budget (--ram-budget), for models larger than memory.
//
// Dense and shared weights stay mapped (and resident once touched); a routed
// expert of a main layer is read through the mapping only after a failed
// read. When a layer's
// router has chosen its experts, Begin hands the MoE resident copies of
// them: those already in a slot are hits, the others are read from the
// checkpoint file into free or evicted slots, in parallel (one read per
// tensor, several in flight), with direct I/O where the file system takes it
// (no second copy in the page cache), while the MoE computes with the
// resident ones (Begin, then Finish). The bytes are the file's, as stored
// (FP4 stays FP4): a streamed forward equals a resident one bit for bit.
//
// Read-ahead: while a layer computes, the MoE asks ReadAhead for the experts
// the next layer is likely to pick (its router applied to this layer's
// input); they are read into free or evicted slots behind the current
// layer's own reads, and a later Begin finds them resident or in flight.
// A wrong guess costs only its read: Begin's choice is the router's.
//
// Eviction: the slot whose expert has the lowest use count (counts halve
// every `slots` acquisitions, so old popularity fades), the least recently
// used among equals; the experts of the current call, those read ahead
// during it and slots still being read are never evicted.
//
// Memory: slots × slot_bytes, one allocation, fixed at Make.
#ifndef DSV4_MODEL_DEEPSEEK_V4_EXPERT_CACHE_H_
#define DSV4_MODEL_DEEPSEEK_V4_EXPERT_CACHE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "model/deepseek_v4/weights.h"
#include "model/model.h"

namespace dsv4::deepseek_v4 {

using ExpertCacheStats = ExpertStreamStats;  // model/model.h

class ExpertCache {
 public:
  // A cache of `budget_bytes` over the routed experts of `layers` (index =
  // layer; layers without routed experts are skipped), whose weights must be
  // views into mapped checkpoint files. Errors: a weight not in a mapped file
  // (a repacked or converted expert: InvalidArgument), a budget below one
  // token's experts (`min_slots`; ResourceExhausted naming the bytes needed),
  // a file that cannot be opened (Io). `io_threads`: reads in flight at once
  // (16 decoded faster than 4 on a virtio disk: docs/benchmarks.md).
  static Result<std::unique_ptr<ExpertCache>> Make(std::span<const MoeWeights* const> layers,
                                                   int64_t budget_bytes, int64_t min_slots,
                                                   int io_threads = 16);
  ~ExpertCache();
  ExpertCache(const ExpertCache&) = delete;
  ExpertCache& operator=(const ExpertCache&) = delete;

  // Experts held at once: Begin takes at most this many.
  int64_t capacity() const { return static_cast<int64_t>(slots_.size()); }
  // out[i] = the slot copy of expert ids[i] of `layer` (distinct ids,
  // ids.size() ≤ capacity()), valid until the next Begin; pending[i] = 1
  // where that copy is being read now (its data may be used only after
  // Finish), 0 where it was resident. The reads run while the caller computes
  // with the resident ones.
  void Begin(int64_t layer, std::span<const int32_t> ids, std::span<const ExpertWeights*> out,
             std::span<uint8_t> pending);
  // Waits for Begin's reads (and for experts read ahead that Begin asked
  // for). Errors: a read that failed or came back short (Io, naming the
  // file); the pending experts' slots are then dropped and the caller must
  // use the mapped weights for them.
  Status Finish();
  // Starts reading the experts `ids` of `layer` that are not resident, into
  // slots no current expert holds, behind Begin's reads; as many as there
  // are such slots. Between Begin and Finish or outside them.
  void ReadAhead(int64_t layer, std::span<const int32_t> ids);
  ExpertCacheStats stats() const;

 private:
  // One tensor of an expert in its file.
  struct Part {
    int file = -1;
    uint64_t offset = 0;
    int64_t bytes = 0;
  };
  struct Expert {
    const ExpertWeights* mapped = nullptr;  // the views into the mapping (shapes, formats)
    Part parts[6];                          // w1, w3, w2 weights, then their scales
    int32_t slot = -1;
    uint32_t uses = 0;
  };
  struct Slot {
    int64_t key = -1;  // layer · E + expert held, -1: none
    uint64_t last_used = 0;
    bool ahead = false;     // read ahead and not yet asked for
    ExpertWeights weights;  // views into this slot's bytes
    // Guarded by mu_ (the workers update them):
    int reads_left = 0;  // this slot's reads not yet done
    Status status;       // the first failed read's
  };
  struct Read {
    int file;  // index into paths_ / fds_
    int fd;
    uint64_t offset;
    int64_t bytes;   // aligned: may reach past the end of the file
    int64_t needed;  // the bytes that must arrive (the part's end)
    uint8_t* dst;
    int32_t slot;
  };
  ExpertCache() = default;
  void Worker();
  // The slot to (re)fill: a free one, else the fewest uses, then the least
  // recently used, outside the current call (last_used == clock_) and the
  // slots being read; -1 if none. Needs mu_.
  int32_t Victim() const;
  // Points `slot` at expert `key` and queues its reads on `queue`. Needs mu_.
  void Load(int64_t key, int32_t slot, std::deque<Read>& queue);

  int64_t n_experts_ = 0;           // E
  std::vector<Expert> experts_;     // [L · E] (empty entries for dense layers)
  std::vector<std::string> paths_;  // files
  std::vector<int> fds_;            // their descriptors
  int64_t region_bytes_[6] = {};    // bytes each part may take in a slot (aligned read)
  int64_t slot_bytes_ = 0;
  uint8_t* arena_ = nullptr;  // slots × slot_bytes_
  size_t arena_bytes_ = 0;
  std::vector<Slot> slots_;
  uint64_t clock_ = 0;
  uint64_t acquisitions_ = 0;
  ExpertCacheStats stats_;
  // Begin's slots still being read (its own or read ahead), until Finish.
  bool in_flight_ = false;
  std::vector<int32_t> waiting_;
  std::chrono::steady_clock::time_point begin_t0_;
  // Reads to do: Worker threads take Begin's (`now_`) before ReadAhead's.
  mutable std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<Read> now_, ahead_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace dsv4::deepseek_v4

#endif  // DSV4_MODEL_DEEPSEEK_V4_EXPERT_CACHE_H_
