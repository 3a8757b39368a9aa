// ggml MXFP4 blocks: the repack to dsv4's FP4 layout (see mxfp4_ref.h).
#include "ops/ref/mxfp4_ref.h"

#include "base/check.h"
#include "base/float_types.h"

namespace dsv4::ops::ref {

namespace {
// Element i (0..31) of a block's 16 code bytes.
uint8_t Code(const uint8_t* qs, int64_t i) { return i < 16 ? qs[i] & 0xf : qs[i - 16] >> 4; }
}  // namespace

void RepackMxfp4Row(const uint8_t* blocks, int64_t n, uint8_t* codes, uint8_t* scales) {
  CHECK(n % kMxfp4BlockElems == 0, "MXFP4 row of %lld values", static_cast<long long>(n));
  for (int64_t b = 0; b < n / kMxfp4BlockElems; ++b) {
    const uint8_t* block = blocks + b * kMxfp4BlockBytes;
    scales[b] = block[0];
    uint8_t* out = codes + b * (kMxfp4BlockElems / 2);
    for (int64_t i = 0; i < kMxfp4BlockElems / 2; ++i) {
      out[i] = static_cast<uint8_t>(Code(block + 1, 2 * i) | (Code(block + 1, 2 * i + 1) << 4));
    }
  }
}

}  // namespace dsv4::ops::ref
