// The MPI messages of a model split over processes, timed alone (not a test;
// docs/distributed.md, docs/benchmarks.md): the cost model's link terms —
// one message costs latency + bytes / bandwidth — checked on the machine at
// hand. Under mpirun with 2 or more ranks, through dist::Communicator (the
// path dsv4 uses): ping-pong between rank 0 and rank 1 for each size (one-way
// time = half the round trip, median of the repeats), then an all-gather of
// each size split evenly over all ranks (expert parallel's exchange). Fits
// latency from the smallest size and bandwidth from the two largest, and prints
// each size's measured time beside latency + bytes / bandwidth. Built on demand:
//   cmake --build build/release --target mpi_message_bench
//   mpirun -n 2 build/release/tests/dist/mpi_message_bench [BYTES ...]
// Default sizes: a 64-byte command; one token's residual streams [C, D] fp32
// of the tiny test model (640), a 4 GB synth-model (32768), V4-Flash (65536)
// and V4-Pro (114688); a 128-token prefill of V4-Flash (8 MiB).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "dist/communicator.h"

namespace {

using dsv4::dist::Communicator;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Check(Communicator& comm, const dsv4::Status& st) {
  if (st.ok()) return;
  std::fprintf(stderr, "mpi_message_bench: rank %d: %s\n", comm.rank(), st.ToString().c_str());
  comm.Abort(2);
}

}  // namespace

int main(int argc, char** argv) {
  auto world = dsv4::dist::MpiWorld();
  if (!world.ok()) {
    std::fprintf(stderr, "mpi_message_bench: %s\n", world.status().ToString().c_str());
    return 2;
  }
  Communicator& comm = **world;
  if (comm.size() < 2) {
    std::fprintf(stderr, "mpi_message_bench: run it under mpirun -n 2 (or more)\n");
    return 2;
  }
  std::vector<int64_t> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::atoll(argv[i]));
  if (sizes.empty()) sizes = {64, 640, 32768, 65536, 114688, int64_t{8} << 20};
  std::sort(sizes.begin(), sizes.end());
  const int rank = comm.rank(), n = comm.size();
  std::vector<double> pingpong, gather;
  for (int64_t size : sizes) {
    std::vector<std::byte> buf(size);
    const int reps = size > (1 << 20) ? 50 : 2000;
    std::vector<double> times;
    for (int r = 0; r < reps + 10; ++r) {
      const double t0 = Now();
      if (rank == 0) {
        Check(comm, comm.Send(1, 7, buf));
        Check(comm, comm.Recv(1, 7, buf));
      } else if (rank == 1) {
        Check(comm, comm.Recv(0, 7, buf));
        Check(comm, comm.Send(0, 7, buf));
      }
      if (r >= 10) times.push_back((Now() - t0) / 2);
    }
    pingpong.push_back(Median(times));
    std::vector<int64_t> offsets(n + 1);
    for (int r = 0; r <= n; ++r) offsets[r] = size * r / n;
    times.clear();
    for (int r = 0; r < reps + 10; ++r) {
      const double t0 = Now();
      Check(comm, comm.AllGather(buf, offsets));
      if (r >= 10) times.push_back(Now() - t0);
    }
    gather.push_back(Median(times));
  }
  if (rank == 0) {
    const double latency = pingpong.front();
    // The slope between the two largest sizes: the bandwidth of long messages.
    const size_t m = sizes.size();
    const double bandwidth =
        m >= 2 && pingpong[m - 1] > pingpong[m - 2]
            ? static_cast<double>(sizes[m - 1] - sizes[m - 2]) / (pingpong[m - 1] - pingpong[m - 2])
            : 0.0;
    std::printf("%d ranks; fit: latency %.2f us, bandwidth %.2f GB/s\n", n, latency * 1e6,
                bandwidth / 1e9);
    std::printf("%12s %14s %14s %18s\n", "bytes", "one-way us", "model us", "all-gather us");
    for (size_t i = 0; i < sizes.size(); ++i) {
      const double model =
          latency + (bandwidth > 0 ? static_cast<double>(sizes[i] - sizes.front()) / bandwidth : 0);
      std::printf("%12lld %14.2f %14.2f %18.2f\n", static_cast<long long>(sizes[i]),
                  pingpong[i] * 1e6, model * 1e6, gather[i] * 1e6);
    }
  }
  return 0;
}
