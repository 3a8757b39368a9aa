#include "ops/matmul.h"

#include "ops/ref/ops_ref.h"

namespace dsv4::ops {

void MatMul(ThreadPool& pool, float* out, const float* x, const TensorView& w, int64_t n_tokens) {
  CHECK(w.rank == 2, "MatMul: weight must be 2-D, got %s", w.ShapeString().c_str());
  const int64_t n_out = w.sizes[0];
  // Output features are split across threads; each writes its own columns.
  pool.ParallelFor(
      n_out,
      [&](int64_t begin, int64_t end, int) {
        ref::MatMul(out + begin, x, w.Slice(begin, end), n_tokens, n_out);
      },
      16);
}

}  // namespace dsv4::ops
