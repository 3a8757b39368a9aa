// Top-k selection: the ids of the k largest of x[0, n), largest first, ties
// to the lower id — the order of ops::ref::TopK, which is their scalar twin.
// DeepSeek-V4's lightning indexer picks a decoded token's top index_topk
// (512) of its visible compressed entries (context / 4) with these.
#ifndef DSV4_OPS_TOPK_H_
#define DSV4_OPS_TOPK_H_

#include <cstdint>
#include <vector>

#include "base/thread_pool.h"

namespace dsv4::ops {

// The best min(k, end − begin) ids of [begin, end) into out, best first,
// through a k-heap (`heap` has room for k; no allocation). Returns the count.
int64_t TopKRange(const float* x, int64_t begin, int64_t end, int64_t k, int32_t* heap,
                  int32_t* out);

// The best min(k, n) ids of x[0, n) into out, best first, with the ids split
// over the pool in ranges of at least kTopKGrain: each thread keeps the best k
// of its range, then their lists merge. The same ids as ops::ref::TopK (a
// strict total order: the larger value, then the lower id; no NaN). scratch
// grows to threads · (2k + 2) ints once.
void TopK(ThreadPool& pool, const float* x, int64_t n, int64_t k, int32_t* out,
          std::vector<int32_t>& scratch);
inline constexpr int64_t kTopKGrain = 4096;

}  // namespace dsv4::ops

#endif  // DSV4_OPS_TOPK_H_
