// Helpers for our own elementwise CPU loops: OT_VECTOR_CLONES compiles a loop function
// for AVX-512, AVX2 and the baseline and picks one at load time (GCC's target_clones),
// since the build targets baseline x86-64 (SSE2); ForEachChunk splits [0, n) over the
// OpenMP threads. Files with such loops are built with -fno-trapping-math and
// -fno-math-errno (runtime/CMakeLists.txt): without them GCC keeps the branches of
// min/max/select chains and the errno of sqrt, and does not vectorise (results are
// unchanged: nothing here enables FP exceptions or reads errno).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define OT_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define OT_VECTOR_CLONES
#endif

namespace ot {
namespace cpu {

// Calls fn(begin, end) on contiguous chunks covering [0, n): one per thread when n is at
// least `parallel_from`, else one chunk on the calling thread.
template <typename Fn>
void ForEachChunk(int64_t n, int64_t parallel_from, Fn&& fn) {
  if (n < parallel_from) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t chunk = (n + threads - 1) / threads;
    const int64_t begin = std::min(n, t * chunk), end = std::min(n, begin + chunk);
    if (begin < end) fn(begin, end);
  }
}

}  // namespace cpu
}  // namespace ot
