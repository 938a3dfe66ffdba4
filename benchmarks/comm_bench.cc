// Google Benchmark cases for comm/: in-place float32 allreduce through the Gloo backend
// from 4 B to 64 MiB, per algorithm. This process is rank 0; it forks the other ranks
// (COMM_BENCH_WORLD_SIZE, default 2) before any benchmark runs. Before each benchmark run
// rank 0 broadcasts {bytes, iterations, algorithm} so the helpers run the same
// collectives, and {0, 0, 0} at the end. Counters: algbw and busbw in GB/s (1e9 bytes),
// busbw = algbw * 2(n-1)/n as in nccl-tests. The command-line table with a correctness
// check is `onnx-train bench-comm`; scripts/bench-comm.sh puts it beside PyTorch.
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

namespace {

std::unique_ptr<ot::Communicator> g_comm;

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
    std::vector<float> data(std::max<size_t>(1, bytes / sizeof(float)), 1.0f);
    const auto options = OptionsFor(static_cast<int64_t>(control[2]));
    for (int64_t i = 0; i < static_cast<int64_t>(control[1]); ++i) {
      g_comm->AllReduce(ot::CommBuffer::Of(data.data(), data.size()), options)->Wait();
    }
  }
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
  const double total = static_cast<double>(data.size() * sizeof(float)) * state.iterations();
  state.counters["algbw_GBps"] = benchmark::Counter(total / 1e9, benchmark::Counter::kIsRate);
  state.counters["busbw_GBps"] =
      benchmark::Counter(total / 1e9 * 2.0 * (n - 1) / n, benchmark::Counter::kIsRate);
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
BENCHMARK(BM_AllReduce)->Apply(AllReduceArgs);

ot::CommConfig ConfigFor(int rank, int size, const std::string& dir, const std::string& run) {
  ot::CommConfig c;
  c.rank = rank;
  c.size = size;
  c.rendezvous = "file:" + dir;
  c.run_id = run;
  c.timeout = std::chrono::seconds(120);
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);  // before forking: --help exits here, alone
  const char* env = std::getenv("COMM_BENCH_WORLD_SIZE");
  const int world = env ? std::max(2, std::atoi(env)) : 2;
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
        g_comm = ot::CreateCommunicator("gloo", ConfigFor(rank, world, dir, run));
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
    g_comm = ot::CreateCommunicator("gloo", ConfigFor(0, world, dir, run));
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
