// HugePageBuffer: zero-filled anonymous memory, 2 MiB-aligned, advised
// MADV_HUGEPAGE. Model weights are read through 2 MiB pages
// (base/mapped_file.h); the bandwidth probe and the matmul benchmark read
// their buffers the same way, without a TLB miss per 4 KiB that the weights
// no longer take.
#ifndef DSV4_BASE_HUGE_PAGE_BUFFER_H_
#define DSV4_BASE_HUGE_PAGE_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <span>

namespace dsv4 {

class HugePageBuffer {
 public:
  // `bytes` of memory; aborts (CHECK) if it cannot be mapped. The advice may
  // be ignored by the kernel (THP off): the memory is then in 4 KiB pages.
  explicit HugePageBuffer(size_t bytes);
  ~HugePageBuffer();
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return bytes_; }
  std::span<uint8_t> bytes() const { return {data_, bytes_}; }

 private:
  static constexpr size_t kAlign = size_t{2} << 20;
  size_t bytes_;
  size_t mapped_;
  void* base_;
  uint8_t* data_;
};

}  // namespace dsv4

#endif  // DSV4_BASE_HUGE_PAGE_BUFFER_H_
