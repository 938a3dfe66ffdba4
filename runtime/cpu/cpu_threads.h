// Thread count of the CPU runtime (OpenMP, which oneDNN uses here).
#pragma once

namespace ot {

void SetCpuThreads(int n);
int GetCpuThreads();

}  // namespace ot
