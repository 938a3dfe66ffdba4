// Pieces shared by the benchmark programs.
#include "benchmarks/bench_common.h"

#include <cstdlib>
#include <cstring>
#include <random>

#include <benchmark/benchmark.h>

namespace ot {
namespace bench {

HostTensor RandomImages(const std::string& name, int64_t batch, const ReferenceModelOptions& o) {
  HostTensor t(DType::kFloat32, {batch, o.channels, o.height, o.width}, name);
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.f, 1.f);
  float* data = t.Data<float>();
  for (int64_t i = 0; i < t.NumElements(); ++i) data[i] = normal(rng);
  return t;
}

HostTensor RandomLabels(int64_t batch, int64_t classes) {
  HostTensor t(DType::kInt64, {batch}, "labels");
  std::mt19937 rng(7);
  for (int64_t i = 0; i < batch; ++i) t.Data<int64_t>()[i] = static_cast<int64_t>(rng() % classes);
  return t;
}

namespace {
int g_threads = 0;
}  // namespace

int Threads() { return g_threads; }

int RunBenchmarkMain(int argc, char** argv, void (*register_cases)()) {
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) g_threads = std::atoi(argv[i] + 10);
    else argv[out++] = argv[i];
  }
  argc = out;
  register_cases();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace bench
}  // namespace ot
