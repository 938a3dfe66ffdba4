// comm/ tests: collectives over N forked processes on loopback (each rank rendezvous
// through a FileStore in a temp directory, or a redis-server the test starts), failure
// cases (a rank that exits mid-collective, one that never joins, a fingerprint mismatch,
// unusable stores) and the launcher-environment parser. Every child is bounded by a
// deadline and killed past it, so a failure never hangs CI.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include "comm/communicator.h"
#include "comm/reduction.h"
#include "comm/rendezvous.h"

namespace ot {
namespace {

using Millis = std::chrono::milliseconds;

// What one child rank reported.
struct RankOutcome {
  bool ok = false;
  std::string kind;          // CommErrorKindName, or "other" / "killed"
  std::vector<int> blamed;   // CommError::ranks()
  std::string message;
  double seconds = 0;        // time from start of the body to the error
};

std::string MakeTempDir() {
  char pattern[] = "/tmp/onnx-train-comm-test-XXXXXX";
  if (!mkdtemp(pattern)) throw std::runtime_error("mkdtemp failed");
  return pattern;
}

void WriteOutcome(const std::string& path, const RankOutcome& o) {
  std::ofstream out(path);
  out << (o.ok ? "ok" : "error") << "\n" << o.kind << "\n" << o.seconds << "\n";
  for (int r : o.blamed) out << r << " ";
  out << "\n" << o.message;
}

RankOutcome ReadOutcome(const std::string& path) {
  RankOutcome o;
  std::ifstream in(path);
  if (!in) {
    o.kind = "killed";
    o.message = "no result written";
    return o;
  }
  std::string status, ranks;
  std::getline(in, status);
  std::getline(in, o.kind);
  in >> o.seconds;
  in.ignore();
  std::getline(in, ranks);
  std::stringstream rs(ranks);
  for (int r; rs >> r;) o.blamed.push_back(r);
  std::stringstream rest;
  rest << in.rdbuf();
  o.message = rest.str();
  o.ok = status == "ok";
  return o;
}

// The base config every rank of a test shares.
CommConfig BaseConfig(int size, const std::string& dir) {
  CommConfig c;
  c.size = size;
  c.rendezvous = "file:" + dir;
  c.run_id = "test";
  c.timeout = Millis(15000);
  c.failure_report_window = Millis(1500);
  return c;
}

// Forks `size` children; child r runs body(r, dir) and reports. Children still running after
// `limit` are killed. Returns the outcome of each rank.
std::vector<RankOutcome> RunRanks(int size, const std::function<void(int, const std::string&)>& body,
                                  Millis limit = Millis(30000)) {
  const std::string dir = MakeTempDir();
  std::vector<pid_t> pids;
  for (int r = 0; r < size; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      RankOutcome o;
      auto start = std::chrono::steady_clock::now();
      try {
        body(r, dir);
        o.ok = true;
      } catch (const CommError& e) {
        o.kind = CommErrorKindName(e.kind());
        o.blamed = e.ranks();
        o.message = e.what();
      } catch (const std::exception& e) {
        o.kind = "other";
        o.message = e.what();
      }
      o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      WriteOutcome(dir + "/outcome." + std::to_string(r), o);
      _exit(0);
    }
    pids.push_back(pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (pid_t pid : pids) {
    for (;;) {
      int status;
      if (waitpid(pid, &status, WNOHANG) != 0) break;
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(Millis(10));
    }
  }
  std::vector<RankOutcome> outcomes;
  for (int r = 0; r < size; ++r) outcomes.push_back(ReadOutcome(dir + "/outcome." + std::to_string(r)));
  std::system(("rm -rf '" + dir + "'").c_str());
  return outcomes;
}

void ExpectAllOk(const std::vector<RankOutcome>& outcomes) {
  for (size_t r = 0; r < outcomes.size(); ++r) {
    EXPECT_TRUE(outcomes[r].ok) << "rank " << r << ": " << outcomes[r].kind << ": "
                                << outcomes[r].message;
  }
}

// Throws with a message when a check fails inside a child.
void Require(bool cond, const std::string& what) {
  if (!cond) throw std::runtime_error(what);
}

std::unique_ptr<Communicator> Connect(int rank, const std::string& dir, int size,
                                      const std::function<void(CommConfig&)>& adjust = nullptr) {
  CommConfig c = BaseConfig(size, dir);
  c.rank = rank;
  if (adjust) adjust(c);
  return CreateCommunicator("gloo", c);
}

float Value(int rank, size_t i) { return static_cast<float>((rank + 1) * (1 + i % 7)); }

void CheckAllReduce(Communicator& comm, size_t count, AllreduceAlgorithm algorithm,
                    ReduceOp op) {
  const int n = comm.size();
  std::vector<float> data(count);
  for (size_t i = 0; i < count; ++i) data[i] = Value(comm.rank(), i);
  AllReduceOptions o;
  o.algorithm = algorithm;
  o.op = op;
  comm.AllReduce(CommBuffer::Of(data.data(), count), o)->Wait();
  for (size_t i = 0; i < count; ++i) {
    float sum = 0;
    for (int r = 0; r < n; ++r) sum += Value(r, i);
    float expected = op == ReduceOp::kSum ? sum : sum / n;
    if (std::fabs(data[i] - expected) > 1e-6f * std::fabs(expected)) {
      throw std::runtime_error(StrFormat("allreduce %s of %zu elements (%s): element %zu is %g, "
                                         "expected %g",
                                         op == ReduceOp::kSum ? "sum" : "average", count,
                                         AllreduceAlgorithmName(algorithm), i, data[i], expected));
    }
  }
}

class AllReduceWorlds : public ::testing::TestWithParam<int> {};

TEST_P(AllReduceWorlds, SumAndAverageEveryAlgorithmAndSize) {
  const int n = GetParam();
  auto outcomes = RunRanks(n, [n](int rank, const std::string& dir) {
    auto comm = Connect(rank, dir, n);
    const size_t sizes[] = {1, 2, 7, 255, 1024, 65536 + 3, 262144, (3u << 20) / 4 + 5};
    for (size_t count : sizes) {
      for (auto a : {AllreduceAlgorithm::kAuto, AllreduceAlgorithm::kRing,
                     AllreduceAlgorithm::kRingChunked, AllreduceAlgorithm::kHalvingDoubling,
                     AllreduceAlgorithm::kBcube}) {
        CheckAllReduce(*comm, count, a, ReduceOp::kSum);
      }
      CheckAllReduce(*comm, count, AllreduceAlgorithm::kAuto, ReduceOp::kAverage);
    }
    // Several MiB through the automatic choice, both ops.
    CheckAllReduce(*comm, (6u << 20) / 4, AllreduceAlgorithm::kAuto, ReduceOp::kSum);
    CheckAllReduce(*comm, (6u << 20) / 4, AllreduceAlgorithm::kAuto, ReduceOp::kAverage);
  });
  ExpectAllOk(outcomes);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, AllReduceWorlds, ::testing::Values(2, 3, 4));

TEST(Comm, SixteenBitAllReduceAndOtherCollectives) {
  const int n = 3;
  auto outcomes = RunRanks(n, [n](int rank, const std::string& dir) {
    auto comm = Connect(rank, dir, n);
    // float16 / bfloat16 sums of small integers are exact.
    for (DType t : {DType::kFloat16, DType::kBFloat16}) {
      auto to = t == DType::kFloat16 ? FloatToHalf : FloatToBFloat16;
      auto from = t == DType::kFloat16 ? HalfToFloat : BFloat16ToFloat;
      std::vector<uint16_t> data(1000);
      for (size_t i = 0; i < data.size(); ++i) data[i] = to(Value(rank, i));
      comm->AllReduce(CommBuffer{data.data(), data.size(), t})->Wait();
      for (size_t i = 0; i < data.size(); ++i) {
        Require(from(data[i]) == 6.0f * (1 + i % 7), "16-bit allreduce value");
      }
    }
    // Broadcast from rank 1.
    std::vector<float> b(5000, static_cast<float>(rank));
    BroadcastOptions bo;
    bo.root = 1;
    comm->Broadcast(CommBuffer::Of(b.data(), b.size()), bo)->Wait();
    for (float v : b) Require(v == 1.0f, "broadcast value");
    // AllGather: rank r contributes 3 copies of r.
    std::vector<float> in(3, static_cast<float>(rank)), out(3 * n, -1.0f);
    comm->AllGather(CommBuffer::Of(in.data(), 3), CommBuffer::Of(out.data(), out.size()))->Wait();
    for (int i = 0; i < 3 * n; ++i) Require(out[i] == static_cast<float>(i / 3), "allgather value");
    // ReduceScatter, float32 (Gloo's halving-doubling) sum and average, and float16.
    const size_t slice = 1001;
    std::vector<float> rs_in(slice * n), rs_out(slice);
    for (size_t i = 0; i < rs_in.size(); ++i) rs_in[i] = Value(rank, i);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      ReduceScatterOptions ro;
      ro.op = op;
      comm->ReduceScatter(CommBuffer::Of(rs_in.data(), rs_in.size()),
                          CommBuffer::Of(rs_out.data(), slice), ro)->Wait();
      for (size_t i = 0; i < slice; ++i) {
        float expected = 6.0f * (1 + (rank * slice + i) % 7) / (op == ReduceOp::kSum ? 1 : n);
        Require(std::fabs(rs_out[i] - expected) < 1e-5f, "reduce-scatter value");
      }
    }
    std::vector<uint16_t> h_in(slice * n), h_out(slice);
    for (size_t i = 0; i < h_in.size(); ++i) h_in[i] = FloatToHalf(Value(rank, i));
    comm->ReduceScatter(CommBuffer{h_in.data(), h_in.size(), DType::kFloat16},
                        CommBuffer{h_out.data(), slice, DType::kFloat16})->Wait();
    for (size_t i = 0; i < slice; ++i) {
      Require(HalfToFloat(h_out[i]) == 6.0f * (1 + (rank * slice + i) % 7), "fp16 reduce-scatter");
    }
    comm->Barrier()->Wait();
    // Bad arguments are refused at once with kInvalid.
    bool refused = false;
    try {
      std::vector<int64_t> ints(4);
      comm->AllReduce(CommBuffer::Of(ints.data(), ints.size()));
    } catch (const CommError& e) {
      refused = e.kind() == CommErrorKind::kInvalid;
    }
    Require(refused, "int64 allreduce must be refused with kInvalid");
  });
  ExpectAllOk(outcomes);
}

// float64 (synchronised batch normalization's per-channel sums) through every algorithm,
// the small ones on the pointer-bound classes: sums keep digits float32 would drop.
TEST(Comm, Float64AllReduceKeepsDoublePrecision) {
  const int n = 3;
  auto outcomes = RunRanks(n, [n](int rank, const std::string& dir) {
    auto comm = Connect(rank, dir, n);
    auto value = [](int r, size_t i) { return 1.0 + static_cast<double>(i) + 1e-12 * (r + 1) * (1 + i % 5); };
    for (size_t count : {1, 17, 513, 70000}) {
      for (auto a : {AllreduceAlgorithm::kAuto, AllreduceAlgorithm::kRing, AllreduceAlgorithm::kRingChunked,
                     AllreduceAlgorithm::kHalvingDoubling}) {
        std::vector<double> data(count);
        for (size_t i = 0; i < count; ++i) data[i] = value(rank, i);
        AllReduceOptions o;
        o.algorithm = a;
        comm->AllReduce(CommBuffer::Of(data.data(), count), o)->Wait();
        for (size_t i = 0; i < count; ++i) {
          double expected = 0;
          for (int r = 0; r < n; ++r) expected += value(r, i);
          Require(std::fabs(data[i] - expected) <= 4e-16 * expected,
                  StrFormat("float64 allreduce of %zu (%s): element %zu is %.17g, expected %.17g", count,
                            AllreduceAlgorithmName(a), i, data[i], expected));
        }
      }
    }
  });
  ExpectAllOk(outcomes);
}

TEST(Comm, SeveralOutstandingWorks) {
  const int n = 2;
  auto outcomes = RunRanks(n, [n](int rank, const std::string& dir) {
    auto comm = Connect(rank, dir, n);
    const int kWorks = 8;
    std::vector<std::vector<float>> buffers;
    std::vector<WorkPtr> works;
    for (int w = 0; w < kWorks; ++w) buffers.emplace_back((w + 1) * 50000, float(rank + w));
    for (int w = 0; w < kWorks; ++w) {
      works.push_back(comm->AllReduce(CommBuffer::Of(buffers[w].data(), buffers[w].size())));
    }
    auto barrier = comm->Barrier();
    // Waiting in reverse order: each completes in submission order regardless.
    barrier->Wait();
    for (int w = kWorks - 1; w >= 0; --w) {
      Require(works[w]->IsCompleted(), "work completed before the later barrier");
      works[w]->Wait(Millis(1));
      for (float v : buffers[w]) Require(v == float(2 * w + 1), "outstanding allreduce value");
    }
  });
  ExpectAllOk(outcomes);
}

TEST(Comm, RankThatExitsMidCollectiveIsNamed) {
  const int n = 3;
  auto outcomes = RunRanks(n, [n](int rank, const std::string& dir) {
    auto comm = Connect(rank, dir, n);
    std::vector<float> data(4u << 20, 1.0f);  // 16 MiB
    comm->AllReduce(CommBuffer::Of(data.data(), 1024))->Wait();
    if (rank == 2) {
      comm->AllReduce(CommBuffer::Of(data.data(), data.size()));  // in flight...
      std::this_thread::sleep_for(Millis(5));
      _exit(0);                                                   // ...when this rank dies
    }
    AllReduceOptions o;
    o.timeout = Millis(10000);
    comm->AllReduce(CommBuffer::Of(data.data(), data.size()), o)->Wait();
  });
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_FALSE(outcomes[r].ok);
    EXPECT_TRUE(outcomes[r].kind == "peer lost" || outcomes[r].kind == "timeout") << outcomes[r].kind;
    EXPECT_EQ(outcomes[r].blamed, std::vector<int>{2}) << outcomes[r].message;
    EXPECT_NE(outcomes[r].message.find("rank 2"), std::string::npos) << outcomes[r].message;
    // Within the collective's timeout plus the report window, never a hang; usually the
    // peer watch notices the exit at once (well under a second).
    EXPECT_LT(outcomes[r].seconds, 10.0 + 1.5 + 2.0);
  }
}

TEST(Comm, HungRankTimesOutAndIsNamed) {
  // Small messages (sync pairs, bounded by the communicator timeout) and large ones
  // (unbound ring, bounded by the per-op timeout) both end in a timeout naming rank 1.
  for (size_t count : {size_t{1000}, size_t{8u << 20}}) {
    SCOPED_TRACE("elements " + std::to_string(count));
    const int n = 2;
    auto outcomes = RunRanks(n, [n, count](int rank, const std::string& dir) {
      auto comm = Connect(rank, dir, n, [count](CommConfig& c) {
        if (count < 10000) c.timeout = Millis(2500);
      });
      if (rank == 1) {  // alive but never calls the collective
        std::this_thread::sleep_for(Millis(5500));
        return;
      }
      std::vector<float> data(count, 1.0f);
      AllReduceOptions o;
      o.timeout = Millis(2500);
      comm->AllReduce(CommBuffer::Of(data.data(), data.size()), o)->Wait();
    });
    EXPECT_FALSE(outcomes[0].ok);
    EXPECT_EQ(outcomes[0].kind, "timeout") << outcomes[0].message;
    EXPECT_EQ(outcomes[0].blamed, std::vector<int>{1}) << outcomes[0].message;
    EXPECT_LT(outcomes[0].seconds, 5.0);
  }
}

TEST(Comm, RankThatNeverJoinsIsNamed) {
  const int n = 3;
  auto outcomes = RunRanks(n, [n](int rank, const std::string& dir) {
    if (rank == 1) return;  // never connects
    Connect(rank, dir, n, [](CommConfig& c) { c.timeout = Millis(1500); });
  });
  for (int r : {0, 2}) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(outcomes[r].kind, "timeout") << outcomes[r].message;
    EXPECT_EQ(outcomes[r].blamed, std::vector<int>{1});
    EXPECT_NE(outcomes[r].message.find("rank 1 of 3 did not join"), std::string::npos)
        << outcomes[r].message;
    EXPECT_LT(outcomes[r].seconds, 5.0);
  }
}

TEST(Comm, FingerprintAndWorldSizeMismatchesAreNamed) {
  auto outcomes = RunRanks(3, [](int rank, const std::string& dir) {
    Connect(rank, dir, 3, [rank](CommConfig& c) {
      c.fingerprint = rank == 2 ? "model=abc;params=11" : "model=abc;params=10";
    });
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(outcomes[r].kind, "mismatch") << outcomes[r].message;
  EXPECT_EQ(outcomes[0].blamed, std::vector<int>{2});
  EXPECT_NE(outcomes[0].message.find("rank 2 'model=abc;params=11'"), std::string::npos)
      << outcomes[0].message;
  EXPECT_EQ(outcomes[2].blamed, (std::vector<int>{0, 1})) << outcomes[2].message;

  // Rank 1 believes the world has 3 ranks, the others 2: rank 2 never comes, and the
  // ranks that do meet see the disagreement.
  outcomes = RunRanks(2, [](int rank, const std::string& dir) {
    Connect(rank, dir, rank == 1 ? 3 : 2, [](CommConfig& c) { c.timeout = Millis(1500); });
  });
  EXPECT_EQ(outcomes[0].kind, "mismatch") << outcomes[0].message;
  EXPECT_EQ(outcomes[0].blamed, std::vector<int>{1}) << outcomes[0].message;
  EXPECT_EQ(outcomes[1].kind, "timeout") << outcomes[1].message;
}

TEST(Comm, UnusableStoresGiveClearErrors) {
  // A FileStore directory that cannot be created (its parent is a file).
  std::string dir = MakeTempDir();
  std::ofstream(dir + "/file") << "x";
  CommConfig c = BaseConfig(2, dir);
  c.rank = 1;
  c.rendezvous = "file:" + dir + "/file/rdzv";
  try {
    CreateCommunicator("gloo", c);
    ADD_FAILURE() << "expected an error";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), CommErrorKind::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("rank 1: the rendezvous directory"), std::string::npos)
        << e.what();
  }
  std::system(("rm -rf '" + dir + "'").c_str());
  // A Redis address nobody listens on.
  c.rendezvous = "redis://127.0.0.1:1";
  auto start = std::chrono::steady_clock::now();
  try {
    CreateCommunicator("gloo", c);
    ADD_FAILURE() << "expected an error";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), CommErrorKind::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("cannot reach the Redis rendezvous store at "
                                         "127.0.0.1:1"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  // Unknown backends and bad specs.
  // A name no build has, refused as invalid with the name and the list of backends (nccl is
  // a real backend in CUDA builds, so it cannot stand for "unknown").
  try {
    CreateCommunicator("no-such-backend", c);
    FAIL() << "an unknown backend was accepted";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), CommErrorKind::kInvalid);
    EXPECT_NE(std::string(e.what()).find("communication backend 'no-such-backend' is not in this build"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("available: "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("gloo"), std::string::npos) << e.what();
  }
  c.rendezvous = "tcp://x";
  EXPECT_THROW(CreateCommunicator("gloo", c), CommError);
}

int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

// A redis-server on a free loopback port for the life of the object.
class RedisServer {
 public:
  explicit RedisServer(const std::string& binary) : port_(FreeLoopbackPort()) {
    pid_ = fork();
    if (pid_ == 0) {
      std::string port = std::to_string(port_);
      execl(binary.c_str(), binary.c_str(), "--port", port.c_str(), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--loglevel", "warning", (char*)nullptr);
      _exit(127);
    }
    for (int i = 0; i < 200 && !Accepting(); ++i) std::this_thread::sleep_for(Millis(10));
  }
  ~RedisServer() {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
  int port() const { return port_; }
  bool Accepting() const {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    close(fd);
    return ok;
  }

 private:
  int port_;
  pid_t pid_ = -1;
};

std::string FindRedisServer() {
  for (const char* p : {"/usr/bin/redis-server", "/usr/local/bin/redis-server"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

TEST(Comm, RedisStoreRendezvous) {
  const std::string binary = FindRedisServer();
  if (binary.empty()) GTEST_SKIP() << "redis-server is not installed (apt-get install redis-server)";
  RedisServer redis(binary);
  ASSERT_TRUE(redis.Accepting()) << "redis-server did not start on port " << redis.port();
  const std::string spec = "redis://127.0.0.1:" + std::to_string(redis.port());
  // Two jobs with different run ids share the server and stay apart.
  for (const char* run : {"job-a", "job-b"}) {
    auto outcomes = RunRanks(3, [&](int rank, const std::string& dir) {
      auto comm = Connect(rank, dir, 3, [&](CommConfig& c) {
        c.rendezvous = spec;
        c.run_id = run;
      });
      CheckAllReduce(*comm, 100000, AllreduceAlgorithm::kAuto, ReduceOp::kSum);
    });
    ExpectAllOk(outcomes);
  }
  // A rank that never joins is named through Redis as well.
  auto outcomes = RunRanks(2, [&](int rank, const std::string& dir) {
    if (rank == 0) return;
    Connect(rank, dir, 2, [&](CommConfig& c) {
      c.rendezvous = spec;
      c.run_id = "job-c";
      c.timeout = Millis(1000);
    });
  });
  EXPECT_EQ(outcomes[1].kind, "timeout") << outcomes[1].message;
  EXPECT_EQ(outcomes[1].blamed, std::vector<int>{0});
}

TEST(Comm, LaunchEnvironments) {
  auto from = [](std::map<std::string, std::string> vars, bool store_needed = true) {
    return LaunchInfoFromEnvironment(
        [vars](const char* name) -> const char* {
          auto it = vars.find(name);
          return it == vars.end() ? nullptr : it->second.c_str();
        },
        store_needed);
  };
  LaunchInfo none = from({});
  EXPECT_EQ(none.source, "");
  LaunchInfo t = from({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"},
                       {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"},
                       {"TORCHELASTIC_RUN_ID", "abc"}});
  EXPECT_EQ(t.source, "torchrun");
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.size, 4);
  EXPECT_EQ(t.local_rank, 1);
  EXPECT_EQ(t.run_id, "torchrun-abc-127.0.0.1-29500");
  EXPECT_EQ(t.local_size, 4);  // no LOCAL_WORLD_SIZE: all on this host
  EXPECT_EQ(t.rendezvous, "");
  LaunchInfo s = from({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                       {"SLURM_JOB_ID", "77"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NNODES", "2"},
                       {"ONNXTRAIN_RDZV", "redis://head:6379"}});
  EXPECT_EQ(s.source, "slurm");
  EXPECT_EQ(s.rank, 5);
  EXPECT_EQ(s.run_id, "slurm-77.0");
  EXPECT_EQ(s.rendezvous, "redis://head:6379");
  EXPECT_EQ(s.local_size, 4);  // 8 tasks over 2 nodes
  EXPECT_EQ(from({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "3"}}).local_size, 3);  // srun -n 3, one node
  LaunchInfo m = from({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                       {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_EQ(m.source, "openmpi");
  EXPECT_EQ(m.size, 2);
  EXPECT_EQ(m.local_size, 2);
  LaunchInfo own = from({{"ONNXTRAIN_RANK", "1"}, {"ONNXTRAIN_WORLD_SIZE", "2"},
                         {"ONNXTRAIN_RUN_ID", "r1"}, {"RANK", "0"}, {"WORLD_SIZE", "9"}});
  EXPECT_EQ(own.source, "onnx-train");
  EXPECT_EQ(own.run_id, "r1");
  EXPECT_EQ(own.local_size, 2);
  // Several hosts without a store, and malformed values, are refused with a sentence.
  try {
    from({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}, {"SLURM_NNODES", "2"}});
    ADD_FAILURE();
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("ONNXTRAIN_RDZV=redis://HOST:PORT"), std::string::npos);
  }
  EXPECT_THROW(from({{"RANK", "x"}, {"WORLD_SIZE", "2"}}), CommError);
  EXPECT_THROW(from({{"RANK", "2"}, {"WORLD_SIZE", "2"}}), CommError);
  // mpirun over two hosts: Gloo needs a store, the MPI backend does not.
  const std::map<std::string, std::string> two_hosts = {{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                                        {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  EXPECT_THROW(from(two_hosts), CommError);
  LaunchInfo mpi = from(two_hosts, /*store_needed=*/false);
  EXPECT_EQ(mpi.source, "openmpi");
  EXPECT_EQ(mpi.rank, 3);
  EXPECT_EQ(mpi.rendezvous, "");
}

TEST(Comm, SixteenBitConversions) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.9604645e-08f, 0.333333f}) {
    EXPECT_NEAR(HalfToFloat(FloatToHalf(v)), v, std::fabs(v) * 1e-3f + 1e-8f) << v;
    EXPECT_NEAR(BFloat16ToFloat(FloatToBFloat16(v)), v, std::fabs(v) * 8e-3f) << v;
  }
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00);
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
}

TEST(Comm, SingleRankNeedsNoPeers) {
  std::string dir = MakeTempDir();
  CommConfig c = BaseConfig(1, dir);
  c.rank = 0;
  auto comm = CreateCommunicator("auto", c);
  std::vector<float> data{1, 2, 3};
  AllReduceOptions o;
  o.op = ReduceOp::kAverage;
  comm->AllReduce(CommBuffer::Of(data.data(), 3), o)->Wait();
  EXPECT_EQ(data[2], 3.0f);
  comm->Barrier()->Wait();
  std::system(("rm -rf '" + dir + "'").c_str());
}

}  // namespace
}  // namespace ot
