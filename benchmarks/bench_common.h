// Pieces shared by the benchmark programs: random inputs and the --threads flag.
#pragma once

#include <string>

#include "graph/host_tensor.h"
#include "models/reference_models.h"

namespace ot {
namespace bench {

// Normal(0, 1) images [batch, C, H, W] named `name`, the same for every call.
HostTensor RandomImages(const std::string& name, int64_t batch, const ReferenceModelOptions& shape);
// Labels in [0, classes), the same for every call.
HostTensor RandomLabels(int64_t batch, int64_t classes);
// The --threads=N given to the program (0: the library default, OMP_NUM_THREADS).
int Threads();
// main() of a benchmark program: takes --threads=N out of argv (Google Benchmark rejects
// unknown flags), registers the cases and runs them.
int RunBenchmarkMain(int argc, char** argv, void (*register_cases)());

}  // namespace bench
}  // namespace ot
