// The MPI Communicator (communicator.h): MPI_COMM_WORLD (or a part of it,
// Split) with MPI_ERRORS_RETURN,
// so a failed call (a peer gone, a truncated message) comes back as a Status
// naming the peer instead of aborting inside MPI. Messages larger than
// INT_MAX bytes go in pieces (MPI counts are int).
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "dist/communicator.h"

#if DSV4_WITH_MPI
#include <mpi.h>
#endif

namespace dsv4::dist {

#if DSV4_WITH_MPI

bool BuiltWithMpi() { return true; }

namespace {

constexpr int64_t kChunk = int64_t{1} << 30;  // bytes per MPI call

std::string MpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(code, text, &n);
  return std::string(text, n);
}

constexpr int kTimedOut = -1;  // Await: the timeout passed (MPI error codes are >= 0)

// "3", "0.5": a timeout in seconds as the operator wrote it.
std::string SecondsText(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", s);
  return text;
}

class MpiCommunicator final : public Communicator {
 public:
  // `world`: each rank's rank in MPI_COMM_WORLD, for a communicator of a part
  // of the job (Split; errors name world ranks); `parent`: whose traffic the
  // messages also count in.
  MpiCommunicator(MPI_Comm comm, int rank, int size, std::vector<int> world = {},
                  Traffic* parent = nullptr)
      : comm_(comm), rank_(rank), size_(size), world_(std::move(world)), parent_(parent) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status Send(int to, int tag, std::span<const std::byte> data, std::string_view what) override {
    const auto start = std::chrono::steady_clock::now();
    for (int64_t at = 0, n = static_cast<int64_t>(data.size()); at < n || n == 0; at += kChunk) {
      const int count = static_cast<int>(std::min(kChunk, n - at));
      MPI_Request request;
      int rc = MPI_Isend(data.data() + at, count, MPI_BYTE, to, tag, comm_, &request);
      if (rc == MPI_SUCCESS) rc = Await(request, /*patient=*/false, start, nullptr);
      if (rc == kTimedOut) {
        return TimedOut(Name(to) + " to take " + std::string(what), to);
      }
      if (rc != MPI_SUCCESS) return Failed("MPI_Isend to " + Name(to), rc);
      Count(count, 1);
      if (n == 0) break;
    }
    return Status::Ok();
  }

  Status StartSend(int to, int tag, std::span<const std::byte> data,
                   std::string_view what) override {
    for (int64_t at = 0, n = static_cast<int64_t>(data.size()); at < n || n == 0; at += kChunk) {
      const int count = static_cast<int>(std::min(kChunk, n - at));
      MPI_Request request;
      const int rc = MPI_Isend(data.data() + at, count, MPI_BYTE, to, tag, comm_, &request);
      if (rc != MPI_SUCCESS) return Failed("MPI_Isend to " + Name(to), rc);
      pending_.push_back({request, to, std::string(what)});
      Count(count, 1);
      if (n == 0) break;
    }
    return Status::Ok();
  }

  Status WaitSent() override {
    const auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < pending_.size(); ++i) {
      Pending& p = pending_[i];
      const int rc = Await(p.request, /*patient=*/false, start, nullptr);
      if (rc == kTimedOut) {
        return TimedOut(Name(p.to) + " to take " + p.what, p.to);
      }
      if (rc != MPI_SUCCESS) return Failed("MPI_Isend to " + Name(p.to), rc);
    }
    pending_.clear();
    return Status::Ok();
  }

  Status Recv(int from, int tag, std::span<std::byte> data, std::string_view what) override {
    const auto start = std::chrono::steady_clock::now();
    for (int64_t at = 0, n = static_cast<int64_t>(data.size()); at < n || n == 0; at += kChunk) {
      const int count = static_cast<int>(std::min(kChunk, n - at));
      MPI_Status st;
      MPI_Request request;
      int rc = MPI_Irecv(data.data() + at, count, MPI_BYTE, from, tag, comm_, &request);
      if (rc == MPI_SUCCESS) rc = Await(request, /*patient=*/false, start, &st);
      if (rc == kTimedOut) {
        return TimedOut(Name(from) + "'s " + std::string(what), from);
      }
      if (rc != MPI_SUCCESS) return Failed("MPI_Irecv from " + Name(from), rc);
      int got = 0;
      MPI_Get_count(&st, MPI_BYTE, &got);
      if (got != count) {
        return DataLoss(Name(rank_) + ": a message from " + Name(from) + " has " +
                            std::to_string(got) + " bytes, expected " + std::to_string(count),
                        "every rank must run the same dsv4 build on the same model");
      }
      if (n == 0) break;
    }
    return Status::Ok();
  }

  // Every broadcast is nonblocking (MPI_Ibcast) on every rank — blocking and
  // nonblocking collectives do not match each other — and waited for (Await).
  Status Broadcast(std::span<std::byte> data, bool patient, std::string_view what) override {
    const auto start = std::chrono::steady_clock::now();
    for (int64_t at = 0, n = static_cast<int64_t>(data.size()); at < n; at += kChunk) {
      const int count = static_cast<int>(std::min(kChunk, n - at));
      MPI_Request request;
      int rc = MPI_Ibcast(data.data() + at, count, MPI_BYTE, 0, comm_, &request);
      if (rc == MPI_SUCCESS) rc = Await(request, patient && rank_ != 0, start, nullptr);
      if (rc == kTimedOut) {
        return rank_ == 0 ? TimedOut(Others(" to take ") + std::string(what), Other())
                          : TimedOut("rank 0's " + std::string(what), 0);
      }
      if (rc != MPI_SUCCESS) return Failed("MPI_Ibcast", rc);
      if (rank_ == 0) {
        Count(static_cast<int64_t>(count) * (size_ - 1), size_ - 1);
      }
    }
    return Status::Ok();
  }

  Status Gather(std::span<const std::byte> mine, std::span<std::byte> all,
                std::string_view what) override {
    const int64_t n = static_cast<int64_t>(mine.size());
    if (n > INT_MAX) return OutOfRange("Gather: " + std::to_string(n) + " bytes per rank");
    if (rank_ == 0 && static_cast<int64_t>(all.size()) < n * size_) {
      return InvalidArgument("Gather: the destination holds " + std::to_string(all.size()) +
                             " bytes, needs " + std::to_string(n * size_));
    }
    const auto start = std::chrono::steady_clock::now();
    MPI_Request request;
    int rc =
        MPI_Igather(mine.data(), static_cast<int>(n), MPI_BYTE, rank_ == 0 ? all.data() : nullptr,
                    static_cast<int>(n), MPI_BYTE, 0, comm_, &request);
    if (rc == MPI_SUCCESS) rc = Await(request, /*patient=*/false, start, nullptr);
    if (rc == kTimedOut) {
      return rank_ == 0 ? TimedOut(Others("'s ") + std::string(what), Other())
                        : TimedOut("rank 0 to take " + std::string(what), 0);
    }
    if (rc != MPI_SUCCESS) return Failed("MPI_Igather", rc);
    if (rank_ != 0) {
      Count(n, 1);
    }
    return Status::Ok();
  }

  Status AllGather(std::span<std::byte> data, std::span<const int64_t> offsets,
                   std::string_view what) override {
    counts_.resize(size_);
    displs_.resize(size_);
    for (int r = 0; r < size_; ++r) {
      const int64_t n = offsets[r + 1] - offsets[r];
      if (offsets[r + 1] > INT_MAX || n < 0 || offsets[r + 1] > static_cast<int64_t>(data.size())) {
        return OutOfRange("AllGather: block " + std::to_string(r) + " at [" +
                          std::to_string(offsets[r]) + ", " + std::to_string(offsets[r + 1]) +
                          ") of " + std::to_string(data.size()) + " bytes");
      }
      counts_[r] = static_cast<int>(n);
      displs_[r] = static_cast<int>(offsets[r]);
    }
    const auto start = std::chrono::steady_clock::now();
    MPI_Request request;
    int rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data.data(), counts_.data(),
                             displs_.data(), MPI_BYTE, comm_, &request);
    if (rc == MPI_SUCCESS) rc = Await(request, /*patient=*/false, start, nullptr);
    if (rc == kTimedOut) return TimedOut(Others("'s ") + std::string(what), Other());
    if (rc != MPI_SUCCESS) return Failed("MPI_Iallgatherv", rc);
    Count(static_cast<int64_t>(counts_[rank_]) * (size_ - 1), size_ - 1);
    return Status::Ok();
  }

  Result<std::shared_ptr<Communicator>> Split(int color) override {
    MPI_Comm sub;
    int rc = MPI_Comm_split(comm_, color, rank_, &sub);
    if (rc != MPI_SUCCESS) return Failed("MPI_Comm_split", rc);
    MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
    int rank = 0, size = 1;
    MPI_Comm_rank(sub, &rank);
    MPI_Comm_size(sub, &size);
    int me = world_.empty() ? rank_ : world_[rank_];
    std::vector<int> world(size);
    rc = MPI_Allgather(&me, 1, MPI_INT, world.data(), 1, MPI_INT, sub);
    if (rc != MPI_SUCCESS) return Failed("MPI_Allgather", rc);
    auto c = std::make_shared<MpiCommunicator>(sub, rank, size, std::move(world), &traffic_);
    c->set_timeout(timeout_s_);
    return std::shared_ptr<Communicator>(std::move(c));
  }

  [[noreturn]] void Abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; keep the promise if it did
  }

 private:
  // Waits for `request` (started at `start`): MPI_Wait when there is no
  // timeout; otherwise polled — spinning for the first millisecond (a decode
  // step's message comes within microseconds), then yielding the core between
  // polls — until done or the timeout has passed (kTimedOut; the request is
  // left pending: the job is about to end). `patient`: never times out, and
  // sleeps between polls, up to 1 ms, so an idle worker leaves its core alone.
  int Await(MPI_Request& request, bool patient, std::chrono::steady_clock::time_point start,
            MPI_Status* status) const {
    MPI_Status ignored;
    MPI_Status* st = status != nullptr ? status : &ignored;
    if (!patient && timeout_s_ <= 0) return MPI_Wait(&request, st);
    const auto limit = std::chrono::duration<double>(timeout_s_);
    auto nap = std::chrono::microseconds(10);
    for (int done = 0;;) {
      const int rc = MPI_Test(&request, &done, st);
      if (rc != MPI_SUCCESS || done) return rc;
      const auto waited = std::chrono::steady_clock::now() - start;
      if (!patient && waited > limit) return kTimedOut;
      if (waited < std::chrono::milliseconds(1)) continue;
      if (patient) {
        std::this_thread::sleep_for(nap);
        nap = std::min(nap * 2, std::chrono::microseconds(1000));
      } else {
        std::this_thread::yield();
      }
    }
  }
  // The one other rank of a collective (-1: several; a collective cannot
  // tell which of them is late), and its name followed by `tail`: "rank 1's ",
  // "the other ranks' ".
  int Other() const { return size_ == 2 ? 1 - rank_ : -1; }
  std::string Others(std::string_view tail) const {
    if (Other() >= 0) return Name(Other()) + std::string(tail);
    return tail == "'s " ? "the other ranks' " : "the other ranks" + std::string(tail);
  }
  // `waited_for` names the peer and the message; `peer` is the rank awaited
  // (-1: several).
  Status TimedOut(const std::string& waited_for, int peer) const {
    const std::string who = peer >= 0 ? Name(peer) : "one of the other ranks";
    return IoError(Name(rank_) + " waited " + SecondsText(timeout_s_) + " s for " + waited_for +
                       " (--mpi-timeout)",
                   who +
                       " is stopped, hung or slower than the timeout allows, and every rank "
                       "ends here; if it is only slow, raise --mpi-timeout SECONDS (0: wait "
                       "forever)");
  }
  Status Failed(const std::string& what, int rc) const {
    return IoError(Name(rank_) + ": " + what + " failed: " + MpiErrorText(rc),
                   "a rank of the job has died or cannot be reached; see its own error above");
  }
  std::string Name(int r) const { return "rank " + std::to_string(world_.empty() ? r : world_[r]); }
  void Count(int64_t bytes, int64_t messages) {
    for (Traffic* t : {&traffic_, parent_}) {
      if (t == nullptr) continue;
      t->bytes += bytes;
      t->messages += messages;
    }
  }
  MPI_Comm comm_;
  int rank_, size_;
  std::vector<int> world_;
  Traffic* parent_;
  std::vector<int> counts_, displs_;  // AllGather's, reused
  struct Pending {                    // a send StartSend began, WaitSent ends
    MPI_Request request;
    int to;
    std::string what;
  };
  std::vector<Pending> pending_;
};

void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

Result<std::shared_ptr<Communicator>> MpiWorld() {
  static std::mutex mu;
  static std::shared_ptr<Communicator> world;
  std::lock_guard<std::mutex> lock(mu);
  if (world) return world;
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
    return IoError("MPI_Init_thread failed", "is this process started by mpirun?");
  }
  std::atexit(FinalizeAtExit);
  if (provided < MPI_THREAD_SERIALIZED) {
    return Unimplemented("this MPI offers thread level " + std::to_string(provided) +
                             ", dsv4 needs MPI_THREAD_SERIALIZED",
                         "use Open MPI (libopenmpi-dev) built with thread support");
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  world = std::make_shared<MpiCommunicator>(MPI_COMM_WORLD, rank, size);
  return world;
}

#else  // !DSV4_WITH_MPI

bool BuiltWithMpi() { return false; }

Result<std::shared_ptr<Communicator>> MpiWorld() {
  return Unimplemented(
      "this dsv4 was built without MPI, but it was started by mpirun as one of several "
      "processes",
      "install libopenmpi-dev and openmpi-bin (scripts/install-deps.sh) and rebuild "
      "(DSV4_WITH_MPI is on when CMake finds MPI)");
}

#endif

}  // namespace dsv4::dist
