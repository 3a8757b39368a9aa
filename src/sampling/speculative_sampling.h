// Lossless speculative sampling (Leviathan et al. 2023, "Fast Inference from
// Transformers via Speculative Decoding"; Chen et al. 2023; DSpark spec §13.7):
// drafts d_1 .. d_k drawn from draft distributions q_0 .. q_{k−1} are checked
// against the target distributions π_0 .. π_k of the main model; d_{i+1} is
// accepted with probability min(1, π_i(d_{i+1}) / q_i(d_{i+1})), the first
// rejection at i draws the next token from normalize(max(π_i − q_i, 0)), and
// when all k are accepted the next token is drawn from π_k. Every emitted
// token then follows the target distribution exactly, whatever q is.
//
// Dimensions: k drafts, V vocabulary.
#ifndef DSV4_SAMPLING_SPECULATIVE_SAMPLING_H_
#define DSV4_SAMPLING_SPECULATIVE_SAMPLING_H_

#include <cstdint>
#include <span>
#include <vector>

#include "sampling/sampler.h"

namespace dsv4 {

// A token drawn from probs [V] (non-negative, summing to about 1) with one
// uniform number: the first id whose cumulative mass exceeds u · total.
int32_t DrawFrom(std::span<const float> probs, Xoshiro256& rng);

struct Verified {
  int64_t accepted = 0;  // drafts accepted, a prefix
  int32_t next = -1;     // the token after them (a residual or a target draw)
};

// drafts [k]; q [k, V] the distributions they were drawn from; pi [k+1, V] the
// target's. `residual` is scratch [V].
Verified VerifyDraftsLossless(std::span<const int32_t> drafts, std::span<const float> q,
                              std::span<const float> pi, Xoshiro256& rng,
                              std::vector<float>& residual);

}  // namespace dsv4

#endif  // DSV4_SAMPLING_SPECULATIVE_SAMPLING_H_
