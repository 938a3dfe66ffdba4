// `onnx-train bench-comm`: forks --world-size processes that rendezvous through a FileStore
// in a fresh temp directory and time in-place float32 allreduce from --min-bytes to
// --max-bytes (times --step-factor each row). Rank 0 prints, like nccl-tests, per size:
// bytes, elements, time (us per allreduce, rank 0's clock), algbw = bytes / time, busbw =
// algbw * 2(n-1)/n (GB = 1e9 bytes) and the number of wrong elements over all ranks (a
// separate checked allreduce of known values), then the average busbw over the sizes from
// 1 MiB and a legend. time is the median of the iterations (host backends) or their mean
// (NCCL, queued back to back).
// --backend nccl: rank r uses cuda:(r % device count) and device buffers (so N must not
// exceed the device count); the timed allreduces are queued back to back and waited for
// once, as nccl-tests does.
// --backend mpi: the ranks are an MPI job; bench-comm runs itself through mpirun (or, started
// by mpirun, is one rank of it). The parent checks the build and the GPUs (in a probe process:
// it must not initialise CUDA before forking) so that a missing one is one error line.
#include "tools/bench_comm.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <dirent.h>
#include <thread>

#include "comm/communicator.h"
#include "comm/gloo_communicator.h"
#include "comm/rendezvous.h"
#include "comm/tensor_buffer.h"
#include "graph/error.h"
#include "runtime/core/tensor.h"
#include "tools/args.h"
#include "tools/shared_flags.h"
#include "runtime/core/plugin.h"
#include "tools/launcher.h"

namespace ot {
namespace {

struct BenchCommOptions {
  std::string backend = "gloo";
  int world_size = 2;
  size_t min_bytes = 4;
  size_t max_bytes = 64u << 20;
  int iters = 20;
  int warmup = 3;
  int step_factor = 4;
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kAuto;
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};
  int device_count = 0;  // nccl: CUDA devices, counted before forking
  // $ONNXTRAIN_GLOO_SYNC_BYTES and $ONNXTRAIN_MPI_PIECE_BYTES (CommConfig's; 0: default).
  size_t gloo_sync_bytes = 0;
  size_t mpi_piece_bytes = 0;
};

// Checks, before any rank starts, that the backend is in this build and (NCCL) that there
// are enough GPUs; sets o->device_count.
void CheckBackend(BenchCommOptions* o) {
  const auto names = CommunicatorBackends();
  if (o->backend == "auto") o->backend = "gloo";  // bench-comm's buffers are host memory
  // A plugin backend (nccl) registers when a rank first asks for it.
  if (std::find(names.begin(), names.end(), o->backend) == names.end() && !PluginBuilt(o->backend)) {
    OT_CHECK(o->backend != "mpi", "bench-comm: %s", NoMpiBackendMessage());
    std::string list;
    for (const auto& name : names) list += (list.empty() ? "" : ", ") + name;
    OT_CHECK(o->backend != "nccl",
             "bench-comm: this build has no NCCL backend (built without CUDA: "
             "-DONNXTRAIN_CUDA=OFF or no CUDA toolkit found); use --backend gloo");
    throw Error("bench-comm: unknown backend '" + o->backend + "'; available: " + list);
  }
  if (o->backend != "nccl") return;
  std::string reason;
  o->device_count = CountCudaDevicesInChild(&reason);
  OT_CHECK(o->device_count > 0, "nccl backend needs a CUDA device: %s", reason.c_str());
  OT_CHECK(o->world_size <= o->device_count,
           "bench-comm --backend nccl: --world-size %d needs %d GPUs (one per rank); this machine "
           "has %d",
           o->world_size, o->world_size, o->device_count);
}

}  // namespace

std::vector<FlagInfo> BenchCommFlagInfos() {
  return {kBackendFlag,
          kWorldSizeFlag,
          {"min-bytes", FlagType::kInt, "  --min-bytes B        the smallest message (4)\n"},
          {"max-bytes", FlagType::kInt, "  --max-bytes B        the largest message (67108864)\n"},
          {"iters", FlagType::kInt, "  --iters N            timed allreduces per size (20)\n"},
          {"warmup", FlagType::kInt, "  --warmup N           untimed allreduces per size first (3)\n"},
          {"step-factor", FlagType::kInt, "  --step-factor F      each size F times the last (4)\n"},
          {"algorithm", FlagType::kText, "  --algorithm NAME     auto, ring, ring_chunked, halving_doubling or bcube (auto)\n"},
          {"timeout", FlagType::kNumber, "  --timeout S          an allreduce fails after S seconds (120)\n"}};
}

namespace {

BenchCommOptions ParseOptions(const std::vector<std::string>& argv) {
  const Args args = ParseFlags(argv, BenchCommFlagInfos());
  OT_CHECK(args.positional().empty(), "bench-comm takes no positional arguments (got '%s')",
           args.positional().empty() ? "" : args.positional()[0].c_str());
  BenchCommOptions o;
  o.backend = args.Get("backend", o.backend);
  o.world_size = static_cast<int>(args.GetInt("world-size", o.world_size));
  o.min_bytes = static_cast<size_t>(args.GetInt("min-bytes", static_cast<int64_t>(o.min_bytes)));
  o.max_bytes = static_cast<size_t>(args.GetInt("max-bytes", static_cast<int64_t>(o.max_bytes)));
  o.iters = static_cast<int>(args.GetInt("iters", o.iters));
  o.warmup = static_cast<int>(args.GetInt("warmup", o.warmup));
  o.step_factor = static_cast<int>(args.GetInt("step-factor", o.step_factor));
  o.algorithm = ParseAllreduceAlgorithm(args.Get("algorithm", "auto"));
  o.timeout = std::chrono::milliseconds(
      static_cast<int64_t>(args.GetDouble("timeout", 120.0) * 1000.0));
  OT_CHECK(o.world_size >= 1 && o.world_size <= 64, "--world-size must be in 1..64, not %d",
           o.world_size);
  OT_CHECK(o.min_bytes >= 4 && o.min_bytes <= o.max_bytes,
           "--min-bytes must be at least 4 and at most --max-bytes");
  OT_CHECK(o.max_bytes <= (size_t{4} << 30), "--max-bytes is limited to 4 GiB");
  OT_CHECK(o.iters >= 1 && o.warmup >= 0, "--iters must be at least 1 and --warmup at least 0");
  OT_CHECK(o.step_factor >= 2, "--step-factor must be at least 2");
  // Piece sizes to measure with, from the environment (read here, once).
  if (const char* v = std::getenv("ONNXTRAIN_GLOO_SYNC_BYTES")) o.gloo_sync_bytes = std::strtoull(v, nullptr, 10);
  if (const char* v = std::getenv("ONNXTRAIN_MPI_PIECE_BYTES")) o.mpi_piece_bytes = std::strtoull(v, nullptr, 10);
  return o;
}

float FillValue(int rank, size_t i) { return static_cast<float>((rank + 1) * (1 + i % 5)); }

// One rank's part of the benchmark; rank 0 prints the table.
void RunRank(const BenchCommOptions& o, int rank, const std::string& dir,
             const std::string& run_id) {
  CommConfig config;
  config.rank = rank;
  config.size = o.world_size;
  config.rendezvous = "file:" + dir;
  config.run_id = run_id;
  config.timeout = o.timeout;
  config.gloo_sync_bytes = o.gloo_sync_bytes;
  config.mpi_piece_bytes = o.mpi_piece_bytes;
  const bool nccl = o.backend == "nccl";
  if (nccl) {
    config.local_rank = rank;
    config.device = Device{DeviceType::kCUDA, rank % o.device_count};
  }
  auto comm = CreateCommunicator(o.backend, config);
  const int n = o.world_size;
  const double bus_factor = n > 1 ? 2.0 * (n - 1) / n : 1.0;
  if (rank == 0) {
    std::printf("# bench-comm: backend %s, world size %d, float32 sum in place, %d iterations "
                "(a quarter from 4 MiB), %d warmup\n",
                comm->backend(), n, o.iters, o.warmup);
    std::printf("%12s %11s %12s %11s %11s %8s  %s\n", "bytes", "elements", "time_us",
                "algbw_GBps", "busbw_GBps", "wrong", "algorithm");
    std::fflush(stdout);
  }
  double busbw_total = 0;  // over the sizes from 1 MiB, where bandwidth (not latency) rules
  int rows = 0;
  AllReduceOptions options;
  options.algorithm = o.algorithm;
  for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.step_factor) {
    const size_t count = std::max<size_t>(1, bytes / sizeof(float));
    std::vector<float> data(count, 1.0f);
    CommBuffer buffer = CommBuffer::Of(data.data(), count);
    Tensor device_data;  // nccl: the buffer on this rank's GPU
    if (nccl) {
      device_data = Tensor::Empty(DType::kFloat32, {static_cast<int64_t>(count)}, config.device);
      device_data.CopyFrom(Tensor::View(DType::kFloat32, {static_cast<int64_t>(count)}, data.data()));
      buffer = BufferOf(device_data);
    }
    // Host backends wait for each allreduce; NCCL queues them on its stream.
    auto run = [&](int times) {
      WorkPtr last;
      for (int i = 0; i < times; ++i) {
        last = comm->AllReduce(buffer, options);
        if (!nccl) last->Wait();
      }
      if (last) last->Wait();
    };
    run(o.warmup);
    const int iters = bytes < (4u << 20) ? o.iters : std::max(3, o.iters / 4);
    comm->Barrier()->Wait();
    // Host backends: the median of the iterations' own times (one slow iteration, a
    // scheduler hiccup, does not move it). NCCL queues them all: the mean over the queue.
    double seconds = 0;
    if (nccl) {
      const auto start = std::chrono::steady_clock::now();
      run(iters);
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
    } else {
      std::vector<double> times;
      for (int i = 0; i < iters; ++i) {
        const auto start = std::chrono::steady_clock::now();
        run(1);
        times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      std::sort(times.begin(), times.end());
      seconds = times.size() % 2 ? times[times.size() / 2] : (times[times.size() / 2 - 1] + times[times.size() / 2]) / 2;
    }

    for (size_t i = 0; i < count; ++i) data[i] = FillValue(rank, i);
    if (nccl) {
      Tensor host = Tensor::View(DType::kFloat32, {static_cast<int64_t>(count)}, data.data());
      device_data.CopyFrom(host);
      comm->AllReduce(buffer, options)->Wait();
      host.CopyFrom(device_data);
    } else {
      comm->AllReduce(buffer, options)->Wait();
    }
    float wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      float expected = 0;
      for (int r = 0; r < n; ++r) expected += FillValue(r, i);
      if (data[i] != expected) wrong += 1;
    }
    comm->AllReduce(CommBuffer::Of(&wrong, 1), AllReduceOptions{})->Wait();

    const double algbw = count * sizeof(float) / seconds / 1e9;
    if (count * sizeof(float) >= (1u << 20)) {
      busbw_total += algbw * bus_factor;
      ++rows;
    }
    if (rank == 0) {
      AllreduceAlgorithm shown = o.algorithm;
      if (shown == AllreduceAlgorithm::kAuto && std::string(comm->backend()) == "gloo") {
        shown = GlooAutoAllreduceAlgorithm(count * sizeof(float), n);
      }
      std::printf("%12zu %11zu %12.1f %11.3f %11.3f %8.0f  %s\n", count * sizeof(float), count,
                  seconds * 1e6, algbw, algbw * bus_factor, wrong,
                  nccl ? "nccl's choice" : o.backend == "mpi" ? "mpi's choice" : AllreduceAlgorithmName(shown));
      std::fflush(stdout);
    }
    if (bytes > o.max_bytes / o.step_factor) break;  // no overflow of bytes
  }
  if (rank == 0) {
    if (rows > 0) std::printf("# average busbw: %.3f GB/s over the %d sizes from 1 MiB\n", busbw_total / rows, rows);
    else std::printf("# average busbw: no size from 1 MiB measured\n");
    std::printf("# time_us: %s of %d iterations per size (%d from 4 MiB), after %d warmup; rank 0's clock\n",
                nccl ? "mean" : "median", o.iters, std::max(3, o.iters / 4), o.warmup);
    std::printf("# algbw_GBps: bytes / time, GB = 1e9 bytes; busbw_GBps = algbw x 2(n-1)/n = algbw x %.3f "
                "for n = %d, as nccl-tests (the bandwidth each link carries in a ring allreduce)\n",
                bus_factor, n);
    std::printf("# wrong: elements that differ from the expected sum in a checked allreduce after the timed ones\n");
    std::fflush(stdout);
  }
}

void RemoveDirectory(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") unlink((dir + "/" + name).c_str());
    }
    closedir(d);
  }
  rmdir(dir.c_str());
}

// Waits for the children; kills them all when the deadline passes. Returns failed ranks.
std::vector<int> WaitForRanks(const std::vector<pid_t>& pids, std::chrono::milliseconds limit) {
  std::vector<int> failed;
  std::vector<bool> done(pids.size(), false);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  size_t remaining = pids.size();
  while (remaining > 0) {
    for (size_t r = 0; r < pids.size(); ++r) {
      if (done[r]) continue;
      int status = 0;
      pid_t got = waitpid(pids[r], &status, WNOHANG);
      if (got == 0) continue;
      done[r] = true;
      --remaining;
      if (got < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        failed.push_back(static_cast<int>(r));
      }
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (size_t r = 0; r < pids.size(); ++r) {
        if (done[r]) continue;
        kill(pids[r], SIGKILL);
        waitpid(pids[r], nullptr, 0);
        failed.push_back(static_cast<int>(r));
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return failed;
}

// --backend mpi: under mpirun this process is one rank; otherwise bench-comm runs itself
// through mpirun with --world-size ranks.
int RunMpi(BenchCommOptions o, const std::vector<std::string>& argv) {
  if (!StartedByMpirun()) {
    std::vector<std::string> args = {ProgramPath(), "bench-comm"};
    args.insert(args.end(), argv.begin(), argv.end());
    // One core per rank where there are enough: the ranks busy-poll shared memory, and two
    // on one core halve the speed (measured: 4 KiB in 5.5 us bound, 5.5-20 us unbound).
    std::vector<std::string> cmd = MpirunCommand(o.world_size, args, /*bind_to_core=*/true);
    std::vector<char*> c_args;
    for (auto& a : cmd) c_args.push_back(a.data());
    c_args.push_back(nullptr);
    std::fflush(stdout);
    execv(cmd[0].c_str(), c_args.data());
    throw Error(StrFormat("bench-comm: cannot start %s: %s", cmd[0].c_str(), std::strerror(errno)));
  }
  const LaunchInfo launch = LaunchInfoFromEnvironment(ProcessEnvironment(), /*store_needed=*/false);
  o.world_size = launch.size;
  try {
    RunRank(o, launch.rank, "", "mpi");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "onnx-train: error: bench-comm rank %d: %s\n", launch.rank, e.what());
    return 1;
  }
  return 0;
}

}  // namespace

int CmdBenchComm(const std::vector<std::string>& argv) {
  BenchCommOptions o = ParseOptions(argv);
  CheckBackend(&o);
  if (o.backend == "mpi") return RunMpi(o, argv);
  char pattern[] = "/tmp/onnx-train-bench-comm-XXXXXX";
  OT_CHECK(mkdtemp(pattern) != nullptr, "bench-comm: cannot create a temp directory in /tmp");
  const std::string dir = pattern;
  const std::string run_id = NewRunId();
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < o.world_size; ++rank) {
    pid_t pid = fork();
    OT_CHECK(pid >= 0, "bench-comm: fork failed for rank %d", rank);
    if (pid == 0) {
      int rc = 0;
      try {
        RunRank(o, rank, dir, run_id);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "onnx-train: error: bench-comm rank %d: %s\n", rank, e.what());
        rc = 1;
      }
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(rc);
    }
    pids.push_back(pid);
  }
  // Generous: every size may take up to the collective timeout before failing.
  auto failed = WaitForRanks(pids, o.timeout * 4 + std::chrono::minutes(10));
  RemoveDirectory(dir);
  OT_CHECK(failed.empty(), "bench-comm: %s failed (see the errors above)",
           DescribeRanks(failed).c_str());
  return 0;
}

}  // namespace ot
