// `onnx-train bench-comm`: allreduce bandwidth table in the columns of nccl-tests, over N
// local processes that this command starts itself (through mpirun for --backend mpi).
#pragma once

#include <string>
#include <vector>

#include "tools/flag_table.h"

namespace ot {

// onnx-train bench-comm --backend gloo|mpi|nccl --world-size N [--min-bytes 4] [--max-bytes 64Mi]
//   [--iters 20] [--warmup 3] [--step-factor 4] [--algorithm auto|ring|...] [--timeout S]
// Its flag table.
std::vector<FlagInfo> BenchCommFlagInfos();
int CmdBenchComm(const std::vector<std::string>& argv);

}  // namespace ot
