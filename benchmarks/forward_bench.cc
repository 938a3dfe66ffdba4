// Forward-pass throughput of the reference models on CPU through ot::Executor (the
// inference graph, batch norm with running statistics: PyTorch's eval mode), reported as
// items_per_second = images/s. scripts/bench-forward.sh runs it beside a PyTorch reference
// measured in the same run. Threads: OMP_NUM_THREADS, or --threads=N before the benchmark
// flags.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "benchmarks/bench_common.h"
#include "graph/error.h"
#include "models/reference_models.h"
#include "runtime/cpu/cpu_threads.h"
#include "runtime/executor/executor.h"
#include "tools/executor_environment.h"

namespace ot {


namespace {

struct ForwardCase {
  std::string model;  // "resnet34" or "simplenn"
  int64_t batch;
  ReferenceModelOptions shape;
};


void BenchForward(benchmark::State& state, const ForwardCase& c) {
  try {
    Model model = BuildReferenceModel(c.model, c.shape);
    ExecutorOptions options = ExecutorOptionsFromEnvironment();
    options.num_threads = bench::Threads();
    Executor exec(model, options);
    const std::string& input_name = model.graph.inputs.at(0).name;
    std::map<std::string, Tensor> feeds{{input_name, Tensor::FromHost(bench::RandomImages(input_name, c.batch, c.shape))}};
    exec.Run(feeds);  // plans and prepares the kernels: not timed
    for (auto _ : state) {
      std::vector<Tensor> outputs = exec.Run(feeds);
      benchmark::DoNotOptimize(outputs.front().raw());
    }
  } catch (const Error& e) {
    state.SkipWithError(e.what());
    return;
  }
  state.SetItemsProcessed(state.iterations() * c.batch);
  state.SetLabel(c.model);
  state.counters["batch"] = static_cast<double>(c.batch);
  state.counters["threads"] = GetCpuThreads();
}

}  // namespace

void RegisterForwardBenchmarks() {
  const std::vector<ForwardCase> cases = {
      {"resnet34", 128, ReferenceModelOptions{3, 32, 32, 10, 0}},
      {"simplenn", 32, ReferenceModelOptions{1, 28, 28, 10, 0}},
  };
  for (const auto& c : cases) {
    std::string name = "forward/" + c.model + "/batch:" + std::to_string(c.batch);
    auto* b = benchmark::RegisterBenchmark(name.c_str(), BenchForward, c);
    b->UseRealTime()->Unit(benchmark::kMillisecond);
    if (c.model == "resnet34") b->MinTime(3.0);
  }
}

}  // namespace ot

int main(int argc, char** argv) { return ot::bench::RunBenchmarkMain(argc, argv, ot::RegisterForwardBenchmarks); }
