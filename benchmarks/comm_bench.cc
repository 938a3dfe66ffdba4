// Google Benchmark cases for comm/: in-place float32 allreduce through the Gloo backend
// from 4 B to 64 MiB, per algorithm. This process is rank 0; it forks the other ranks
// (COMM_BENCH_WORLD_SIZE, default 2) before any benchmark runs. Before each benchmark run
// rank 0 broadcasts {bytes, iterations, algorithm} so the helpers run the same
// collectives, and {0, 0, 0} at the end. Counters: algbw and busbw in GB/s (1e9 bytes),
// busbw = algbw * 2(n-1)/n as in nccl-tests. The command-line table with a correctness
// check is `onnx-train bench-comm`; scripts/bench-comm.sh puts it beside PyTorch.
// COMM_BENCH_BACKEND=nccl (CUDA builds) runs BM_NcclAllReduce instead: rank r on
// cuda:(r % device count) with device buffers, world size (default: the device count, 1
// allowed) at most the device count; NCCL picks its own algorithm, and the allreduces of
// one benchmark run are queued back to back and waited for once.
#include <benchmark/benchmark.h>

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/rendezvous.h"
#include "comm/tensor_buffer.h"
#include "runtime/core/tensor.h"
#include "runtime/core/plugin.h"

namespace {

std::unique_ptr<ot::Communicator> g_comm;
bool g_nccl = false;  // COMM_BENCH_BACKEND=nccl
ot::Device g_device;   // nccl: this rank's GPU

// The benchmark's buffer: host memory for Gloo, this rank's GPU for NCCL.
struct BenchBuffer {
  std::vector<float> host;
  ot::Tensor device;
  explicit BenchBuffer(size_t bytes) : host(std::max<size_t>(1, bytes / sizeof(float)), 1.0f) {
    if (g_nccl) {
      device = ot::Tensor::Empty(ot::DType::kFloat32, {static_cast<int64_t>(host.size())}, g_device);
      device.CopyFrom(ot::Tensor::View(ot::DType::kFloat32, {static_cast<int64_t>(host.size())}, host.data()));
    }
  }
  ot::CommBuffer comm() { return g_nccl ? ot::BufferOf(device) : ot::CommBuffer::Of(host.data(), host.size()); }
  size_t bytes() const { return host.size() * sizeof(float); }
};

// Runs `times` allreduces: Gloo waits for each, NCCL queues them and waits for the last.
void RunAllReduces(BenchBuffer& data, const ot::AllReduceOptions& options, int64_t times) {
  ot::WorkPtr last;
  for (int64_t i = 0; i < times; ++i) {
    last = g_comm->AllReduce(data.comm(), options);
    if (!g_nccl) last->Wait();
  }
  if (last) last->Wait();
}

// {bytes, iterations, algorithm}; bytes 0 ends the helpers.
void SendControl(int64_t bytes, int64_t iterations, int64_t algorithm) {
  double control[3] = {double(bytes), double(iterations), double(algorithm)};
  g_comm->Broadcast(ot::CommBuffer::Of(control, 3))->Wait();
}

ot::AllReduceOptions OptionsFor(int64_t algorithm) {
  ot::AllReduceOptions o;
  o.algorithm = static_cast<ot::AllreduceAlgorithm>(algorithm);
  return o;
}

// Ranks 1..n-1: run whatever rank 0 announces until told to stop.
void HelperLoop() {
  for (;;) {
    double control[3];
    g_comm->Broadcast(ot::CommBuffer::Of(control, 3))->Wait();
    const auto bytes = static_cast<size_t>(control[0]);
    if (bytes == 0) return;
    BenchBuffer data(bytes);
    RunAllReduces(data, OptionsFor(static_cast<int64_t>(control[2])), static_cast<int64_t>(control[1]));
  }
}

void SetBandwidthCounters(benchmark::State& state, size_t bytes) {
  const int n = g_comm->size();
  const double total = static_cast<double>(bytes) * state.iterations();
  state.counters["algbw_GBps"] = benchmark::Counter(total / 1e9, benchmark::Counter::kIsRate);
  state.counters["busbw_GBps"] = benchmark::Counter(
      n > 1 ? total / 1e9 * 2.0 * (n - 1) / n : total / 1e9, benchmark::Counter::kIsRate);
}

// NCCL: one benchmark iteration is one queued allreduce; the run waits for the last one.
void BM_NcclAllReduce(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  BenchBuffer data(bytes);
  const int64_t algorithm = static_cast<int64_t>(ot::AllreduceAlgorithm::kAuto);
  const ot::AllReduceOptions options = OptionsFor(algorithm);
  SendControl(static_cast<int64_t>(bytes), static_cast<int64_t>(state.max_iterations), algorithm);
  ot::WorkPtr last;
  for (auto _ : state) last = g_comm->AllReduce(data.comm(), options);
  if (last) last->Wait();
  SetBandwidthCounters(state, data.bytes());
  state.SetLabel("nccl, world " + std::to_string(g_comm->size()));
}

void BM_AllReduce(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  const int64_t algorithm = state.range(1);
  std::vector<float> data(std::max<size_t>(1, bytes / sizeof(float)), 1.0f);
  const auto options = OptionsFor(algorithm);
  SendControl(static_cast<int64_t>(bytes), static_cast<int64_t>(state.max_iterations), algorithm);
  for (auto _ : state) {
    g_comm->AllReduce(ot::CommBuffer::Of(data.data(), data.size()), options)->Wait();
  }
  const int n = g_comm->size();
  SetBandwidthCounters(state, data.size() * sizeof(float));
  state.SetLabel(std::string(ot::AllreduceAlgorithmName(
                     static_cast<ot::AllreduceAlgorithm>(algorithm))) +
                 ", world " + std::to_string(n));
}

void AllReduceArgs(benchmark::internal::Benchmark* b) {
  for (auto algorithm : {ot::AllreduceAlgorithm::kAuto, ot::AllreduceAlgorithm::kRing,
                         ot::AllreduceAlgorithm::kHalvingDoubling}) {
    for (int64_t bytes = 4; bytes <= (int64_t{64} << 20); bytes *= 16) {
      b->Args({bytes, static_cast<int64_t>(algorithm)});
    }
  }
  b->ArgNames({"bytes", "algorithm"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

// Registered in main(): the Gloo cases or the NCCL ones, by COMM_BENCH_BACKEND.
void RegisterBenchmarks() {
  if (g_nccl) {
    auto* b = benchmark::RegisterBenchmark("BM_NcclAllReduce", BM_NcclAllReduce);
    for (int64_t bytes = 4; bytes <= (int64_t{256} << 20); bytes *= 16) b->Arg(bytes);
    b->ArgNames({"bytes"})->UseRealTime()->Unit(benchmark::kMicrosecond);
  } else {
    benchmark::RegisterBenchmark("BM_AllReduce", BM_AllReduce)->Apply(AllReduceArgs);
  }
}

ot::CommConfig ConfigFor(int rank, int size, const std::string& dir, const std::string& run) {
  ot::CommConfig c;
  c.rank = rank;
  c.size = size;
  c.rendezvous = "file:" + dir;
  c.run_id = run;
  c.timeout = std::chrono::seconds(120);
  if (g_nccl) {
    c.local_rank = rank;
    c.device = g_device;
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);  // before forking: --help exits here, alone
  const char* backend_env = std::getenv("COMM_BENCH_BACKEND");
  const std::string backend = backend_env && *backend_env ? backend_env : "gloo";
  g_nccl = backend == "nccl";
  const char* env = std::getenv("COMM_BENCH_WORLD_SIZE");
  int world = env ? std::max(2, std::atoi(env)) : 2;
  int device_count = 0;
  if (g_nccl) {
    if (!ot::PluginBuilt("nccl")) {
      std::fprintf(stderr, "comm_bench: this build has no NCCL backend (built without CUDA)\n");
      return 1;
    }
    std::string reason;
    device_count = ot::CountCudaDevicesInChild(&reason);  // no CUDA in this process before fork
    if (device_count == 0) {
      std::fprintf(stderr, "comm_bench: nccl backend needs a CUDA device: %s\n", reason.c_str());
      return 1;
    }
    world = env ? std::max(1, std::atoi(env)) : device_count;
    if (world > device_count) {
      std::fprintf(stderr, "comm_bench: COMM_BENCH_WORLD_SIZE=%d needs %d GPUs; this machine has %d\n",
                   world, world, device_count);
      return 1;
    }
  } else if (backend != "gloo") {
    std::fprintf(stderr, "comm_bench: COMM_BENCH_BACKEND must be gloo or nccl, not '%s'\n", backend.c_str());
    return 1;
  }
  RegisterBenchmarks();
  char pattern[] = "/tmp/onnx-train-comm-bench-XXXXXX";
  if (!mkdtemp(pattern)) return 1;
  const std::string dir = pattern;
  const std::string run = ot::NewRunId();
  std::vector<pid_t> helpers;
  for (int rank = 1; rank < world; ++rank) {
    pid_t pid = fork();
    if (pid == 0) {
      int rc = 0;
      try {
        if (g_nccl) g_device = ot::Device{ot::DeviceType::kCUDA, rank % device_count};
        g_comm = ot::CreateCommunicator(backend, ConfigFor(rank, world, dir, run));
        HelperLoop();
        g_comm.reset();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "comm_bench rank %d: %s\n", rank, e.what());
        rc = 1;
      }
      _exit(rc);
    }
    helpers.push_back(pid);
  }
  int rc = 0;
  try {
    if (g_nccl) g_device = ot::Device{ot::DeviceType::kCUDA, 0};
    g_comm = ot::CreateCommunicator(backend, ConfigFor(0, world, dir, run));
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    SendControl(0, 0, 0);
    g_comm.reset();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "comm_bench rank 0: %s\n", e.what());
    rc = 1;
  }
  for (pid_t pid : helpers) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  std::system(("rm -rf '" + dir + "'").c_str());
  return rc;
}
