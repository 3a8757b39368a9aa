// CED fused gate-up MLP and its column-major weight layout (specs/seed-mechanisms.md
// S-037…S-039, S-074…S-079, S-143; resolutions C-02, C-03, C-19).
//
// Layout (C-03): a weight is row_major or col_major; CED means col_major, tested
// as stride == (1, size(0)). safetensors stores no strides, so the layout of a
// tensor comes from the header's __metadata__: "dsv4.layout.<tensor name>" =
// "col_major" means the header shape is the logical [rows, cols] and the bytes
// hold column after column (element (r, c) at c·rows + r). The loader binds that
// as a strided view without copying; MatMulAnyLayout reads either layout in place.
//
// Fused MLP (C-02): ced_weight is the logical [I, H] matrix — rows [0, I/2) gate,
// rows [I/2, I) up — plus ced_bias [I] and a standard down projection [H, I]:
//   fused = ced_weight · x + ced_bias                     [I]
//   p[j]  = silu(fused[j >> 1]) · fused[I/2 + (j >> 1)]   j < I (repeat_interleave ×2, never built,
//   C-19) out   = down · p                                      [H]
// which is the half-width SwiGLU with down'[:, j] = down[:, 2j] + down[:, 2j+1].
#ifndef DSV4_MODEL_SEED_CED_MLP_H_
#define DSV4_MODEL_SEED_CED_MLP_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "tensor/tensor.h"

namespace dsv4::seed {

enum class Layout { kRowMajor, kColMajor };
std::string_view LayoutName(Layout l);

// The CED predicate: a rank-2 view with stride (1, size(0)) is col_major (S-076).
Layout DetectLayout(const TensorView& w);

// A col_major view of [rows, cols] over `data` (strides (1, rows)); no copy.
TensorView ColMajorView(const void* data, DType dtype, int64_t rows, int64_t cols);

// S-078 (C-03): a rank-2 strided view [rows, cols], element strides (s0, s1),
// over a storage of `storage_elems` elements. Any view whose largest offset
// (rows-1)·s0 + (cols-1)·s1 is at or past the storage — such as the seed's
// as_strided(shape, (shape[0], 1)) on a [14336, 5120] tensor — is refused with
// OutOfRange naming `what`; negative strides or sizes are InvalidArgument.
Result<TensorView> CheckedStridedView(const void* data, int64_t storage_elems, DType dtype,
                                      int64_t rows, int64_t cols, int64_t s0, int64_t s1,
                                      std::string_view what);

// Per-thread buffers of the column-major matmul (grow-only; reuse one per
// caller so a decode step allocates nothing).
struct LayoutScratch {
  std::vector<std::vector<float>> acc;  // [threads][T · rows of a chunk]
  std::vector<std::vector<float>> col;  // [threads][rows of a chunk] (f16/bf16 columns)
};

// out[T, N] = x[T, K] · w[N, K]ᵀ for a row_major or col_major w (f32, f16, bf16
// when col_major), reading w in place; fp32 accumulation. A column-major w may
// have a leading dimension larger than N (strides (1, ld), ld ≥ N: a row slice
// of a col_major tensor, as the S-015 baseline reads the gate and up halves).
// The column path splits the N output rows over the pool and reads each weight
// once for all T tokens. `scratch` null: local buffers (allocates).
void MatMulAnyLayout(ThreadPool& pool, float* out, const float* x, const TensorView& w,
                     int64_t n_tokens, LayoutScratch* scratch = nullptr);

// Rows [begin, end) of a rank-2 view (either layout), without a copy.
TensorView RowSlice(const TensorView& w, int64_t begin, int64_t end);

// An owning copy of w (rank 2, any layout) in `want` layout, f32 (S-077:
// asking for another physical layout copies; same logical values).
struct OwnedMatrix {
  std::vector<float> data;
  TensorView view;
};
OwnedMatrix ToLayout(const TensorView& w, Layout want);

struct CedMlpWeights {
  TensorView fused;         // [I, H], either layout
  std::vector<float> bias;  // [I] or empty
  TensorView down;          // [H, I]
};

// Scratch of the fused path: exactly T·I floats (gate and up halves; the
// product is written over the gate half), S-039. The baseline path uses
// gate/up ([T, I/2] each) instead; the down stage holds per thread one row of
// down's pair sums (I/2) and, for non-f32 down, one dequantized row; `layout`
// is the column-major matmul's buffers. All grow-only.
struct CedScratch {
  std::vector<float> fused;
  std::vector<float> gate, up;
  std::vector<std::vector<float>> pair, rows;  // [threads][I/2], [threads][I]
  LayoutScratch layout;
};

// x [T, H] → out [T, H], the fused path (no [T, I] expanded tensors): one
// product with the whole ced_weight [I, H].
void CedMlpForward(ThreadPool& pool, const CedMlpWeights& w, const float* x, int64_t T, float* out,
                   CedScratch& scratch);

// S-015 baseline: the same function with unfused gate and up products — two
// matmuls over the halves [0, I/2) and [I/2, I) of ced_weight (read in place,
// either layout), then the same SwiGLU and down stage. Equal to CedMlpForward
// up to fp32 summation order.
void CedMlpBaseline(ThreadPool& pool, const CedMlpWeights& w, const float* x, int64_t T, float* out,
                    CedScratch& scratch);

// The literal chunk → silu → repeat_interleave → mul → down path, materialising
// everything (the oracle for CedMlpForward in tests).
void CedMlpExplicit(const CedMlpWeights& w, const float* x, int64_t T, float* out);

// Standard SwiGLU weights, f32 row-major: gate/up [F, H], down [H, F].
struct SwiGluOwned {
  OwnedMatrix gate, up, down;
};
// CED storage of the same function (S-143, layout only): fused [2F, H] col_major
// = [gate; up], bias 0, down [H, 2F] with down[:, 2j] = W_d[:, j], down[:, 2j+1] = 0.
struct CedOwned {
  OwnedMatrix fused, down;
  std::vector<float> bias;
  CedMlpWeights weights() const { return {fused.view, bias, down.view}; }
};
Result<CedOwned> ConvertSwiGluToCed(const TensorView& gate, const TensorView& up,
                                    const TensorView& down);
// Back to standard SwiGLU: gate/up are the halves, W_d[:, j] = down[:, 2j] + down[:, 2j+1].
// A non-zero bias cannot be expressed and is an error.
Result<SwiGluOwned> ConvertCedToSwiGlu(const CedMlpWeights& ced);

}  // namespace dsv4::seed

#endif  // DSV4_MODEL_SEED_CED_MLP_H_
