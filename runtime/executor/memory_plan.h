// Static memory planning: given each buffer's size and the steps between which it is
// alive, assign offsets in one arena so that buffers alive at the same time never overlap.
#pragma once

#include <cstddef>
#include <vector>

namespace ot {

struct BufferLifetime {
  size_t bytes = 0;
  int first_step = 0;  // step that writes it
  int last_step = 0;   // last step that reads it (inclusive)
};

struct MemoryPlan {
  std::vector<size_t> offsets;  // one per buffer, aligned
  size_t arena_bytes = 0;
  size_t sum_of_buffers = 0;  // what separate allocations would take
};

// Greedy by size: the largest buffers are placed first, each at the lowest aligned
// offset that does not overlap a placed buffer with an intersecting lifetime.
MemoryPlan PlanMemory(const std::vector<BufferLifetime>& buffers, size_t alignment);

}  // namespace ot
