// Greedy-by-size offset assignment over buffer lifetimes.
#include "runtime/executor/memory_plan.h"

#include <algorithm>
#include <numeric>

namespace ot {

MemoryPlan PlanMemory(const std::vector<BufferLifetime>& buffers, size_t alignment) {
  MemoryPlan plan;
  plan.offsets.assign(buffers.size(), 0);
  auto round_up = [alignment](size_t n) { return (n + alignment - 1) / alignment * alignment; };
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return buffers[a].bytes > buffers[b].bytes; });
  std::vector<size_t> placed;
  for (size_t idx : order) {
    const BufferLifetime& b = buffers[idx];
    size_t need = round_up(std::max<size_t>(b.bytes, 1));
    plan.sum_of_buffers += need;
    // Intervals of placed buffers alive at the same time, sorted by offset.
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t p : placed) {
      const BufferLifetime& o = buffers[p];
      if (o.first_step <= b.last_step && b.first_step <= o.last_step)
        busy.emplace_back(plan.offsets[p], plan.offsets[p] + round_up(std::max<size_t>(o.bytes, 1)));
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [start, end] : busy) {
      if (start >= offset + need) break;  // fits in the gap before this one
      offset = std::max(offset, end);
    }
    plan.offsets[idx] = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + need);
    placed.push_back(idx);
  }
  return plan;
}

}  // namespace ot
