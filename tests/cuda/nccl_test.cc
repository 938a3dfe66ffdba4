// NCCL backend tests (CUDA builds). Every GPU test runs its ranks in forked processes (the
// test process itself never initialises CUDA, which would not survive fork()) and skips
// with the reason when the machine has no GPU, or too few for its world size:
//  - world size 1: every collective against values computed on the host, float16 and
//    bfloat16, host buffers, stream ordering with the compute stream, error mapping
//    (dtype, sizes, abort), the gradient reducer on device tensors;
//  - world size >= 2: allreduce/broadcast/allgather/reduce-scatter across processes, the
//    reducer averaging device gradients, a fingerprint mismatch, a rank that exits (peer
//    lost, named) and one that hangs (timeout, named).
// Without a GPU the tests that check the failure path run: CreateCommunicator("nccl")
// and `onnx-train bench-comm --backend nccl` fail with "nccl backend needs a CUDA device".
#include <gtest/gtest.h>

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "comm/communicator.h"
#include "comm/nccl_communicator.h"
#include "runtime/core/plugin.h"
#include "comm/tensor_buffer.h"
#include "graph/ir.h"
#include "runtime/cuda/cuda_common.h"
#include "runtime/core/tensor.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/common/test_util.h"
#include "train/parallel/gradient_reducer.h"

namespace ot {
namespace {

using Millis = std::chrono::milliseconds;

// GPUs of this machine, counted once in a probe process.
int GpuCount(std::string* reason) {
  static std::string why;
  static const int count = CountCudaDevicesInChild(&why);
  if (reason) *reason = why;
  return count;
}

#define SKIP_WITHOUT_GPUS(n)                                                                \
  do {                                                                                      \
    std::string reason_;                                                                    \
    const int have_ = GpuCount(&reason_);                                                   \
    if (have_ == 0 && !::ot::testing::BrokenGpuReason().empty())                             \
      FAIL() << ::ot::testing::BrokenGpuReason();                                           \
    if (have_ == 0) GTEST_SKIP() << "no GPU: " << reason_;                                  \
    if (have_ < (n)) GTEST_SKIP() << "needs " << (n) << " GPUs, this machine has " << have_; \
  } while (0)

// What one child rank reported: "ok", or the CommError kind (or "other") and message.
struct Outcome {
  std::string kind;
  std::vector<int> blamed;
  std::string message;
  bool ok() const { return kind == "ok"; }
};

std::string TempDir() {
  char pattern[] = "/tmp/onnx-train-nccl-test-XXXXXX";
  if (!mkdtemp(pattern)) throw std::runtime_error("mkdtemp failed");
  return pattern;
}

CommConfig RankConfig(int rank, int size, const std::string& dir) {
  CommConfig c;
  c.rank = rank;
  c.size = size;
  c.local_rank = rank;
  c.rendezvous = "file:" + dir;
  c.run_id = "nccl-test";
  c.timeout = Millis(60000);
  c.failure_report_window = Millis(1500);
  return c;
}

// Forks `size` ranks running body(rank, dir); kills those still running after `limit`.
std::vector<Outcome> RunRanks(int size, const std::function<void(int, const std::string&)>& body,
                              Millis limit = Millis(120000)) {
  const std::string dir = TempDir();
  std::vector<pid_t> pids;
  for (int r = 0; r < size; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      Outcome o{"ok", {}, ""};
      try {
        body(r, dir);
      } catch (const CommError& e) {
        o = {CommErrorKindName(e.kind()), e.ranks(), e.what()};
      } catch (const std::exception& e) {
        o = {"other", {}, e.what()};
      }
      std::ofstream out(dir + "/outcome." + std::to_string(r));
      out << o.kind << "\n";
      for (int b : o.blamed) out << b << " ";
      out << "\n" << o.message;
      out.close();
      _exit(0);
    }
    pids.push_back(pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (pid_t pid : pids) {
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(Millis(10));
    }
  }
  std::vector<Outcome> outcomes;
  for (int r = 0; r < size; ++r) {
    std::ifstream in(dir + "/outcome." + std::to_string(r));
    Outcome o{"killed", {}, "no outcome written (killed at the deadline, or crashed)"};
    if (in) {
      std::string blamed;
      std::getline(in, o.kind);
      std::getline(in, blamed);
      std::stringstream bs(blamed);
      for (int b; bs >> b;) o.blamed.push_back(b);
      std::stringstream rest;
      rest << in.rdbuf();
      o.message = rest.str();
    }
    outcomes.push_back(o);
  }
  std::system(("rm -rf '" + dir + "'").c_str());
  return outcomes;
}

void ExpectAllOk(const std::vector<Outcome>& outcomes) {
  for (size_t r = 0; r < outcomes.size(); ++r) {
    EXPECT_TRUE(outcomes[r].ok()) << "rank " << r << ": " << outcomes[r].kind << ": "
                                  << outcomes[r].message;
  }
}

// Throws (the child reports it) when a check fails inside a rank.
void Require(bool condition, const std::string& what) {
  if (!condition) throw std::runtime_error(what);
}

Device GpuOf(int rank) {
  return Device{DeviceType::kCUDA, rank % cuda::DeviceCount()};
}

std::unique_ptr<Communicator> Connect(int rank, int size, const std::string& dir) {
  CommConfig c = RankConfig(rank, size, dir);
  c.device = GpuOf(rank);
  return CreateCommunicator("nccl", c);
}

Tensor OnDevice(const std::vector<float>& values, Device device) {
  HostTensor h(DType::kFloat32, {static_cast<int64_t>(values.size())});
  std::memcpy(h.bytes.data(), values.data(), values.size() * sizeof(float));
  return Tensor::FromHost(h, device);
}

std::vector<float> FromDevice(const Tensor& t) {
  HostTensor h = t.ToHost();
  std::vector<float> out(static_cast<size_t>(t.numel()));
  std::memcpy(out.data(), h.bytes.data(), out.size() * sizeof(float));
  return out;
}

// Rank r's value at index i, and the sum over n ranks.
float ValueOf(int rank, size_t i) { return static_cast<float>((rank + 1) * (1 + i % 7)) * 0.5f; }
float SumOf(int n, size_t i) {
  float s = 0;
  for (int r = 0; r < n; ++r) s += ValueOf(r, i);
  return s;
}

void RequireNear(const std::vector<float>& got, const std::function<float(size_t)>& expected,
                 float tol, const std::string& what) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - expected(i)) > tol * (1 + std::fabs(expected(i)))) {
      throw std::runtime_error(StrFormat("%s: element %zu is %g, expected %g", what.c_str(), i,
                                         got[i], expected(i)));
    }
  }
}

// The collectives of one world, checked against host arithmetic (any world size).
void CheckCollectives(int rank, int n, Communicator& comm) {
  const Device dev = GpuOf(rank);
  for (size_t count : {size_t{1}, size_t{1000}, size_t{1} << 20}) {
    std::vector<float> mine(count);
    for (size_t i = 0; i < count; ++i) mine[i] = ValueOf(rank, i);
    Tensor t = OnDevice(mine, dev);
    comm.AllReduce(BufferOf(t))->Wait();
    RequireNear(FromDevice(t), [&](size_t i) { return SumOf(n, i); }, 1e-6f, "allreduce sum");
    t = OnDevice(mine, dev);
    AllReduceOptions avg;
    avg.op = ReduceOp::kAverage;
    comm.AllReduce(BufferOf(t), avg)->Wait();
    RequireNear(FromDevice(t), [&](size_t i) { return SumOf(n, i) / n; }, 1e-6f, "allreduce average");
  }
  // Broadcast from the last rank.
  std::vector<float> mine(257);
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = ValueOf(rank, i);
  Tensor b = OnDevice(mine, dev);
  BroadcastOptions bo;
  bo.root = n - 1;
  comm.Broadcast(BufferOf(b), bo)->Wait();
  RequireNear(FromDevice(b), [&](size_t i) { return ValueOf(n - 1, i); }, 0, "broadcast");
  // Allgather: rank order.
  Tensor in = OnDevice(mine, dev);
  Tensor out = Tensor::Empty(DType::kFloat32, {static_cast<int64_t>(mine.size()) * n}, dev);
  comm.AllGather(BufferOf(in), BufferOf(out))->Wait();
  RequireNear(FromDevice(out), [&](size_t i) { return ValueOf(static_cast<int>(i / mine.size()), i % mine.size()); },
              0, "allgather");
  // Reduce-scatter: this rank's slice of the sum.
  const size_t slice = 300;
  std::vector<float> whole(slice * n);
  for (size_t i = 0; i < whole.size(); ++i) whole[i] = ValueOf(rank, i);
  Tensor rs_in = OnDevice(whole, dev);
  Tensor rs_out = Tensor::Empty(DType::kFloat32, {static_cast<int64_t>(slice)}, dev);
  comm.ReduceScatter(BufferOf(rs_in), BufferOf(rs_out))->Wait();
  RequireNear(FromDevice(rs_out), [&](size_t i) { return SumOf(n, rank * slice + i); }, 1e-6f,
              "reduce-scatter");
  // Host buffers go through device staging.
  std::vector<double> host = {1.0 + rank, 2.0 * (rank + 1)};
  comm.AllReduce(CommBuffer::Of(host.data(), host.size()))->Wait();
  double expected0 = 0, expected1 = 0;
  for (int r = 0; r < n; ++r) {
    expected0 += 1.0 + r;
    expected1 += 2.0 * (r + 1);
  }
  Require(host[0] == expected0 && host[1] == expected1, "host-buffer allreduce");
  comm.Barrier()->Wait();
}

TEST(NcclTest, World1CollectivesMatchHostArithmetic) {
  SKIP_WITHOUT_GPUS(1);
  ExpectAllOk(RunRanks(1, [](int rank, const std::string& dir) {
    auto comm = Connect(rank, 1, dir);
    Require(std::string(comm->backend()) == "nccl", "backend name");
    CheckCollectives(rank, 1, *comm);
  }));
}

TEST(NcclTest, World1HalfPrecisionAverage) {
  SKIP_WITHOUT_GPUS(1);
  ExpectAllOk(RunRanks(1, [](int rank, const std::string& dir) {
    auto comm = Connect(rank, 1, dir);
    // float16 1.5 = 0x3E00, bfloat16 1.5 = 0x3FC0: an average over one rank keeps them.
    for (auto [dtype, bits] : {std::pair<DType, uint16_t>{DType::kFloat16, 0x3E00},
                               std::pair<DType, uint16_t>{DType::kBFloat16, 0x3FC0}}) {
      HostTensor h(dtype, {64});
      for (int i = 0; i < 64; ++i) std::memcpy(h.bytes.data() + 2 * i, &bits, 2);
      Tensor t = Tensor::FromHost(h, GpuOf(rank));
      AllReduceOptions avg;
      avg.op = ReduceOp::kAverage;
      comm->AllReduce(BufferOf(t), avg)->Wait();
      HostTensor back = t.ToHost();
      Require(back.bytes == h.bytes, "half-precision average changed the values");
    }
  }));
}

TEST(NcclTest, World1StreamOrdering) {
  SKIP_WITHOUT_GPUS(1);
  ExpectAllOk(RunRanks(1, [](int rank, const std::string& dir) {
    auto comm = Connect(rank, 1, dir);
    const Device dev = GpuOf(rank);
    // Queued on compute: the collective must see this copy, and the copy after
    // WaitOnStream (on compute) must see the collective, with no host wait between.
    std::vector<float> values(1 << 22, 3.0f);
    Tensor src = OnDevice(values, dev);
    Tensor bucket = Tensor::Empty(DType::kFloat32, {static_cast<int64_t>(values.size())}, dev);
    Tensor result = Tensor::Empty(DType::kFloat32, {static_cast<int64_t>(values.size())}, dev);
    for (int step = 0; step < 3; ++step) {
      bucket.CopyFrom(src);  // cudaMemcpyAsync on compute
      WorkPtr work = comm->AllReduce(BufferOf(bucket));
      work->WaitOnStream(nullptr);  // compute waits for the comm stream
      result.CopyFrom(bucket);
      RequireNear(FromDevice(result), [](size_t) { return 3.0f; }, 0, "stream-ordered allreduce");
      work->Wait();
      Require(work->IsCompleted() && work->Error() == nullptr, "completed work");
    }
  }));
}

TEST(NcclTest, World1ErrorsAreTyped) {
  SKIP_WITHOUT_GPUS(1);
  ExpectAllOk(RunRanks(1, [](int rank, const std::string& dir) {
    auto comm = Connect(rank, 1, dir);
    const Device dev = GpuOf(rank);
    auto expect_error = [](CommErrorKind kind, const std::string& words, const std::function<void()>& f) {
      try {
        f();
      } catch (const CommError& e) {
        Require(e.kind() == kind, std::string("wrong kind: ") + CommErrorKindName(e.kind()) + ": " + e.what());
        Require(std::string(e.what()).find(words) != std::string::npos,
                "message without '" + words + "': " + e.what());
        return;
      }
      throw std::runtime_error("no CommError for: " + words);
    };
    Tensor ints = Tensor::Empty(DType::kInt32, {8}, dev);
    expect_error(CommErrorKind::kInvalid, "reduces float32", [&] { comm->AllReduce(BufferOf(ints)); });
    Tensor a = Tensor::Empty(DType::kFloat32, {8}, dev), b = Tensor::Empty(DType::kFloat32, {9}, dev);
    expect_error(CommErrorKind::kInvalid, "world size (1)", [&] { comm->AllGather(BufferOf(a), BufferOf(b)); });
    BroadcastOptions bad_root;
    bad_root.root = 3;
    expect_error(CommErrorKind::kInvalid, "root 3", [&] { comm->Broadcast(BufferOf(a), bad_root); });
    if (cuda::DeviceCount() > 1) {
      Tensor elsewhere = Tensor::Empty(DType::kFloat32, {8}, Device{DeviceType::kCUDA, 1});
      expect_error(CommErrorKind::kInvalid, "keep the model", [&] { comm->AllReduce(BufferOf(elsewhere)); });
    }
    comm->Abort("test abort");
    Require(comm->AsyncError() != nullptr, "no error after Abort");
    expect_error(CommErrorKind::kAborted, "test abort", [&] { comm->AllReduce(BufferOf(a))->Wait(); });
  }));
}

// The reducer's device path: hooks fed device gradients, the optimizer side reads the
// average in place (world size 1: the values are unchanged; n ranks: the mean).
void CheckReducer(int rank, int n, Communicator& comm) {
  const Device dev = GpuOf(rank);
  const std::vector<std::pair<std::string, int64_t>> grads = {{"g0", 1000}, {"g1", 300000}, {"g2", 7}};
  BucketOptions options;
  options.first_bucket_bytes = 4096;  // several buckets
  GradientReducer reducer(comm, grads, options);
  Require(reducer.NumBuckets() >= 2, "expected several buckets");
  for (int step = 0; step < 2; ++step) {
    RunOptions hooks = reducer.Hooks();
    std::vector<Tensor> tensors;
    for (auto it = grads.rbegin(); it != grads.rend(); ++it) {  // backward order
      std::vector<float> v(static_cast<size_t>(it->second));
      for (size_t i = 0; i < v.size(); ++i) v[i] = ValueOf(rank, i) + static_cast<float>(step);
      tensors.push_back(OnDevice(v, dev));
      hooks.on_value_ready(it->first, tensors.back());
    }
    Node update;
    update.name = "update";
    update.op_type = "SGD";
    for (const auto& g : grads) update.inputs.push_back(g.first);
    hooks.before_node(update);
    reducer.FinishStep();
    for (const Tensor& t : tensors) {
      RequireNear(FromDevice(t), [&](size_t i) { return SumOf(n, i) / n + static_cast<float>(step); }, 1e-6f,
                  "reduced gradient");
    }
  }
}

TEST(NcclTest, World1GradientReducerOnDeviceTensors) {
  SKIP_WITHOUT_GPUS(1);
  ExpectAllOk(RunRanks(1, [](int rank, const std::string& dir) {
    auto comm = Connect(rank, 1, dir);
    CheckReducer(rank, 1, *comm);
  }));
}

TEST(NcclTest, MultiProcessCollectives) {
  SKIP_WITHOUT_GPUS(2);
  const int n = std::min(GpuCount(nullptr), 4);
  ExpectAllOk(RunRanks(n, [n](int rank, const std::string& dir) {
    auto comm = Connect(rank, n, dir);
    CheckCollectives(rank, n, *comm);
    CheckReducer(rank, n, *comm);
  }));
}

TEST(NcclTest, FingerprintMismatchIsNamed) {
  SKIP_WITHOUT_GPUS(1);  // the join fails before any rank uses its GPU
  auto outcomes = RunRanks(2, [](int rank, const std::string& dir) {
    CommConfig c = RankConfig(rank, 2, dir);
    c.fingerprint = rank == 0 ? "model-a" : "model-b";
    CreateCommunicator("nccl", c);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(outcomes[r].kind, "mismatch") << outcomes[r].message;
    EXPECT_EQ(outcomes[r].blamed, std::vector<int>{1 - r}) << outcomes[r].message;
  }
}

TEST(NcclTest, DeadPeerIsNamedNotWaitedFor) {
  SKIP_WITHOUT_GPUS(2);
  const auto start = std::chrono::steady_clock::now();
  auto outcomes = RunRanks(2, [](int rank, const std::string& dir) {
    auto comm = Connect(rank, 2, dir);
    float warmup[4] = {1, 2, 3, 4};
    comm->AllReduce(CommBuffer::Of(warmup, 4))->Wait();
    if (rank == 1) _exit(3);  // dies without a goodbye
    std::this_thread::sleep_for(Millis(200));
    Tensor t = Tensor::Empty(DType::kFloat32, {1 << 20}, GpuOf(rank));
    comm->AllReduce(BufferOf(t))->Wait();
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(outcomes[0].kind, "peer lost") << outcomes[0].message;
  EXPECT_EQ(outcomes[0].blamed, std::vector<int>{1}) << outcomes[0].message;
  EXPECT_LT(seconds, 50.0) << "the dead peer was waited for instead of detected";
}

TEST(NcclTest, HungPeerTimesOutAndIsNamed) {
  SKIP_WITHOUT_GPUS(2);
  auto outcomes = RunRanks(2, [](int rank, const std::string& dir) {
    CommConfig c = RankConfig(rank, 2, dir);
    c.device = GpuOf(rank);
    auto comm = CreateCommunicator("nccl", c);
    if (rank == 1) {
      std::this_thread::sleep_for(Millis(8000));  // never joins the allreduce, stays alive
      _exit(0);
    }
    Tensor t = Tensor::Empty(DType::kFloat32, {1024}, GpuOf(rank));
    AllReduceOptions o;
    o.timeout = Millis(1500);
    const auto start = std::chrono::steady_clock::now();
    try {
      comm->AllReduce(BufferOf(t), o)->Wait();
    } catch (const CommError&) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      Require(s < 6.0, StrFormat("the timeout took %.1f s", s));
      throw;
    }
  });
  EXPECT_EQ(outcomes[0].kind, "timeout") << outcomes[0].message;
  EXPECT_EQ(outcomes[0].blamed, std::vector<int>{1}) << outcomes[0].message;
}

// Without a GPU (CI): the failure path is one clear error.
TEST(NcclTest, NoGpuIsAClearError) {
  std::string reason;
  if (GpuCount(&reason) > 0) GTEST_SKIP() << "this machine has a GPU; the no-GPU error cannot happen";
  auto outcomes = RunRanks(1, [](int rank, const std::string& dir) {
    CreateCommunicator("nccl", RankConfig(rank, 1, dir));
  });
  EXPECT_EQ(outcomes[0].kind, "invalid");
  EXPECT_NE(outcomes[0].message.find("nccl backend needs a CUDA device: " + reason), std::string::npos)
      << outcomes[0].message;
  // The backend is a plugin: built here, and registered once loaded.
  EXPECT_TRUE(PluginBuilt("nccl"));
  LoadPlugin("nccl");
  const auto backends = CommunicatorBackends();
  EXPECT_TRUE(std::find(backends.begin(), backends.end(), "nccl") != backends.end());
}

TEST(NcclTest, BenchCommWithoutGpuFailsWithOneLine) {
  std::string reason;
  if (GpuCount(&reason) > 0) GTEST_SKIP() << "this machine has a GPU";
  FILE* p = popen((testing::OnnxTrainBinary() + " bench-comm --backend nccl --world-size 1 2>&1").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char chunk[512];
  for (size_t n; (n = fread(chunk, 1, sizeof chunk, p)) > 0;) out.append(chunk, n);
  const int status = pclose(p);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << out;
  EXPECT_EQ(out, "onnx-train: error: nccl backend needs a CUDA device: " + reason + "\n");
}

}  // namespace
}  // namespace ot
