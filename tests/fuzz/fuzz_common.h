// Shared checks for the io fuzz targets: every tensor a reader returns must
// lie inside the input, and its view must agree with its byte size.
#ifndef DSV4_TESTS_FUZZ_FUZZ_COMMON_H_
#define DSV4_TESTS_FUZZ_FUZZ_COMMON_H_

#include <cstddef>
#include <cstdint>

#include "base/check.h"
#include "io/checkpoint.h"

namespace dsv4::fuzz {

// Checks the tensor invariants and reads the first and last byte of each
// tensor (so ASan sees any out-of-bounds view).
inline uint8_t TouchTensors(const CheckpointReader& r, const uint8_t* data, size_t size) {
  uint8_t acc = 0;
  for (const TensorInfo& t : r.tensors()) {
    const auto* p = static_cast<const uint8_t*>(t.data);
    CHECK(t.nbytes >= 0, "negative size for %s", t.name.c_str());
    CHECK(p >= data && p <= data + size, "tensor %s starts outside the input", t.name.c_str());
    CHECK(static_cast<size_t>(t.nbytes) <= size - static_cast<size_t>(p - data),
          "tensor %s ends outside the input", t.name.c_str());
    const TensorView v = t.view();
    CHECK(v.nbytes() == t.nbytes, "tensor %s: view has %lld bytes, info %lld", t.name.c_str(),
          static_cast<long long>(v.nbytes()), static_cast<long long>(t.nbytes));
    CHECK(r.Find(t.name) == &t, "Find(%s) does not return the listed tensor", t.name.c_str());
    if (t.nbytes > 0) acc ^= p[0] ^ p[t.nbytes - 1];
  }
  return acc;
}

}  // namespace dsv4::fuzz

#endif  // DSV4_TESTS_FUZZ_FUZZ_COMMON_H_
