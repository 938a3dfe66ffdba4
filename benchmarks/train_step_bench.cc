// Training-step throughput of the reference models on CPU through ot::TrainingSession
// (forward, loss, backward, SGD momentum 0.9 update: what benchmarks/torch_step.py
// times), reported as items_per_second = images/s. scripts/bench-train.sh runs it beside
// PyTorch in the same run. Threads: OMP_NUM_THREADS, or --threads=N.
// Any ONNX model too (benchmarks/zoo_step.py): ONNXTRAIN_BENCH_ONNX=FILE with
// ONNXTRAIN_BENCH_BATCH (32), ONNXTRAIN_BENCH_CLASSES (10) and, for an int64 token input,
// ONNXTRAIN_BENCH_VOCAB (100) adds train_step/onnx/batch:B on random inputs.
// ONNXTRAIN_BENCH_CONV_ALGO=auto|direct|winograd|taps|winograd2|winograd4: the convolutions' --conv-algo (auto).
// ONNXTRAIN_BENCH_FUSE=0: BatchNorm, Add and ReLU as separate kernels (graph/passes/fusion.h).
// ONNXTRAIN_BENCH_AMP=bf16: the step under --amp bf16 (graph/passes/amp_pass.h).
// ONNXTRAIN_BENCH_FUSE_ATTENTION=0: attention chains left as their ops (not fused into org.onnxtrain Attention).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "benchmarks/bench_common.h"
#include "graph/error.h"
#include "graph/onnx_io.h"
#include "models/reference_models.h"
#include "runtime/cpu/cpu_threads.h"
#include "train/training_session.h"
#include "tools/executor_environment.h"

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
    config.executor = ExecutorOptionsFromEnvironment();
    config.executor.num_threads = bench::Threads();
    if (const char* algo = std::getenv("ONNXTRAIN_BENCH_CONV_ALGO")) config.executor.conv_algo = algo;
    if (const char* fuse = std::getenv("ONNXTRAIN_BENCH_FUSE")) config.fuse_relu = std::string(fuse) != "0";
    if (const char* amp = std::getenv("ONNXTRAIN_BENCH_AMP")) config.amp = ParseAmpMode(amp);
    TrainingSession session(model, config);
    session.ReleaseStateBytes(&model);  // as the trainer does: the session holds the weights
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

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoll(v) : fallback;
}

// A random batch for the model's first input: normal floats, or token ids below `vocab`
// for an int64 input; the batch dimension (symbolic or not) becomes `batch`.
HostTensor RandomInput(const ValueInfo& input, int64_t batch, int64_t vocab) {
  std::vector<int64_t> dims;
  for (size_t d = 0; d < input.dims.size(); ++d) {
    OT_CHECK(d == 0 || input.dims[d].value > 0, "input '%s' has a symbolic dimension %zu; only the batch may be",
             input.name.c_str(), d);
    dims.push_back(d == 0 ? batch : input.dims[d].value);
  }
  HostTensor t(input.dtype, dims, input.name);
  std::mt19937 rng(42);
  if (input.dtype == DType::kInt64) {
    for (int64_t i = 0; i < t.NumElements(); ++i) t.Data<int64_t>()[i] = static_cast<int64_t>(rng() % vocab);
  } else {
    OT_CHECK(input.dtype == DType::kFloat32, "input '%s' is %s; the benchmark feeds float or int64",
             input.name.c_str(), DTypeName(input.dtype).c_str());
    std::normal_distribution<float> normal(0.f, 1.f);
    for (int64_t i = 0; i < t.NumElements(); ++i) t.Data<float>()[i] = normal(rng);
  }
  return t;
}

void BenchOnnxStep(benchmark::State& state, const std::string& path, int64_t batch, int64_t classes, int64_t vocab) {
  size_t arena_bytes = 0;
  try {
    Model model = LoadModel(path);
    TrainingConfig config;
    config.optimizer.momentum = 0.9f;
    config.executor = ExecutorOptionsFromEnvironment();
    config.executor.num_threads = bench::Threads();
    if (const char* algo = std::getenv("ONNXTRAIN_BENCH_CONV_ALGO")) config.executor.conv_algo = algo;
    if (const char* fuse = std::getenv("ONNXTRAIN_BENCH_FUSE")) config.fuse_relu = std::string(fuse) != "0";
    if (const char* amp = std::getenv("ONNXTRAIN_BENCH_AMP")) config.amp = ParseAmpMode(amp);
    if (const char* fa = std::getenv("ONNXTRAIN_BENCH_FUSE_ATTENTION")) config.autodiff.fuse_attention = std::string(fa) != "0";
    TrainingSession session(model, config);
    session.ReleaseStateBytes(&model);  // as the trainer does: the session holds the weights
    const ValueInfo* in = model.graph.FindInput(session.input_name());
    OT_CHECK(in, "the model has no input '%s'", session.input_name().c_str());
    Tensor x = Tensor::FromHost(RandomInput(*in, batch, vocab));
    Tensor y = Tensor::FromHost(bench::RandomLabels(batch, classes));
    for (int i = 0; i < 2; ++i) session.Step(x, y, 0.01f);  // planning and warm-up: not timed
    arena_bytes = session.LastPlanStats().arena_bytes;
    for (auto _ : state) {
      StepResult r = session.Step(x, y, 0.01f);
      benchmark::DoNotOptimize(r.loss);
    }
  } catch (const Error& e) {
    state.SkipWithError(e.what());
    return;
  }
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["batch"] = static_cast<double>(batch);
  state.counters["threads"] = GetCpuThreads();
  state.counters["arena_mb"] = static_cast<double>(arena_bytes) / (1 << 20);
}

}  // namespace

void RegisterStepBenchmarks() {
  if (const char* onnx = std::getenv("ONNXTRAIN_BENCH_ONNX"); onnx && *onnx) {
    const int64_t batch = EnvInt("ONNXTRAIN_BENCH_BATCH", 32);
    std::string name = "train_step/onnx/batch:" + std::to_string(batch);
    benchmark::RegisterBenchmark(name.c_str(), BenchOnnxStep, std::string(onnx), batch,
                                 EnvInt("ONNXTRAIN_BENCH_CLASSES", 10), EnvInt("ONNXTRAIN_BENCH_VOCAB", 100))
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
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
