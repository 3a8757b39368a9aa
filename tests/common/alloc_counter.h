// A counting global operator new for tests that assert a code path does no
// heap allocation. Linking alloc_counter.cc into a test binary replaces the
// global operator new/delete family with versions that count every
// allocation; AllocationCount() reads the running total.
#ifndef DSV4_TESTS_COMMON_ALLOC_COUNTER_H_
#define DSV4_TESTS_COMMON_ALLOC_COUNTER_H_

#include <cstdint>

namespace dsv4::testing {

// Heap allocations made through operator new (any form) so far, all threads.
int64_t AllocationCount();

// Debugging aid: while on, the next counted allocation aborts (run the test
// under a debugger to see who allocates).
void SetAllocationTrap(bool on);

}  // namespace dsv4::testing

#endif  // DSV4_TESTS_COMMON_ALLOC_COUNTER_H_
