#include "ops/simd/simd_kernels.h"

namespace dsv4::ops::simd {

GgmlQ8Fn GgmlBasicQ8Kernel(DType w_dtype) {
  (void)w_dtype;
  return nullptr;
}

}  // namespace dsv4::ops::simd
