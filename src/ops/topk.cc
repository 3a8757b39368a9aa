// Top-k selection; see topk.h.
#include "ops/topk.h"

#include <algorithm>

#include "base/check.h"

namespace dsv4::ops {
namespace {

// `a` ranks above `b`: the larger value, the lower id on ties.
inline bool Better(const float* x, int32_t a, int32_t b) {
  return x[a] > x[b] || (x[a] == x[b] && a < b);
}

}  // namespace

int64_t TopKRange(const float* x, int64_t begin, int64_t end, int64_t k, int32_t* heap,
                  int32_t* out) {
  if (k <= 0 || end <= begin) return 0;
  CHECK(end <= INT32_MAX, "TopK: ids up to %lld do not fit int32", static_cast<long long>(end));
  // Min-heap on Better: heap[0] is the worst of the best k so far.
  const auto worse = [x](int32_t a, int32_t b) { return Better(x, a, b); };
  int64_t size = 0;
  for (auto i = static_cast<int32_t>(begin); i < end; ++i) {
    if (size < k) {
      heap[size++] = i;
      std::push_heap(heap, heap + size, worse);
    } else if (Better(x, i, heap[0])) {
      std::pop_heap(heap, heap + size, worse);
      heap[size - 1] = i;
      std::push_heap(heap, heap + size, worse);
    }
  }
  std::sort_heap(heap, heap + size, worse);  // best first
  std::copy_n(heap, size, out);
  return size;
}

void TopK(ThreadPool& pool, const float* x, int64_t n, int64_t k, int32_t* out,
          std::vector<int32_t>& scratch) {
  k = std::min(k, n);
  if (k <= 0) return;
  // Per thread: [heap k][list k][count 1][read position 1].
  const int64_t threads = pool.size(), stride = 2 * k + 2;
  if (static_cast<int64_t>(scratch.size()) < threads * stride) scratch.resize(threads * stride);
  for (int64_t t = 0; t < threads; ++t) scratch[t * stride + 2 * k] = 0;  // unused chunks: none
  pool.ParallelFor(
      n,
      [&](int64_t b, int64_t e, int t) {
        int32_t* part = scratch.data() + t * stride;
        part[2 * k] = static_cast<int32_t>(TopKRange(x, b, e, k, part, part + k));
      },
      std::max(kTopKGrain, k));
  // Merge: the best remaining head of the threads' lists, k times.
  for (int64_t t = 0; t < threads; ++t) scratch[t * stride + 2 * k + 1] = 0;
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    for (int64_t t = 0; t < threads; ++t) {
      const int32_t* part = scratch.data() + t * stride;
      if (part[2 * k + 1] == part[2 * k]) continue;  // list used up
      if (best < 0) {
        best = t;
        continue;
      }
      const int32_t* cur = scratch.data() + best * stride;
      if (Better(x, part[k + part[2 * k + 1]], cur[k + cur[2 * k + 1]])) best = t;
    }
    int32_t* pick = scratch.data() + best * stride;
    out[j] = pick[k + pick[2 * k + 1]++];
  }
}

}  // namespace dsv4::ops
