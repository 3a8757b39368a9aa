// HugePageBuffer; see huge_page_buffer.h.
#include "base/huge_page_buffer.h"

#include <sys/mman.h>

#include "base/check.h"

namespace dsv4 {

HugePageBuffer::HugePageBuffer(size_t bytes) : bytes_(bytes), mapped_(bytes + kAlign) {
  void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(p != MAP_FAILED, "HugePageBuffer: cannot map %zu bytes", mapped_);
  base_ = p;
  const uintptr_t a = (reinterpret_cast<uintptr_t>(p) + kAlign - 1) & ~uintptr_t{kAlign - 1};
  data_ = reinterpret_cast<uint8_t*>(a);
  if (bytes_ > 0) ::madvise(data_, bytes_, MADV_HUGEPAGE);  // advice: may be ignored
}

HugePageBuffer::~HugePageBuffer() { ::munmap(base_, mapped_); }

}  // namespace dsv4
