// Byte arrays of data sets that batches read at random (a shuffled epoch picks rows all over
// them) reserved on 2 MiB pages where the system has them: with 4 KiB pages nearly every row
// is a TLB miss, and a page walk before each row's first cache line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ot {

// Reserves room for `bytes` bytes in `v` (as v->reserve) and asks the kernel (Linux
// transparent huge pages, madvise) to back its whole 2 MiB pages with huge pages as they are
// first written. Advice only: elsewhere, or without the memory, the pages stay as they are;
// the bytes are the same either way. Call it before filling `v`.
void ReserveOnHugePages(std::vector<uint8_t>* v, size_t bytes);

}  // namespace ot
