// One model over several processes (`mpirun -n N dsv4 run|bench|serve|logits
// --model DIR`; docs/distributed.md). Pipeline parallel: the main layers are
// split into N consecutive ranges (--layers-split), rank r runs the r-th; the
// residual streams go rank to rank (model/model.h PipelineStage) over MPI
// point-to-point messages (dist/communicator.h). Rank 0 is the front end: it
// tokenizes, embeds, makes the logits, samples, runs the draft head and the
// server. The other ranks serve it: LoadModel on them never returns — they
// mirror rank 0's calls (caches made, truncated, freed; Forward and
// ForwardBatch, whose tokens rank 0 broadcasts) until rank 0's model is
// destroyed, then exit the process.
//
// Start-up: every rank loads the model and reports its Status and the model's
// fingerprints (config, tensor table and load options; each weight file's
// size and first and last MiB) to rank 0, which checks them against its own;
// every rank then gets the verdict and all of them fail alike, the error
// naming the rank and what failed or differs.
//
// Expert parallel (--parallel expert): every rank runs every layer and a
// share of the routed experts (model/model.h ExpertShard); both together
// (--parallel pipeline,expert --stages S): S stages of N / S ranks, a
// stage's ranks splitting its experts. A prompt goes through the stages in
// micro-batches (--pipeline-micro-batch). Every wait inside a call is bounded
// by --mpi-timeout: past it the job ends with an error naming the ranks.
#ifndef DSV4_ENGINE_DISTRIBUTED_H_
#define DSV4_ENGINE_DISTRIBUTED_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/loader.h"

namespace dsv4 {

// Whether this process was started by mpirun as one of several.
bool DistributedLaunch();

// --layers-split: "auto" (layers / ranks each, the remainder to the last
// ranks) or "a,b,c,..." (one layer count per rank, summing to `layers`).
// Returns each rank's first layer and, last, `layers`: [ranks + 1].
Result<std::vector<int64_t>> ParseLayersSplit(std::string_view text, int64_t layers, int ranks);

// LoadModel under mpirun (loader.cc calls it): see above. `options.
// distributed` says how to split.
Result<LoadedModel> LoadDistributed(const LoadOptions& options);

}  // namespace dsv4

#endif  // DSV4_ENGINE_DISTRIBUTED_H_
