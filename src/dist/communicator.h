// Communicator: what the processes of one model split over several (pipeline
// or expert parallel, engine/distributed.h) say to each other — point-to-point
// messages of bytes, a broadcast from rank 0 and a gather to it — and what
// each has sent (bytes, messages: dsv4 bench's traffic figures). The MPI
// implementation (mpi_communicator.cc) is the real one; every call returns a
// Status naming the peer rank (MPI errors are returned, never fatal inside MPI).
#ifndef DSV4_DIST_COMMUNICATOR_H_
#define DSV4_DIST_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"

namespace dsv4::dist {

// What this process has sent since it started (every byte counted once per
// destination, as if each message went straight there: a broadcast counts
// size − 1 copies at the root, an all-gather size − 1 copies of each block).
struct Traffic {
  int64_t bytes = 0;
  int64_t messages = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // How long one call below may wait for its peers, in seconds (0: forever,
  // the default). A wait past it fails the call with a Status naming this
  // rank, the peer and `what` was awaited ("rank 0 waited 120 s for rank 2's
  // residual streams ..."): a peer that is stopped or hung without dying
  // (MPI itself has no receive timeouts) ends the job instead of hanging it.
  // A `patient` Broadcast never times out (a worker waiting for the next
  // request: an idle server is normal).
  void set_timeout(double seconds) { timeout_s_ = seconds; }
  double timeout() const { return timeout_s_; }
  // Point-to-point messages; `tag` tells kinds apart. Recv's `data` must be
  // exactly the size sent. `what` names the message in a timeout's error
  // ("residual streams after layers [0, 4)"); the peer's rank is added.
  virtual Status Send(int to, int tag, std::span<const std::byte> data,
                      std::string_view what = "a message") = 0;
  virtual Status Recv(int from, int tag, std::span<std::byte> data,
                      std::string_view what = "a message") = 0;
  // Send without waiting: `data` must stay alive and unchanged until
  // WaitSent, which waits for every send started so far (the timeout counts
  // from WaitSent's start). A pipeline stage sends its micro-batches on this
  // way and goes on with the next while the next stage takes them.
  virtual Status StartSend(int to, int tag, std::span<const std::byte> data,
                           std::string_view what = "a message") = 0;
  virtual Status WaitSent() = 0;
  // rank 0's `data` to every rank (in place; the same size on every rank).
  // `patient`: a receiver that may wait long (a worker between requests)
  // polls, then sleeps between polls, instead of spinning on a core, and
  // never times out.
  virtual Status Broadcast(std::span<std::byte> data, bool patient = false,
                           std::string_view what = "a broadcast") = 0;
  // Every rank's `mine` (one size for all) into rank 0's `all` ([size, n]);
  // `all` is ignored on the other ranks.
  virtual Status Gather(std::span<const std::byte> mine, std::span<std::byte> all,
                        std::string_view what = "a gather") = 0;
  // In place: rank r's block is bytes [offsets[r], offsets[r+1]) of `data`
  // ([size + 1] offsets, the same on every rank); every rank gets every block.
  virtual Status AllGather(std::span<std::byte> data, std::span<const int64_t> offsets,
                           std::string_view what = "an all-gather") = 0;
  // The ranks that give the same `color` (every rank calls it), as a
  // communicator of their own, ranked in this one's order. Its messages also
  // count in this one's traffic; its errors name ranks as this one does.
  virtual Result<std::shared_ptr<Communicator>> Split(int color) = 0;
  // Ends every process of the job at once (exit code `code`), after an error
  // that leaves the others waiting for this one.
  [[noreturn]] virtual void Abort(int code) = 0;
  const Traffic& traffic() const { return traffic_; }

 protected:
  Traffic traffic_;
  double timeout_s_ = 0;
};

// Typed helpers over the byte calls.
template <typename T>
std::span<const std::byte> Bytes(std::span<const T> s) {
  return std::as_bytes(s);
}
template <typename T>
std::span<std::byte> MutableBytes(std::span<T> s) {
  return std::as_writable_bytes(s);
}

// Whether this process was started by mpirun/mpiexec as one of several
// (Open MPI's OMPI_COMM_WORLD_SIZE, PMI's PMI_SIZE > 1); true even in a build
// without MPI, which then refuses to run (MpiWorld).
bool LaunchedAsSeveralProcesses();
// Whether this dsv4 was built with MPI (DSV4_WITH_MPI).
bool BuiltWithMpi();

// The MPI world: MPI initialised once per process (thread level serialized:
// the serving engine calls the model from its own thread), errors returned.
// MPI is finalised at exit. Errors: a build without MPI (Unimplemented), an
// MPI that fails to start.
Result<std::shared_ptr<Communicator>> MpiWorld();

}  // namespace dsv4::dist

#endif  // DSV4_DIST_COMMUNICATOR_H_
