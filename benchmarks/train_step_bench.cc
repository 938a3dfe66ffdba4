// Training-step throughput of the reference models on CPU through ot::TrainingSession
// (forward, loss, backward, SGD momentum 0.9 update: what ../shared/reference/torch_step.py
// times), reported as items_per_second = images/s. scripts/bench-train.sh runs it beside
// PyTorch in the same run. Threads: OMP_NUM_THREADS, or --threads=N.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "benchmarks/bench_common.h"
#include "graph/error.h"
#include "models/reference_models.h"
#include "runtime/cpu/cpu_threads.h"
#include "train/training_session.h"

namespace ot {


namespace {

struct StepCase {
  std::string model;
  int64_t batch;
  ReferenceModelOptions shape;
  float lr;
};

void BenchStep(benchmark::State& state, const StepCase& c) {
  size_t arena_bytes = 0;
  try {
    Model model = BuildReferenceModel(c.model, c.shape);
    TrainingConfig config;
    config.optimizer.momentum = 0.9f;
    config.executor.num_threads = bench::Threads();
    TrainingSession session(model, config);
    Tensor x = Tensor::FromHost(bench::RandomImages(session.input_name(), c.batch, c.shape));
    Tensor y = Tensor::FromHost(bench::RandomLabels(c.batch, c.shape.classes));
    for (int i = 0; i < 2; ++i) session.Step(x, y, c.lr);  // planning and warm-up: not timed
    arena_bytes = session.LastPlanStats().arena_bytes;
    for (auto _ : state) {
      StepResult r = session.Step(x, y, c.lr);
      benchmark::DoNotOptimize(r.loss);
    }
  } catch (const Error& e) {
    state.SkipWithError(e.what());
    return;
  }
  state.SetItemsProcessed(state.iterations() * c.batch);
  state.SetLabel(c.model);
  state.counters["batch"] = static_cast<double>(c.batch);
  state.counters["threads"] = GetCpuThreads();
  state.counters["arena_mb"] = static_cast<double>(arena_bytes) / (1 << 20);
}

}  // namespace

void RegisterStepBenchmarks() {
  const std::vector<StepCase> cases = {
      {"resnet34", 128, ReferenceModelOptions{3, 32, 32, 10, 0}, 0.1f},
      {"simplenn", 32, ReferenceModelOptions{1, 28, 28, 10, 0}, 0.01f},
      {"simplenn", 1024, ReferenceModelOptions{1, 28, 28, 10, 0}, 0.01f},
  };
  for (const auto& c : cases) {
    std::string name = "train_step/" + c.model + "/batch:" + std::to_string(c.batch);
    auto* b = benchmark::RegisterBenchmark(name.c_str(), BenchStep, c);
    b->UseRealTime()->Unit(benchmark::kMillisecond);
    if (c.model == "resnet34") b->Iterations(3);
  }
}

}  // namespace ot

int main(int argc, char** argv) { return ot::bench::RunBenchmarkMain(argc, argv, ot::RegisterStepBenchmarks); }
