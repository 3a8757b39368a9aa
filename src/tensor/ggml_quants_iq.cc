#include <string>

#include "base/check.h"
#include "tensor/ggml_quants.h"

namespace dsv4 {

void DequantizeIqRow(DType t, const uint8_t* src, int64_t n, float* dst) {
  (void)src;
  (void)n;
  (void)dst;
  CHECK(false, "DequantizeIqRow: %s not implemented yet", std::string(DTypeName(t)).c_str());
}

}  // namespace dsv4
