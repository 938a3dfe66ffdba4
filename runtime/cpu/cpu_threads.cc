// Thread count of the CPU runtime.
#include "runtime/cpu/cpu_threads.h"

#include <omp.h>

namespace ot {

void SetCpuThreads(int n) {
  if (n > 0) omp_set_num_threads(n);
}

int GetCpuThreads() { return omp_get_max_threads(); }

}  // namespace ot
