#include <string>

#include "base/check.h"
#include "ops/ref/ggml_dot_ref.h"

namespace dsv4::ops::ref {

float DotIqQ8K(DType w, const uint8_t* row, const BlockQ8K* xq, int64_t k) {
  (void)row;
  (void)xq;
  (void)k;
  CHECK(false, "DotIqQ8K: %s not implemented yet", std::string(DTypeName(w)).c_str());
  return 0.0f;
}

}  // namespace dsv4::ops::ref
