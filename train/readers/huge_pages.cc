// ReserveOnHugePages (see huge_pages.h).
#include "train/readers/huge_pages.h"

#include <sys/mman.h>

namespace ot {

void ReserveOnHugePages(std::vector<uint8_t>* v, size_t bytes) {
  v->reserve(bytes);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t start = reinterpret_cast<uintptr_t>(v->data());
  const uintptr_t begin = (start + kHuge - 1) & ~(kHuge - 1), end = (start + v->capacity()) & ~(kHuge - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#endif
}

}  // namespace ot
