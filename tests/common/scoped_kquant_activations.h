// Sets the process's k-quant activations (ops::SetKQuantActivations) for one
// scope, for tests of both paths.
#ifndef DSV4_TESTS_COMMON_SCOPED_KQUANT_ACTIVATIONS_H_
#define DSV4_TESTS_COMMON_SCOPED_KQUANT_ACTIVATIONS_H_

#include "ops/matmul.h"

namespace dsv4::testing {

class ScopedKQuantActivations {
 public:
  explicit ScopedKQuantActivations(ops::KQuantActivations a) : old_(ops::GetKQuantActivations()) {
    ops::SetKQuantActivations(a);
  }
  ~ScopedKQuantActivations() { ops::SetKQuantActivations(old_); }
  ScopedKQuantActivations(const ScopedKQuantActivations&) = delete;
  ScopedKQuantActivations& operator=(const ScopedKQuantActivations&) = delete;

 private:
  ops::KQuantActivations old_;
};

}  // namespace dsv4::testing

#endif  // DSV4_TESTS_COMMON_SCOPED_KQUANT_ACTIVATIONS_H_
